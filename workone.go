// This file holds the synchronous run of one job, in the caller's goroutine, that package
// skiplocktest offers users' tests.

package skiplock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/skiplock/skiplock/internal/claim"
	"github.com/skiplock/skiplock/internal/testbridge"
)

// The synchronous run of one job, in the caller's goroutine, that package skiplocktest
// offers users' tests (through internal/testbridge, so the root API does not grow): the
// real claim statement, the real handlers, hooks and recording; no goroutines to wait on.
var _ = testbridge.Provide(func(ctx context.Context, w *Worker, queue string) (*JobRow, JobResult, error) {
	return w.workOne(ctx, queue)
})

// The opening of a job's stored args with the client's Keyring, for package
// skiplocktest's RequireEnqueued, which matches encrypted args on their plaintext.
var _ = testbridge.ProvideOpen(func(c *Client, kind string, payload []byte) ([]byte, error) {
	return c.keyring.Open(kind, payload)
})

// workOne claims one due job of queue (one of the worker's queues: another name, a typo
// above all, is an error naming the worker's queues rather than an empty queue) and
// runs it to its recorded end: its success or failure is written before it returns. It
// returns a nil row when no job is due. The handler's context is derived from ctx; if ctx
// ends while the handler runs, the handler's error is recorded as a failed attempt like
// any other. It refuses a worker that runs or ran (Run and workOne would share the
// completer and the held jobs).
func (w *Worker) workOne(ctx context.Context, queue string) (*JobRow, JobResult, error) {
	if err := validQueue(queue); err != nil {
		return nil, JobResult{}, err
	}
	w.mu.Lock() // Handle may not add kinds while the job runs
	defer w.mu.Unlock()
	if w.started.Load() {
		return nil, JobResult{}, errors.New("skiplock: a worker that runs (or ran) Run cannot run jobs synchronously")
	}
	q := w.queues.Get(queue)
	if q == nil {
		names := w.queues.Names()
		for i, n := range names {
			names[i] = strconv.Quote(n)
		}
		return nil, JobResult{}, fmt.Errorf("skiplock: queue %q is not one this worker serves (its queues: %s): name one of them, or add it to WorkerConfig.Queues",
			queue, strings.Join(names, ", "))
	}
	jobs, err := claim.NewClaimer(w.client.db, w.cfg.VisibilityTimeout).Claim(ctx, queue, 1, w.id, nil)
	if err != nil || len(jobs) == 0 {
		return nil, JobResult{}, err
	}
	d, ok := w.starter.StartIn(ctx, jobs[0], q.HoldsSlot())
	if !ok {
		return nil, JobResult{}, claim.ErrHeldTwice
	}
	// Deferred, so that a handler that calls runtime.Goexit (t.FailNow in a test) and so
	// ends this goroutine has its recorded failure written too.
	defer func() {
		d.Job.Cancel(nil)
		w.starter.HandlerWG.Done()
		w.completer.FlushNow()
		w.failures.Flush() // a failure, too, is written before workOne returns
	}()
	res := w.executor.Execute(d, nil)
	return d.Row, res, nil
}
