package jobtype

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is what enqueueing inside the caller's transaction needs; pgx.Tx satisfies it.
// skiplock never begins, commits or rolls back a DBTX it is given.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error)
}

// AttemptKey identifies one claimed attempt of a job: its id and the fencing token the
// claim took. The token grows at every claim and never goes back, so a key is never
// reused.
type AttemptKey struct {
	ID    int64
	Fence int64
}

// Attempt is the worker's side of one claimed attempt, which CompleteTx calls to record
// the attempt's success in the handler's own transaction.
type Attempt interface {
	CompleteTx(ctx context.Context, tx DBTX, row *JobRow) error
}

// SetAttempt ties row, as handed to a handler, to the worker running its attempt.
func SetAttempt(row *JobRow, a Attempt) { row.attempt = a }

// AttemptOf returns the attempt SetAttempt tied row to, or nil for a row read any
// other way.
func AttemptOf(row *JobRow) Attempt { return row.attempt }

// MarkCompletedInTx records that CompleteTx wrote the success of row's attempt in a
// caller's transaction: once that transaction commits, the attempt has succeeded,
// whatever its handler returns. Safe for concurrent use.
func MarkCompletedInTx(row *JobRow) { atomic.StoreUint32(&row.inTx, 1) }

// CompletedInTx reports whether MarkCompletedInTx was called for row: its success may
// have committed with the handler's transaction.
func CompletedInTx(row *JobRow) bool { return atomic.LoadUint32(&row.inTx) == 1 }

// MarkSuspended records that a durable wait (Sleep, AwaitSignal, internal/durable) ended
// row's attempt in the database: the job is queued again, its attempt given back, and
// the worker writes nothing more for the attempt, whatever its handler returns. Safe for
// concurrent use.
func MarkSuspended(row *JobRow) { atomic.StoreUint32(&row.suspended, 1) }

// Suspended reports whether MarkSuspended was called for row.
func Suspended(row *JobRow) bool { return atomic.LoadUint32(&row.suspended) == 1 }
