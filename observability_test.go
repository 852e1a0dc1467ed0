package skiplock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

type obsArgs struct {
	Case string `json:"case"`
}

func (obsArgs) Kind() string { return "obs_hooks" }

type obsCtxKey struct{}

// attemptHook records, per job case, every JobStarted and JobFinished with the attempt
// number the row carried, and whether the context handed to JobFinished is the one
// JobStarted returned.
type attemptHook struct {
	mu       sync.Mutex
	started  map[string][]int
	finished map[string][]skiplock.JobResult
	attempts map[string][]int
	ctxOK    map[string][]bool
}

func (h *attemptHook) JobStarted(ctx context.Context, job *skiplock.JobRow) context.Context {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := string(job.Payload)
	h.started[c] = append(h.started[c], job.Attempts)
	return context.WithValue(ctx, obsCtxKey{}, "hooked")
}

func (h *attemptHook) JobFinished(ctx context.Context, job *skiplock.JobRow, res skiplock.JobResult) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := string(job.Payload)
	h.finished[c] = append(h.finished[c], res)
	h.attempts[c] = append(h.attempts[c], job.Attempts)
	h.ctxOK[c] = append(h.ctxOK[c], ctx.Value(obsCtxKey{}) == "hooked")
}

// Every attempt is reported once to JobStarted and once to JobFinished, with its attempt
// number, outcome, status and duration: a panic (a retry), a timeout (a retry), and a
// handler cut off by shutdown (released, its attempt given back in the row).
func TestHooks_OncePerAttemptWithItsNumberOutcomeAndDuration(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hook := &attemptHook{started: map[string][]int{}, finished: map[string][]skiplock.JobResult{}, attempts: map[string][]int{}, ctxOK: map[string][]bool{}}
	client, err := skiplock.NewClient(b.pool, skiplock.Config{Schema: b.schema, Logger: testLogger(), Hooks: []skiplock.Hook{hook}})
	require.NoError(t, err)
	ids := map[string]int64{}
	for _, c := range []string{"panic", "timeout", "release"} {
		timeout := 300 * time.Millisecond
		if c == "release" {
			timeout = time.Hour // only the shutdown ends it
		}
		j, err := client.Enqueue(b.ctx, obsArgs{Case: c}, &skiplock.EnqueueOptions{MaxAttempts: 3, Timeout: timeout})
		require.NoError(t, err)
		ids[`{"case": "`+c+`"}`] = j.ID
	}
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{
		PollInterval: 20 * time.Millisecond, SweepInterval: -1, Logger: testLogger(),
		RetryPolicy: fixedDelay(10 * time.Millisecond), ShutdownTimeout: 50 * time.Millisecond,
	})
	require.NoError(t, err)
	var mwSaw sync.Map
	require.NoError(t, skiplock.Use(w, func(next skiplock.JobHandler) skiplock.JobHandler {
		return func(ctx context.Context, job *skiplock.JobRow) error {
			mwSaw.Store(string(job.Payload), ctx.Value(obsCtxKey{}))
			return next(ctx, job)
		}
	}))
	releaseStarted := make(chan struct{})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[obsArgs]) error {
		switch job.Args.Case {
		case "panic":
			if job.Attempts == 1 {
				panic("boom")
			}
		case "timeout":
			if job.Attempts == 1 {
				<-ctx.Done()
				return ctx.Err()
			}
		case "release":
			close(releaseStarted)
			<-ctx.Done()
			return ctx.Err()
		}
		time.Sleep(20 * time.Millisecond)
		return nil
	}))
	stop := runWorker(t, w)
	eventually(t, 30*time.Second, func() bool {
		hook.mu.Lock()
		defer hook.mu.Unlock()
		return len(hook.finished[`{"case": "panic"}`]) == 2 && len(hook.finished[`{"case": "timeout"}`]) == 2
	}, "panic and timeout cases done")
	<-releaseStarted
	stop()

	hook.mu.Lock()
	defer hook.mu.Unlock()
	type want struct {
		outcomes []skiplock.Outcome
		statuses []skiplock.JobStatus
		attempts []int
		panicked []bool
	}
	wants := map[string]want{
		`{"case": "panic"}`:   {[]skiplock.Outcome{skiplock.OutcomeRetry, skiplock.OutcomeSucceeded}, []skiplock.JobStatus{skiplock.StatusQueued, skiplock.StatusSucceeded}, []int{1, 2}, []bool{true, false}},
		`{"case": "timeout"}`: {[]skiplock.Outcome{skiplock.OutcomeTimedOut, skiplock.OutcomeSucceeded}, []skiplock.JobStatus{skiplock.StatusQueued, skiplock.StatusSucceeded}, []int{1, 2}, []bool{false, false}},
		`{"case": "release"}`: {[]skiplock.Outcome{skiplock.OutcomeReleased}, []skiplock.JobStatus{skiplock.StatusQueued}, []int{1}, []bool{false}},
	}
	for c, wt := range wants {
		var outs []skiplock.Outcome
		var sts []skiplock.JobStatus
		var pan []bool
		for _, r := range hook.finished[c] {
			outs, sts, pan = append(outs, r.Outcome), append(sts, r.Status), append(pan, r.Panicked)
			assert.Positive(t, r.Duration, "%s: duration", c)
			assert.Less(t, r.Duration, 10*time.Second, "%s: duration", c)
		}
		assert.Equal(t, wt.outcomes, outs, c)
		assert.Equal(t, wt.statuses, sts, c)
		assert.Equal(t, wt.panicked, pan, c)
		assert.Equal(t, wt.attempts, hook.started[c], "%s: JobStarted once per attempt, with its number", c)
		assert.Equal(t, wt.attempts, hook.attempts[c], "%s: JobFinished once per attempt, with its number", c)
		for _, ok := range hook.ctxOK[c] {
			assert.True(t, ok, "%s: JobFinished gets JobStarted's context", c)
		}
		v, _ := mwSaw.Load(c)
		assert.Equal(t, "hooked", v, "%s: middleware sees JobStarted's context", c)
	}
	for _, r := range hook.finished[`{"case": "timeout"}`][:1] {
		assert.GreaterOrEqual(t, r.Duration, 300*time.Millisecond, "a timed-out attempt ran to its timeout")
	}
	assert.Equal(t, 0, b.count(t, `SELECT attempts FROM {s}.jobs WHERE id = $1 AND status = 'queued' AND locked_by IS NULL`, ids[`{"case": "release"}`]),
		"the released job is queued with its attempt given back")
	var panicErr *skiplock.PanicError
	assert.True(t, errors.As(hook.finished[`{"case": "panic"}`][0].Err, &panicErr))
}

