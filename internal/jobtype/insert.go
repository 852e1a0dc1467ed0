// This file holds what an insert middleware sees and may change of a job being
// enqueued.

package jobtype

import (
	"context"
	"encoding/json"
	"time"
)

// InsertJob is a job being enqueued, as an [InsertMiddleware] sees it: it may change any
// field but Kind, and the enqueue checks the result as it checks the caller's options.
type InsertJob struct {
	// Kind is the job's kind; a change is ignored.
	Kind string
	// Queue, Priority and RunAt (zero: due now, by the database clock) are the job's. A
	// new job debounced by UniqueOpts.Debounce without a RunAt shows zero: it is due
	// Debounce after now() by the database clock, unless the middleware sets a RunAt.
	Queue    string
	Priority int
	RunAt    time.Time
	// Payload is the job's args as JSON (before encryption, when the job is encrypted).
	Payload json.RawMessage
	// Metadata is the job's metadata, never nil. Keys starting with "skiplock_" are
	// skiplock's own marks: a middleware may not add, change or remove them.
	Metadata map[string]string
}

// InsertMiddleware rewrites a job before it is written: it runs for every job of
// Enqueue, EnqueueTx, EnqueueMany and the periodic jobs, in the order given, before the
// enqueue hooks. An error refuses the enqueue (nothing is written; inside the caller's
// transaction, the transaction stays usable) and comes back from the call wrapped.
type InsertMiddleware func(ctx context.Context, job *InsertJob) error
