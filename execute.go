// This file holds the execution of one job: dispatching a claimed job to a runner, its
// timeout (WorkerConfig.JobTimeout, a per-kind Timeout method, EnqueueOptions.Timeout),
// calling the handler with panic recovery, and handing the result to the completer or the
// failure recorder.

package skiplock

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"
)

// ErrJobTimeout is the cause (see context.Cause) of a handler's context cancelled because
// the attempt ran past its timeout ([WorkerConfig].JobTimeout, a kind's Timeout method or
// [EnqueueOptions].Timeout). The attempt counts as failed.
var ErrJobTimeout = errors.New("skiplock: job timeout")

// errJobLost is the cancel cause of a job whose lease this worker no longer holds
// (reclaimed by the sweeper, or cancelled).
var errJobLost = errors.New("skiplock: job is no longer held by this worker (cancelled or reclaimed)")

type handler struct {
	run     func(ctx context.Context, row *JobRow) error
	policy  RetryPolicy
	timeout time.Duration // the kind's Timeout(); 0: the worker's
}

// timeoutArgs is implemented by args types with a kind-specific job timeout.
type timeoutArgs interface {
	Timeout() time.Duration
}

// runner is one of a queue's MaxWorkers long-lived goroutines. Reusing them (rather than
// a goroutine per job) keeps their grown stacks: handlers that decode JSON would otherwise
// pay for stack growth on every job.
func (w *Worker) runner(q *queueRunner) {
	for d := range q.jobs {
		w.execute(d)
		d.cancel(nil)
		q.finished()
		w.handlerWG.Done()
	}
}

// start registers one claimed job: its context (derived from jobBase, which shutdown
// cancels) and its place among the held jobs, with the lease its claim wrote. Its slot
// was reserved before the claim.
func (w *Worker) start(jobBase context.Context, cj claimedJob) dispatched {
	jobCtx, cancel := context.WithCancelCause(jobBase)
	jobCtx, st := withJobState(jobCtx, w.client.maxBytes)
	key := jobKey{cj.row.ID, cj.fence}
	w.held.add(key, cancel, cj.leased, st)
	w.handlerWG.Add(1)
	slot := w.holdsSlot(cj.row.Queue)
	if slot {
		w.slotJobs.Add(1)
	}
	return dispatched{ctx: jobCtx, cancel: cancel, key: key, row: cj.row, timeout: cj.timeout, slot: slot}
}

// timeoutFor returns the timeout of one attempt: the job's own, else its kind's, else the
// worker's. Zero or negative means none.
func (w *Worker) timeoutFor(d dispatched, h handler) time.Duration {
	switch {
	case d.timeout > 0:
		return d.timeout
	case h.timeout != 0:
		return h.timeout
	default:
		return w.cfg.JobTimeout
	}
}

