package skiplock_test

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

// outcomeHook records every enqueue and every attempt's result, by the job's "case"
// metadata; it tags each enqueue with metadata of its own.
type outcomeHook struct {
	mu       sync.Mutex
	enqueued []string // the "case" of each enqueue, when its insert is done
	rows     int      // enqueues done with a row (Enqueue, EnqueueTx)
	outcomes map[string][]skiplock.Outcome
	statuses map[string][]skiplock.JobStatus
	seen     map[string]map[string]string // the metadata each handler saw
}

func (h *outcomeHook) JobEnqueuing(ctx context.Context, e *skiplock.EnqueueEvent) func(*skiplock.JobRow, error) {
	e.Metadata["hooked"] = "yes"
	c := e.Metadata["case"]
	return func(row *skiplock.JobRow, err error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if err == nil {
			h.enqueued = append(h.enqueued, c)
		}
		if row != nil {
			h.rows++
		}
	}
}

func (h *outcomeHook) JobStarted(ctx context.Context, job *skiplock.JobRow) context.Context {
	return ctx
}

func (h *outcomeHook) JobFinished(ctx context.Context, job *skiplock.JobRow, res skiplock.JobResult) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := job.Metadata["case"]
	h.outcomes[c] = append(h.outcomes[c], res.Outcome)
	h.statuses[c] = append(h.statuses[c], res.Status)
}

func TestHooks_SeeEnqueuesMetadataAndEveryOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hook := &outcomeHook{outcomes: map[string][]skiplock.Outcome{}, statuses: map[string][]skiplock.JobStatus{}, seen: map[string]map[string]string{}}
	client, err := skiplock.NewClient(b.pool, skiplock.Config{Schema: b.schema, Logger: testLogger(), Hooks: []skiplock.Hook{hook}})
	require.NoError(t, err)

	md := func(c string) *skiplock.EnqueueOptions {
		return &skiplock.EnqueueOptions{Metadata: map[string]string{"case": c}, MaxAttempts: 3}
	}
	// One path each: Enqueue, EnqueueTx, EnqueueMany by COPY and by the unique-key insert.
	for _, c := range []string{"ok", "retry", "snooze"} {
		_, err := client.Enqueue(b.ctx, verdictArgs{Verdict: c}, md(c))
		require.NoError(t, err)
	}
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = client.EnqueueTx(b.ctx, tx, verdictArgs{Verdict: "dead"}, &skiplock.EnqueueOptions{Metadata: map[string]string{"case": "dead"}, MaxAttempts: 1})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))
	_, err = client.EnqueueMany(b.ctx, []skiplock.EnqueueParams{
		{Args: verdictArgs{Verdict: "cancel"}, Options: md("cancel")},
		{Args: verdictArgs{Verdict: "timeout"}, Options: &skiplock.EnqueueOptions{Metadata: map[string]string{"case": "timeout"}, MaxAttempts: 1, Timeout: 50 * time.Millisecond}},
	})
	require.NoError(t, err)
	_, err = client.EnqueueMany(b.ctx, []skiplock.EnqueueParams{
		{Args: verdictArgs{Verdict: "permanent"}, Options: &skiplock.EnqueueOptions{Metadata: map[string]string{"case": "permanent"}, UniqueKey: "p"}},
	})
	require.NoError(t, err)

	// Bad metadata is refused before anything is written.
	_, err = client.Enqueue(b.ctx, verdictArgs{}, &skiplock.EnqueueOptions{Metadata: map[string]string{"": "x"}})
	require.ErrorIs(t, err, skiplock.ErrInvalidOptions)
	_, err = client.Enqueue(b.ctx, verdictArgs{}, &skiplock.EnqueueOptions{Metadata: map[string]string{"k": "a\x00b"}})
	require.ErrorIs(t, err, skiplock.ErrInvalidOptions)
	assert.Equal(t, 7, b.count(t, `SELECT count(*) FROM {s}.jobs`))

	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{
		PollInterval: 20 * time.Millisecond, SweepInterval: -1, Logger: testLogger(),
		RetryPolicy: fixedDelay(10 * time.Millisecond),
	})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[verdictArgs]) error {
		hook.mu.Lock()
		hook.seen[job.Metadata["case"]] = job.Metadata
		hook.mu.Unlock()
		switch job.Args.Verdict {
		case "retry", "dead":
			if job.Attempts == 1 {
				return errors.New("downstream timeout")
			}
		case "snooze":
			if !snoozedOnce(hook) {
				return skiplock.Snooze(10 * time.Millisecond)
			}
		case "cancel":
			return skiplock.CancelJob(errors.New("not needed"))
		case "permanent":
			return skiplock.Permanent(errors.New("bad input"))
		case "timeout":
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}))
	runWorker(t, w)
	want := map[string][]skiplock.Outcome{
		"ok":        {skiplock.OutcomeSucceeded},
		"retry":     {skiplock.OutcomeRetry, skiplock.OutcomeSucceeded},
		"snooze":    {skiplock.OutcomeSnoozed, skiplock.OutcomeSucceeded},
		"dead":      {skiplock.OutcomeDead},
		"cancel":    {skiplock.OutcomeCancelled},
		"permanent": {skiplock.OutcomeFailed},
		"timeout":   {skiplock.OutcomeTimedOut},
	}
	eventually(t, 30*time.Second, func() bool {
		hook.mu.Lock()
		defer hook.mu.Unlock()
		n := 0
		for _, o := range hook.outcomes {
			n += len(o)
		}
		return n == 9
	}, "nine attempts reported")

	hook.mu.Lock()
	defer hook.mu.Unlock()
	assert.Equal(t, want, hook.outcomes)
	assert.Equal(t, []skiplock.JobStatus{skiplock.StatusDead}, hook.statuses["timeout"], "a timed-out last attempt is dead")
	assert.Equal(t, []skiplock.JobStatus{skiplock.StatusQueued, skiplock.StatusSucceeded}, hook.statuses["retry"])
	assert.ElementsMatch(t, []string{"ok", "retry", "snooze", "dead", "cancel", "timeout", "permanent"}, hook.enqueued)
	assert.Equal(t, 4, hook.rows, "Enqueue and EnqueueTx report their rows; EnqueueMany none")
	for c, m := range hook.seen {
		assert.Equal(t, map[string]string{"case": c, "hooked": "yes"}, m, "metadata of %s as the handler saw it", c)
	}
	assert.Len(t, hook.seen, 7)
}

