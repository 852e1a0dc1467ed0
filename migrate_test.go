package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/migrations"
)

// schemaShape describes a schema's tables, columns, indexes and constraints, to compare
// two migrations of it.
func schemaShape(t *testing.T, b *bundle) []string {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `
		SELECT 'col ' || table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '')
		FROM information_schema.columns WHERE table_schema = $1
		UNION ALL
		SELECT 'idx ' || indexname || ' ' || regexp_replace(indexdef, '"?' || $1 || '"?\.', '', 'g')
		FROM pg_indexes WHERE schemaname = $1
		UNION ALL
		SELECT 'con ' || conname || ' ' || pg_get_constraintdef(c.oid)
		FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = $1
		UNION ALL
		SELECT 'opt ' || relname || ' ' || coalesce(array_to_string(reloptions, ','), '')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND relkind = 'r'
		ORDER BY 1`, b.schema)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

func TestMigrate_ConcurrentDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	pool := newPool(t, 8)
	cfg := skiplock.MigrateConfig{Schema: schema}

	// Four migrators at once on a fresh schema: all succeed, each version applied once.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = skiplock.Migrate(ctx, pool, cfg) }()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	b := &bundle{ctx: ctx, pool: pool, schema: schema}
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.schema_migrations WHERE version = 1`))
	st, err := skiplock.GetMigrationStatus(ctx, pool, cfg)
	require.NoError(t, err)
	assert.Equal(t, st.Latest, st.Current)
	first := schemaShape(t, b)
	require.NotEmpty(t, first)
	assert.Contains(t, first, "idx jobs_claim_idx CREATE INDEX jobs_claim_idx ON jobs USING btree (queue, priority DESC, run_at, id) WHERE (status = 'queued'::text)")

	// Again: a no-op.
	var applied string
	require.NoError(t, pool.QueryRow(ctx, b.q(`SELECT applied_at::text FROM {s}.schema_migrations WHERE version = 1`)).Scan(&applied))
	require.NoError(t, skiplock.Migrate(ctx, pool, cfg))
	var again string
	require.NoError(t, pool.QueryRow(ctx, b.q(`SELECT applied_at::text FROM {s}.schema_migrations WHERE version = 1`)).Scan(&again))
	assert.Equal(t, applied, again)
	assert.Equal(t, first, schemaShape(t, b))

	// Down removes the tables; up brings back the same schema.
	require.NoError(t, skiplock.MigrateDown(ctx, pool, cfg))
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename LIKE 'jobs%'`, schema))
	st, err = skiplock.GetMigrationStatus(ctx, pool, cfg)
	require.NoError(t, err)
	assert.Equal(t, 0, st.Current)
	require.NoError(t, skiplock.Migrate(ctx, pool, cfg))
	assert.Equal(t, first, schemaShape(t, b))
}

