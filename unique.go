// This file holds unique jobs by what they are: the UniqueOpts an enqueue may carry. The
// key they compute (kind, optionally queue, args and time bucket, hashed) and the inserts
// that honour it are in internal/enqueue.

package skiplock

import (
	"time"

	"github.com/skiplock/skiplock/internal/enqueue"
)

// UniqueOpts makes a job unique by what it is: at most one job with the same kind (and,
// as chosen, the same queue, args and time bucket) exists in the states that count. A
// duplicate enqueue inserts nothing and returns the existing job with
// [JobRow].Duplicate set and a nil error; [Client.EnqueueMany] skips it and does not
// count it.
//
// Active jobs (queued, running) are arbitrated by a unique index, so concurrent enqueues
// from any number of transactions leave one row. Finished states that count are looked
// up by the same statement among the finished jobs of the jobs table and the archive,
// and once more after the insert, in its transaction, for a holder that finished while
// the insert waited on it (a round trip more; see docs/enqueueing.md).
//
// The zero value means: unique by kind alone, among queued and running jobs.
type UniqueOpts struct {
	// ByArgs makes the args part of the key, as canonical JSON (object keys sorted, so
	// field order does not matter). Defaults to false: the args do not matter.
	ByArgs bool
	// ArgsFields limits ByArgs to these top-level JSON fields of the args (by their JSON
	// names); a missing field counts as null. Setting it implies ByArgs. Defaults to
	// empty: every field.
	ArgsFields []string
	// ByQueue makes the queue part of the key: the same job may then be queued once per
	// queue. Defaults to false.
	ByQueue bool
	// ByPeriod makes the time bucket part of the key: at most one job per bucket of this
	// length (buckets are whole multiples of it since 0001-01-01 UTC, as time.Truncate
	// counts: for a length that divides a day the same as from the Unix epoch, so 1h
	// buckets start on the hour UTC; 168h buckets start on Mondays).
	// The bucket is that of RunAt when set, else of the enqueuing host's clock. Zero means
	// no bucket; negative is an error.
	ByPeriod time.Duration
	// States are the states in which an existing job blocks a new one. They must include
	// queued and running. Adding succeeded means a job done within the period blocks
	// another: with the default CompletionArchive the archive is searched, and the
	// archive retention bounds how far back; under CompletionDelete a succeeded job
	// leaves no row and cannot count. Defaults to queued and running.
	States []JobStatus
	// Replace: when a queued job (not yet running) holds the key, this enqueue's args
	// replace that job's, and the enqueue returns it with Duplicate and Replaced set. A
	// holder already running (or finished, under States) is kept as it is: Duplicate
	// only. For Enqueue and EnqueueTx; EnqueueMany refuses it.
	Replace bool
	// Debounce delays the job: a new job is due Debounce after it is enqueued (unless
	// RunAt is set), and an enqueue that meets a queued holder pushes the holder's run_at
	// to Debounce after now (never earlier than it was), both by the database's clock, so
	// a burst of enqueues of one key runs once, Debounce after the last. Zero: no
	// debounce; negative is an error.
	// For Enqueue and EnqueueTx; EnqueueMany refuses it.
	Debounce time.Duration
	// MaxDelay bounds Debounce under a steady stream: a holder is never pushed later than
	// MaxDelay after it was first enqueued (its created_at), so it runs at the latest
	// then. Zero: no bound; it needs Debounce, and must be at least Debounce.
	MaxDelay time.Duration
}

// allStatuses lists every job status, for validation.
var allStatuses = enqueue.AllStatuses
