// Package jobtype holds the types that the root package and the engine's packages share:
// the job row and its states, the outcome of an attempt, handlers' verdicts, the attempt
// key, the completion modes and the database handle's interface. It imports no package
// of the module; the root package re-exports these names with type aliases.
package jobtype

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// JobStatus is the state of a job. See the package documentation for the state machine.
type JobStatus string

// The job states.
const (
	StatusQueued    JobStatus = "queued"    // waiting for run_at and a free worker
	StatusRunning   JobStatus = "running"   // claimed by a worker
	StatusSucceeded JobStatus = "succeeded" // finished without error
	StatusFailed    JobStatus = "failed"    // a permanent error: never retried
	StatusDead      JobStatus = "dead"      // attempts exhausted
	StatusCancelled JobStatus = "cancelled" // cancelled by an operator or its handler
)

// AttemptError is one entry of a job's error history.
type AttemptError struct {
	// Attempt is the job's attempts as the entry was written: the attempt that failed,
	// or for a job ended without running because its deadline had passed at the claim
	// (its attempt given back), the attempts that ran before that claim (0 if none).
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
}

// JobRow is a job as stored in the database.
type JobRow struct {
	ID          int64
	Queue       string
	Kind        string
	Payload     []byte // the args as JSON; args encrypted with a Keyring: their sealed form
	Status      JobStatus
	Priority    int
	RunAt       time.Time
	Attempts    int // attempts started so far, including a running one
	MaxAttempts int
	LockedAt    time.Time // zero unless running
	LockedBy    string    // the worker holding the job, empty unless running
	LastError   string
	Errors      []AttemptError // the latest errors, oldest first, at most 10
	UniqueKey   string
	CreatedAt   time.Time
	FinishedAt  time.Time // zero until the job reaches a final state
	// Duplicate is set on the job an enqueue returns when it inserted nothing because
	// this existing job holds the unique key ([UniqueOpts], [EnqueueOptions].UniqueKey).
	// It is not stored.
	Duplicate bool
	// Replaced is set, with Duplicate, when the enqueue changed the queued job holding
	// the key: gave it its args ([UniqueOpts].Replace) or pushed its run_at
	// ([UniqueOpts].Debounce). It is not stored.
	Replaced bool
	// Metadata is the string map given at enqueue ([EnqueueOptions].Metadata, plus what
	// enqueue hooks added, such as a trace context). Empty when none.
	Metadata map[string]string
	// Progress is the latest progress the handler recorded with [RecordProgress], as the
	// heartbeat or the completion last wrote it; nil when none was recorded.
	Progress *Progress
	// Output is the JSON the handler set with [SetOutput], stored with its success; nil
	// when none.
	Output json.RawMessage
	// Deadline is the job's deadline ([EnqueueOptions].Deadline, [Workflow].Deadline):
	// no attempt starts after it and a running one is cancelled at it. Zero when none.
	// It is stored in the metadata, under the reserved key MetaDeadline.
	Deadline time.Time
	// Logs are the records the job's handlers logged through skiplock.Logger, oldest
	// first (by attempt, then in order), at most 1,000 records or 64 KiB per attempt.
	// Only Client.Get fills them (nil when none); nil in lists, hooks, Wait and a handler's Job.
	Logs []LogRecord
	// Fence is the token of the attempt a handler runs: it grows with every claim of any
	// job and never goes back, and every write about the attempt is fenced on it. Give it
	// to another system as a fencing token (docs/workers.md, "Exactly once"): a downstream that
	// keeps, per job ID, the highest token it accepted and refuses lower ones cannot be
	// written by an attempt that lost its job to a newer one. Zero outside a handler.
	Fence int64

	attempt Attempt // the worker running this attempt, for CompleteTx; nil outside a handler
	// inTx is 1 once CompleteTx wrote this attempt's success in a caller's transaction
	// (MarkCompletedInTx); read and written atomically.
	inTx uint32
	// suspended is 1 once Sleep or AwaitSignal ended this attempt in the database
	// (MarkSuspended); read and written atomically.
	suspended uint32
}

// Progress is a running job's progress as its handler last recorded it with
// [RecordProgress]: a number (a percentage, a count of items — the handler decides) and a
// short message.
type Progress struct {
	Value   float64 `json:"value"`
	Message string  `json:"message,omitempty"`
}

// MetaDeadline is the reserved metadata key that keeps a job's deadline, as RFC 3339
// text in UTC with nanoseconds. Every insert path carries a job's metadata, and the
// archive keeps it, so the deadline needs no column of its own.
const MetaDeadline = "skiplock_deadline"

// FormatDeadline is d as MetaDeadline stores it.
func FormatDeadline(d time.Time) string { return d.UTC().Format(time.RFC3339Nano) }

// jobColumns is the column list every statement returning a JobRow selects, in scanJob's order.
const Columns = `id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
	locked_at, locked_by, last_error, errors, unique_key, created_at, finished_at,
	metadata, progress, output`

// ArchiveColumns is Columns for a jobs_archive row, which keeps no lease.
const ArchiveColumns = `id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
	NULL::timestamptz, locked_by, last_error, errors, unique_key, created_at, finished_at,
	metadata, progress, output`

// scanJob reads one row of jobColumns.
func ScanJob(row pgx.Row) (*JobRow, error) {
	s := new(Scan)
	if err := row.Scan(s.Dest(nil)...); err != nil {
		return nil, err
	}
	return s.Job(), nil
}

