// This file holds the outcome recorder: the one place a finished attempt goes. The
// executor (internal/execute, execute.go) hands it each attempt once its handler returned, with the
// attempt's key and result; the recorder decides what becomes of it — a success batch
// (complete.go), a failure batch (failure.go), the release of a job cut off by shutdown,
// or nothing (the worker no longer holds the job, or has stopped) — and tells the hooks.
// The lease (internal/ownership, lease.go), the success and failure batches and the slot accounting are
// handed to it when it is built.

package record

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/ownership"
)

// ErrShutdown is the cancel cause of job contexts cut off by shutdown.
var ErrShutdown = jobtype.ErrShutdown

// AttemptResult is what one attempt's handler came to, as the executor hands it over.
type AttemptResult struct {
	// Ctx is the handler's context: its cancel cause says why it ended early, its state
	// what the handler reported (the root's progress.go), and the hooks get it back.
	Ctx context.Context
	// State is the attempt's state (jobtype.JobCtx.State), the one its held entry has:
	// marking it returned marks the held attempt, without a look-up among them.
	State    *jobtype.State
	Row      *jobtype.JobRow
	Err      error // nil: success
	Panicked bool
	Duration time.Duration
	Timeout  time.Duration       // the attempt's timeout, named in a timeout's error
	Policy   jobtype.RetryPolicy // decides a failure's retry delay
	Slot     bool                // claimed under a concurrency limit (slotJobs)
}

// SlotJobs counts the worker's claimed jobs of queues with a concurrency limit whose
// handlers have not returned. The last of them to return sends the successes waiting
// with it at once (completer.urgent): their slots are free only once they are written.
type SlotJobs struct{ n atomic.Int64 }

// Take counts a job that holds a slot.
func (s *SlotJobs) Take() { s.n.Add(1) }

// give counts one back, and reports whether it was the last.
func (s *SlotJobs) give() (last bool) { return s.n.Add(-1) == 0 }

// OutcomeRecorder decides what becomes of each finished attempt.
type OutcomeRecorder struct {
	held      *ownership.HeldJobs        // the attempts this worker runs, their leases renewed
	completer *Completer                 // success batches
	failures  *FailureRecorder           // failure batches
	release   func([]jobtype.AttemptKey) // puts jobs cut off by shutdown back in the queue (internal/ownership, lease.go)
	slots     *SlotJobs
	hooks     []jobtype.Hook
	logger    *slog.Logger
	// Logs writes what each attempt logged (skiplock.Logger) before its outcome; nil:
	// nothing is written.
	Logs *LogWriter

	// The jobs cut off by shutdown whose handlers returned, to put back in the queue.
	relMu     sync.Mutex
	toRelease []jobtype.AttemptKey
	relClosed bool        // the first release is done; later returns are put back one by one
	stopped   atomic.Bool // Run has returned: late results are logged, not recorded

	// Freed, when set, is told of each slot of a limited queue that a suspended attempt
	// (jobtype.Suspended) gave back: its wait's transaction wrote the job queued, so the
	// slot is free in the database already (flowWatch.slotsFreed).
	Freed func(n int)

	// LostReturned, when set, is told of each attempt whose handler returned after the
	// worker found it no longer held: a job cancelled while it ran keeps its lease until
	// then (internal/ownership, cancelled.go).
	LostReturned func(jobtype.AttemptKey)
}

func NewOutcomeRecorder(held *ownership.HeldJobs, c *Completer, f *FailureRecorder, release func([]jobtype.AttemptKey), slots *SlotJobs, hooks []jobtype.Hook, logger *slog.Logger) *OutcomeRecorder {
	return &OutcomeRecorder{held: held, completer: c, failures: f, release: release, slots: slots, hooks: hooks, logger: logger}
}

