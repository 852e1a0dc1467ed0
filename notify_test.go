package skiplock_test

// Tests of the wake-ups (notify.go): a notification wakes a worker, the listener comes
// back after its connection dies, and the fallback poll covers for a missing listener.

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// claimTracer counts the claim statements a pool runs: those started, and those ended.
type claimTracer struct{ started, ended atomic.Int64 }

type claimTraceKey struct{}

func (c *claimTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "FOR UPDATE SKIP LOCKED") && strings.Contains(d.SQL, "WITH RECURSIVE prios") {
		c.started.Add(1)
		return context.WithValue(ctx, claimTraceKey{}, true)
	}
	return ctx
}

func (c *claimTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if ctx.Value(claimTraceKey{}) != nil {
		c.ended.Add(1)
	}
}

// idle reports whether at least n claims ran and none is in flight.
func (c *claimTracer) idle(n int64) bool {
	e := c.ended.Load()
	return e >= n && c.started.Load() == e
}

func TestWorker_NotificationWakesWorkerAndListenerComesBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan int, 10)
	// The worker's client traces its claims, so the test can wait for the claim loops to
	// go quiet before it relies on a notification to wake them.
	tracer := &claimTracer{}
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{ID: "listen-" + b.schema, PollInterval: time.Minute, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error {
		started <- job.Args.N
		return nil
	}))
	listenerPID := func() int {
		var pid int
		err := b.pool.QueryRow(b.ctx, `SELECT coalesce(max(pid), 0) FROM pg_stat_activity
			WHERE application_name = $1 AND query LIKE 'LISTEN%'`, "skiplock-listen listen-"+b.schema).Scan(&pid)
		require.NoError(t, err)
		return pid
	}
	runWorker(t, w)
	var first int
	eventually(t, 10*time.Second, func() bool { first = listenerPID(); return first != 0 }, "listener connected")
	// With no job due, the poll at start (and the one after the listener connects) wakes
	// no claim loop; only a notification can wake them within the one-minute poll.
	eventually(t, 10*time.Second, func() bool { return tracer.idle(0) }, "claim loops quiet")

	_, err = b.client.Enqueue(b.ctx, noopArgs{N: 1}, nil)
	require.NoError(t, err)
	select {
	case n := <-started:
		assert.Equal(t, 1, n)
	case <-time.After(5 * time.Second):
		t.Fatal("job did not start within 5s with a 1 minute poll: the notification did not wake the worker")
	}

	// Kill the listener's backend; the listener reconnects and notifications work again.
	_, err = b.pool.Exec(b.ctx, `SELECT pg_terminate_backend($1)`, first)
	require.NoError(t, err)
	eventually(t, 15*time.Second, func() bool { p := listenerPID(); return p != 0 && p != first }, "listener reconnected")
	before := tracer.ended.Load()
	// The reconnect makes the worker poll; wait for any claim it caused before the next enqueue.
	eventually(t, 10*time.Second, func() bool { return tracer.idle(before) }, "claim loops quiet after the reconnect")
	_, err = b.client.Enqueue(b.ctx, noopArgs{N: 2}, nil)
	require.NoError(t, err)
	select {
	case n := <-started:
		assert.Equal(t, 2, n)
	case <-time.After(5 * time.Second):
		t.Fatal("job did not start within 5s after the listener reconnected")
	}
}

func TestWorker_PollsWhenListenerIsDown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ran atomic.Int32
	// The listener points at a port nobody listens on: only the fallback poll runs jobs.
	w := newWorker(t, b, skiplock.WorkerConfig{
		PollInterval: 100 * time.Millisecond, SweepInterval: -1, Logger: testLogger(),
		ListenURL: "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=1",
	})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error {
		ran.Add(1)
		return nil
	}))
	runWorker(t, w)
	for i := range 5 {
		_, err := b.client.Enqueue(b.ctx, noopArgs{N: i}, nil)
		require.NoError(t, err)
	}
	eventually(t, 10*time.Second, func() bool { return ran.Load() == 5 }, "5 jobs ran by polling")
}