// Scan is one row of jobColumns on its way to a JobRow: the row and the nullable
// columns' destinations in one allocation, which the row keeps. The nullable columns
// scan into values with a validity flag, not into pointers that pgx would allocate.
type Scan struct {
	row                          JobRow
	status                       string
	lockedAt, finishedAt         pgtype.Timestamptz
	lockedBy, lastErr, uniqueKey pgtype.Text
	errs, meta, progress, output []byte
}

// dest returns the scan destinations of jobColumns, in buf's storage (nil: a new slice).
func (s *Scan) Dest(buf []any) []any {
	j := &s.row
	return append(buf[:0], &j.ID, &j.Queue, &j.Kind, &j.Payload, &s.status, &j.Priority, &j.RunAt, &j.Attempts,
		&j.MaxAttempts, &s.lockedAt, &s.lockedBy, &s.lastErr, &s.errs, &s.uniqueKey, &j.CreatedAt, &s.finishedAt,
		&s.meta, &s.progress, &s.output)
}

// job finishes the row from the scanned columns and returns it.
func (s *Scan) Job() *JobRow {
	j := &s.row
	j.Status = JobStatus(s.status)
	if s.lockedAt.Valid {
		j.LockedAt = s.lockedAt.Time
	}
	if s.finishedAt.Valid {
		j.FinishedAt = s.finishedAt.Time
	}
	j.LockedBy, j.LastError, j.UniqueKey = s.lockedBy.String, s.lastErr.String, s.uniqueKey.String
	decodeJSON(j, s.errs, s.meta, s.progress)
	if len(s.output) > 0 {
		j.Output = json.RawMessage(s.output)
	}
	return j
}

// decodeJSON decodes the history, metadata (and the deadline it keeps) and progress
// into j.
func decodeJSON(j *JobRow, errs, meta, progress []byte) {
	if len(errs) > 0 {
		// A history that does not decode (edited by hand) is dropped from the row rather
		// than failing it: a claimed job must always reach its handler.
		var err error
		if j.Errors, err = decodeHistory(errs); err != nil {
			j.Errors = nil
		}
	}
	// Like the history, metadata or progress that does not decode (non-string values
	// written by hand) is dropped rather than failing the row. "{}" is the common case and
	// costs no decoding.
	if len(meta) > 2 && json.Unmarshal(meta, &j.Metadata) != nil {
		j.Metadata = nil
	}
	if d, ok := j.Metadata[MetaDeadline]; ok {
		j.Deadline, _ = time.Parse(time.RFC3339Nano, d)
	}
	if len(progress) > 0 {
		var p Progress
		if json.Unmarshal(progress, &p) == nil {
			j.Progress = &p
		}
	}
}

// collectJobs reads all rows of a jobColumns query.
func CollectJobs(rows pgx.Rows) ([]*JobRow, error) {
	defer rows.Close()
	var out []*JobRow
	for rows.Next() {
		j, err := ScanJob(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// RowReader reads the rows of one Columns query one after the other, each into a JobRow
// of its own, for the claim: its destinations serve every row, the text and JSON
// columns are read in place (pgtype.DriverBytes) and the JSON ones decoded from there,
// and the strings rows share (queue, kind, status, worker) are made once per reader,
// not per row. The rows come out as Scan makes them. Read (rawrow.go) decodes a row
// from its raw values when its columns allow, and through Dest and Finish otherwise.
type RowReader struct {
	status, queue, kind, lockedBy, lastErr, uniqueKey pgtype.DriverBytes
	errs, meta, progress, output                      pgtype.DriverBytes
	lockedAt, finishedAt                              pgtype.Timestamptz
	dest                                              []any
	strs                                              []string // the strings made so far, for reuse
	raw                                               rawState // Read decodes the raw values (rawrow.go)
}

// Dest returns the destinations of Columns for the row j, followed by extra; valid until
// the next call.
func (r *RowReader) Dest(j *JobRow, extra ...any) []any {
	r.dest = append(r.dest[:0], &j.ID, &r.queue, &r.kind, &j.Payload, &r.status, &j.Priority, &j.RunAt, &j.Attempts,
		&j.MaxAttempts, &r.lockedAt, &r.lockedBy, &r.lastErr, &r.errs, &r.uniqueKey, &j.CreatedAt, &r.finishedAt,
		&r.meta, &r.progress, &r.output)
	r.dest = append(r.dest, extra...)
	return r.dest
}

// Finish completes j from the columns read into r's destinations, before the next row
// is read; as Scan.Job does.
func (r *RowReader) Finish(j *JobRow) {
	j.Queue, j.Kind, j.LockedBy = r.str(r.queue), r.str(r.kind), r.str(r.lockedBy)
	j.Status = JobStatus(r.str(r.status))
	j.LastError, j.UniqueKey = string(r.lastErr), string(r.uniqueKey)
	if r.lockedAt.Valid {
		j.LockedAt = r.lockedAt.Time
	}
	if r.finishedAt.Valid {
		j.FinishedAt = r.finishedAt.Time
	}
	decodeJSON(j, r.errs, r.meta, r.progress)
	if len(r.output) > 0 {
		j.Output = json.RawMessage(bytes.Clone(r.output))
	}
}

// str returns b as a string, the same one for the same bytes within a reader.
func (r *RowReader) str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	for _, s := range r.strs {
		if s == string(b) {
			return s
		}
	}
	s := string(b)
	if len(r.strs) < maxReaderStrings {
		r.strs = append(r.strs, s)
	}
	return s
}

// maxReaderStrings bounds the strings a RowReader keeps for reuse: a claim's rows share
// a queue, a status, a worker and a few kinds.
const maxReaderStrings = 16
