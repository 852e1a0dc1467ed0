// This file holds batch handlers: HandleBatch registers a handler that receives many
// claimed jobs of a kind in one call and returns a result per job, so that it can, say,
// write 500 rows with one statement. The jobs are claimed, leased, timed and recorded one
// by one exactly as with Handle; only the handler call is shared.

package skiplock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
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
// A panic in fn fails every job of the call with the panic's value.
//
// fn's context is the first job's: it ends when that job's timeout passes or the worker
// shuts down. [SetOutput] and [SetProgress] are not available per job in fn. Each job is
// still its own row: it is retried, timed out, cancelled and recorded alone.
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
// leader calls fn in its own goroutine: no goroutine is started.
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
	b.errs = c.call(ctx, b.jobs)
	close(b.done)
	return b.errs[i]
}

// call runs fn and returns exactly one result per job.
func (c *batchCollector[T]) call(ctx context.Context, jobs []*Job[T]) (errs []error) {
	defer func() {
		if p := recover(); p != nil {
			errs = fill(len(jobs), fmt.Errorf("skiplock: batch handler panicked: %v", p))
		}
	}()
	errs = c.fn(ctx, jobs)
	if len(errs) != len(jobs) {
		return fill(len(jobs), fmt.Errorf("skiplock: batch handler returned %d results for %d jobs", len(errs), len(jobs)))
	}
	return errs
}

func fill(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}
