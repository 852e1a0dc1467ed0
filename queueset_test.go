package skiplock_test

// Tests of the run-time queue changes (queueset.go): Worker.AddQueue, RemoveQueue and
// SetMaxWorkers on a running worker.

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/skiplock/skiplock"
)

// gatedArgs is a job whose handler writes its start and end in an audit table and waits
// for a token in between.
type gatedArgs struct {
	N int `json:"n"`
}

func (gatedArgs) Kind() string { return "gated" }

// gatedWorker returns a worker whose gatedArgs handler records each run in the audit
// table gated_audit (job, phase, started, ended, by the database's clock) and waits for
// a token on release (or its context) before it ends. phase is read at each start.
func gatedWorker(t *testing.T, b *bundle, cfg skiplock.WorkerConfig, release <-chan struct{}, phase *atomic.Int32) *skiplock.Worker {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.gated_audit (job bigint PRIMARY KEY, queue text, phase int,
		started timestamptz NOT NULL DEFAULT clock_timestamp(), ended timestamptz)`))
	require.NoError(t, err)
	w := newWorker(t, b, cfg)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[gatedArgs]) error {
		if _, err := b.pool.Exec(ctx, b.q(`INSERT INTO {s}.gated_audit (job, queue, phase) VALUES ($1, $2, $3)`), job.ID, job.Queue, phase.Load()); err != nil {
			return err
		}
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		_, err := b.pool.Exec(context.WithoutCancel(ctx), b.q(`UPDATE {s}.gated_audit SET ended = clock_timestamp() WHERE job = $1`), job.ID)
		return err
	}))
	return w
}

func enqueueGated(t *testing.T, b *bundle, queue string, n int) {
	t.Helper()
	for i := range n {
		_, err := b.client.Enqueue(b.ctx, gatedArgs{N: i}, &skiplock.EnqueueOptions{Queue: queue})
		require.NoError(t, err)
	}
}

func TestWorker_AddQueueWhileRunningRunsItsJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, b, skiplock.WorkerConfig{SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error { return nil }))
	for i := range 20 {
		_, err := b.client.Enqueue(b.ctx, noopArgs{N: i}, &skiplock.EnqueueOptions{Queue: "extra"})
		require.NoError(t, err)
	}
	runWorker(t, w)
	require.NoError(t, w.AddQueue(b.ctx, "extra", skiplock.QueueConfig{MaxWorkers: 3, Completion: skiplock.CompletionKeep}))
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue = 'extra' AND status = 'succeeded'`) == 20
	}, "the added queue's jobs ran (kept, as its Completion says)")
	// A job enqueued after the add is woken by its notification, as any queue's.
	_, err := b.client.Enqueue(b.ctx, noopArgs{}, &skiplock.EnqueueOptions{Queue: "extra"})
	require.NoError(t, err)
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue = 'extra' AND status = 'succeeded'`) == 21
	}, "a job enqueued after the add ran")

	require.ErrorIs(t, w.AddQueue(b.ctx, "extra", skiplock.QueueConfig{}), skiplock.ErrQueueExists)
	require.ErrorIs(t, w.AddQueue(b.ctx, "no spaces", skiplock.QueueConfig{}), skiplock.ErrInvalidQueue)
	require.ErrorIs(t, w.AddQueue(b.ctx, "neg", skiplock.QueueConfig{MaxWorkers: -1}), skiplock.ErrInvalidConfig)
	require.ErrorIs(t, w.RemoveQueue(b.ctx, "nope"), skiplock.ErrUnknownQueue)
	require.ErrorIs(t, w.SetMaxWorkers("nope", 2), skiplock.ErrUnknownQueue)
	require.ErrorIs(t, w.SetMaxWorkers("extra", -2), skiplock.ErrInvalidConfig)
}

// TestWorker_RemoveQueueFinishesRunningJobsAndClaimsNoMore: the removed queue's running
// jobs finish and are recorded; its jobs enqueued after the removal stay queued while the
// worker goes on claiming the jobs of its other queue, enqueued after them. RemoveQueue
// waits for the running jobs until its ctx ends, then returns; removed with a ctx that
// lasts, a queue whose jobs are done returns nil.
func TestWorker_RemoveQueueFinishesRunningJobsAndClaimsNoMore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{}, 100)
	var phase atomic.Int32
	w := gatedWorker(t, b, skiplock.WorkerConfig{
		Queues:       map[string]skiplock.QueueConfig{"gone": {MaxWorkers: 5}, "stays": {}},
		PollInterval: 20 * time.Millisecond, SweepInterval: -1, Logger: testLogger(),
	}, release, &phase)
	enqueueGated(t, b, "gone", 3)
	runWorker(t, w)
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.gated_audit WHERE queue = 'gone'`) == 3
	}, "three jobs of the queue running")

	// RemoveQueue waits for the running jobs, until its ctx ends: it has removed the
	// queue by then.
	rctx, cancel := context.WithTimeout(b.ctx, 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, w.RemoveQueue(rctx, "gone"), context.DeadlineExceeded)
	enqueueGated(t, b, "gone", 4)
	for range 3 {
		release <- struct{}{}
	}
	// Its three jobs are recorded as usual.
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE queue = 'gone' AND status = 'succeeded'`) == 3
	}, "the removed queue's running jobs recorded")

	// A job of the other queue, enqueued after the four, runs (the worker polls every
	// 20 ms and would have woken the removed queue too), and the four stay queued.
	phase.Store(1)
	enqueueGated(t, b, "stays", 1)
	release <- struct{}{}
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE queue = 'stays'`) == 1
	}, "the other queue's job ran")
	assert.Equal(t, 4, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue = 'gone' AND status = 'queued'`))
	assert.Equal(t, 3, b.count(t, `SELECT count(*) FROM {s}.gated_audit WHERE queue = 'gone'`), "a job of the removed queue was claimed")

	// The queue can come back, and go again once its jobs are done.
	require.NoError(t, w.AddQueue(b.ctx, "gone", skiplock.QueueConfig{}))
	for range 4 {
		release <- struct{}{}
	}
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE queue = 'gone'`) == 7
	}, "the queue added back ran its jobs")
	require.NoError(t, w.RemoveQueue(b.ctx, "gone"))
}

