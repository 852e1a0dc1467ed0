// This file holds CompleteTx, the exactly-once call: a handler marks its own attempt
// succeeded inside its own transaction, fenced on the attempt's token, so that its
// business writes and the job's success commit together or not at all.

package skiplock

import (
	"context"
	"errors"
	"fmt"

	"github.com/skiplock/skiplock/internal/jobtype"
)

// ErrAttemptLost is returned by [CompleteTx] when the attempt is no longer held by the
// worker that runs the handler: its worker's lease ended and the job was taken back (it
// may run elsewhere), the job was cancelled, or the attempt already completed.
var ErrAttemptLost = jobtype.ErrAttemptLost

// CompleteTx marks the attempt of job succeeded inside tx, the handler's own transaction
// (a pgx.Tx, or anything with the same methods), fenced on the attempt's token
// (job.Fence) as every write of the worker is: the job's success and the handler's
// business writes commit together or not at all. It writes what the job's completion
// mode says (archive, delete or keep: its kind's, its queue's or the worker's), as the
// worker's own success batch would, with the output set by [SetOutput] and the last
// [RecordProgress] (when ctx is the handler's, or derived from it), and settles a workflow
// task's dependents in tx.
//
// If the attempt is no longer this worker's (its worker's lease ended and the job was
// taken back, the job was cancelled, or the attempt already completed), CompleteTx
// returns [ErrAttemptLost] and tx is aborted: it can only roll back, so the business
// writes of an attempt that lost its job never commit, even if the caller ignores the
// error.
//
// The row stays locked by tx until it commits or rolls back: the job cannot be taken
// away meanwhile, and the worker's own writes about it wait or pass over it. Call
// CompleteTx last, just before Commit: a durable call after it ([Step], [StepTx], [Sleep],
// [AwaitSignal]) returns an error at once and runs nothing, and a Step or StepTx whose
// function called it returns an error and records nothing (StepTx's transaction rolls
// back). After a commit, the attempt has succeeded
// whatever the handler returns: the worker writes nothing more for it, and its hooks are
// told it succeeded, even when the handler then returns an error (when, say,
// [Worker.StopAndCancel] cuts off what it does after the commit; the worker asks the
// database, one statement, when a handler that called CompleteTx returns an error). If tx
// rolls back instead, the worker records what the handler returns, as usual.
//
// job must be the one the worker handed to the handler: CompleteTx returns an error for
// a job read any other way (Client.Get, List).
func CompleteTx[T JobArgs](ctx context.Context, tx DBTX, job *Job[T]) error {
	if job == nil || job.JobRow == nil {
		return errors.New("skiplock: CompleteTx: job is nil")
	}
	return completeRowTx(ctx, tx, job.JobRow)
}

// completeRowTx is CompleteTx for a JobRow.
func completeRowTx(ctx context.Context, tx DBTX, row *JobRow) error {
	if tx == nil {
		return errors.New("skiplock: CompleteTx: tx is nil")
	}
	ref := jobtype.AttemptOf(row)
	if ref == nil {
		return fmt.Errorf("skiplock: CompleteTx: job %d is not an attempt this process runs (pass the job the handler was given)", row.ID)
	}
	return ref.CompleteTx(ctx, tx, row)
}
