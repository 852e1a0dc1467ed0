package skiplock_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

func TestBackoffPolicy_DefaultFormula(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		attempt int
		r       float64
		want    time.Duration
	}{
		{1, 0, 1 * time.Second},          // 2^1 s × 0.5
		{1, 0.999999, 2 * time.Second},   // just under 2^1 s
		{3, 0.5, 6 * time.Second},        // 8 s × 0.75
		{12, 0, 30 * time.Minute},        // capped at 1 h, × 0.5
		{40, 0.999999, 60 * time.Minute}, // capped, no overflow
	} {
		p := skiplock.BackoffPolicy{Rand: func() float64 { return tc.r }}
		got := p.NextRetry(&skiplock.JobRow{Attempts: tc.attempt})
		assert.InDelta(t, float64(tc.want), float64(got), float64(10*time.Millisecond), "attempt %d r %v", tc.attempt, tc.r)
	}
}

// TestBackoffPolicy_SaturatesAtMax: the delay is never more than Max nor less than half
// of it once capped, and never negative, for every Max up to the longest Duration, any
// attempt number and the jitter at both ends (and a Rand that breaks its contract).
// A float64 Max × a jitter factor that rounds to 1.0 was 2^63, which wrapped to a
// negative Duration.
func TestBackoffPolicy_SaturatesAtMax(t *testing.T) {
	t.Parallel()
	top := math.Nextafter(1, 0) // the largest Float64 returns
	for _, maxD := range []time.Duration{math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 - 512, math.MaxInt64 - 1<<11,
		math.MaxInt64 / 2, time.Hour, 1} {
		for _, base := range []time.Duration{0, 1, time.Second, math.MaxInt64 / 3, math.MaxInt64} {
			for _, attempt := range []int{1, 2, 30, 62, 63, 64, 1000, math.MaxInt} {
				for _, r := range []float64{0, 0.5, top, 1, math.Inf(1), -1, math.NaN()} {
					p := skiplock.BackoffPolicy{Base: base, Max: maxD, Rand: func() float64 { return r }}
					got := p.NextRetry(&skiplock.JobRow{Attempts: attempt})
					b := base
					if b <= 0 {
						b = time.Second
					}
					// Below the cap: Base × 2^attempt, known exactly while it is under Max.
					capped := maxD
					if attempt < 63 && b <= maxD>>attempt {
						capped = b << attempt
					}
					require.LessOrEqual(t, got, capped, "Max %d Base %d attempt %d r %v", maxD, base, attempt, r)
					require.GreaterOrEqual(t, got, capped/2, "Max %d Base %d attempt %d r %v", maxD, base, attempt, r)
				}
			}
		}
	}
	// The top of the jitter is the cap itself, not past it.
	p := skiplock.BackoffPolicy{Max: math.MaxInt64, Rand: func() float64 { return top }}
	assert.Equal(t, time.Duration(math.MaxInt64), p.NextRetry(&skiplock.JobRow{Attempts: 100}))
}

type flakyArgs struct{}

func (flakyArgs) Kind() string { return "flaky" }

func TestRetry_FailsThreeTimesThenSucceedsWithJitteredBackoff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const base = 50 * time.Millisecond
	var mu sync.Mutex
	var delays []time.Duration // run_at minus the failure's time, per failed attempt
	w := newWorker(t, b, skiplock.WorkerConfig{
		RetryPolicy: skiplock.BackoffPolicy{Base: base}, PollInterval: 20 * time.Millisecond,
		SweepInterval: -1, Logger: testLogger(),
	})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[flakyArgs]) error {
		if n := len(job.Errors); n > 0 {
			mu.Lock()
			delays = append(delays, job.RunAt.Sub(job.Errors[n-1].At))
			mu.Unlock()
		}
		if job.Attempts <= 3 {
			return errors.New("flaky: not yet")
		}
		return nil
	}))
	job, err := b.client.Enqueue(b.ctx, flakyArgs{}, nil)
	require.NoError(t, err)
	runWorker(t, w)
	waitStatus(t, b, job.ID, skiplock.StatusSucceeded, 20*time.Second, "job succeeded")
	got, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, 4, got.Attempts)
	require.Len(t, got.Errors, 3)
	assert.Equal(t, "flaky: not yet", got.LastError)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, delays, 3)
	for i, d := range delays {
		attempt := i + 1
		full := base * time.Duration(1<<attempt)
		assert.GreaterOrEqual(t, d, full/2, "attempt %d delay %s", attempt, d)
		assert.Less(t, d, full, "attempt %d delay %s", attempt, d)
	}
}

