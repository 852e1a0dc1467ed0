// This file holds Worker.Run, which starts the worker's parts in their declared order and
// stops them in reverse at shutdown, and the harder stop (StopAndCancel), with the errors
// either returns when a shutdown could not end cleanly.

package skiplock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/internal/lifecycle"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// Run claims and runs jobs until ctx is cancelled, then shuts down gracefully:
//
//  1. it stops claiming and waits up to ShutdownTimeout for running handlers; the results
//     of those that return are recorded as usual;
//  2. it cancels the contexts of the handlers still running (cause: shutdown) and waits
//     up to min(ShutdownTimeout, 5s) more; the jobs of those that return with an error are
//     put back in the queue at once, due now, without using up an attempt (a nil return
//     is recorded as a success);
//  3. it keeps waiting for the handlers that ignore their context: their jobs stay with
//     this worker, their leases renewed, so no other worker runs them beside them; every
//     ShutdownTimeout it logs which jobs hold it up (id, kind, attempt, running for). As
//     each returns, its job is put back (an error) or its success recorded.
//
// Run returns nil once every handler has returned and its outcome is recorded, or an
// error if it cannot start (schema not migrated, already run). When the database does not
// answer during the shutdown, each outcome batch gives up after its 30 s write limit and
// the put-back of its jobs after 10 s more; Run then returns [ErrOutcomesNotRecorded]
// (their jobs run again elsewhere once the worker's lease lapses). A caller that cannot wait
// that long (a deploy with a kill deadline) calls [Worker.StopAndCancel]: Run then
// returns [ErrHandlersStillRunning] if it gave up on handlers still running, and the
// process must exit. When Run returns nil, none of its goroutines is left.
//
// While running, database errors (lost connections, a restarting server) are logged and
// retried; they do not stop Run, and at start each start-up statement is retried for up to
// 30 seconds, or until ctx is cancelled (or StopAndCancel is called): Run then returns nil
// at once, having run nothing. The parts start in the order of Worker.services and stop in the reverse
// order; a part that cannot start stops those already started.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if !w.started.CompareAndSwap(false, true) {
		w.mu.Unlock()
		return ErrWorkerStarted
	}
	defer close(w.runDone)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.cancelRun = cancel
	w.mu.Unlock()
	parts, err := w.start(ctx)
	if err != nil {
		w.qmu.Lock() // the worker never runs now: later queue changes are refused
		w.qstate = queuesStopped
		w.qmu.Unlock()
		if ctx.Err() != nil {
			// Stopped while starting (ctx cancelled, StopAndCancel): nothing ran, nothing
			// is left to shut down, so Run returns nil at once, even while the database is
			// out of reach and the start-up statements are being retried.
			return nil
		}
		return err
	}
	w.logger.Info("skiplock: worker started", "queues", w.queues.Len(), "version", moduleVersion())
	<-ctx.Done()
	stranded := w.lease.Stranded()
	w.qmu.Lock() // a queue change in progress ends first; later ones are refused
	w.qstate = queuesStopped
	w.qmu.Unlock()
	parts.Stop()
	w.outcomes.Stop()
	if n := w.held().Count(); n > 0 {
		w.logger.Error("skiplock: worker stopped with handlers still running; the process must exit", "running", n)
		w.runErr = fmt.Errorf("%w: %d", ErrHandlersStillRunning, n)
	}
	// The jobs whose outcome the shutdown could not write, nor put them back.
	if n := w.lease.Stranded() - stranded; n > 0 {
		w.logger.Error("skiplock: worker stopped without recording the outcomes of some jobs; they run again elsewhere once its lease lapses", "jobs", n)
		w.runErr = errors.Join(w.runErr, fmt.Errorf("%w: %d job(s) left running under worker %q, neither recorded nor put back: they will run again elsewhere once its lease lapses",
			ErrOutcomesNotRecorded, n, w.id))
	}
	if w.runErr != nil {
		return w.runErr
	}
	w.logger.Info("skiplock: worker stopped")
	return nil
}

