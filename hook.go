// This file holds the hooks skiplock calls for metrics and tracing: around every job a
// Worker runs (Hook), and before and after every enqueue (EnqueueHook), with the outcome
// of each attempt.

package skiplock

import (
	"context"

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
	OutcomeSucceeded = jobtype.OutcomeSucceeded // the handler returned nil
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

// enqueuing runs the client's enqueue hooks for j, then encodes and checks its metadata.
// The returned function must be called once with the insert's result; on error it has
// been called already.
func (c *Client) enqueuing(ctx context.Context, j *newJob) (func(*JobRow, error), error) {
	var dones []func(*JobRow, error)
	if len(c.enqueueHooks) > 0 {
		if j.meta == nil {
			j.meta = map[string]string{}
		}
		e := &EnqueueEvent{Kind: j.kind, Queue: j.queue, Metadata: j.meta}
		for _, h := range c.enqueueHooks {
			if d := h.JobEnqueuing(ctx, e); d != nil {
				dones = append(dones, d)
			}
		}
		j.meta = e.Metadata
	}
	finish := func(row *JobRow, err error) {
		for _, d := range dones {
			d(row, err)
		}
	}
	if err := j.encodeMetadata(); err != nil {
		finish(nil, err)
		return nil, err
	}
	return finish, nil
}
