// This file holds the synchronous run of one job, in the caller's goroutine, that package
// skiplocktest offers users' tests (through internal/testbridge, so the root API does not
// grow): the real claim statement, the real handlers, hooks and recording — no
// goroutines to wait on.

package skiplock

import (
	"context"
	"errors"

	"github.com/skiplock/skiplock/internal/claim"
	"github.com/skiplock/skiplock/internal/testbridge"
)

// The synchronous run, as package skiplocktest takes it (testbridge.Sync).
var _ = testbridge.Provide(func(ctx context.Context, w *Worker, queue string) (*JobRow, JobResult, error) {
	return w.workOne(ctx, queue)
})

// workOne claims one due job of queue (any valid queue name, configured or not) and runs
// it to its recorded end: its success or failure is written before it returns. It returns a nil row
// when no job is due. The handler's context is derived from ctx; if ctx ends while the
// handler runs, the handler's error is recorded as a failed attempt like any other. It refuses a worker that runs or ran (Run and workOne would share
// the completer and the held jobs).
func (w *Worker) workOne(ctx context.Context, queue string) (*JobRow, JobResult, error) {
	if err := validQueue(queue); err != nil {
		return nil, JobResult{}, err
	}
	w.mu.Lock() // Handle may not add kinds while the job runs
	defer w.mu.Unlock()
	if w.started.Load() {
		return nil, JobResult{}, errors.New("skiplock: a worker that runs (or ran) Run cannot run jobs synchronously")
	}
	jobs, err := claim.NewClaimer(w.client.db, w.cfg.VisibilityTimeout).Claim(ctx, queue, 1, w.id)
	if err != nil || len(jobs) == 0 {
		return nil, JobResult{}, err
	}
	q := w.queues.Get(queue)
	d := w.starter.StartIn(ctx, jobs[0], q != nil && q.HoldsSlot())
	res := w.executor.Execute(d, nil)
	d.Cancel(nil)
	w.starter.HandlerWG.Done()
	w.completer.FlushNow()
	w.failures.Flush() // a failure, too, is written before workOne returns
	return d.Row, res, nil
}