type failOnceArgs struct {
	N int `json:"n"`
}

func (failOnceArgs) Kind() string { return "fail_once" }

func TestRetry_JitterSpreadsSimultaneousFailures(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const jobs = 1000
	params := make([]skiplock.EnqueueParams, jobs)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: failOnceArgs{N: i}}
	}
	_, err := b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	// Base 20 s: the first retry is due in [20 s, 40 s), long after the test has looked,
	// even on a loaded machine where failing the 1,000 jobs takes several seconds.
	w := newWorker(t, b, skiplock.WorkerConfig{
		RetryPolicy: skiplock.BackoffPolicy{Base: 20 * time.Second}, SweepInterval: -1, Logger: testLogger(),
		Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 200}},
	})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[failOnceArgs]) error {
		return errors.New("downstream outage")
	}))
	stop := runWorker(t, w)
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE attempts = 1 AND status = 'queued'`) == jobs
	}, "every job failed once")
	stop()

	rows, err := b.pool.Query(b.ctx, b.q(`SELECT extract(epoch FROM run_at - (errors->0->>'at')::timestamptz)::float8 FROM {s}.jobs`))
	require.NoError(t, err)
	var delays []float64
	for rows.Next() {
		var d float64
		require.NoError(t, rows.Scan(&d))
		delays = append(delays, d)
	}
	require.NoError(t, rows.Err())
	require.Len(t, delays, jobs)
	sort.Float64s(delays)
	assert.GreaterOrEqual(t, delays[0], 20.0)
	assert.Less(t, delays[jobs-1], 40.0)
	// Spread over the window, not bunched: each tenth of [20 s, 40 s) holds some of them.
	buckets := map[int]int{}
	for _, d := range delays {
		buckets[int((d-20.0)/2.0)]++
	}
	assert.Len(t, buckets, 10, "buckets: %v", buckets)
	for k, n := range buckets {
		assert.Greater(t, n, jobs/40, "bucket %d holds only %d", k, n)
	}
}

type brokenArgs struct{}

func (brokenArgs) Kind() string { return "broken" }

func TestRetry_ExhaustedGoesDeadAndRequeueBringsItBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var fixed atomic.Bool
	var runs atomic.Int32
	w := newWorker(t, b, skiplock.WorkerConfig{
		RetryPolicy: skiplock.BackoffPolicy{Base: 5 * time.Millisecond}, PollInterval: 20 * time.Millisecond,
		SweepInterval: -1, Logger: testLogger(),
	})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[brokenArgs]) error {
		runs.Add(1)
		if !fixed.Load() {
			return errors.New("bug in handler")
		}
		return nil
	}))
	job, err := b.client.Enqueue(b.ctx, brokenArgs{}, &skiplock.EnqueueOptions{MaxAttempts: 3})
	require.NoError(t, err)
	runWorker(t, w)
	waitStatus(t, b, job.ID, skiplock.StatusDead, 20*time.Second, "job dead")
	dead, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, 3, dead.Attempts)
	assert.Equal(t, int32(3), runs.Load())
	assert.False(t, dead.FinishedAt.IsZero())
	list, err := b.client.List(b.ctx, skiplock.ListParams{Status: skiplock.StatusDead})
	require.NoError(t, err)
	require.Len(t, list, 1)

	_, err = b.client.Requeue(b.ctx, skiplock.RequeueFilter{})
	require.ErrorIs(t, err, skiplock.ErrInvalidOptions, "an empty filter must not requeue everything")
	n, err := b.client.Requeue(b.ctx, skiplock.RequeueFilter{Kind: "other"})
	require.NoError(t, err)
	assert.Zero(t, n.Requeued)

	fixed.Store(true)
	n, err = b.client.Requeue(b.ctx, skiplock.RequeueFilter{Kind: "broken"})
	require.NoError(t, err)
	assert.Equal(t, skiplock.RequeueResult{Requeued: 1}, n)
	waitStatus(t, b, job.ID, skiplock.StatusSucceeded, 20*time.Second, "requeued job succeeded")
	done, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, 1, done.Attempts, "requeue resets attempts")
	assert.Len(t, done.Errors, 3, "the error history stays")
}

type verdictArgs struct {
	Verdict string `json:"verdict"`
}

func (verdictArgs) Kind() string { return "verdict" }

func TestRetry_HandlerVerdicts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var snoozes atomic.Int32
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 20 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[verdictArgs]) error {
		switch job.Args.Verdict {
		case "permanent":
			return skiplock.Permanent(errors.New("bad input"))
		case "cancel":
			return skiplock.CancelJob(errors.New("not needed any more"))
		case "snooze":
			if snoozes.Add(1) <= 2 {
				return skiplock.Snooze(30 * time.Millisecond)
			}
			return nil
		}
		return errors.New("unexpected")
	}))
	ids := map[string]int64{}
	for _, v := range []string{"permanent", "cancel", "snooze"} {
		j, err := b.client.Enqueue(b.ctx, verdictArgs{Verdict: v}, &skiplock.EnqueueOptions{MaxAttempts: 5})
		require.NoError(t, err)
		ids[v] = j.ID
	}
	runWorker(t, w)
	want := map[string]skiplock.JobStatus{"permanent": skiplock.StatusFailed, "cancel": skiplock.StatusCancelled, "snooze": skiplock.StatusSucceeded}
	for v, id := range ids {
		eventually(t, 10*time.Second, func() bool {
			j, err := b.client.Get(b.ctx, id)
			require.NoError(t, err)
			return j.Status == want[v]
		}, "%s ends %s", v, want[v])
	}
	p, err := b.client.Get(b.ctx, ids["permanent"])
	require.NoError(t, err)
	assert.Equal(t, 1, p.Attempts, "no retry after a permanent error")
	assert.Contains(t, p.LastError, "bad input")
	s, err := b.client.Get(b.ctx, ids["snooze"])
	require.NoError(t, err)
	assert.Equal(t, 1, s.Attempts, "snoozes do not use attempts")
	assert.Equal(t, int32(3), snoozes.Load())
}

type limitedRetryArgs struct{}

func (limitedRetryArgs) Kind() string { return "limited_retry" }
func (limitedRetryArgs) RetryPolicy() skiplock.RetryPolicy {
	return fixedDelay(time.Hour)
}

type fixedDelay time.Duration

func (d fixedDelay) NextRetry(*skiplock.JobRow) time.Duration { return time.Duration(d) }

func TestRetry_PerKindPolicy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, b, skiplock.WorkerConfig{SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[limitedRetryArgs]) error {
		return errors.New("later")
	}))
	job, err := b.client.Enqueue(b.ctx, limitedRetryArgs{}, nil)
	require.NoError(t, err)
	runWorker(t, w)
	eventually(t, 10*time.Second, func() bool {
		j, err := b.client.Get(b.ctx, job.ID)
		require.NoError(t, err)
		return j.Attempts == 1 && j.Status == skiplock.StatusQueued
	}, "failed once")
	j, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(time.Hour), j.RunAt, time.Minute)
}

type uglyErrorArgs struct{}

func (uglyErrorArgs) Kind() string { return "ugly_error" }

func TestRetry_UnstorableErrorMessagesAreStillRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, b, skiplock.WorkerConfig{SweepInterval: -1, Logger: testLogger()})
	// A NUL byte, an invalid UTF-8 byte, and a long multi-byte message that a byte cut
	// would split inside a rune: Postgres's text type refuses all three as they are.
	ugly := "nul:\x00 bad:\xff " + strings.Repeat("é", 6000)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[uglyErrorArgs]) error {
		return errors.New(ugly)
	}))
	job, err := b.client.Enqueue(b.ctx, uglyErrorArgs{}, nil)
	require.NoError(t, err)
	runWorker(t, w)
	eventually(t, 10*time.Second, func() bool {
		j, err := b.client.Get(b.ctx, job.ID)
		require.NoError(t, err)
		return j.Status == skiplock.StatusQueued && j.Attempts == 1
	}, "the failed attempt was recorded, not left running")
	j, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(j.LastError, "nul: bad:\uFFFD é"), "last_error %q", j.LastError[:20])
	assert.LessOrEqual(t, len(j.LastError), 8192+len("…"))
	assert.True(t, utf8.ValidString(j.LastError))
}

// stormArgs fails in the way its N says (see stormVerdict), once its handler is released.
type stormArgs struct {
	N int `json:"n"`
}

func (stormArgs) Kind() string { return "storm" }

// stormDelay is the retry delay of job n (and its snooze): its own, to the microsecond.
func stormDelay(n int) time.Duration {
	return time.Duration(n+1)*time.Minute + time.Duration(n)*time.Millisecond + 7*time.Microsecond
}

// stormPolicy gives every job its own delay, from its args.
type stormPolicy struct{}

func (stormPolicy) NextRetry(job *skiplock.JobRow) time.Duration {
	var a stormArgs
	if err := json.Unmarshal(job.Payload, &a); err != nil {
		panic(err)
	}
	return stormDelay(a.N)
}

// statusHook records the status each job's run reported.
type statusHook struct {
	mu     sync.Mutex
	status map[int64]skiplock.JobStatus
}

func (h *statusHook) JobStarted(ctx context.Context, _ *skiplock.JobRow) context.Context { return ctx }

func (h *statusHook) JobFinished(_ context.Context, job *skiplock.JobRow, res skiplock.JobResult) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.status[job.ID] = res.Status
}

func (h *statusHook) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.status)
}

// stormWorker runs a worker whose storm handlers all wait until release is closed and
// then return verdict(n). started receives each job id as its handler starts.
func stormWorker(t *testing.T, b *bundle, jobs int, verdict func(n int) error) (hook *statusHook, started chan int64, release chan struct{}, w *skiplock.Worker) {
	t.Helper()
	hook = &statusHook{status: map[int64]skiplock.JobStatus{}}
	started, release = make(chan int64, jobs), make(chan struct{})
	w = newWorker(t, b, skiplock.WorkerConfig{
		Queues:            map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: jobs}},
		RetryPolicy:       stormPolicy{},
		VisibilityTimeout: 5 * time.Minute, // no heartbeat during the test: the recorder alone fences
		SweepInterval:     -1,
		Hooks:             []skiplock.Hook{hook},
		Logger:            testLogger(),
	})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[stormArgs]) error {
		started <- job.ID
		<-release
		return verdict(job.Args.N)
	}))
	return hook, started, release, w
}

func TestFailures_AStormIsRecordedInBatchesEachJobWithItsOwnVerdictAndBackoff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const jobs = 120
	// By n % 5: retry with the job's own delay, dead (its only attempt), permanent,
	// cancelled by the handler, snoozed for the job's own delay.
	verdict := func(n int) error {
		switch n % 5 {
		case 2:
			return skiplock.Permanent(errors.New("storm: permanent"))
		case 3:
			return skiplock.CancelJob(errors.New("storm: cancel"))
		case 4:
			return skiplock.Snooze(stormDelay(n))
		}
		return fmt.Errorf("storm: downstream down (%d)", n)
	}
	hook, started, release, w := stormWorker(t, b, jobs, verdict)
	params := make([]skiplock.EnqueueParams, jobs)
	for n := range params {
		opts := &skiplock.EnqueueOptions{MaxAttempts: 5}
		if n%5 == 1 {
			opts.MaxAttempts = 1
		}
		params[n] = skiplock.EnqueueParams{Args: stormArgs{N: n}, Options: opts}
	}
	_, err := b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	runWorker(t, w)
	for range jobs {
		<-started
	}
	var before time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT clock_timestamp()`).Scan(&before))
	close(release) // every handler fails at once
	eventually(t, 60*time.Second, func() bool { return hook.count() == jobs }, "every failure reported")
	eventually(t, 60*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'running'`) == 0
	}, "every failure written")
	var after time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT clock_timestamp()`).Scan(&after))

	rows, err := b.pool.Query(b.ctx, b.q(`SELECT id, (payload->>'n')::int, status, attempts, run_at,
		finished_at IS NOT NULL, locked_by, last_error, coalesce(jsonb_array_length(errors), 0),
		(errors->-1->>'at')::timestamptz FROM {s}.jobs`))
	require.NoError(t, err)
	seen := 0
	for rows.Next() {
		var (
			id                  int64
			n, attempts, nerrs  int
			status              string
			runAt               time.Time
			finished            bool
			lockedBy, lastError *string
			errAt               *time.Time
		)
		require.NoError(t, rows.Scan(&id, &n, &status, &attempts, &runAt, &finished, &lockedBy, &lastError, &nerrs, &errAt))
		seen++
		hook.mu.Lock()
		reported := hook.status[id]
		hook.mu.Unlock()
		assert.Equal(t, skiplock.JobStatus(status), reported, "job %d: hooks are told the status that is written", n)
		switch n % 5 {
		case 0: // retry: queued again, run_at = the failure's now() + its own delay, exactly
			assert.Equal(t, "queued", status, "job %d", n)
			assert.Equal(t, 1, attempts)
			assert.Nil(t, lockedBy)
			assert.False(t, finished)
			require.Equal(t, 1, nerrs)
			require.NotNil(t, errAt)
			assert.Equal(t, stormDelay(n), runAt.Sub(*errAt), "job %d: its own backoff", n)
		case 1: // no attempt left: dead, the last worker kept
			assert.Equal(t, "dead", status, "job %d", n)
			assert.True(t, finished)
			require.NotNil(t, lockedBy)
			assert.Equal(t, w.ID(), *lockedBy)
			assert.Equal(t, 1, nerrs)
		case 2:
			assert.Equal(t, "failed", status, "job %d", n)
			assert.True(t, finished)
			require.NotNil(t, lastError)
			assert.Contains(t, *lastError, "storm: permanent")
		case 3:
			assert.Equal(t, "cancelled", status, "job %d", n)
			assert.True(t, finished)
		case 4: // snooze: queued at now() + its delay, the attempt given back, no error
			assert.Equal(t, "queued", status, "job %d", n)
			assert.Equal(t, 0, attempts, "a snooze gives the attempt back")
			assert.Equal(t, 0, nerrs)
			assert.Nil(t, lastError)
			assert.Nil(t, lockedBy)
			assert.False(t, runAt.Before(before.Add(stormDelay(n))), "job %d: snoozed for its own delay", n)
			assert.False(t, runAt.After(after.Add(stormDelay(n))), "job %d: snoozed for its own delay", n)
		}
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, jobs, seen)
	// The failures shared statements: fewer transactions than jobs.
	txs := b.count(t, `SELECT count(DISTINCT xmin::text) FROM {s}.jobs`)
	assert.Less(t, txs, jobs, "every failure was written by a statement of its own")
	t.Logf("%d failures recorded by %d statements", jobs, txs)
}