// execute runs one claimed job's handler and hands the outcome on: a success to the
// completer, a failure to the failure recorder, a job cut off by shutdown to Run to put
// back. The result of a job the worker no longer holds is dropped, and so is one that
// comes after Run returned; both are logged. Every write is fenced on the claim's token.
// It returns the result the hooks were told.
func (w *Worker) execute(d dispatched) JobResult {
	ctx, key, row := d.ctx, d.key, d.row
	// No lock: Handle refuses new kinds once Run has started, so the map is read-only here.
	h, ok := w.handlers[row.Kind]
	timeout := w.timeoutFor(d, h)
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, timeout, ErrJobTimeout)
		defer cancel()
		// A handler that ignores its timeout is no longer heartbeated after a grace
		// period: its lease runs out and the job is retried elsewhere, this attempt counted.
		abandon := time.AfterFunc(timeout+w.lease.interval, func() {
			w.held.abandon(key)
			w.logger.Warn("skiplock: handler ignores its job timeout; no longer renewing its lease, the job will be retried when the lease ends",
				"job", row.ID, "attempt", row.Attempts, "timeout", timeout)
			w.mw.stuck(d.ctx, row, timeout) // error handlers (middleware.go)
		})
		defer abandon.Stop()
	}
	for _, hk := range w.allHooks {
		ctx = hk.JobStarted(ctx, row)
	}
	began := time.Now()
	var err error
	panicked := false
	if !ok {
		err = fmt.Errorf("no handler registered for kind %q", row.Kind)
	} else {
		err, panicked = callHandler(ctx, w.mw.wrap(h.run, row.Kind), row) // middleware (middleware.go)
	}
	dur := time.Since(began)
	// The last slot-holding job of the worker to return sends the successes waiting with
	// it at once (completer.urgent).
	lastSlot := d.slot && w.slotJobs.Add(-1) == 0
	cause := context.Cause(ctx)
	if w.stopped.Load() {
		w.held.remove(key)
		w.logger.Warn("skiplock: a handler returned after the worker stopped; its result is not recorded, and the job is retried when its lease ends, this attempt counted",
			"job", row.ID, "attempt", row.Attempts, "err", err)
		return w.report(ctx, row, JobResult{Status: row.Status, Outcome: OutcomeLost, Err: err, Duration: dur, Panicked: panicked})
	}
	if err != nil && errors.Is(cause, errShutdown) {
		// Cut off by shutdown: Run puts it back once it has stopped waiting for handlers.
		w.relMu.Lock()
		late := w.relClosed
		if !late {
			w.toRelease = append(w.toRelease, key)
		}
		w.relMu.Unlock()
		if late {
			w.held.remove(key)
			w.logger.Warn("skiplock: a handler cut off by shutdown returned too late to put its job back; it is retried when its lease ends, this attempt counted",
				"job", row.ID, "attempt", row.Attempts)
		}
		// Still held, its lease renewed, until Run puts it back.
		return w.report(ctx, row, JobResult{Status: StatusQueued, Outcome: OutcomeReleased, Err: err, Duration: dur, Panicked: panicked})
	}
	if errors.Is(cause, errJobLost) {
		w.held.remove(key)
		w.logger.Info("skiplock: result of a job this worker no longer holds is dropped", "job", row.ID, "attempt", row.Attempts)
		return w.report(ctx, row, JobResult{Status: row.Status, Outcome: OutcomeLost, Err: err, Duration: dur, Panicked: panicked})
	}
	// Until its outcome is written, the attempt stays held and its lease renewed; the
	// batch that writes it removes it.
	w.held.recorded(key)
	if err == nil {
		if !w.completer.add(key, stateOf(ctx), d.slot, lastSlot) {
			w.held.remove(key)
			w.logger.Warn("skiplock: a success came after the worker stopped recording; the job is retried when its lease ends, this attempt counted",
				"job", row.ID, "attempt", row.Attempts)
			return w.report(ctx, row, JobResult{Status: row.Status, Outcome: OutcomeLost, Duration: dur})
		}
		return w.report(ctx, row, JobResult{Status: StatusSucceeded, Outcome: OutcomeSucceeded, Duration: dur})
	}
	if errors.Is(cause, ErrJobTimeout) && !errors.Is(err, ErrJobTimeout) {
		err = fmt.Errorf("%w after %s: %w", ErrJobTimeout, timeout, err)
	}
	policy := w.cfg.RetryPolicy
	if h.policy != nil {
		policy = h.policy
	}
	status := w.failures.record(key, row, err, policy)
	if status == StatusRunning { // not taken: the recorder stopped
		w.held.remove(key)
	}
	return w.report(ctx, row, JobResult{Status: status, Outcome: outcomeOf(ctx, status, err), Err: err, Duration: dur, Panicked: panicked})
}

// holdsSlot reports whether the jobs of queue are claimed under a concurrency limit now:
// their slots are free again only once their outcomes are recorded.
func (w *Worker) holdsSlot(queue string) bool {
	q := w.queues[queue]
	if q == nil {
		return false
	}
	f := q.flow.Load()
	return f != nil && (f.limits.Concurrency > 0 || f.limits.KeyConcurrency > 0)
}

// callHandler runs the handler, turning a panic into an error with its stack.
func callHandler(ctx context.Context, run func(context.Context, *JobRow) error, row *JobRow) (err error, panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()} // "panic: <value>\n\n<stack>"
			panicked = true
		}
	}()
	return run(ctx, row), false
}
