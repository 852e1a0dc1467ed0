package skiplock_test

// Tests of the operator calls (admin.go): Get, Cancel, Stats.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

func TestGet_UnknownIDIsNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.client.Get(b.ctx, 123456789)
	require.ErrorIs(t, err, skiplock.ErrJobNotFound)
}

func TestCancel_QueuedAndRunning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	queued, err := b.client.Enqueue(b.ctx, slowArgs{Ms: 1}, &skiplock.EnqueueOptions{RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	c, err := b.client.Cancel(b.ctx, queued.ID)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusCancelled, c.Status)
	_, err = b.client.Cancel(b.ctx, 987654321)
	require.ErrorIs(t, err, skiplock.ErrJobNotFound)

	// A running job is told through its context (the control message, or the heartbeat).
	started := make(chan struct{})
	cause := make(chan error, 1)
	w := newWorker(t, b, skiplock.WorkerConfig{VisibilityTimeout: 600 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[slowArgs]) error {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	}))
	running, err := b.client.Enqueue(b.ctx, slowArgs{Ms: 60_000}, nil)
	require.NoError(t, err)
	runWorker(t, w)
	<-started
	c, err = b.client.Cancel(b.ctx, running.ID)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusCancelled, c.Status)
	select {
	case err := <-cause:
		assert.Error(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the running job's context was not cancelled")
	}
	// Its handler's error does not resurrect it.
	eventually(t, 5*time.Second, func() bool {
		j, err := b.client.Get(b.ctx, running.ID)
		require.NoError(t, err)
		return j.Status == skiplock.StatusCancelled && j.LastError == ""
	}, "stays cancelled")
}

func TestStats_CountsByQueueAndStatus(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 3 {
		_, err := b.client.Enqueue(b.ctx, noopArgs{N: i}, &skiplock.EnqueueOptions{Queue: "a"})
		require.NoError(t, err)
	}
	_, err := b.client.Enqueue(b.ctx, noopArgs{}, &skiplock.EnqueueOptions{Queue: "b", RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET run_at = now() - interval '90 seconds' WHERE queue = 'a'`))
	require.NoError(t, err)
	stats, err := b.client.Stats(b.ctx)
	require.NoError(t, err)
	require.Len(t, stats, 2)
	assert.Equal(t, "a", stats[0].Queue)
	assert.Equal(t, int64(3), stats[0].Counts[skiplock.StatusQueued])
	assert.InDelta(t, 90, stats[0].OldestDue.Seconds(), 5)
	assert.Equal(t, int64(1), stats[1].Counts[skiplock.StatusQueued])
	assert.Zero(t, stats[1].OldestDue, "a job not yet due is not waiting")
}

func TestCancel_ReachesRunningHandlerAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan struct{}, 1)
	seen := make(chan time.Time, 1)
	// Heartbeats every 20s: only the control message can explain a quick cancel.
	w := newWorker(t, b, skiplock.WorkerConfig{ID: "rc-" + b.schema, VisibilityTimeout: time.Minute, SweepInterval: -1,
		PollInterval: 50 * time.Millisecond, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[hangArgs]) error {
		started <- struct{}{}
		<-ctx.Done()
		seen <- time.Now()
		return ctx.Err()
	}))
	runWorker(t, w)
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %_control%'`,
			"skiplock-listen rc-"+b.schema) == 1
	}, "the worker listens on the control channel")

	var worst time.Duration
	for range 3 {
		job, err := b.client.Enqueue(b.ctx, hangArgs{}, nil)
		require.NoError(t, err)
		<-started
		t0 := time.Now()
		got, err := b.client.Cancel(b.ctx, job.ID)
		require.NoError(t, err)
		require.Equal(t, skiplock.StatusCancelled, got.Status)
		select {
		case at := <-seen:
			worst = max(worst, at.Sub(t0))
		case <-time.After(10 * time.Second):
			t.Fatal("the running handler was not told of the cancel")
		}
	}
	t.Logf("cancel -> handler's context done: worst of 3 %s", worst)
	assert.Less(t, worst, 2*time.Second, "about 100 ms expected; the heartbeat fallback would take 20 s")
}