func TestFailures_AStaleFailureInABatchChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const jobs = 40
	hook, started, release, w := stormWorker(t, b, jobs, func(n int) error {
		return fmt.Errorf("storm: %d failed", n)
	})
	params := make([]skiplock.EnqueueParams, jobs)
	for n := range params {
		params[n] = skiplock.EnqueueParams{Args: stormArgs{N: n}}
	}
	_, err := b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	stop := runWorker(t, w)
	for range jobs {
		<-started
	}
	// While the handlers run, the odd jobs are taken over: reclaimed, and claimed again
	// by another worker (a new attempt, another locked_by).
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET attempts = attempts + 1, fence = fence + 1, locked_by = 'thief', locked_at = now()
		WHERE (payload->>'n')::int % 2 = 1`))
	require.NoError(t, err)
	var stolenRunAt time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT max(run_at) FROM {s}.jobs WHERE locked_by = 'thief'`)).Scan(&stolenRunAt))
	close(release)
	eventually(t, 60*time.Second, func() bool { return hook.count() == jobs }, "every failure handled")
	eventually(t, 60*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'running' AND locked_by <> 'thief'`) == 0
	}, "every failure written")
	stop() // Run returns once every failure reported before is written

	// The stale failures changed nothing; the others were recorded.
	assert.Equal(t, jobs/2, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE locked_by = 'thief' AND status = 'running'
		AND attempts = 2 AND errors IS NULL AND last_error IS NULL AND run_at <= $1`, stolenRunAt))
	assert.Equal(t, jobs/2, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE (payload->>'n')::int % 2 = 0
		AND status = 'queued' AND attempts = 1 AND jsonb_array_length(errors) = 1 AND locked_by IS NULL`))
}

func TestRetry_AnImmediateRetryIsClaimedWithoutWaitingForThePoll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, b, skiplock.WorkerConfig{
		RetryPolicy:   fixedDelay(0),
		PollInterval:  time.Hour, // only the worker's own wake-up can bring the retry back in time
		SweepInterval: -1, Logger: testLogger(),
	})
	done := make(chan int, 1)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[failOnceArgs]) error {
		if job.Attempts == 1 {
			return errors.New("first attempt fails")
		}
		done <- job.Attempts
		return nil
	}))
	runWorker(t, w)
	// Wait until the worker runs (its row is written just before it starts claiming).
	// Whether its first claim or the enqueue's notification brings the job, only the
	// worker's own wake-up brings the retry back before the hourly poll.
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.workers WHERE id = $1`, w.ID()) == 1
	}, "the worker registered")
	_, err := b.client.Enqueue(b.ctx, failOnceArgs{}, nil)
	require.NoError(t, err)
	select {
	case n := <-done:
		assert.Equal(t, 2, n)
	case <-time.After(30 * time.Second):
		t.Fatal("the retry due at once waited for the hourly poll")
	}
}

