// This file holds batch handlers: HandleBatch registers a handler that receives many
// claimed jobs of a kind in one call and returns a result per job, so that it can, say,
// write 500 rows with one statement. The jobs are claimed, leased, timed and recorded one
// by one exactly as with Handle; only the handler call is shared.

package skiplock

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/jobtype"
)

// Defaults of [BatchHandlerConfig].
const (
	DefaultBatchHandlerMaxJobs = 100
	DefaultBatchHandlerMaxWait = 10 * time.Millisecond
)

// BatchHandlerConfig configures [HandleBatch]. The zero value is valid.
type BatchHandlerConfig struct {
	// MaxJobs is the most jobs one call receives. Defaults to
	// [DefaultBatchHandlerMaxJobs] (100); zero or negative means the default. A batch
	// holds at most the jobs the worker runs at once: give the queue MaxWorkers of at
	// least MaxJobs.
	MaxJobs int
	// MaxWait is the longest the first job of a batch waits for others before the call.
	// Defaults to [DefaultBatchHandlerMaxWait] (10ms); zero or negative means the default.
	MaxWait time.Duration
}

// HandleBatch registers fn as the handler of T's kind on w, called with up to
// cfg.MaxJobs jobs at once: the first job to start opens a batch, which the jobs that
// start within cfg.MaxWait join, and fn runs once for all of them. fn returns one error
// per job, in order (nil: that job succeeded; [Permanent], [CancelJob], [Snooze] work
// as from Handle's handlers); a slice of another length fails every job of the call.
// A panic in fn fails every job of the call with the panic's value and stack, as a
// panic in a handler of Handle does ([PanicError]; last_error "skiplock: batch handler
// panicked: <value>" and the stack), and an fn that ends its goroutine with
// runtime.Goexit (t.FailNow) fails every job too.
//
// Each job is still its own row: it is retried, timed out, cancelled and recorded alone.
// Each job's own context is [Job.Context]: it ends when that job is cancelled
// ([Client.Cancel]), passes its timeout, or is cut off by the worker's shutdown, and fn
// should stop working for that job then (and may report that job's output and progress
// with it: [SetOutput], [RecordProgress]; a durable [Step] or [Sleep] takes only it).
// fn's ctx carries the first job's values (a hook's tracing span) and ends only once
// every job of the call has ended its own: one job's cancel or timeout does not cut the
// others' work.
//
// A job whose context ended stays with the call until fn returns, its slot taken and its
// lease renewed, since fn may still be writing for it; then it is recorded as with
// Handle: past its timeout as a timed-out failure whatever fn returned for it, and after
// [Client.Cancel] not at all (the cancel wrote it).
func HandleBatch[T JobArgs](w *Worker, cfg BatchHandlerConfig, fn func(ctx context.Context, jobs []*Job[T]) []error) error {
	if fn == nil {
		return errors.New("skiplock: HandleBatch: nil handler")
	}
	if cfg.MaxJobs <= 0 {
		cfg.MaxJobs = DefaultBatchHandlerMaxJobs
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = DefaultBatchHandlerMaxWait
	}
	c := &batchCollector[T]{cfg: cfg, fn: fn}
	return Handle(w, c.run)
}

// batchCollector gathers the jobs of one kind that start close together into batches.
type batchCollector[T JobArgs] struct {
	cfg  BatchHandlerConfig
	fn   func(ctx context.Context, jobs []*Job[T]) []error
	mu   sync.Mutex
	open *jobBatch[T] // the batch jobs join now; nil: the next job opens one
}

// jobBatch is one call of the batch handler.
type jobBatch[T JobArgs] struct {
	jobs []*Job[T]
	full chan struct{} // closed when MaxJobs joined
	done chan struct{} // closed when errs is set
	errs []error
}