// start checks the schema, takes back what an earlier process left under this worker's
// id, and starts the parts in the order of Worker.services; a part that cannot start
// stops those already started. Each start-up statement is retried (RetryAtStart) until
// ctx ends.
func (w *Worker) start(ctx context.Context) (*lifecycle.Group, error) {
	if err := pgutil.RetryAtStart(ctx, func(ctx context.Context) error {
		_, err := w.client.pool.Exec(ctx, w.checkSQL)
		return err
	}); err != nil {
		return nil, w.client.wrapErr("worker start", err)
	}
	var taken int64
	if err := pgutil.RetryAtStart(ctx, func(ctx context.Context) (err error) {
		taken, err = w.elector.Reclaim.Predecessors(ctx, w.id)
		return err
	}); err != nil {
		return nil, w.client.wrapErr("worker start", err)
	}
	if taken > 0 {
		w.logger.Info("skiplock: took back the running jobs an earlier process left under this worker's id", "jobs", taken)
	}
	w.checkConns()
	parts := &lifecycle.Group{}
	w.qmu.Lock() // queues added or removed meanwhile wait, then meet the running parts
	defer w.qmu.Unlock()
	if err := parts.Start(ctx, w.services()...); err != nil {
		w.qstate = queuesStopped
		return nil, err
	}
	w.qstate = queuesRunning
	return parts, nil
}

// ErrOutcomesNotRecorded is returned by [Worker.Run] (and [Worker.StopAndCancel]) when
// the shutdown could neither write the outcomes of some jobs (their handlers returned)
// nor put them back in the queue: the database did not answer within the write limits
// (30 s for an outcome batch, then 10 s to put its jobs back). Its message says how many.
// Those jobs stay running under this worker, whatever their handlers returned, and run
// again elsewhere once the worker's lease (its row in the workers table, 10 s) lapses, as
// a dead worker's jobs do: they run at least once, none is lost. Test for it with
// [errors.Is].
var ErrOutcomesNotRecorded = errors.New("skiplock: the worker stopped without recording every outcome")

// ErrHandlersStillRunning is returned by [Worker.StopAndCancel] and [Worker.Run] when the
// worker stopped without waiting for handlers that ignore their cancelled context. Their
// goroutines still run and their jobs will run elsewhere once this worker's lease ends
// (the worker ends it as it stops, so at the next renewal of another worker): the
// process must exit now, or their effects may happen twice.
var ErrHandlersStillRunning = errors.New("skiplock: the worker stopped with handlers still running; the process must exit")

// StopAndCancel is the harder stop, for a caller that cannot wait for Run's graceful
// shutdown (a deploy with a kill deadline): it stops claiming, cancels every handler's
// context at once (cause: shutdown) and waits for the handlers until ctx ends, then for
// Run to return. If every handler returned, it returns what Run returns: nil when their
// jobs were put back or their results recorded, as in a graceful shutdown, and
// [ErrOutcomesNotRecorded] when the database did not answer. If ctx ends first, it gives up:
// Run stops renewing the worker's leases and ends its worker lease (its row in the
// workers table), so other workers take its jobs back at once, and both Run and
// StopAndCancel return an error matching [ErrHandlersStillRunning]. StopAndCancel waits
// at most a second more for Run: when the database does not answer, it returns while Run
// still waits for its last statements' time limits.
// The process must then exit: its handlers still run, and their jobs will run
// elsewhere. On a Worker whose Run has not been called, it does nothing.
func (w *Worker) StopAndCancel(ctx context.Context) error {
	w.mu.Lock()
	cancel := w.cancelRun
	w.mu.Unlock()
	if cancel == nil {
		return nil
	}
	w.executor.HardStop()
	cancel()
	select {
	case <-w.runDone:
	case <-ctx.Done():
		w.executor.Abandon() // too late if Run already stopped waiting for handlers: harmless
		// Run now ends the worker's lease and returns; with the database reachable that
		// takes milliseconds. With the database down its statements wait for their time
		// limits, and the caller's deadline has already passed: wait a moment, no more.
		t := time.NewTimer(stopAndCancelGrace)
		defer t.Stop()
		select {
		case <-w.runDone:
		case <-t.C:
			return fmt.Errorf("%w (and Run is still ending: the database did not answer within %s)", ErrHandlersStillRunning, stopAndCancelGrace)
		}
	}
	return w.runErr
}

// stopAndCancelGrace is how long StopAndCancel waits for Run after its context ended.
const stopAndCancelGrace = time.Second