type panickyPolicyArgs struct{}

func (panickyPolicyArgs) Kind() string                      { return "panicky_policy" }
func (panickyPolicyArgs) RetryPolicy() skiplock.RetryPolicy { return panickyPolicy{} }

type panickyPolicy struct{}

func (panickyPolicy) NextRetry(*skiplock.JobRow) time.Duration { panic("the policy blew up") }

// TestRetry_APanickingPolicyFallsBackToTheDefaultBackoff: a retry policy that panics
// neither ends the process nor loses the failure: the attempt is recorded, retried after
// the default backoff (1-2 s after a first attempt), and the retry runs.
func TestRetry_APanickingPolicyFallsBackToTheDefaultBackoff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var logs lockedBuffer
	w := newWorker(t, b, skiplock.WorkerConfig{Completion: skiplock.CompletionKeep, PollInterval: 50 * time.Millisecond,
		SweepInterval: -1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[panickyPolicyArgs]) error {
		if job.Attempts == 1 {
			return errors.New("try later")
		}
		return nil
	}))
	job, err := b.client.Enqueue(b.ctx, panickyPolicyArgs{}, nil)
	require.NoError(t, err)
	stop := runWorker(t, w)
	defer stop()
	waitStatus(t, b, job.ID, skiplock.StatusSucceeded, 15*time.Second, "the retry runs and succeeds")
	stop()

	j, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, 2, j.Attempts)
	require.Len(t, j.Errors, 1)
	assert.Equal(t, "try later", j.Errors[0].Error)
	// The failure's statement set run_at to now() + delay, and wrote the error at now();
	// the success kept run_at.
	delay := j.RunAt.Sub(j.Errors[0].At)
	assert.True(t, delay >= time.Second && delay < 2*time.Second, "the default backoff's first delay is 1-2 s, got %s", delay)
	// The panic is logged, with the job and its kind.
	var logged bool
	for l := range strings.Lines(logs.String()) {
		logged = logged || strings.Contains(l, "NextRetry panicked") && strings.Contains(l, fmt.Sprintf("job=%d ", job.ID)) &&
			strings.Contains(l, "kind=panicky_policy") && strings.Contains(l, "the policy blew up")
	}
	assert.True(t, logged, "the policy's panic is logged with the job and its kind:\n%s", logs.String())
}

