package skiplock_test

// Tests of middleware and error handlers (middleware.go).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// trace records what middleware and handlers did, in order, from any goroutine.
type trace struct {
	mu     sync.Mutex
	events []string
}

func (tr *trace) add(s string) {
	tr.mu.Lock()
	tr.events = append(tr.events, s)
	tr.mu.Unlock()
}

func (tr *trace) get() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.events...)
}

func named(tr *trace, name string) skiplock.Middleware {
	return func(next skiplock.JobHandler) skiplock.JobHandler {
		return func(ctx context.Context, job *skiplock.JobRow) error {
			tr.add(name + ">" + job.Kind)
			err := next(ctx, job)
			tr.add("<" + name)
			return err
		}
	}
}

func TestUse_WrapsHandlersInOrderAndUseKindInside(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tr := &trace{}
	w := newWorker(t, b, skiplock.WorkerConfig{Logger: testLogger()})
	done := make(chan string, 2)
	require.NoError(t, skiplock.Handle(w, func(_ context.Context, j *skiplock.Job[noopArgs]) error {
		tr.add("noop")
		done <- j.Kind
		return nil
	}))
	require.NoError(t, skiplock.Handle(w, func(_ context.Context, j *skiplock.Job[emailArgs]) error {
		tr.add("email")
		done <- j.Kind
		return nil
	}))
	require.NoError(t, skiplock.Use(w, named(tr, "a"), named(tr, "b")))
	require.NoError(t, skiplock.UseKind(w, "noop", named(tr, "k")))
	require.NoError(t, skiplock.Use(w, named(tr, "c")))
	require.Error(t, skiplock.Use(w, nil))
	require.ErrorIs(t, skiplock.UseKind(w, "", named(tr, "x")), skiplock.ErrInvalidKind)

	_, err := b.client.Enqueue(b.ctx, noopArgs{}, nil)
	require.NoError(t, err)
	stop := runWorker(t, w)
	defer stop()
	<-done
	require.Error(t, skiplock.Use(w, named(tr, "late")), "after Run")
	// done is sent from inside the handler: the middleware's after-parts run once it returns.
	eventually(t, 10*time.Second, func() bool { return len(tr.get()) == 9 }, "the noop job's middleware returned")
	assert.Equal(t, []string{"a>noop", "b>noop", "c>noop", "k>noop", "noop", "<k", "<c", "<b", "<a"}, tr.get())

	tr.mu.Lock()
	tr.events = nil
	tr.mu.Unlock()
	_, err = b.client.Enqueue(b.ctx, emailArgs{OrderID: 1}, nil)
	require.NoError(t, err)
	<-done
	eventually(t, 10*time.Second, func() bool { return len(tr.get()) == 7 }, "the email job's middleware returned")
	assert.Equal(t, []string{"a>send_email", "b>send_email", "c>send_email", "email", "<c", "<b", "<a"}, tr.get(), "no kind middleware for another kind")
}

type txKey struct{}

// A transaction per job: the middleware begins it, the handler writes with it, and it
// commits only when the handler succeeds. The first attempt fails after its write, which
// is rolled back; the retry's write commits. The audit table shows one row per job.
func TestUse_TransactionPerJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.audit (job_id bigint, attempt int)`))
	require.NoError(t, err)
	w := newWorker(t, b, skiplock.WorkerConfig{RetryPolicy: skiplock.BackoffPolicy{Base: time.Millisecond, Max: time.Millisecond},
		Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 8}}, PollInterval: 50 * time.Millisecond, Logger: testLogger()})
	require.NoError(t, skiplock.Use(w, func(next skiplock.JobHandler) skiplock.JobHandler {
		return func(ctx context.Context, job *skiplock.JobRow) error {
			return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
				return next(context.WithValue(ctx, txKey{}, tx), job)
			})
		}
	}))
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, j *skiplock.Job[auditArgs]) error {
		tx := ctx.Value(txKey{}).(pgx.Tx)
		if _, err := tx.Exec(ctx, b.q(`INSERT INTO {s}.audit VALUES ($1, $2)`), j.ID, j.Attempts); err != nil {
			return err
		}
		if j.Attempts == 1 {
			return errors.New("fails after its write")
		}
		return nil
	}))
	const n = 40
	params := make([]skiplock.EnqueueParams, n)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: auditArgs{N: i}}
	}
	_, err = b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	stop := runWorker(t, w)
	eventually(t, 60*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE status = 'succeeded'`) == n
	}, "every job succeeded on its second attempt")
	stop()
	assert.Equal(t, n, b.count(t, `SELECT count(*) FROM {s}.audit`))
	assert.Equal(t, n, b.count(t, `SELECT count(DISTINCT job_id) FROM {s}.audit WHERE attempt = 2`), "only the second attempts' writes committed")
}

