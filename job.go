// This file holds what a job is: the args interface handlers are registered by, the
// job states, the row as stored (JobRow, with its error history), the typed Job a
// handler receives, and the scanning of rows into JobRow.

package skiplock

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/sealed"
)

// JobArgs is the payload of a job. Its Kind names the handler that runs it; the value
// itself is stored as JSON, so it must marshal with encoding/json.
type JobArgs interface {
	Kind() string
}

// JobStatus is the state of a job. See the package documentation for the state machine.
type JobStatus = jobtype.JobStatus

// The job states.
const (
	StatusQueued    = jobtype.StatusQueued    // waiting for run_at and a free worker
	StatusRunning   = jobtype.StatusRunning   // claimed by a worker
	StatusSucceeded = jobtype.StatusSucceeded // finished without error
	StatusFailed    = jobtype.StatusFailed    // a permanent error: never retried
	StatusDead      = jobtype.StatusDead      // attempts exhausted
	StatusCancelled = jobtype.StatusCancelled // cancelled by an operator or its handler
)

// AttemptError is one entry of a job's error history ([JobRow].Errors).
type AttemptError = jobtype.AttemptError

// Job is a claimed job with its args decoded into T, as a handler receives it. For args
// encrypted with a [Keyring], Args are the opened args and JobRow.Payload stays the
// sealed payload as stored, the one middleware, error handlers and hooks see.
type Job[T JobArgs] struct {
	*JobRow
	Args T

	ctx context.Context // the attempt's own context (Context); nil outside a handler
}

// Context returns the context of the job's own attempt: it ends when the job is cancelled
// ([Client.Cancel]), passes its timeout, or is cut off by the worker's shutdown, with
// that as its cause ([context.Cause]). In a [Handle] handler it is the handler's ctx; in a
// [HandleBatch] call it is each job's own, while the call's ctx goes on for the others,
// and [SetOutput] and [RecordProgress] given it report for that job alone. For a Job
// not handed over by a worker it is [context.Background].
func (j *Job[T]) Context() context.Context {
	if j.ctx == nil {
		return context.Background()
	}
	return j.ctx
}

// JobRow is a job as stored: its id, queue, kind, JSON payload, state, attempts, error
// history, metadata, progress and output. See [jobtype.JobRow] for its fields.
type JobRow = jobtype.JobRow

// LogRecord is one record a handler logged through [Logger], as [Client.Logs] returns it.
type LogRecord = jobtype.LogRecord

// Progress is what a handler last reported with [RecordProgress].
type Progress = jobtype.Progress

// jobColumns are the columns scanJob reads, in its order.
const jobColumns = jobtype.Columns

// archiveJobColumns is jobColumns for a jobs_archive row, which keeps no lease.
const archiveJobColumns = jobtype.ArchiveColumns

// scanJob scans one row of jobColumns.
func scanJob(row pgx.Row) (*JobRow, error) { return jobtype.ScanJob(row) }

// jobScan is the scan buffer of one row of jobColumns.
type jobScan = jobtype.Scan

// collectJobs scans every row of jobColumns and closes rows.
func collectJobs(rows pgx.Rows) ([]*JobRow, error) { return jobtype.CollectJobs(rows) }

// The rest of this file holds the hooks skiplock calls for metrics and tracing: around every job a
// Worker runs (Hook), and before and after every enqueue (EnqueueHook), with the outcome
// of each attempt; and what rewrites or seals a job before it is written (InsertMiddleware,
// Keyring: internal/sealed).

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
