// This file holds the hooks skiplock calls for metrics and tracing: around every job a
// Worker runs (Hook), and before and after every enqueue (EnqueueHook), with the outcome
// of each attempt.

package skiplock

import (
	"github.com/skiplock/skiplock/internal/jobtype"
)

// Hook observes jobs as a worker runs them, for metrics and tracing. See
// [jobtype.Hook] for the contract of its methods.
type Hook = jobtype.Hook

// EnqueueHook is a [Hook] that also observes enqueues. See [jobtype.EnqueueHook].
type EnqueueHook = jobtype.EnqueueHook

// EnqueueEvent is what an [EnqueueHook] sees of a job being enqueued.
type EnqueueEvent = jobtype.EnqueueEvent

// Outcome is how an attempt ended, as hooks see it.
type Outcome = jobtype.Outcome

// The outcomes of an attempt.
const (
	OutcomeSucceeded = jobtype.OutcomeSucceeded // the handler returned nil, or committed its success with CompleteTx
	OutcomeRetry     = jobtype.OutcomeRetry     // failed; queued again after the retry policy's delay
	OutcomeSnoozed   = jobtype.OutcomeSnoozed   // Snooze: queued again, the attempt given back
	OutcomeDead      = jobtype.OutcomeDead      // failed with no attempts left
	OutcomeFailed    = jobtype.OutcomeFailed    // Permanent, or a payload that does not decode
	OutcomeCancelled = jobtype.OutcomeCancelled // CancelJob
	OutcomeTimedOut  = jobtype.OutcomeTimedOut  // ran past its timeout
	OutcomeReleased  = jobtype.OutcomeReleased  // put back unfinished by shutdown
	OutcomeLost      = jobtype.OutcomeLost      // no longer this worker's
)

// JobResult is what a [Hook] learns of a finished attempt.
type JobResult = jobtype.JobResult
