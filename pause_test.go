package skiplock_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// deadListenURL points a worker's listener at a port nobody listens on: it never
// connects, so only the fallback poll tells the worker anything.
const deadListenURL = "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=1"

// pauseFixture is a worker of queues "p" and "other" whose handlers count what ran, and
// block on release for jobs with N < 0.
type pauseFixture struct {
	*bundle
	ran     atomic.Int32
	running chan int
	release chan struct{}
}

func newPauseFixture(t *testing.T, cfg skiplock.WorkerConfig) (*pauseFixture, *skiplock.Worker) {
	t.Helper()
	f := &pauseFixture{bundle: setup(t), running: make(chan int, 10), release: make(chan struct{})}
	cfg.Queues = map[string]skiplock.QueueConfig{"p": {MaxWorkers: 4}, "other": {MaxWorkers: 4}}
	cfg.SweepInterval = -1
	cfg.Logger = testLogger()
	w := newWorker(t, f.bundle, cfg)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error {
		if job.Args.N < 0 {
			f.running <- job.Args.N
			<-f.release
		}
		f.ran.Add(1)
		return nil
	}))
	return f, w
}

func (f *pauseFixture) enqueue(t *testing.T, queue string, n int) {
	t.Helper()
	for i := range n {
		_, err := f.client.Enqueue(f.ctx, noopArgs{N: i}, &skiplock.EnqueueOptions{Queue: queue})
		require.NoError(t, err, "enqueueing into a paused queue works")
	}
}

