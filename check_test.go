package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

func TestCheckSchema_FailsEarlyOnAnUnmigratedSchema(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t) // exists, empty
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Logger: testLogger()})
	require.NoError(t, err, "NewClient does no I/O")

	err = client.CheckSchema(t.Context())
	require.ErrorIs(t, err, skiplock.ErrNotMigrated)
	assert.Contains(t, err.Error(), "has no skiplock tables")
	assert.Contains(t, err.Error(), schema)
	// What a user saw before: the first enqueue failing. It still says the same.
	_, err = client.Enqueue(t.Context(), noopArgs{}, nil)
	require.ErrorIs(t, err, skiplock.ErrNotMigrated)
	// A worker refuses to start too.
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{Logger: testLogger()})
	require.NoError(t, err)
	require.ErrorIs(t, w.Run(t.Context()), skiplock.ErrNotMigrated)

	// A schema that does not exist at all.
	missing, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema + "_nope", Logger: testLogger()})
	require.NoError(t, err)
	require.ErrorIs(t, missing.CheckSchema(t.Context()), skiplock.ErrNotMigrated)

	// Part way: the message says where it stands.
	require.NoError(t, skiplock.Migrate(t.Context(), pool, skiplock.MigrateConfig{Schema: schema, TargetVersion: 3}))
	err = client.CheckSchema(t.Context())
	require.ErrorIs(t, err, skiplock.ErrNotMigrated)
	assert.Contains(t, err.Error(), "at migration 3 of")

	require.NoError(t, skiplock.Migrate(t.Context(), pool, skiplock.MigrateConfig{Schema: schema}))
	require.NoError(t, client.CheckSchema(t.Context()))
	_, err = client.Enqueue(t.Context(), noopArgs{}, &skiplock.EnqueueOptions{RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
}

// Check at start-up that the schema is migrated, rather than learning it at the first
// enqueue.
func ExampleClient_CheckSchema() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	err := client.CheckSchema(ctx)
	fmt.Println(errors.Is(err, skiplock.ErrNotMigrated))

	_ = skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema})
	fmt.Println(client.CheckSchema(ctx))
	// Output:
	// true
	// <nil>
}