// Every documented figure of Stats matches the rows, and CachedStats, read by two clients
// on their own pools, recomputes once per interval for both.
func TestStats_FiguresMatchTheRowsAndCachedStatsIsShared(t *testing.T) {
	t.Parallel()
	b := setup(t)
	enq := func(c string, o *skiplock.EnqueueOptions) int64 {
		j, err := b.client.Enqueue(b.ctx, obsArgs{Case: c}, o)
		require.NoError(t, err)
		return j.ID
	}
	due := enq("due", &skiplock.EnqueueOptions{Queue: "q"})
	enq("due2", &skiplock.EnqueueOptions{Queue: "q"})
	enq("later", &skiplock.EnqueueOptions{Queue: "q", RunAt: time.Now().Add(time.Hour)})
	parent := enq("parent", &skiplock.EnqueueOptions{Queue: "q", RunAt: time.Now().Add(time.Hour)})
	enq("child", &skiplock.EnqueueOptions{Queue: "q", DependsOn: []int64{parent}})
	run := enq("run", &skiplock.EnqueueOptions{Queue: "q"})
	over := enq("over", &skiplock.EnqueueOptions{Queue: "q"})
	arch1 := enq("arch1", &skiplock.EnqueueOptions{Queue: "q"})
	arch2 := enq("arch2", &skiplock.EnqueueOptions{Queue: "q"})
	dead := enq("dead", &skiplock.EnqueueOptions{Queue: "q"})
	_, err := b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET run_at = now() - interval '90 seconds' WHERE id = $1`), due)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET status = 'running', attempts = 1, fence = 7, locked_by = 'w', locked_at = now(), lease_until = now() + interval '1 hour',
		overrun_fence = CASE WHEN id = $2 THEN 7 END WHERE id IN ($1, $2)`), run, over)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET status = 'dead', attempts = 1, finished_at = now() - interval '30 seconds' WHERE id = $1`), dead)
	require.NoError(t, err)
	// Two archived successes: 20 s ago and 5 minutes ago.
	_, err = b.pool.Exec(b.ctx, b.q(`WITH d AS (DELETE FROM {s}.jobs WHERE id IN ($1, $2) RETURNING *)
		INSERT INTO {s}.jobs_archive (id, kind, queue, payload, metadata, priority, run_at, status, attempts, max_attempts, created_at, finished_at)
		SELECT id, kind, queue, payload, metadata, priority, run_at, 'succeeded', 1, max_attempts, created_at,
			now() - CASE WHEN id = $1 THEN interval '20 seconds' ELSE interval '5 minutes' END FROM d`), arch1, arch2)
	require.NoError(t, err)

	check := func(s skiplock.QueueStats) {
		t.Helper()
		assert.Equal(t, "q", s.Queue)
		assert.Equal(t, map[skiplock.JobStatus]int64{skiplock.StatusQueued: 5, skiplock.StatusRunning: 2, skiplock.StatusDead: 1}, s.Counts)
		assert.Equal(t, int64(3), s.Scheduled, "later, parent, and the waiting child")
		assert.Equal(t, int64(1), s.Overrunning)
		assert.InDelta(t, 90, s.OldestDue.Seconds(), 5)
		assert.Equal(t, map[skiplock.JobStatus]int64{skiplock.StatusSucceeded: 1, skiplock.StatusDead: 1}, s.FinishedLastMinute)
		assert.Equal(t, map[skiplock.JobStatus]int64{skiplock.StatusSucceeded: 2, skiplock.StatusDead: 1}, s.FinishedLastHour)
	}
	stats, err := b.client.Stats(b.ctx)
	require.NoError(t, err)
	require.Len(t, stats, 1)
	check(stats[0])

	c1, err := skiplock.NewClient(newPool(t, 1), skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)
	c2, err := skiplock.NewClient(newPool(t, 1), skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)
	const interval = 400 * time.Millisecond
	taken := map[time.Time]bool{}
	t0 := time.Now()
	for time.Since(t0) < 2*time.Second {
		for _, c := range []*skiplock.Client{c1, c2} {
			s, at, err := c.CachedStats(b.ctx, interval)
			require.NoError(t, err)
			require.Len(t, s, 1)
			check(s[0])
			taken[at] = true
		}
	}
	elapsed := time.Since(t0)
	assert.LessOrEqual(t, len(taken), int(elapsed/interval)+2, "one refresh per interval for both clients")
	assert.GreaterOrEqual(t, len(taken), int(elapsed/interval)-1, "a refresh each interval")
	ats := make([]time.Time, 0, len(taken))
	for at := range taken {
		ats = append(ats, at)
	}
	slices.SortFunc(ats, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(ats); i++ {
		assert.GreaterOrEqual(t, ats[i].Sub(ats[i-1]), interval, "refreshes at least an interval apart")
	}
}
