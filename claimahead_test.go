package skiplock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// gated is how many jobs of newAheadWorker's wait for its gate: more than the 16 (4 ×
// MaxWorkers) a worker claiming ahead holds.
const gated = 20

type aheadArgs struct {
	N int `json:"n"`
}

func (aheadArgs) Kind() string { return "ahead" }

// aheadWorker is a worker of queue "q" (MaxWorkers 4) whose handlers of jobs N < warm
// return at once (counted in warmed), and of the others write a row of ahead_audit as
// they start, whatever their context, then wait for gate (or their context). Each
// handler counts itself in running (the most at once in most).
type aheadWorker struct {
	w    *skiplock.Worker
	gate chan struct{}
	atOnce
	warmed atomic.Int32 // handlers of jobs N < warm run
}

func newAheadWorker(t *testing.T, b *bundle, warm int, cfg skiplock.WorkerConfig) *aheadWorker {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.ahead_audit (job bigint NOT NULL, n int NOT NULL,
		started timestamptz NOT NULL DEFAULT clock_timestamp(), ended timestamptz)`))
	require.NoError(t, err)
	cfg.Queues = map[string]skiplock.QueueConfig{"q": {MaxWorkers: 4}}
	cfg.SweepInterval, cfg.Logger = -1, testLogger()
	a := &aheadWorker{w: newWorker(t, b, cfg), gate: make(chan struct{})}
	require.NoError(t, skiplock.Handle(a.w, func(ctx context.Context, job *skiplock.Job[aheadArgs]) error {
		defer a.enter()()
		if job.Args.N < warm {
			a.warmed.Add(1)
			return nil
		}
		if _, err := b.pool.Exec(context.WithoutCancel(ctx), b.q(`INSERT INTO {s}.ahead_audit (job, n) VALUES ($1, $2)`), job.ID, job.Args.N); err != nil {
			return err
		}
		select {
		case <-a.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
		_, err := b.pool.Exec(context.WithoutCancel(ctx), b.q(`UPDATE {s}.ahead_audit SET ended = clock_timestamp() WHERE job = $1`), job.ID)
		return err
	}))
	params := make([]skiplock.EnqueueParams, 0, warm+gated)
	for i := range warm + gated {
		params = append(params, skiplock.EnqueueParams{Args: aheadArgs{N: i}, Options: &skiplock.EnqueueOptions{Queue: "q"}})
	}
	_, err = b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	return a
}

// With short handlers a queue claims up to MaxWorkers jobs ahead of its free slots (docs/
// configuration.md, "Claiming ahead"), yet never runs more than MaxWorkers handlers at
// once, and runs every job once. Once its handlers block, the worker holds 4 × MaxWorkers
// jobs: MaxWorkers running, three times as many waiting for a runner; no more.
func TestWorker_ClaimsAheadOfShortHandlersButRunsAtMostMaxWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const warm = 64
	a := newAheadWorker(t, b, warm, skiplock.WorkerConfig{})
	runWorker(t, a.w)

	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue = 'q' AND status = 'running'`) == 16 &&
			b.count(t, `SELECT count(*) FROM {s}.ahead_audit WHERE n >= $1 AND ended IS NULL`, warm) == 4
	}, "four handlers blocked, twelve more jobs claimed ahead")
	holdsFor(t, 300*time.Millisecond, 20*time.Millisecond, func() {
		assert.LessOrEqual(t, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue = 'q' AND status = 'running'`), 16,
			"the worker holds more than 4 × MaxWorkers jobs")
	})
	close(a.gate)
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE status = 'succeeded'`) == warm+gated
	}, "every job succeeded")
	assert.LessOrEqual(t, a.most.Load(), int32(4), "more handlers than MaxWorkers ran at once")
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.ahead_audit a WHERE
		(SELECT count(*) FROM {s}.ahead_audit o WHERE o.started <= a.started AND (o.ended IS NULL OR o.ended > a.started)) > 4`),
		"the audit shows more than 4 handlers at once")
	assert.Equal(t, int32(warm), a.warmed.Load())
	assert.Equal(t, gated, b.count(t, `SELECT count(DISTINCT job) FROM {s}.ahead_audit`))
	assert.Equal(t, gated, b.count(t, `SELECT count(*) FROM {s}.ahead_audit`), "a job's handler ran twice")
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE attempts <> 1`))
}