type negativeDelayArgs struct{}

func (negativeDelayArgs) Kind() string                      { return "negative_delay" }
func (negativeDelayArgs) RetryPolicy() skiplock.RetryPolicy { return fixedDelay(-time.Hour) }

// TestRetry_ANegativeDelayIsDueNowNotInThePast: a policy's negative delay means zero, as
// Snooze's does: the retry is due at the failure (run_at = now()), not an hour before it,
// where it would have jumped ahead of every job due in that hour (claims take the
// earliest run_at first).
func TestRetry_ANegativeDelayIsDueNowNotInThePast(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, b, skiplock.WorkerConfig{Completion: skiplock.CompletionKeep, PollInterval: 50 * time.Millisecond,
		SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[negativeDelayArgs]) error {
		if job.Attempts == 1 {
			return errors.New("try again")
		}
		return nil
	}))
	job, err := b.client.Enqueue(b.ctx, negativeDelayArgs{}, nil)
	require.NoError(t, err)
	stop := runWorker(t, w)
	defer stop()
	waitStatus(t, b, job.ID, skiplock.StatusSucceeded, 15*time.Second, "the retry runs and succeeds")
	stop()

	j, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, 2, j.Attempts)
	require.Len(t, j.Errors, 1)
	// The failure's statement set run_at to now() + delay and wrote the error at now();
	// the success kept run_at.
	assert.Equal(t, time.Duration(0), j.RunAt.Sub(j.Errors[0].At), "the retry is due at the failure, not before it")
}