// TestWorker_SetMaxWorkersLowersWithoutCuttingAndRaises: 10 handlers run; MaxWorkers
// lowered to 2 cuts none of them, and once they ended, no more than 2 jobs of the queue
// run at once (checked in the audit table); raised to 6, six run.
func TestWorker_SetMaxWorkersLowersWithoutCuttingAndRaises(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{}, 100)
	var phase atomic.Int32
	w := gatedWorker(t, b, skiplock.WorkerConfig{
		Queues:       map[string]skiplock.QueueConfig{"q": {MaxWorkers: 10}},
		PollInterval: 20 * time.Millisecond, SweepInterval: -1, Logger: testLogger(),
	}, release, &phase)
	enqueueGated(t, b, "q", 30)
	runWorker(t, w)
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.gated_audit WHERE ended IS NULL`) == 10
	}, "ten handlers running")

	phase.Store(2)
	require.NoError(t, w.SetMaxWorkers("q", 2))
	for range 10 {
		release <- struct{}{}
	}
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.gated_audit WHERE phase = 0 AND ended IS NOT NULL`) == 10 &&
			b.count(t, `SELECT count(*) FROM {s}.gated_audit WHERE phase = 2 AND ended IS NULL`) == 2
	}, "the ten ended and two more run")
	// Let a few of the two-at-a-time jobs through.
	for range 4 {
		release <- struct{}{}
	}
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.gated_audit WHERE phase = 2 AND ended IS NOT NULL`) == 4 &&
			b.count(t, `SELECT count(*) FROM {s}.gated_audit WHERE phase = 2 AND ended IS NULL`) == 2
	}, "four more ended, two run")
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.gated_audit a WHERE a.phase = 2 AND
		(SELECT count(*) FROM {s}.gated_audit o WHERE o.started <= a.started AND (o.ended IS NULL OR o.ended > a.started)) > 2`),
		"more than 2 jobs ran at once after MaxWorkers was lowered to 2")

	phase.Store(3)
	require.NoError(t, w.SetMaxWorkers("q", 6))
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.gated_audit WHERE ended IS NULL`) == 6
	}, "six run once MaxWorkers was raised to 6")
	close(release)
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE status = 'succeeded'`) == 30
	}, "every job done")
}

// TestWorker_RunTimeQueuesLeaveNoGoroutine is not parallel: it checks that the
// goroutines of queues added and removed at run time end with Run.
func TestWorker_RunTimeQueuesLeaveNoGoroutine(t *testing.T) {
	b := setup(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), ignorePgxReader)
	w := newWorker(t, b, skiplock.WorkerConfig{SweepInterval: -1, Logger: testLogger()})
	ran := make(chan struct{}, 10)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error {
		ran <- struct{}{}
		return nil
	}))
	require.NoError(t, w.AddQueue(b.ctx, "before", skiplock.QueueConfig{MaxWorkers: 2}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	for _, q := range []string{"a", "b", "c"} {
		require.NoError(t, w.AddQueue(b.ctx, q, skiplock.QueueConfig{MaxWorkers: 3}))
		_, err := b.client.Enqueue(b.ctx, noopArgs{}, &skiplock.EnqueueOptions{Queue: q})
		require.NoError(t, err)
		<-ran
	}
	require.NoError(t, w.SetMaxWorkers("a", 8))
	require.NoError(t, w.RemoveQueue(b.ctx, "b"))
	require.NoError(t, w.RemoveQueue(b.ctx, "before"))
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	require.ErrorIs(t, w.AddQueue(b.ctx, "late", skiplock.QueueConfig{}), skiplock.ErrWorkerStopped)
}

// TestWorker_QueueChangesAfterARunThatNeverStartedAreRefused: a Run that returned
// without starting (its ctx ended during the start-up statements, or they failed) leaves
// a worker that never runs again: the run-time queue changes say so with
// ErrWorkerStopped, as after any Run, rather than succeed and change nothing.
func TestWorker_QueueChangesAfterARunThatNeverStartedAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, b, skiplock.WorkerConfig{Queues: map[string]skiplock.QueueConfig{"q": {}}, SweepInterval: -1, Logger: testLogger()})
	ctx, cancel := context.WithCancel(b.ctx)
	cancel()
	require.NoError(t, w.Run(ctx), "a Run stopped while starting returns nil")
	require.ErrorIs(t, w.AddQueue(b.ctx, "late", skiplock.QueueConfig{}), skiplock.ErrWorkerStopped)
	require.ErrorIs(t, w.RemoveQueue(b.ctx, "q"), skiplock.ErrWorkerStopped)
	require.ErrorIs(t, w.SetMaxWorkers("q", 3), skiplock.ErrWorkerStopped)

	// The same after a Run that failed to start: the schema is not migrated.
	client, err := skiplock.NewClient(b.pool, skiplock.Config{Schema: b.schema + "_none", Logger: testLogger()})
	require.NoError(t, err)
	w2, err := skiplock.NewWorker(client, skiplock.WorkerConfig{Queues: map[string]skiplock.QueueConfig{"q": {}}, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, err)
	require.Error(t, w2.Run(b.ctx))
	require.ErrorIs(t, w2.AddQueue(b.ctx, "late", skiplock.QueueConfig{}), skiplock.ErrWorkerStopped)
}