// snoozedOnce reports whether the snooze case has already been snoozed. Called with h.mu free.
func snoozedOnce(h *outcomeHook) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.outcomes["snooze"]) > 0
}

// durationArgs is the args type of TestHooks_DurationIsTheHandlersOwn.
type durationArgs struct{}

func (durationArgs) Kind() string { return "hook_duration" }

// slowStartHook takes its time in JobStarted and reports each result's Duration.
type slowStartHook struct{ durations chan time.Duration }

func (h slowStartHook) JobStarted(ctx context.Context, _ *skiplock.JobRow) context.Context {
	time.Sleep(150 * time.Millisecond)
	return ctx
}

func (h slowStartHook) JobFinished(_ context.Context, _ *skiplock.JobRow, res skiplock.JobResult) {
	h.durations <- res.Duration
}

// The Duration hooks are told is the handler's own time: not the hooks' JobStarted
// before it, with a timeout (which starts before the hooks) or without one.
func TestHooks_DurationIsTheHandlersOwn(t *testing.T) {
	t.Parallel()
	for _, timeout := range []time.Duration{0, -1} { // the default (1m), none
		b := setup(t)
		hook := slowStartHook{durations: make(chan time.Duration, 1)}
		client, err := skiplock.NewClient(b.pool, skiplock.Config{Schema: b.schema, Logger: testLogger(), Hooks: []skiplock.Hook{hook}})
		require.NoError(t, err)
		w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{Logger: testLogger(), JobTimeout: timeout, PollInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, skiplock.Handle(w, func(context.Context, *skiplock.Job[durationArgs]) error {
			time.Sleep(30 * time.Millisecond)
			return nil
		}))
		_, err = client.Enqueue(b.ctx, durationArgs{}, nil)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(b.ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		d := <-hook.durations
		cancel()
		require.NoError(t, <-done)
		assert.GreaterOrEqual(t, d, 30*time.Millisecond, "timeout %v: the handler's sleep", timeout)
		assert.Less(t, d, 150*time.Millisecond, "timeout %v: JobStarted's sleep is not the handler's", timeout)
	}
}

// panickyHook panics in JobFinished.
type panickyHook struct{}

func (panickyHook) JobStarted(ctx context.Context, _ *skiplock.JobRow) context.Context { return ctx }

func (panickyHook) JobFinished(context.Context, *skiplock.JobRow, skiplock.JobResult) {
	panic("the metrics hook blew up")
}

// TestHooks_APanickingJobFinishedIsLoggedAndIgnored: a hook whose JobFinished panics
// changes no outcome: a success and a failure are both recorded, the hooks after it are
// still told, and the worker goes on.
func TestHooks_APanickingJobFinishedIsLoggedAndIgnored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	after := &statusHook{status: map[int64]skiplock.JobStatus{}}
	w := newWorker(t, b, skiplock.WorkerConfig{Hooks: []skiplock.Hook{panickyHook{}, after}, Completion: skiplock.CompletionKeep,
		SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error {
		if job.Args.N == 1 {
			return skiplock.Permanent(errors.New("bad input"))
		}
		return nil
	}))
	stop := runWorker(t, w)
	defer stop()
	var ids []int64
	for n := range 3 {
		j, err := b.client.Enqueue(b.ctx, noopArgs{N: n}, nil)
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	waitStatus(t, b, ids[0], skiplock.StatusSucceeded, 15*time.Second, "the success is recorded")
	waitStatus(t, b, ids[1], skiplock.StatusFailed, 15*time.Second, "the failure is recorded")
	waitStatus(t, b, ids[2], skiplock.StatusSucceeded, 15*time.Second, "the worker goes on")
	stop()

	j, err := b.client.Get(b.ctx, ids[1])
	require.NoError(t, err)
	assert.Equal(t, "permanent: bad input", j.LastError)
	after.mu.Lock()
	defer after.mu.Unlock()
	assert.Equal(t, map[int64]skiplock.JobStatus{ids[0]: skiplock.StatusSucceeded, ids[1]: skiplock.StatusFailed,
		ids[2]: skiplock.StatusSucceeded}, after.status, "the next hook is told of every outcome")
}

// startPanickyHook's JobStarted panics for the jobs whose metadata says case=boom.
type startPanickyHook struct{}

func (startPanickyHook) JobStarted(ctx context.Context, job *skiplock.JobRow) context.Context {
	if job.Metadata["case"] == "boom" {
		panic("the tracing hook blew up")
	}
	return ctx
}

func (startPanickyHook) JobFinished(context.Context, *skiplock.JobRow, skiplock.JobResult) {}

// TestHooks_APanickingJobStartedFailsTheAttempt: a hook whose JobStarted panics makes
// that attempt a panic, recorded as a handler's is (the job, of one attempt, ends dead
// with the panic and its stack), without running the handler; the hooks are still told
// of the outcome, other jobs run, and the worker (the process) goes on. Before, the panic
// ended the process.
func TestHooks_APanickingJobStartedFailsTheAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	after := &statusHook{status: map[int64]skiplock.JobStatus{}}
	w := newWorker(t, b, skiplock.WorkerConfig{Hooks: []skiplock.Hook{startPanickyHook{}, after}, Completion: skiplock.CompletionKeep,
		SweepInterval: -1, Logger: testLogger()})
	var ran sync.Map
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error {
		ran.Store(job.Args.N, true)
		return nil
	}))
	stop := runWorker(t, w)
	defer stop()
	var ids []int64
	for n := range 3 {
		opts := &skiplock.EnqueueOptions{MaxAttempts: 1}
		if n == 1 {
			opts.Metadata = map[string]string{"case": "boom"}
		}
		j, err := b.client.Enqueue(b.ctx, noopArgs{N: n}, opts)
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	waitStatus(t, b, ids[0], skiplock.StatusSucceeded, 15*time.Second, "job 0 succeeded")
	waitStatus(t, b, ids[1], skiplock.StatusDead, 15*time.Second, "job 1, whose JobStarted panicked, is dead")
	waitStatus(t, b, ids[2], skiplock.StatusSucceeded, 15*time.Second, "the worker goes on")
	stop()
	j, err := b.client.Get(b.ctx, ids[1])
	require.NoError(t, err)
	assert.Contains(t, j.LastError, "panic: the tracing hook blew up")
	_, handled := ran.Load(1)
	assert.False(t, handled, "the handler did not run")
	after.mu.Lock()
	defer after.mu.Unlock()
	assert.Equal(t, skiplock.StatusDead, after.status[ids[1]], "the hooks are told of the outcome")
}