// Record takes the result a of the attempt k and hands it on: a success to the completer,
// a failure to the failure recorder, a job cut off by shutdown to the release (unless its
// handler returned Permanent or CancelJob: a failure, as it would be otherwise). The result
// of a job the worker no longer holds is dropped, and so is one that comes after Run
// returned; both are logged. An error from a handler whose CompleteTx committed is its
// job's success, written already (committedInTx); an attempt a durable wait suspended
// writes nothing more (its wait wrote the job queued). Every write is fenced on the claim's
// token. It tells the hooks, and returns what it told them.
func (r *OutcomeRecorder) Record(k jobtype.AttemptKey, a AttemptResult) jobtype.JobResult {
	// Before the outcome: a job found final has its records already.
	r.Logs.Write(a.State)
	lastSlot := a.Slot && r.slots.give()
	cause := context.Cause(a.Ctx)
	if a.Err == nil && errors.Is(cause, jobtype.ErrJobTimeout) {
		// Past its timeout the attempt has failed, whatever the handler says: it may have
		// stopped half-way when its context ended and returned nil anyway.
		a.Err = fmt.Errorf("%w after %s: the handler returned nil past its timeout", jobtype.ErrJobTimeout, a.Timeout)
	} else if v, _ := jobtype.VerdictOf(a.Err); v == jobtype.VerdictSnooze && errors.Is(cause, jobtype.ErrJobTimeout) {
		// A snooze past the timeout is a failed attempt too, its verdict dropped (the
		// message kept): it would give the attempt back, and a job whose handler hangs
		// and then snoozes at every attempt would never go dead.
		a.Err = fmt.Errorf("%w after %s: the handler returned %q past its timeout", jobtype.ErrJobTimeout, a.Timeout, a.Err.Error())
	}
	if errors.Is(cause, jobtype.ErrDeadlineExceeded) {
		// Past its deadline the attempt has failed, and no other may start.
		msg := "the handler returned nil past it"
		if a.Err != nil {
			msg = a.Err.Error()
		}
		a.Err = jobtype.Permanent(fmt.Errorf("%w: the job's deadline %s passed while its attempt ran: %s",
			jobtype.ErrDeadlineExceeded, a.Row.Deadline.UTC().Format(time.RFC3339Nano), msg))
	}
	row, err := a.Row, a.Err
	res := jobtype.JobResult{Status: row.Status, Outcome: jobtype.OutcomeLost, Err: err, Duration: a.Duration, Panicked: a.Panicked}
	switch {
	case jobtype.Suspended(row):
		// A durable wait (internal/durable) ended the attempt in the database: the job is
		// queued again, its attempt given back, whatever the handler returned.
		r.held.Remove(k)
		if a.Slot && r.Freed != nil {
			r.Freed(1)
		}
		res = jobtype.JobResult{Status: jobtype.StatusQueued, Outcome: jobtype.OutcomeSnoozed, Duration: a.Duration}
	case r.stopped.Load():
		r.held.Remove(k)
		r.logger.Warn("skiplock: a handler returned after the worker stopped; its result is not recorded, and the job is retried when its lease ends, this attempt counted",
			"job", row.ID, "attempt", row.Attempts, "err", err)
	case err != nil && r.committedInTx(k, row):
		// The handler committed its success with CompleteTx, then returned an error (the
		// shutdown cut off what it did after the commit, say): the job has succeeded, and
		// nothing is left to write or to put back. (On a nil return the success batch
		// writes it again, in case the handler's transaction rolled back, with no query
		// here; the completer expects no row to match then: Success.inTx.)
		r.held.Remove(k)
		res = jobtype.JobResult{Status: jobtype.StatusSucceeded, Outcome: jobtype.OutcomeSucceeded, Duration: a.Duration}
	case err != nil && errors.Is(cause, ErrShutdown) && !final(err):
		// Cut off by shutdown: put back, the attempt given back. A handler that said
		// its job is over (Permanent, CancelJob) is recorded as it said, below.
		r.cutOff(k, row)
		res.Status, res.Outcome = jobtype.StatusQueued, jobtype.OutcomeReleased
	case errors.Is(cause, ownership.ErrJobLost):
		r.held.Remove(k)
		r.logger.Info("skiplock: result of a job this worker no longer holds is dropped", "job", row.ID, "attempt", row.Attempts)
		if r.LostReturned != nil {
			r.LostReturned(k)
		}
	case err == nil:
		res = r.success(k, a, lastSlot)
	default:
		res = r.failure(k, a, cause)
	}
	return r.report(a.Ctx, row, res)
}

// final reports whether err carries a verdict that ends its job (Permanent, CancelJob),
// which a shutdown does not overrule.
func final(err error) bool {
	v, _ := jobtype.VerdictOf(err)
	return v == jobtype.VerdictPermanent || v == jobtype.VerdictCancel
}

// committedInTx reports whether row's handler wrote the attempt's success with
// CompleteTx in a transaction that has committed. Only an attempt whose CompleteTx
// matched its row asks the database; when the database does not answer, it is recorded by
// what its handler returned (a write fenced on the token, which matches nothing if the
// success did commit).
func (r *OutcomeRecorder) committedInTx(k jobtype.AttemptKey, row *jobtype.JobRow) bool {
	if !jobtype.CompletedInTx(row) {
		return false
	}
	ok, err := r.completer.CommittedInTx(k)
	if err != nil {
		r.logger.Warn("skiplock: could not read whether a CompleteTx committed; the attempt is recorded by its handler's error",
			"job", row.ID, "attempt", row.Attempts, "err", err)
	}
	return ok
}

