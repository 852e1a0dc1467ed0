// This file holds the worker's side of CompleteTx: the attempt a claimed row carries,
// which writes the attempt's success in the handler's transaction.

package record

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/settle"
	"github.com/skiplock/skiplock/internal/waiting"
)

// AttemptRef ties a claimed JobRow to the worker that runs it, for CompleteTx: the
// worker's id (locked_by) and its success statement per completion mode.
type AttemptRef struct {
	WorkerID string
	Stmts    map[jobtype.Completion]completeStmts        // the success statements of each mode, as the completer's
	ModeOf   func(queue, kind string) jobtype.Completion // the mode of a job's queue and kind
	Lost     string                                      // attemptLostSQL
	Flows    *settle.Settler                             // settles a workflow task's dependents in tx
	Wake     waiting.Waking                              // tells the job's waiters (Client.Wait) at tx's commit
}

// AttemptLostSQL aborts the caller's transaction when CompleteTx matched no row, so that
// a caller that ignores the error still cannot commit the business writes of an attempt
// it lost. A DO block needs no function in the schema, and works through a
// transaction-pooling PgBouncer (it runs inside the caller's transaction).
const AttemptLostSQL = `DO $$ BEGIN RAISE EXCEPTION 'skiplock: attempt lost' USING ERRCODE = 'SK001'; END $$`

// CompleteTx implements jobtype.Attempt: the fenced success of row's attempt in tx.
func (ref *AttemptRef) CompleteTx(ctx context.Context, tx jobtype.DBTX, row *jobtype.JobRow) error {
	st := ref.Stmts[ref.ModeOf(row.Queue, row.Kind)]
	q, args := st.sql, []any{[]int64{row.ID}, []int64{row.Fence}, ref.WorkerID}
	if p, o := jobtype.StateOf(ctx).Reported(); (p != nil || o != nil) && st.sqlReport != "" {
		q, args = st.sqlReport, append(args, []*string{o}, []*string{p})
	}
	// The wake-up of the job's waiters goes with the statement, in one round trip when tx
	// is a pgx.Tx.
	tag, err := ref.Wake.Exec(ctx, tx, q, args, []int64{row.ID})
	if err != nil {
		return fmt.Errorf("skiplock: CompleteTx: job %d: %w", row.ID, err)
	}
	if tag.RowsAffected() > 0 {
		if settle.IsTask(row) {
			// A workflow task's dependents are settled in the same transaction, as the
			// worker's own success batch does (internal/settle).
			if err := ref.Flows.Settle(ctx, tx, []int64{row.ID}); err != nil {
				return fmt.Errorf("skiplock: CompleteTx: job %d: settling its workflow: %w", row.ID, err)
			}
		}
		// If tx commits, the attempt has succeeded whatever the handler returns: the
		// outcome recorder asks the database before it records anything else
		// (OutcomeRecorder.Record).
		jobtype.MarkCompletedInTx(row)
		return nil
	}
	_, err = tx.Exec(ctx, ref.Lost)
	var pgErr *pgconn.PgError
	if err != nil && !(errors.As(err, &pgErr) && pgErr.Code == "SK001") {
		return fmt.Errorf("%w: job %d, attempt %d (aborting the transaction failed: %w)", jobtype.ErrAttemptLost, row.ID, row.Attempts, err)
	}
	return fmt.Errorf("%w: job %d, attempt %d", jobtype.ErrAttemptLost, row.ID, row.Attempts)
}