// Jobs claimed ahead that still wait for a runner when shutdown cuts the handlers off do
// not start: they are put back with the handlers cut off, their attempts given back.
func TestWorker_ShutdownPutsBackJobsClaimedAheadUnstarted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const warm = 64
	a := newAheadWorker(t, b, warm, skiplock.WorkerConfig{ShutdownTimeout: 200 * time.Millisecond})
	stop := runWorker(t, a.w)
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue = 'q' AND status = 'running'`) == 16 &&
			b.count(t, `SELECT count(*) FROM {s}.ahead_audit WHERE n >= $1 AND ended IS NULL`, warm) == 4
	}, "four handlers blocked, twelve more jobs claimed ahead")
	stop()

	// Two claims in flight may come back in either order: a warm job can wait behind
	// the blocked ones too. Every handler that started ran to its end.
	succeeded := b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE status = 'succeeded'`)
	assert.Equal(t, int(a.warmed.Load()), succeeded, "a warm job's handler ran and it did not succeed")
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'running'`), "a job is left running")
	assert.Equal(t, warm+gated-succeeded, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue = 'q' AND status = 'queued' AND attempts = 0`),
		"the jobs not succeeded are queued with no attempt spent")
	assert.Equal(t, 4, b.count(t, `SELECT count(*) FROM {s}.ahead_audit`),
		"a job claimed ahead started its handler after shutdown cut the handlers off")
}

// Three workers drain 20,000 short jobs with 8 slots each, claiming ahead; one stops
// part-way (its shutdown cutting off at once what it still holds). Every job runs its
// handler exactly once and succeeds at its first attempt (a job put back unstarted
// gives its attempt back), no worker runs more than 8 handlers at once, and at some
// point a worker held more jobs than its slots: the drain did claim ahead.
func TestWorker_AFleetClaimingAheadRunsEveryJobOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const jobs, slots = 20000, 8
	var runs sync.Map // job id → *atomic.Int32
	workers := make([]*skiplock.Worker, 3)
	counts := make([]*atOnce, 3)
	for i := range workers {
		c := &atOnce{}
		counts[i] = c
		workers[i] = newWorker(t, b, skiplock.WorkerConfig{
			ID:     fmt.Sprintf("ahead-%d-%s", i, b.schema),
			Queues: map[string]skiplock.QueueConfig{"q": {MaxWorkers: slots}},
			// The stopped worker cuts its handlers off at once: what still waits is put back.
			ShutdownTimeout: time.Millisecond, SweepInterval: -1, Logger: testLogger(),
		})
		require.NoError(t, skiplock.Handle(workers[i], func(ctx context.Context, job *skiplock.Job[aheadArgs]) error {
			defer c.enter()()
			v, _ := runs.LoadOrStore(job.ID, new(atomic.Int32))
			v.(*atomic.Int32).Add(1)
			return nil
		}))
	}
	params := make([]skiplock.EnqueueParams, jobs)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: aheadArgs{N: i}, Options: &skiplock.EnqueueOptions{Queue: "q"}}
	}
	_, err := b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)

	var heldMost atomic.Int64 // the most running jobs one worker held, sampled
	sampleCtx, stopSampling := context.WithCancel(b.ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampleCtx.Err() == nil {
			var n int64
			if err := b.pool.QueryRow(sampleCtx, b.q(`SELECT coalesce(max(c), 0) FROM (SELECT count(*) c FROM {s}.jobs
				WHERE queue = 'q' AND status = 'running' GROUP BY locked_by) x`)).Scan(&n); err == nil && n > heldMost.Load() {
				heldMost.Store(n)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	stops := make([]func(), 3)
	for i, w := range workers {
		stops[i] = runWorker(t, w)
	}
	eventually(t, 60*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE status = 'succeeded'`) >= jobs/4
	}, "a quarter of the jobs done")
	stops[0]()
	eventually(t, 120*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE status = 'succeeded'`) == jobs
	}, "every job succeeded")
	stopSampling()
	<-sampled

	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs`), "a job is left in the jobs table")
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE attempts <> 1`), "a job spent more than one attempt")
	ran, twice := 0, 0
	runs.Range(func(_, v any) bool {
		ran++
		if v.(*atomic.Int32).Load() != 1 {
			twice++
		}
		return true
	})
	assert.Equal(t, jobs, ran, "jobs whose handler ran")
	assert.Zero(t, twice, "jobs whose handler ran more than once")
	for i, c := range counts {
		assert.LessOrEqual(t, c.most.Load(), int32(slots), "worker %d ran more handlers at once than its slots", i)
	}
	assert.Greater(t, heldMost.Load(), int64(slots), "no worker ever held more jobs than its slots: the drain did not claim ahead")
}