// errRecorder is an ErrorHandler that records what it is told.
type errRecorder struct {
	mu     sync.Mutex
	errs   map[int64][]string // job id -> "status: error"
	panics map[int64]*skiplock.PanicError
	stuck  chan int64
}

func (r *errRecorder) HandleError(_ context.Context, job *skiplock.JobRow, status skiplock.JobStatus, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs[job.ID] = append(r.errs[job.ID], fmt.Sprintf("%s: %v", status, err))
	var pe *skiplock.PanicError
	if errors.As(err, &pe) {
		r.panics[job.ID] = pe
	}
}

func (r *errRecorder) HandleStuck(_ context.Context, job *skiplock.JobRow, _ time.Duration) {
	r.stuck <- job.ID
}

type mwVerdictArgs struct {
	Do string `json:"do"`
}

func (mwVerdictArgs) Kind() string { return "mw_verdict" }

func TestHandleErrors_SeesEveryFailedAttemptWithPanicStacks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &errRecorder{errs: map[int64][]string{}, panics: map[int64]*skiplock.PanicError{}, stuck: make(chan int64, 1)}
	w := newWorker(t, b, skiplock.WorkerConfig{RetryPolicy: skiplock.BackoffPolicy{Base: time.Millisecond, Max: time.Millisecond},
		PollInterval: 50 * time.Millisecond, Logger: testLogger()})
	require.NoError(t, skiplock.HandleErrors(w, rec))
	require.Error(t, skiplock.HandleErrors(w, nil))
	var snoozed atomic.Bool
	require.NoError(t, skiplock.Handle(w, func(_ context.Context, j *skiplock.Job[mwVerdictArgs]) error {
		switch j.Args.Do {
		case "fail":
			return errors.New("boom")
		case "permanent":
			return skiplock.Permanent(errors.New("bad input"))
		case "panic":
			panicHere()
		case "snooze":
			if snoozed.CompareAndSwap(false, true) { // a snooze gives the attempt back
				return skiplock.Snooze(time.Millisecond)
			}
		case "cancel":
			return skiplock.CancelJob(errors.New("not needed"))
		}
		return nil
	}))
	ids := map[string]int64{}
	for _, do := range []string{"fail", "permanent", "panic", "snooze", "cancel", "ok"} {
		j, err := b.client.Enqueue(b.ctx, mwVerdictArgs{Do: do}, &skiplock.EnqueueOptions{MaxAttempts: 2})
		require.NoError(t, err)
		ids[do] = j.ID
	}
	stop := runWorker(t, w)
	eventually(t, 60*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status IN ('queued', 'running')`) == 0
	}, "every job finished")
	stop()

	rec.mu.Lock()
	defer rec.mu.Unlock()
	assert.Equal(t, []string{"queued: boom", "dead: boom"}, rec.errs[ids["fail"]])
	require.Len(t, rec.errs[ids["permanent"]], 1)
	assert.True(t, strings.HasPrefix(rec.errs[ids["permanent"]][0], "failed: "), rec.errs[ids["permanent"]])
	assert.Len(t, rec.errs[ids["panic"]], 2, "both attempts")
	pe := rec.panics[ids["panic"]]
	require.NotNil(t, pe)
	assert.Equal(t, "the handler blew up", pe.Value)
	assert.Contains(t, string(pe.Stack), "panicHere", "the stack names where it panicked")
	for _, quiet := range []string{"snooze", "cancel", "ok"} {
		assert.Empty(t, rec.errs[ids[quiet]], quiet)
	}
	// last_error is the same text as before PanicError.
	j, err := b.client.Get(b.ctx, ids["panic"])
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(j.LastError, "panic: the handler blew up\n\n"), j.LastError)
}

func panicHere() { panic("the handler blew up") }

func TestHandleErrors_ToldOfAHandlerStuckPastItsTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &errRecorder{errs: map[int64][]string{}, panics: map[int64]*skiplock.PanicError{}, stuck: make(chan int64, 1)}
	w := newWorker(t, b, skiplock.WorkerConfig{JobTimeout: 100 * time.Millisecond, VisibilityTimeout: 300 * time.Millisecond,
		SweepInterval: -1, ShutdownTimeout: 100 * time.Millisecond, Logger: testLogger()})
	require.NoError(t, skiplock.HandleErrors(w, rec))
	release := make(chan struct{})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, j *skiplock.Job[slowArgs]) error {
		<-release // ignores ctx
		return nil
	}))
	job, err := b.client.Enqueue(b.ctx, slowArgs{Ms: 1}, nil)
	require.NoError(t, err)
	stop := runWorker(t, w)
	select {
	case id := <-rec.stuck:
		assert.Equal(t, job.ID, id)
	case <-time.After(30 * time.Second):
		t.Fatal("HandleStuck was not called")
	}
	close(release)
	stop()
}

// A middleware that panics is recovered like a handler: a failed attempt, not a crash.
func TestUse_PanicInMiddlewareIsAFailedAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, b, skiplock.WorkerConfig{Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(context.Context, *skiplock.Job[noopArgs]) error { return nil }))
	require.NoError(t, skiplock.Use(w, func(next skiplock.JobHandler) skiplock.JobHandler {
		return func(ctx context.Context, job *skiplock.JobRow) error { panic("middleware bug") }
	}))
	j, err := b.client.Enqueue(b.ctx, noopArgs{}, &skiplock.EnqueueOptions{MaxAttempts: 1})
	require.NoError(t, err)
	stop := runWorker(t, w)
	defer stop()
	eventually(t, 30*time.Second, func() bool {
		got, err := b.client.Get(b.ctx, j.ID)
		require.NoError(t, err)
		return got.Status == skiplock.StatusDead && strings.HasPrefix(got.LastError, "panic: middleware bug")
	}, "dead with the middleware's panic")
}

type ctorPanicArgs struct{}

func (ctorPanicArgs) Kind() string { return "ctor_panic" }

// TestUse_PanicInMiddlewareConstructorIsAFailedAttempt: a middleware that panics while
// it builds its handler (before the handler's own call) is the attempt's panic, recorded
// like a handler's; the worker goes on with other kinds.
func TestUse_PanicInMiddlewareConstructorIsAFailedAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &errRecorder{errs: map[int64][]string{}, panics: map[int64]*skiplock.PanicError{}}
	w := newWorker(t, b, skiplock.WorkerConfig{Completion: skiplock.CompletionKeep, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(context.Context, *skiplock.Job[noopArgs]) error { return nil }))
	require.NoError(t, skiplock.Handle(w, func(context.Context, *skiplock.Job[ctorPanicArgs]) error {
		t.Error("the handler must not run: its middleware never built it")
		return nil
	}))
	require.NoError(t, skiplock.UseKind(w, ctorPanicArgs{}.Kind(), func(next skiplock.JobHandler) skiplock.JobHandler {
		panic("constructor bug")
	}))
	require.NoError(t, skiplock.HandleErrors(w, rec))
	bad, err := b.client.Enqueue(b.ctx, ctorPanicArgs{}, &skiplock.EnqueueOptions{MaxAttempts: 1})
	require.NoError(t, err)
	stop := runWorker(t, w)
	defer stop()
	waitStatus(t, b, bad.ID, skiplock.StatusDead, 15*time.Second, "the attempt failed, its only one")
	good, err := b.client.Enqueue(b.ctx, noopArgs{}, nil)
	require.NoError(t, err)
	waitStatus(t, b, good.ID, skiplock.StatusSucceeded, 15*time.Second, "the worker goes on")
	stop()

	j, err := b.client.Get(b.ctx, bad.ID)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(j.LastError, "panic: constructor bug"), "last_error: %s", j.LastError)
	assert.Contains(t, j.LastError, "middleware_test.go", "the stack is recorded")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Contains(t, rec.panics, bad.ID, "error handlers see a *PanicError")
	assert.Equal(t, "constructor bug", rec.panics[bad.ID].Value)
}

type panickyErrorHandler struct{}

func (panickyErrorHandler) HandleError(context.Context, *skiplock.JobRow, skiplock.JobStatus, error) {
	panic("the error tracker blew up")
}

func (panickyErrorHandler) HandleStuck(context.Context, *skiplock.JobRow, time.Duration) {
	panic("the pager blew up")
}

// TestHandleErrors_APanickingErrorHandlerIsLoggedAndIgnored: an error handler whose
// HandleError or HandleStuck panics changes nothing: the failure is recorded as the
// handler's verdict says, a stuck handler's job stays held until it returns, the error
// handlers after it are still told, and the worker goes on.
func TestHandleErrors_APanickingErrorHandlerIsLoggedAndIgnored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &errRecorder{errs: map[int64][]string{}, panics: map[int64]*skiplock.PanicError{}, stuck: make(chan int64, 1)}
	w := newWorker(t, b, skiplock.WorkerConfig{JobTimeout: 100 * time.Millisecond, VisibilityTimeout: 300 * time.Millisecond,
		RetryPolicy: fixedDelay(time.Hour), Completion: skiplock.CompletionKeep, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[mwVerdictArgs]) error {
		return skiplock.Permanent(errors.New("bad input"))
	}))
	require.NoError(t, skiplock.Handle(w, func(context.Context, *skiplock.Job[noopArgs]) error { return nil }))
	release := make(chan struct{})
	require.NoError(t, skiplock.Handle(w, func(context.Context, *skiplock.Job[slowArgs]) error {
		<-release // ignores its context past its timeout: HandleStuck
		return nil
	}))
	require.NoError(t, skiplock.HandleErrors(w, panickyErrorHandler{}, rec))
	bad, err := b.client.Enqueue(b.ctx, mwVerdictArgs{}, nil)
	require.NoError(t, err)
	stuck, err := b.client.Enqueue(b.ctx, slowArgs{}, nil)
	require.NoError(t, err)
	stop := runWorker(t, w)
	defer stop()
	waitStatus(t, b, bad.ID, skiplock.StatusFailed, 15*time.Second, "the permanent failure is recorded")
	select {
	case id := <-rec.stuck:
		assert.Equal(t, stuck.ID, id, "the next error handler is told of the stuck handler")
	case <-time.After(30 * time.Second):
		t.Fatal("HandleStuck was not called")
	}
	close(release)
	eventually(t, 15*time.Second, func() bool {
		j, err := b.client.Get(b.ctx, stuck.ID)
		require.NoError(t, err)
		return j.Status == skiplock.StatusQueued && j.Attempts == 1
	}, "the stuck handler's attempt is recorded as a timed-out failure once it returns")
	good, err := b.client.Enqueue(b.ctx, noopArgs{}, nil)
	require.NoError(t, err)
	waitStatus(t, b, good.ID, skiplock.StatusSucceeded, 15*time.Second, "the worker goes on")
	stop()

	j, err := b.client.Get(b.ctx, bad.ID)
	require.NoError(t, err)
	assert.Equal(t, 1, j.Attempts)
	assert.Equal(t, "permanent: bad input", j.LastError)
	s, err := b.client.Get(b.ctx, stuck.ID)
	require.NoError(t, err)
	assert.Contains(t, s.LastError, "job timeout")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	assert.Equal(t, []string{"failed: permanent: bad input"}, rec.errs[bad.ID], "the next error handler is still told")
}