// run is the per-job handler: it joins the open batch (or opens one and, as its leader,
// calls fn for it when it is full or MaxWait has passed) and returns its own result. The
// leader calls fn in its own goroutine: no long-lived goroutine is started (see
// batchContext).
func (c *batchCollector[T]) run(ctx context.Context, job *Job[T]) error {
	c.mu.Lock()
	b, leader := c.open, false
	if b == nil {
		b, leader = &jobBatch[T]{full: make(chan struct{}), done: make(chan struct{})}, true
		c.open = b
	}
	i := len(b.jobs)
	b.jobs = append(b.jobs, job)
	if len(b.jobs) == c.cfg.MaxJobs {
		close(b.full)
		c.open = nil
	}
	c.mu.Unlock()
	if !leader {
		<-b.done // the leader always closes it, whatever fn does
		return b.errs[i]
	}
	t := time.NewTimer(c.cfg.MaxWait)
	select {
	case <-b.full:
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	c.mu.Lock()
	if c.open == b {
		c.open = nil // closed to newcomers: they open the next batch
	}
	c.mu.Unlock()
	callCtx, end := batchContext(ctx, b.jobs)
	// Deferred, so that an fn that ends this goroutine with runtime.Goexit (t.FailNow,
	// say) still releases the jobs that joined the call, each failed as the leader's
	// attempt is, rather than leaving them waiting for ever.
	defer func() {
		if b.errs == nil {
			b.errs = fill(len(b.jobs), errBatchExited)
		}
		end()
		close(b.done)
	}()
	b.errs = c.call(callCtx, b.jobs)
	return b.errs[i]
}

// errBatchExited is the error of the jobs of a batch call whose fn ended its goroutine
// with runtime.Goexit instead of returning.
var errBatchExited = errors.New("skiplock: batch handler exited without returning (runtime.Goexit: t.FailNow or require.* called in a handler?)")

// batchContext returns the context of one call of fn for jobs, whose leader's context is
// leader: it carries leader's values and ends, with the cause of the last, once every
// job's own context has ended. end releases it once fn has returned. It starts no
// goroutine of its own; context.AfterFunc runs each job's countdown in a short-lived one
// when that job's context ends.
func batchContext[T JobArgs](leader context.Context, jobs []*Job[T]) (ctx context.Context, end func()) {
	// Marked: durable steps need one job's context (job.Context()), not the call's.
	ctx, cancel := context.WithCancelCause(jobtype.WithBatchCall(context.WithoutCancel(leader)))
	var left atomic.Int64
	left.Store(int64(len(jobs)))
	stops := make([]func() bool, len(jobs))
	for i, j := range jobs {
		jctx := j.Context()
		stops[i] = context.AfterFunc(jctx, func() {
			if left.Add(-1) == 0 {
				cancel(context.Cause(jctx))
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel(context.Canceled)
	}
}

// call runs fn and returns exactly one result per job.
func (c *batchCollector[T]) call(ctx context.Context, jobs []*Job[T]) (errs []error) {
	defer func() {
		if p := recover(); p != nil {
			errs = fill(len(jobs), &batchPanicError{&PanicError{Value: p, Stack: debug.Stack()}})
		}
	}()
	errs = c.fn(ctx, jobs)
	if len(errs) != len(jobs) {
		return fill(len(jobs), fmt.Errorf("skiplock: batch handler returned %d results for %d jobs", len(errs), len(jobs)))
	}
	return errs
}

// batchPanicError is the error of each job of a batch call whose fn panicked: the
// panic's value and stack, recorded as a handler's panic is (errors.As gives the
// *PanicError), its message saying the batch handler panicked.
type batchPanicError struct{ p *PanicError }

// Error returns "skiplock: batch handler panicked: <value>", a blank line and the stack.
func (e *batchPanicError) Error() string {
	return fmt.Sprintf("skiplock: batch handler panicked: %v\n\n%s", e.p.Value, e.p.Stack)
}

// Unwrap returns the panic.
func (e *batchPanicError) Unwrap() error { return e.p }

func fill(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}