// A schema migrated by a newer skiplock (a version this build does not know) is not
// reverted underneath that version: MigrateDown refuses, naming it, and reverts nothing.
// Before, it reverted the versions it knew, newest first after the unknown one, left the
// unknown one recorded over the tables it had removed, and returned nil.
func TestMigrateDown_RefusesAVersionItDoesNotKnow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.schema_migrations (version, name) VALUES (999, 'from_a_newer_skiplock')`))
	require.NoError(t, err)
	before, err := skiplock.GetMigrationStatus(b.ctx, b.pool, skiplock.MigrateConfig{Schema: b.schema})
	require.NoError(t, err)
	shape := schemaShape(t, b)

	for _, target := range []int{0, 15, before.Latest} {
		err = skiplock.MigrateDown(b.ctx, b.pool, skiplock.MigrateConfig{Schema: b.schema, TargetVersion: target})
		require.Error(t, err, "target %d", target)
		assert.Contains(t, err.Error(), fmt.Sprintf("schema %q has migration(s) [999], which this build of skiplock does not know (it knows up to %d)", b.schema, before.Latest))
		assert.Contains(t, err.Error(), "nothing was reverted")
	}
	after, err := skiplock.GetMigrationStatus(b.ctx, b.pool, skiplock.MigrateConfig{Schema: b.schema})
	require.NoError(t, err)
	assert.Equal(t, before, after)
	assert.Equal(t, shape, schemaShape(t, b))

	// Past the unknown version there is nothing to revert, and no refusal.
	require.NoError(t, skiplock.MigrateDown(b.ctx, b.pool, skiplock.MigrateConfig{Schema: b.schema, TargetVersion: 999}))
	assert.Equal(t, shape, schemaShape(t, b))
}

// TestMigrate_NothingPendingTakesNoLock: with every migration applied, Migrate only reads,
// so it returns at once even while another session holds the migration lock (a deploy
// migrating, say) instead of queueing behind it.
func TestMigrate_NothingPendingTakesNoLock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	// The key Migrate locks: "skip" and the hash of the schema name.
	_, err = tx.Exec(b.ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, 0x736b6970, b.schema)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, skiplock.Migrate(ctx, b.pool, skiplock.MigrateConfig{Schema: b.schema}))
}

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
	// One "skiplock: " prefix, not the sentinel's again.
	assert.True(t, strings.HasPrefix(err.Error(), "skiplock: schema is not migrated: schema "), err.Error())
	// What a user saw before: the first enqueue failing. It still says the same, with
	// the operation after the one prefix.
	_, err = client.Enqueue(t.Context(), noopArgs{}, nil)
	require.ErrorIs(t, err, skiplock.ErrNotMigrated)
	assert.True(t, strings.HasPrefix(err.Error(), "skiplock: enqueue: schema is not migrated: run skiplock.Migrate for schema "), err.Error())
	// A worker refuses to start too.
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{Logger: testLogger()})
	require.NoError(t, err)
	require.ErrorIs(t, w.Run(t.Context()), skiplock.ErrNotMigrated)

	// A schema that does not exist at all.
	missing, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema + "_nope", Logger: testLogger()})
	require.NoError(t, err)
	err = missing.CheckSchema(t.Context())
	require.ErrorIs(t, err, skiplock.ErrNotMigrated)
	assert.Equal(t, 1, strings.Count(err.Error(), "skiplock: "), err.Error())

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

// A schema that lacks a migration below its current version (applied by a build that did
// not have it: two changes in flight took neighbouring numbers) is not migrated:
// CheckSchema says which version it lacks, GetMigrationStatus lists it as pending, and
// Migrate applies it. Before, CheckSchema compared only the highest version and returned
// nil, and `skiplock migrate status` said "up to date".
func TestCheckSchema_FindsAMigrationMissingBelowTheCurrentOne(t *testing.T) {
	t.Parallel()
	b := setup(t)
	st, err := skiplock.GetMigrationStatus(b.ctx, b.pool, skiplock.MigrateConfig{Schema: b.schema})
	require.NoError(t, err)
	require.Empty(t, st.Pending)
	gap := st.Latest - 1
	// The gap's migration taken out by hand (its down file, and its record), as a build
	// that did not have it would have left the schema.
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `SET LOCAL search_path TO `+pgx.Identifier{b.schema}.Sanitize())
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, migrationFile(t, gap, "down"))
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, b.q(`DELETE FROM {s}.schema_migrations WHERE version = $1`), gap)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))

	err = b.client.CheckSchema(b.ctx)
	require.ErrorIs(t, err, skiplock.ErrNotMigrated)
	assert.Contains(t, err.Error(), fmt.Sprintf("is at migration %d but lacks migration(s) [%d]", st.Latest, gap))
	st, err = skiplock.GetMigrationStatus(b.ctx, b.pool, skiplock.MigrateConfig{Schema: b.schema})
	require.NoError(t, err)
	assert.Equal(t, []int{gap}, st.Pending)
	assert.Equal(t, st.Latest, st.Current)

	require.NoError(t, skiplock.Migrate(b.ctx, b.pool, skiplock.MigrateConfig{Schema: b.schema}))
	require.NoError(t, b.client.CheckSchema(b.ctx))
}

// migrationFile returns the up or down file of migration version.
func migrationFile(t *testing.T, version int, dir string) string {
	t.Helper()
	matches, err := fs.Glob(migrations.FS, fmt.Sprintf("%03d_*.%s.sql", version, dir))
	require.NoError(t, err)
	require.Len(t, matches, 1)
	body, err := fs.ReadFile(migrations.FS, matches[0])
	require.NoError(t, err)
	return string(body)
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

// TestMigrate_RefusesATargetBeyondTheLatest: a TargetVersion this build does not know is
// refused, as the CLI's --target is, rather than read as "the latest"; nothing is applied.
func TestMigrate_RefusesATargetBeyondTheLatest(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t) // exists, empty
	before, err := skiplock.GetMigrationStatus(t.Context(), pool, skiplock.MigrateConfig{Schema: schema})
	require.NoError(t, err)
	err = skiplock.Migrate(t.Context(), pool, skiplock.MigrateConfig{Schema: schema, TargetVersion: before.Latest + 1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), fmt.Sprintf("TargetVersion %d is beyond the latest version this build knows, %d", before.Latest+1, before.Latest))
	after, err := skiplock.GetMigrationStatus(t.Context(), pool, skiplock.MigrateConfig{Schema: schema})
	require.NoError(t, err)
	assert.Equal(t, 0, after.Current, "nothing applied")

	require.NoError(t, skiplock.Migrate(t.Context(), pool, skiplock.MigrateConfig{Schema: schema, TargetVersion: before.Latest}))
}
