package skiplock_test

// The defaults README.md and docs/getting-started.md state, as a worker built with a zero
// WorkerConfig meets them.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// A worker with no timeouts set gives each attempt a minute (docs/getting-started.md: "1
// minute by default"), and its claim writes a job lease of a minute, the default
// VisibilityTimeout (docs/guarantees.md, "The lease").
func TestWorker_AZeroConfigWorkerGivesEachAttemptAMinuteAndAMinuteLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, b, skiplock.WorkerConfig{Logger: testLogger()})
	type attempt struct {
		id       int64
		deadline time.Duration // from the handler's start
		ok       bool
	}
	got := make(chan attempt, 1)
	release := make(chan struct{})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error {
		dl, ok := ctx.Deadline()
		got <- attempt{id: job.ID, deadline: time.Until(dl), ok: ok}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}))
	job, err := b.client.Enqueue(b.ctx, noopArgs{}, nil)
	require.NoError(t, err)
	runWorker(t, w)
	defer close(release)
	var a attempt
	select {
	case a = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not start")
	}
	require.Equal(t, job.ID, a.id)
	require.True(t, a.ok, "the attempt's context has a deadline")
	assert.InDelta(t, float64(time.Minute), float64(a.deadline), float64(5*time.Second), "the default job timeout")

	// The running row's lease, read while the handler holds it (no heartbeat has renewed
	// it yet: those come every 20 s at this timeout).
	var lease, sinceClaim float64
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT extract(epoch FROM lease_until - locked_at)::float8, extract(epoch FROM now() - locked_at)::float8
		FROM {s}.jobs WHERE id = $1 AND status = 'running'`), job.ID).Scan(&lease, &sinceClaim))
	require.Less(t, sinceClaim, 15.0, "read before the first heartbeat")
	assert.InDelta(t, time.Minute.Seconds(), lease, 1, "lease_until = the claim's now() + the default VisibilityTimeout")
}

type defaultsFailArgs struct{}

func (defaultsFailArgs) Kind() string { return "defaults_fail" }

// A zero-config worker retries a failed job with the default backoff (README.md: "retry
// failures with jittered exponential backoff"; docs/failures.md: 2^attempt s × [0.5, 1),
// so 1–2 s after the first failure), counting the attempt against the default 20.
func TestWorker_AZeroConfigWorkerRetriesWithTheDefaultBackoff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, b, skiplock.WorkerConfig{Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[defaultsFailArgs]) error {
		return errors.New("downstream down")
	}))
	job, err := b.client.Enqueue(b.ctx, defaultsFailArgs{}, nil)
	require.NoError(t, err)
	runWorker(t, w)
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND status = 'queued' AND attempts = 1`, job.ID) == 1
	}, "the first failure recorded")
	var delay float64
	var maxAttempts int
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT extract(epoch FROM run_at - (errors->-1->>'at')::timestamptz)::float8, max_attempts
		FROM {s}.jobs WHERE id = $1`), job.ID).Scan(&delay, &maxAttempts))
	assert.GreaterOrEqual(t, delay, 1.0, "the first retry's delay: 2 s × at least 0.5")
	assert.Less(t, delay, 2.0, "the first retry's delay: 2 s × less than 1")
	assert.Equal(t, 20, maxAttempts)
}

// README.md: "the worker needs 8 connections for its own statements with one queue, a few
// more with more queues (it warns when MaxConns is lower)". A worker at its defaults with
// one queue warns on a pool of 7, not on one of 8; with two queues, 8 is too few.
func TestWorker_WarnsWhenThePoolIsSmallerThanItsOwnStatementsNeed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		queues   []string
		maxConns int32
		warns    bool
	}{
		{[]string{"default"}, 7, true},
		{[]string{"default"}, 8, false},
		{[]string{"default", "other"}, 8, true},
	} {
		logs := &logCapture{}
		client, err := skiplock.NewClient(newPool(t, tc.maxConns), skiplock.Config{Schema: b.schema, Logger: testLogger()})
		require.NoError(t, err)
		queues := map[string]skiplock.QueueConfig{}
		for _, q := range tc.queues {
			queues[q] = skiplock.QueueConfig{}
		}
		w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{Queues: queues, Logger: slog.New(logs)})
		require.NoError(t, err)
		stop := runWorker(t, w)
		// The check comes before the worker's parts start: once its row is written, it ran.
		eventually(t, 30*time.Second, func() bool {
			return b.count(t, `SELECT count(*) FROM {s}.workers WHERE id = $1`, w.ID()) == 1
		}, "the worker registered")
		stop()
		warning := logs.find("pool is smaller than this worker needs")
		if !tc.warns {
			assert.Empty(t, warning, "%d queues, MaxConns %d", len(tc.queues), tc.maxConns)
			continue
		}
		require.NotEmpty(t, warning, "%d queues, MaxConns %d", len(tc.queues), tc.maxConns)
		assert.Contains(t, warning, fmt.Sprintf("max_conns=%d", tc.maxConns))
		if len(tc.queues) == 1 {
			assert.Contains(t, warning, "need=8", "the README's count for one queue")
		}
	}
}

// docs/getting-started.md: "skiplock.NewClient wraps your *pgxpool.Pool and does no I/O".
// A client made on a fresh pool has not taken a connection from it, nor made one.
func TestNewClient_DoesNoIO(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 4)
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: pgtest.Schema(t), Logger: testLogger()})
	require.NoError(t, err)
	require.NotNil(t, client)
	st := pool.Stat()
	assert.Zero(t, st.AcquireCount(), "NewClient acquired a connection")
	assert.Zero(t, st.NewConnsCount(), "NewClient opened a connection")
}