// cutOff keeps the attempt k, cut off by shutdown, for the release: it stays held, its
// lease renewed, until Run puts it back with the others cut off once the grace after
// the cancel has passed. A handler that returns later, while Run still waits for the
// rest, has its job put back at once, on its own.
func (r *OutcomeRecorder) cutOff(k jobtype.AttemptKey, row *jobtype.JobRow) {
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

// ReleaseCutOff puts back the jobs cut off by shutdown whose handlers returned; those
// that return later are put back one by one (cutOff). A job whose handler still runs is
// not put back: another worker would run the same attempt beside it.
func (r *OutcomeRecorder) ReleaseCutOff() {
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
func (r *OutcomeRecorder) success(k jobtype.AttemptKey, a AttemptResult, lastSlot bool) jobtype.JobResult {
	a.State.MarkReturned()
	if !r.completer.Add(k, a.Row, a.State, a.Slot, lastSlot) {
		r.held.Remove(k)
		r.logger.Warn("skiplock: a success came after the worker stopped recording; the job is retried when its lease ends, this attempt counted",
			"job", a.Row.ID, "attempt", a.Row.Attempts)
		return jobtype.JobResult{Status: a.Row.Status, Outcome: jobtype.OutcomeLost, Duration: a.Duration}
	}
	return jobtype.JobResult{Status: jobtype.StatusSucceeded, Outcome: jobtype.OutcomeSucceeded, Duration: a.Duration}
}

// failure hands a failure to the failure recorder, which computes its retry; the attempt
// stays held until its batch is written, like a success's.
func (r *OutcomeRecorder) failure(k jobtype.AttemptKey, a AttemptResult, cause error) jobtype.JobResult {
	a.State.MarkReturned()
	err := a.Err
	if errors.Is(cause, jobtype.ErrJobTimeout) && !errors.Is(err, jobtype.ErrJobTimeout) {
		err = fmt.Errorf("%w after %s: %w", jobtype.ErrJobTimeout, a.Timeout, err)
	}
	status := r.failures.Record(k, a.Row, err, a.Policy)
	if status == jobtype.StatusRunning { // not taken: the recorder stopped
		r.held.Remove(k)
	}
	return jobtype.JobResult{Status: status, Outcome: outcomeOf(a.Ctx, status, err), Err: err, Duration: a.Duration, Panicked: a.Panicked}
}

// Stop makes later results be logged and dropped: Run has returned.
func (r *OutcomeRecorder) Stop() { r.stopped.Store(true) }

// report tells every hook how a job's run ended, and returns res.
func (r *OutcomeRecorder) report(ctx context.Context, row *jobtype.JobRow, res jobtype.JobResult) jobtype.JobResult {
	for _, hk := range r.hooks {
		r.tell(ctx, hk, row, res)
	}
	return res
}

// tell calls hk's JobFinished. A panic in it is logged and changes nothing else: the
// outcome is decided already, and the other hooks are still told.
func (r *OutcomeRecorder) tell(ctx context.Context, hk jobtype.Hook, row *jobtype.JobRow, res jobtype.JobResult) {
	defer func() {
		if p := recover(); p != nil {
			r.logger.Error("skiplock: a hook's JobFinished panicked; the panic is ignored",
				"job", row.ID, "kind", row.Kind, "attempt", row.Attempts, "hook", fmt.Sprintf("%T", hk),
				"panic", p, "stack", string(debug.Stack()))
		}
	}()
	hk.JobFinished(ctx, row, res)
}

// outcomeOf names how an attempt that failed with herr ended, given the status its
// failure was recorded with.
func outcomeOf(ctx context.Context, status jobtype.JobStatus, herr error) jobtype.Outcome {
	verdict, _ := jobtype.VerdictOf(herr)
	switch {
	case status == jobtype.StatusRunning:
		return jobtype.OutcomeLost // the write failed; the sweeper takes the job back
	case verdict == jobtype.VerdictSnooze && status == jobtype.StatusQueued:
		return jobtype.OutcomeSnoozed
	case status == jobtype.StatusFailed:
		return jobtype.OutcomeFailed
	case status == jobtype.StatusCancelled:
		return jobtype.OutcomeCancelled
	case status != jobtype.StatusQueued && status != jobtype.StatusDead:
		return jobtype.OutcomeLost // a stale result: the row is not this attempt's any more
	case errors.Is(context.Cause(ctx), jobtype.ErrJobTimeout),
		errors.Is(context.Cause(ctx), context.DeadlineExceeded) && errors.Is(herr, context.DeadlineExceeded):
		return jobtype.OutcomeTimedOut // the job's timeout, or a deadline a hook gave the handler
	case status == jobtype.StatusDead:
		return jobtype.OutcomeDead
	default:
		return jobtype.OutcomeRetry
	}
}
