package main

// Tests of the quickstart's enqueueing and handlers with skiplocktest: the real database,
// the real handlers, run in the test's goroutine, and a clock moved instead of waited for.

import (
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/skiplocktest"
)

// setup migrates a schema of the test's own, with the orders table, and returns a client
// and a worker with the quickstart's handlers (never Run: skiplocktest runs its jobs).
func setup(t *testing.T) (*pgxpool.Pool, *skiplock.Client, *skiplock.Worker) {
	t.Helper()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	require.NoError(t, skiplock.Migrate(t.Context(), pool, skiplock.MigrateConfig{Schema: schema}))
	require.NoError(t, createOrders(t.Context(), pool, schema))
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	require.NoError(t, err)
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{RetryPolicy: skiplock.BackoffPolicy{}})
	require.NoError(t, err)
	require.NoError(t, (&handlers{pool: pool, schema: schema, out: io.Discard}).register(w))
	return pool, client, w
}

func TestPlaceOrder_EnqueuesTheConfirmationOnlyWhenTheOrderCommits(t *testing.T) {
	t.Parallel()
	pool, client, _ := setup(t)
	id, err := placeOrder(t.Context(), pool, client, "ada@example.com", true)
	require.NoError(t, err)
	job := skiplocktest.RequireEnqueued(t, pool, client, SendConfirmation{OrderID: id, Email: "ada@example.com"}, &skiplocktest.RequireOpts{Count: 1})
	assert.Equal(t, skiplock.StatusQueued, job.Status)

	_, err = placeOrder(t.Context(), pool, client, "bob@example.com", false)
	require.NoError(t, err)
	skiplocktest.RequireNotEnqueued(t, pool, client, SendConfirmation{Email: "bob@example.com"}, nil)
}

func TestSendConfirmation_EmailsOnceEvenWhenRunTwice(t *testing.T) {
	t.Parallel()
	pool, client, w := setup(t)
	id, err := placeOrder(t.Context(), pool, client, "ada@example.com", true)
	require.NoError(t, err)
	// The same job again, as after a crash: at-least-once execution.
	_, err = client.Enqueue(t.Context(), SendConfirmation{OrderID: id, Email: "ada@example.com"}, nil)
	require.NoError(t, err)

	ran := skiplocktest.Drain(t, w, "default")
	require.Len(t, ran, 2)
	for _, r := range ran {
		assert.Equal(t, skiplock.OutcomeSucceeded, r.Result.Outcome)
	}
	var emailed *time.Time
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT emailed_at FROM `+client.Schema()+`.orders WHERE id = $1`, id).Scan(&emailed))
	assert.NotNil(t, emailed)
}

func TestSyncInventory_RetriesWithBackoffUntilTheServiceAnswers(t *testing.T) {
	t.Parallel()
	pool, client, w := setup(t)
	job, err := client.Enqueue(t.Context(), SyncInventory{SKU: "SKU-42"}, nil)
	require.NoError(t, err)

	for attempt := 1; attempt <= 2; attempt++ {
		r := skiplocktest.RunOne(t, w, "default")
		require.NotNil(t, r, "attempt %d is due", attempt)
		assert.Equal(t, skiplock.OutcomeRetry, r.Result.Outcome)
		assert.Nil(t, skiplocktest.RunOne(t, w, "default"), "backing off after attempt %d", attempt)
		// The default backoff after attempt n is at most 2^n seconds.
		skiplocktest.Advance(t, pool, client, time.Duration(1<<attempt)*time.Second)
	}
	r := skiplocktest.RunOne(t, w, "default")
	require.NotNil(t, r)
	assert.Equal(t, skiplock.OutcomeSucceeded, r.Result.Outcome)
	done, err := client.Get(t.Context(), job.ID)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusSucceeded, done.Status)
	assert.Equal(t, 3, done.Attempts)
	assert.Len(t, done.Errors, 2)
}