// stillQueued checks for d that the n jobs of queue stay queued.
func (f *pauseFixture) stillQueued(t *testing.T, queue string, n int, d time.Duration) {
	t.Helper()
	holdsFor(t, d, 50*time.Millisecond, func() {
		require.Equal(t, n, f.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue = $1 AND status = 'queued'`, queue),
			"a paused queue's jobs must stay queued")
	})
}

// pollStartedAfterNow waits until the worker's fallback poll (pollSQL) has started since
// the call, as the database's activity view shows it. That poll reads the pauses
// committed before the call, and it sets the paused flags before it wakes any claim
// loop; the polls before it have ended (one poller runs them one after the other).
func (f *pauseFixture) pollStartedAfterNow(t *testing.T) {
	t.Helper()
	var since time.Time
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT clock_timestamp()`).Scan(&since))
	eventually(t, 10*time.Second, func() bool {
		return f.count(t, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query_start > $1
				AND query LIKE 'SELECT q.name, p.name IS NOT NULL AS paused%'
				AND query LIKE '%"' || $2 || '"%'`, since, f.schema) > 0
	}, "a fallback poll started after the pause")
}

func TestPause_NotificationStopsClaimsAtOnce(t *testing.T) {
	t.Parallel()
	// A one-minute poll: only the control notification can pause or resume in time.
	f, w := newPauseFixture(t, skiplock.WorkerConfig{PollInterval: time.Minute})
	runWorker(t, w)

	// A job running when the pause comes finishes.
	_, err := f.client.Enqueue(f.ctx, noopArgs{N: -1}, &skiplock.EnqueueOptions{Queue: "p"})
	require.NoError(t, err)
	select {
	case <-f.running:
	case <-time.After(10 * time.Second):
		t.Fatal("the blocking job did not start")
	}
	require.NoError(t, f.client.PauseQueue(f.ctx, "p"))
	close(f.release)
	eventually(t, 10*time.Second, func() bool { return f.ran.Load() == 1 }, "the running job finished")

	// The other queue keeps running. Its jobs are woken by their enqueues' notifications
	// (the poll is a minute away), which reach the worker's listener after the pause's:
	// notifications arrive in commit order, and the listener applies a pause before it
	// reads the next one. So once they ran, the worker knows of the pause.
	f.enqueue(t, "other", 3)
	eventually(t, 10*time.Second, func() bool { return f.ran.Load() == 4 }, "the other queue keeps running")
	// Each enqueue sends a wake-up, which the paused queue must ignore.
	f.enqueue(t, "p", 5)
	f.stillQueued(t, "p", 5, 1500*time.Millisecond)

	stats, err := f.client.Stats(f.ctx)
	require.NoError(t, err)
	paused := map[string]bool{}
	for _, s := range stats {
		if len(s.Counts) > 0 || s.Paused { // queues with recently finished jobs are listed too
			paused[s.Queue] = s.Paused
		}
	}
	assert.Equal(t, map[string]bool{"p": true}, paused, "finished jobs are archived: only p has jobs, and it is paused")

	began := time.Now()
	require.NoError(t, f.client.ResumeQueue(f.ctx, "p"))
	eventually(t, 20*time.Second, func() bool { return f.ran.Load() == 9 }, "resumed queue drains")
	assert.Less(t, time.Since(began), 20*time.Second, "resumed by the notification, not the one-minute poll")
}

func TestPause_PollCoversForADeadListener(t *testing.T) {
	t.Parallel()
	f, w := newPauseFixture(t, skiplock.WorkerConfig{PollInterval: 200 * time.Millisecond, ListenURL: deadListenURL})
	runWorker(t, w)
	f.enqueue(t, "p", 2)
	eventually(t, 10*time.Second, func() bool { return f.ran.Load() == 2 }, "jobs run by polling")

	require.NoError(t, f.client.PauseQueue(f.ctx, "p"))
	f.pollStartedAfterNow(t)
	f.enqueue(t, "p", 4)
	f.stillQueued(t, "p", 4, 1500*time.Millisecond)

	require.NoError(t, f.client.ResumeQueue(f.ctx, "p"))
	eventually(t, 10*time.Second, func() bool { return f.ran.Load() == 6 }, "resumed queue drains by polling")
}

func TestPause_WorkerStartedLaterSeesIt(t *testing.T) {
	t.Parallel()
	f, w := newPauseFixture(t, skiplock.WorkerConfig{PollInterval: time.Minute, ListenURL: deadListenURL})
	require.NoError(t, f.client.PauseQueue(f.ctx, "p"))
	require.NoError(t, f.client.PauseQueue(f.ctx, "p"), "pausing twice is fine")
	f.enqueue(t, "p", 3)
	f.enqueue(t, "other", 1)
	runWorker(t, w)
	eventually(t, 10*time.Second, func() bool { return f.ran.Load() == 1 }, "the other queue runs")
	f.stillQueued(t, "p", 3, time.Second)

	stats, err := f.client.Stats(f.ctx)
	require.NoError(t, err)
	stats = slices.DeleteFunc(stats, func(s skiplock.QueueStats) bool { return len(s.Counts) == 0 && !s.Paused }) // recently finished only
	require.Len(t, stats, 1, "the other queue's job is archived")
	assert.True(t, stats[0].Paused && stats[0].Queue == "p" && !stats[0].PausedAt.IsZero(), "%+v", stats[0])

	// A paused queue without jobs still shows in Stats.
	require.NoError(t, f.client.PauseQueue(f.ctx, "empty"))
	stats, err = f.client.Stats(f.ctx)
	require.NoError(t, err)
	stats = slices.DeleteFunc(stats, func(s skiplock.QueueStats) bool { return len(s.Counts) == 0 && !s.Paused })
	require.Len(t, stats, 2)
	assert.Equal(t, "empty", stats[0].Queue)
	assert.True(t, stats[0].Paused)

	require.ErrorIs(t, f.client.PauseQueue(f.ctx, "Bad Name"), skiplock.ErrInvalidQueue)
}

// TestPause_AClaimLoopWaitingForItsTurnClaimsNothing: a paused queue's claim loop that
// was already waiting for a claim connection (all of the worker's claims in flight, held
// up here on the claim locks of eight limited queues) when the pause came must not claim
// once its turn comes: the pause stops claims from the moment the worker knows of it.
func TestPause_AClaimLoopWaitingForItsTurnClaimsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A pool with room for the eight waiting claims, the poll and the test's statements.
	client, err := skiplock.NewClient(newPool(t, 30), skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)
	queues := map[string]skiplock.QueueConfig{"p": {MaxWorkers: 4}}
	var held []string
	for i := range 8 { // claim.MaxClaimConns: every claim connection of the worker
		name := fmt.Sprintf("held%d", i)
		queues[name] = skiplock.QueueConfig{Limits: skiplock.QueueLimits{Rate: 1000}}
		held = append(held, b.schema+"."+name)
	}
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{Queues: queues, PollInterval: 50 * time.Millisecond,
		ListenURL: deadListenURL, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error { return nil }))
	f := &pauseFixture{bundle: b}

	// The limited queues' claims wait on their claim locks, held here.
	lockConn, err := newPool(t, 2).Acquire(b.ctx)
	require.NoError(t, err)
	defer lockConn.Release()
	tx, err := lockConn.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck // committed below
	_, err = tx.Exec(b.ctx, `SELECT pg_advisory_xact_lock(1936419190, hashtext(k)) FROM unnest($1::text[]) AS k`, held)
	require.NoError(t, err)
	for i := range 8 {
		f.enqueue(t, fmt.Sprintf("held%d", i), 1)
	}
	runWorker(t, w)
	eventually(t, 20*time.Second, func() bool {
		return f.count(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND classid = 1936419190 AND objid::bigint IN (SELECT hashtext(k)::bigint & 4294967295 FROM unnest($1::text[]) AS k)`, held) == 8
	}, "eight claims waiting on their claim locks")

	// p's job is due: the poll wakes its claim loops, which wait for a claim connection.
	f.enqueue(t, "p", 1)
	f.pollStartedAfterNow(t)
	f.pollStartedAfterNow(t) // the one before has ended: it woke p

	require.NoError(t, client.PauseQueue(b.ctx, "p"))
	f.pollStartedAfterNow(t)
	f.pollStartedAfterNow(t) // the worker knows of the pause
	require.NoError(t, tx.Commit(b.ctx))
	eventually(t, 20*time.Second, func() bool {
		return f.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE queue LIKE 'held%'`) == 8
	}, "the limited queues' jobs ran")
	f.stillQueued(t, "p", 1, time.Second)
}
