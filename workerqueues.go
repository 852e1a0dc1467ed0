// This file holds a worker's set of queues (queueSet), which the parts of a running
// worker read, and the changes to it at run time: Worker.AddQueue, RemoveQueue and
// SetMaxWorkers. A queue added at run time joins the parts already running — its claim
// loops join the claim loops' Service, its runners the executor's — so Run's shutdown
// stops and waits for them like any other; a removed queue's goroutines end before
// RemoveQueue returns, or, if its ctx ends first, at the latest with Run.

package skiplock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/skiplock/skiplock/internal/claim"
)

// ErrUnknownQueue is returned by [Worker.RemoveQueue] and [Worker.SetMaxWorkers] for a
// queue the worker does not work.
var ErrUnknownQueue = errors.New("skiplock: the worker does not work this queue")

// ErrQueueExists is returned by [Worker.AddQueue] for a queue the worker already works.
var ErrQueueExists = errors.New("skiplock: the worker already works this queue")

// ErrWorkerStopped is returned by the run-time queue changes once Run has returned.
var ErrWorkerStopped = errors.New("skiplock: the worker has stopped")

// AddQueue makes the worker work one more queue, as if it had been in
// [WorkerConfig].Queues from the start: before Run, it joins the queues Run starts;
// while Run runs, its claim loops start at once (its runners as its jobs come, up to
// MaxWorkers), it claims what is due, and from its next registration (within seconds) the fleet counts this worker
// among those serving it. Its Limits apply as NewWorker's would; its Completion and
// Retention, for its jobs, from now on (Retention in the embedded sweeper, if this worker
// runs one). A queue the worker already works is an error that matches [ErrQueueExists];
// an invalid name or configuration, one that matches [ErrInvalidConfig]. After Run
// returned it is [ErrWorkerStopped]. It is safe to call from any goroutine, a handler's
// included; ctx bounds the start-up statements (the queue's paused flag, its slots under
// a concurrency limit).
func (w *Worker) AddQueue(ctx context.Context, name string, cfg QueueConfig) error {
	if validQueue(name) != nil {
		return &configError{field: "AddQueue: the queue name", value: strconv.Quote(truncate(name, 70)), fix: "use [a-z0-9_-], 1-64 characters", also: ErrInvalidQueue}
	}
	field := "AddQueue(" + strconv.Quote(name) + ")"
	if err := cfg.validate(field); err != nil {
		return err
	}
	limits, err := checkLimits(cfg.Limits, name)
	if err != nil {
		return fmt.Errorf("%w: %s.Limits: %w", ErrInvalidConfig, field, err)
	}
	w.qmu.Lock()
	defer w.qmu.Unlock()
	if w.qstate == queuesStopped {
		return ErrWorkerStopped
	}
	if w.queues.Get(name) != nil {
		return fmt.Errorf("%w: %q", ErrQueueExists, name)
	}
	q := claim.NewQueueRunner(name, cmp.Or(cfg.MaxWorkers, DefaultMaxWorkers), w.loops)
	if w.qstate == queuesRunning {
		// Its paused flag and limits are known before its first claim, as at Run's start.
		if err := w.pause.LoadQueue(ctx, q); err != nil {
			return err
		}
		if err := w.flow.Add(ctx, q, limits); err != nil {
			return err
		}
	} else {
		w.flow.Declare(name, q, limits)
	}
	w.queues.Put(q, cfg.Completion)
	if w.sweeper != nil {
		w.sweeper.s.SetQueueRetention(name, cfg.Retention)
	}
	if w.qstate == queuesRunning {
		w.executor.Grow(q)
		w.claims.StartQueue(q)
		q.Signal()
		w.poller.Kick()
	}
	w.logger.Info("skiplock: queue added", "queue", name, "max_workers", q.Max.Load())
	return nil
}

// RemoveQueue makes the worker stop working queue: it claims no more of its jobs from
// now on (a claim in flight finishes, and its jobs run), and the jobs it is running finish
// and are recorded as usual. RemoveQueue waits for them, until ctx ends: it then returns
// ctx's error, and they still finish and are recorded (Run's shutdown waits for them as
// for any other). Other workers of the queue are not affected, nor are its jobs in the
// database: the queue's Retention stays in force in this worker's sweeper (an AddQueue
// of the queue sets it anew). A queue the worker does not work is an error that matches
// [ErrUnknownQueue]; after Run returned it is [ErrWorkerStopped]. Removing the last
// queue leaves a worker that claims nothing until a queue is added. Safe to call from
// any goroutine, but not from a handler of the same queue: it would wait for itself
// until ctx ends.
func (w *Worker) RemoveQueue(ctx context.Context, queue string) error {
	w.qmu.Lock()
	if w.qstate == queuesStopped {
		w.qmu.Unlock()
		return ErrWorkerStopped
	}
	q := w.queues.Drop(queue)
	if q == nil {
		w.qmu.Unlock()
		return fmt.Errorf("%w: %q", ErrUnknownQueue, queue)
	}
	w.flow.Remove(queue)
	// Its Retention stays in the embedded sweeper: its archived jobs, which its other
	// workers may still add to, are kept as long as the queue said (AddQueue sets it anew).
	running := w.qstate == queuesRunning
	if running {
		// No claim loop hands the runners a job any more once they stopped; then the
		// runners end as their jobs do.
		q.Loops.Stop()
		q.CloseJobs()
	}
	w.qmu.Unlock()
	w.logger.Info("skiplock: queue removed", "queue", queue)
	if !running {
		return nil
	}
	done := make(chan struct{})
	go func() { q.Ran.Wait(); close(done) }() // ends when the runners do, whoever waits
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SetMaxWorkers changes how many jobs of queue this worker runs at once; n = 0 means
// [DefaultMaxWorkers], and n must be at most 100000. Raised, the queue claims more at
// once, at its next claim; lowered, no running handler is cut off: the queue claims no
// more until fewer than n of its jobs run. A claim already in flight when it is called
// (it asked for the free slots of the old value) still starts every job it took, so
// those may run beside the others, above n, until they end. It takes effect before and during Run; after
// Run returned it is [ErrWorkerStopped], and a queue the worker does not work is an error
// that matches [ErrUnknownQueue]. Safe to call from any goroutine.
func (w *Worker) SetMaxWorkers(queue string, n int) error {
	if n < 0 || n > maxQueueWorkers {
		return &configError{field: "SetMaxWorkers(" + strconv.Quote(queue) + ")", value: fmt.Sprint(n),
			fix: fmt.Sprintf("use 1 to %d, or 0 for the default (%d)", maxQueueWorkers, DefaultMaxWorkers)}
	}
	n = cmp.Or(n, DefaultMaxWorkers)
	w.qmu.Lock()
	defer w.qmu.Unlock()
	if w.qstate == queuesStopped {
		return ErrWorkerStopped
	}
	q := w.queues.Get(queue)
	if q == nil {
		return fmt.Errorf("%w: %q", ErrUnknownQueue, queue)
	}
	old := q.Max.Swap(int64(n))
	if w.qstate == queuesRunning && int64(n) > old {
		w.executor.Grow(q)
		q.Signal() // the new slots claim now
	}
	if old != int64(n) {
		w.logger.Info("skiplock: queue's max workers changed", "queue", queue, "from", old, "to", n)
	}
	return nil
}
