// This file holds the outcome recorder: the one place a finished attempt goes. The
// executor (execute.go) hands it each attempt once its handler returned, with the
// attempt's key and result; the recorder decides what becomes of it — a success batch
// (complete.go), a failure batch (retry.go), the release of a job cut off by shutdown,
// or nothing (the worker no longer holds the job, or has stopped) — and tells the hooks.
// The lease (lease.go), the success and failure batches and the slot accounting are
// handed to it when it is built.

package skiplock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/ownership"
)

// ErrJobTimeout is the cause (see context.Cause) of a handler's context cancelled because
// the attempt ran past its timeout ([WorkerConfig].JobTimeout, a kind's Timeout method or
// [EnqueueOptions].Timeout). The attempt counts as failed.
var ErrJobTimeout = jobtype.ErrJobTimeout

// errShutdown is the cancel cause of job contexts cut off by shutdown.
var errShutdown = jobtype.ErrShutdown

// attemptResult is what one attempt's handler came to, as the executor hands it over.
type attemptResult struct {
	// ctx is the handler's context: its cancel cause says why it ended early, its state
	// what the handler reported (progress.go), and the hooks get it back.
	ctx      context.Context
	row      *JobRow
	err      error // nil: success
	panicked bool
	duration time.Duration
	timeout  time.Duration // the attempt's timeout, named in a timeout's error
	policy   RetryPolicy   // decides a failure's retry delay
	slot     bool          // claimed under a concurrency limit (slotJobs)
}

// slotJobs counts the worker's claimed jobs of queues with a concurrency limit whose
// handlers have not returned. The last of them to return sends the successes waiting
// with it at once (completer.urgent): their slots are free only once they are written.
type slotJobs struct{ n atomic.Int64 }

// take counts a job that holds a slot.
func (s *slotJobs) take() { s.n.Add(1) }

// give counts one back, and reports whether it was the last.
func (s *slotJobs) give() (last bool) { return s.n.Add(-1) == 0 }

// outcomeRecorder decides what becomes of each finished attempt.
type outcomeRecorder struct {
	held      *ownership.HeldJobs        // the attempts this worker runs, their leases renewed
	completer *completer                 // success batches
	failures  *failureRecorder           // failure batches
	release   func([]jobtype.AttemptKey) // puts jobs cut off by shutdown back in the queue (lease.go)
	slots     *slotJobs
	hooks     []Hook
	logger    *slog.Logger

	// The jobs cut off by shutdown whose handlers returned, to put back in the queue.
	relMu     sync.Mutex
	toRelease []jobtype.AttemptKey
	relClosed bool        // the first release is done; later returns are put back one by one
	stopped   atomic.Bool // Run has returned: late results are logged, not recorded
}

func newOutcomeRecorder(held *ownership.HeldJobs, c *completer, f *failureRecorder, release func([]jobtype.AttemptKey), slots *slotJobs, hooks []Hook, logger *slog.Logger) *outcomeRecorder {
	return &outcomeRecorder{held: held, completer: c, failures: f, release: release, slots: slots, hooks: hooks, logger: logger}
}

// record takes the result a of the attempt k and hands it on: a success to the completer,
// a failure to the failure recorder, a job cut off by shutdown to the release. The result
// of a job the worker no longer holds is dropped, and so is one that comes after Run
// returned; both are logged. Every write is fenced on the claim's token. It tells the
// hooks, and returns what it told them.
func (r *outcomeRecorder) record(k jobtype.AttemptKey, a attemptResult) JobResult {
	lastSlot := a.slot && r.slots.give()
	cause := context.Cause(a.ctx)
	if a.err == nil && errors.Is(cause, ErrJobTimeout) {
		// Past its timeout the attempt has failed, whatever the handler says: it may have
		// stopped half-way when its context ended and returned nil anyway.
		a.err = fmt.Errorf("%w after %s: the handler returned nil past its timeout", ErrJobTimeout, a.timeout)
	}
	row, err := a.row, a.err
	res := JobResult{Status: row.Status, Outcome: OutcomeLost, Err: err, Duration: a.duration, Panicked: a.panicked}
	switch {
	case r.stopped.Load():
		r.held.Remove(k)
		r.logger.Warn("skiplock: a handler returned after the worker stopped; its result is not recorded, and the job is retried when its lease ends, this attempt counted",
			"job", row.ID, "attempt", row.Attempts, "err", err)
	case err != nil && errors.Is(cause, errShutdown):
		r.cutOff(k, row)
		res.Status, res.Outcome = StatusQueued, OutcomeReleased
	case errors.Is(cause, ownership.ErrJobLost):
		r.held.Remove(k)
		r.logger.Info("skiplock: result of a job this worker no longer holds is dropped", "job", row.ID, "attempt", row.Attempts)
	case err == nil:
		res = r.success(k, a, lastSlot)
	default:
		res = r.failure(k, a, cause)
	}
	return r.report(a.ctx, row, res)
}

