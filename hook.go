// This file holds the hooks skiplock calls for metrics and tracing: around every job a
// Worker runs (Hook), and before and after every enqueue (EnqueueHook), with the outcome
// of each attempt; and what rewrites or seals a job before it is written (InsertMiddleware,
// Keyring: internal/sealed).

package skiplock

import (
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/sealed"
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

// InsertMiddleware rewrites a job before it is written ([Config].InsertMiddleware). See
// [jobtype.InsertMiddleware].
type InsertMiddleware = jobtype.InsertMiddleware

// InsertJob is a job being enqueued, as an [InsertMiddleware] sees and changes it.
type InsertJob = jobtype.InsertJob

// Keyring holds the AES-GCM keys that encrypt and decrypt jobs' args ([Config].Keyring,
// [EnqueueOptions].Encrypt): new jobs are sealed with the current key, and a job sealed
// with any key of the ring opens, so keys rotate by adding the new one as current and
// keeping the old ones until the jobs they sealed are gone. See [sealed.Keyring].
type Keyring = sealed.Keyring

// NewKeyring returns a keyring that seals with keys[current] and opens with any of keys:
// 16, 24 or 32 bytes each (AES-128, -192, -256), from a secret store; ids are 1-64
// characters of [A-Za-z0-9._-].
func NewKeyring(current string, keys map[string][]byte) (*Keyring, error) {
	return sealed.NewKeyring(current, keys)
}

// SealedKey returns the id of the key that sealed a stored payload, and false when the
// payload is not sealed: what the CLI and the dashboard show instead of the args.
func SealedKey(payload []byte) (string, bool) { return sealed.SealedKey(payload) }
