package jobtype

import (
	"context"
	"time"
)

// Hook observes job execution. Methods are called from the job's goroutine and must be
// safe for concurrent use. Put hooks in [WorkerConfig].Hooks for one worker, or in
// [Config].Hooks for every worker of a client (which runs them first). A hook in
// [Config].Hooks that also implements [EnqueueHook] sees the client's enqueues too.
type Hook interface {
	// JobStarted is called before the handler; the context it returns is the handler's
	// (return ctx unchanged if there is nothing to add, e.g. a tracing span).
	JobStarted(ctx context.Context, job *JobRow) context.Context
	// JobFinished is called once after every JobStarted, with the outcome. A panic in it
	// is recovered and logged: the outcome is recorded already, and the other hooks are
	// still told.
	JobFinished(ctx context.Context, job *JobRow, res JobResult)
}

// EnqueueHook is implemented by a [Hook] in [Config].Hooks that wants to see enqueues: a
// tracing integration starts a span and puts its trace context in the job's metadata, a
// metrics one counts jobs enqueued.
type EnqueueHook interface {
	// JobEnqueuing is called for each job before it is inserted, in the enqueuing
	// goroutine. It may add entries to e.Metadata, which is stored with the job. It
	// returns a function called once when the insert is done — with the inserted row (nil
	// for [Client.EnqueueMany], which returns no rows) or the error — or nil.
	// A job inserted by [Client.EnqueueTx] may still be rolled back with its transaction.
	JobEnqueuing(ctx context.Context, e *EnqueueEvent) (done func(row *JobRow, err error))
}

// EnqueueEvent is a job about to be inserted, as an [EnqueueHook] sees it.
type EnqueueEvent struct {
	Kind  string
	Queue string
	// Metadata is the job's metadata ([EnqueueOptions].Metadata, copied); a hook may add
	// to it. It is never nil.
	Metadata map[string]string
}

// Outcome is how one attempt ended, as a [Hook] sees it. It is finer than the job's new
// status: a job queued again was retried or snoozed, a dead one may have timed out.
type Outcome string

// The outcomes of an attempt.
const (
	OutcomeSucceeded Outcome = "succeeded" // the handler returned nil, or committed its success with CompleteTx
	OutcomeRetry     Outcome = "retry"     // failed; queued again after the retry policy's delay
	OutcomeSnoozed   Outcome = "snoozed"   // Snooze, or a durable wait (Sleep, AwaitSignal): queued again, the attempt given back
	OutcomeDead      Outcome = "dead"      // failed with no attempts left
	OutcomeFailed    Outcome = "failed"    // Permanent, or a payload that does not decode
	OutcomeCancelled Outcome = "cancelled" // CancelJob
	// OutcomeTimedOut: the handler's context reached its deadline and the handler failed.
	// JobResult.Status says whether the job was queued for a retry or is dead.
	OutcomeTimedOut Outcome = "timed_out"
	// OutcomeReleased: cut off by the worker's shutdown and put back in the queue without
	// using an attempt.
	OutcomeReleased Outcome = "released"
	// OutcomeLost: the result was not recorded, because the worker no longer held the job
	// (cancelled or taken back by the sweeper) or the write failed; the job's row says
	// what happens next.
	OutcomeLost Outcome = "lost"
)

// JobResult is what a handler run came to, as a [Hook] sees it.
type JobResult struct {
	// Status is the job's new state: succeeded, queued (retry or snooze), failed, dead or
	// cancelled. A success is reported when it is handed to the batch that records it.
	Status JobStatus
	// Outcome is how the attempt ended.
	Outcome  Outcome
	Err      error         // the handler's error, nil on success
	Duration time.Duration // time spent in the handler
	Panicked bool
}
