// This file holds what happens when a handler fails: the handler's verdicts (Permanent,
// CancelJob, Snooze), the retry policy (jittered exponential backoff by default), and the
// failureRecorder that writes failed attempts in batches, with one fenced statement each.

package skiplock

import (
	"time"

	"github.com/skiplock/skiplock/internal/jobtype"
)

// Permanent wraps a handler error to say the job must not be retried: the job ends in
// status failed with the error recorded. Use it for bad input that no retry can fix.
func Permanent(err error) error { return jobtype.Permanent(err) }

// CancelJob wraps a handler error to end the job in status cancelled, without retry.
func CancelJob(err error) error { return jobtype.CancelJob(err) }

// Snooze returned by a handler puts the job back in the queue to run again after d,
// without using up an attempt. d <= 0 means run again as soon as possible: the worker
// wakes its own claim loops. A positive d, like a retry's delay, is when the job is due
// again; it runs at its queue's first claim after that, which on an idle queue is the
// worker's first poll after it is due (see [RetryPolicy]). Returned after the attempt's
// timeout, it is a failed attempt like any other result then ([ErrJobTimeout]).
func Snooze(d time.Duration) error { return jobtype.Snooze(d) }

// RetryPolicy decides when a failed job runs again. NextRetry gets the job as claimed
// (job.Attempts is the attempt that just failed, starting at 1) and returns the delay from
// now, by the database clock. A negative delay counts as zero, as [Snooze]'s does: the
// job is due now, not in the past, so it does not go ahead of the jobs due before it
// (claims take the earliest due first). It is not asked when the job has no attempts
// left. A policy that panics is recovered and logged (with the job's id and kind), and the
// default backoff ([BackoffPolicy]) decides the delay instead.
//
// The delay is when the job is due again, not when it runs: a worker claims it at its
// queue's first claim after that. Nothing notifies a retry, so on an otherwise idle queue
// that is the worker's next poll ([WorkerConfig].PollInterval, 1s by default): a delay
// shorter than the poll interval is in effect rounded up to the next poll, and a retry
// (given a free slot) runs between its delay and its delay plus PollInterval after the
// failure. Only a delay of zero or less is claimed at once: the worker that writes the
// failure wakes its own claim loops. For shorter retries, set a shorter PollInterval.
//
// A kind can have its own policy: give its args type a method RetryPolicy() RetryPolicy.
type RetryPolicy = jobtype.RetryPolicy

// BackoffPolicy is the default [RetryPolicy]: jittered exponential backoff,
// min(Base × 2^attempt, Max) × a random factor in [0.5, 1.0), never more than Max (for
// any Max up to the longest Duration, and any attempt). The zero value is the default
// policy (Base 1s, Max 1h). It is safe for concurrent use. The delays are when
// the job is due again: a retry due before the worker's next poll
// ([WorkerConfig].PollInterval) waits for it (see [RetryPolicy]), so a Base under the
// poll interval needs a shorter PollInterval to retry sooner.
type BackoffPolicy = jobtype.BackoffPolicy

// retryPolicyArgs is implemented by args types with a kind-specific policy.
type retryPolicyArgs interface {
	RetryPolicy() RetryPolicy
}