// cutOff keeps the attempt k, cut off by shutdown, for the release: it stays held, its
// lease renewed, until Run puts it back with the others cut off once the grace after
// the cancel has passed. A handler that returns later, while Run still waits for the
// rest, has its job put back at once, on its own.
func (r *outcomeRecorder) cutOff(k jobtype.AttemptKey, row *JobRow) {
	r.relMu.Lock()
	late := r.relClosed
	if !late {
		r.toRelease = append(r.toRelease, k)
	}
	r.relMu.Unlock()
	if late {
		r.release([]jobtype.AttemptKey{k})
		r.held.Remove(k)
		r.logger.Info("skiplock: a handler cut off by shutdown returned; its job is put back", "job", row.ID, "attempt", row.Attempts)
	}
}

// releaseCutOff puts back the jobs cut off by shutdown whose handlers returned; those
// that return later are put back one by one (cutOff). A job whose handler still runs is
// not put back: another worker would run the same attempt beside it.
func (r *outcomeRecorder) releaseCutOff() {
	r.relMu.Lock()
	keys := r.toRelease
	r.toRelease, r.relClosed = nil, true
	r.relMu.Unlock()
	r.release(keys)
	for _, k := range keys {
		r.held.Remove(k)
	}
}

// success hands a success to the completer. Until it is written, the attempt stays held
// and its lease renewed; the batch that writes it removes it.
func (r *outcomeRecorder) success(k jobtype.AttemptKey, a attemptResult, lastSlot bool) JobResult {
	r.held.Recorded(k)
	if !r.completer.add(k, a.row, jobtype.StateOf(a.ctx), a.slot, lastSlot) {
		r.held.Remove(k)
		r.logger.Warn("skiplock: a success came after the worker stopped recording; the job is retried when its lease ends, this attempt counted",
			"job", a.row.ID, "attempt", a.row.Attempts)
		return JobResult{Status: a.row.Status, Outcome: OutcomeLost, Duration: a.duration}
	}
	return JobResult{Status: StatusSucceeded, Outcome: OutcomeSucceeded, Duration: a.duration}
}

// failure hands a failure to the failure recorder, which computes its retry; the attempt
// stays held until its batch is written, like a success's.
func (r *outcomeRecorder) failure(k jobtype.AttemptKey, a attemptResult, cause error) JobResult {
	r.held.Recorded(k)
	err := a.err
	if errors.Is(cause, ErrJobTimeout) && !errors.Is(err, ErrJobTimeout) {
		err = fmt.Errorf("%w after %s: %w", ErrJobTimeout, a.timeout, err)
	}
	status := r.failures.record(k, a.row, err, a.policy)
	if status == StatusRunning { // not taken: the recorder stopped
		r.held.Remove(k)
	}
	return JobResult{Status: status, Outcome: outcomeOf(a.ctx, status, err), Err: err, Duration: a.duration, Panicked: a.panicked}
}

// stop makes later results be logged and dropped: Run has returned.
func (r *outcomeRecorder) stop() { r.stopped.Store(true) }

// report tells every hook how a job's run ended, and returns res.
func (r *outcomeRecorder) report(ctx context.Context, row *JobRow, res JobResult) JobResult {
	for _, hk := range r.hooks {
		hk.JobFinished(ctx, row, res)
	}
	return res
}

// outcomeOf names how an attempt that failed with herr ended, given the status its
// failure was recorded with.
func outcomeOf(ctx context.Context, status JobStatus, herr error) Outcome {
	verdict, _ := jobtype.VerdictOf(herr)
	switch {
	case status == StatusRunning:
		return OutcomeLost // the write failed; the sweeper takes the job back
	case verdict == jobtype.VerdictSnooze && status == StatusQueued:
		return OutcomeSnoozed
	case status == StatusFailed:
		return OutcomeFailed
	case status == StatusCancelled:
		return OutcomeCancelled
	case status != StatusQueued && status != StatusDead:
		return OutcomeLost // a stale result: the row is not this attempt's any more
	case errors.Is(context.Cause(ctx), ErrJobTimeout),
		errors.Is(context.Cause(ctx), context.DeadlineExceeded) && errors.Is(herr, context.DeadlineExceeded):
		return OutcomeTimedOut // the job's timeout, or a deadline a hook gave the handler
	case status == StatusDead:
		return OutcomeDead
	default:
		return OutcomeRetry
	}
}