func TestStats_CountsFinishedJobsFromTheArchive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 20 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error {
		if job.Args.N < 0 {
			return errors.New("no")
		}
		return nil
	}))
	for i := range 3 {
		_, err := b.client.Enqueue(b.ctx, noopArgs{N: i}, nil)
		require.NoError(t, err)
	}
	_, err := b.client.Enqueue(b.ctx, noopArgs{N: -1}, &skiplock.EnqueueOptions{MaxAttempts: 1})
	require.NoError(t, err)
	_, err = b.client.Enqueue(b.ctx, noopArgs{}, &skiplock.EnqueueOptions{Queue: "later", RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	stop := runWorker(t, w)
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive`) == 3 && b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'dead'`) == 1
	}, "three archived, one dead")
	stop()
	// One success finished 10 minutes ago, one 2 hours ago.
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs_archive SET finished_at = now() - CASE WHEN payload->>'n' = '1' THEN interval '10 minutes' ELSE interval '2 hours' END WHERE payload->>'n' IN ('1', '2')`))
	require.NoError(t, err)

	stats, err := b.client.Stats(b.ctx)
	require.NoError(t, err)
	require.Len(t, stats, 2)
	d := stats[0]
	assert.Equal(t, "default", d.Queue)
	assert.Equal(t, map[skiplock.JobStatus]int64{skiplock.StatusDead: 1}, d.Counts)
	assert.Equal(t, map[skiplock.JobStatus]int64{skiplock.StatusSucceeded: 1, skiplock.StatusDead: 1}, d.FinishedLastMinute)
	assert.Equal(t, map[skiplock.JobStatus]int64{skiplock.StatusSucceeded: 2, skiplock.StatusDead: 1}, d.FinishedLastHour)
	assert.Equal(t, "later", stats[1].Queue)
	assert.Equal(t, int64(1), stats[1].Scheduled)
	assert.Equal(t, int64(1), stats[1].Counts[skiplock.StatusQueued])
}

func TestCachedStats_OneRefreshPerIntervalWhateverTheCallers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.client.Enqueue(b.ctx, noopArgs{}, nil)
	require.NoError(t, err)

	// 8 callers on separate pools at once, the cache stale: exactly one recomputes; the
	// others get the old value or, after the refresh, the new one.
	const callers = 8
	clients := make([]*skiplock.Client, callers)
	for i := range clients {
		c, err := skiplock.NewClient(newPool(t, 1), skiplock.Config{Schema: b.schema, Logger: testLogger()})
		require.NoError(t, err)
		clients[i] = c
	}
	ats := make([]time.Time, callers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, at, err := c.CachedStats(b.ctx, time.Hour)
			assert.NoError(t, err)
			ats[i] = at
		}()
	}
	close(start)
	wg.Wait()
	refreshes := map[time.Time]bool{}
	for _, at := range ats {
		if at.Year() > 1970 {
			refreshes[at] = true
		}
	}
	assert.Len(t, refreshes, 1, "one refresh among %d callers", callers)

	// Within maxAge, the cache answers, new jobs or not; maxAge 0 recomputes.
	_, err = b.client.Enqueue(b.ctx, noopArgs{}, nil)
	require.NoError(t, err)
	stats, at, err := b.client.CachedStats(b.ctx, time.Hour)
	require.NoError(t, err)
	assert.True(t, refreshes[at])
	assert.Equal(t, int64(1), stats[0].Counts[skiplock.StatusQueued])
	stats, at2, err := b.client.CachedStats(b.ctx, 0)
	require.NoError(t, err)
	assert.True(t, at2.After(at))
	assert.Equal(t, int64(2), stats[0].Counts[skiplock.StatusQueued])
	exact, err := b.client.Stats(b.ctx)
	require.NoError(t, err)
	require.Len(t, exact, 1)
	assert.GreaterOrEqual(t, exact[0].OldestDue, stats[0].OldestDue, "the oldest job has waited longer since")
	exact[0].OldestDue, stats[0].OldestDue = 0, 0
	assert.Equal(t, exact, stats, "the cache holds what Stats returns")
}
