// This file holds the sweep's settle of sequence tasks cancelled while they ran: the
// root's Client.Cancel leaves such a task released, for the end of its job's lease
// (internal/ownership, cancelled.go). Its worker settles it when the handler returns;
// when the lease ends otherwise (the worker died, stopped waiting for the handler, or
// could not write the end), the sweep settles it once the lease has passed, so the key's
// next job is never held for ever.

package maintenance

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/settle"
)

// EndCancelledSequencesSQL ends the passed leases of the jobs of sequence tasks cancelled
// while they ran whose tasks are still released, one batch ($1) at a time, and returns
// their ids, to settle in the same transaction.
//
//   - lease_until < now(): no worker renews it any more, so no handler of the job runs
//     (RetryWorkflow reads the lease the same way). Its worker sets it NULL when the
//     handler returns, in the transaction that settles the task, so a row whose lease is
//     NULL has nothing left here.
//   - The rows come from jobs_cancelled_lease_idx (migration 21: the cancelled rows whose
//     lease is still set, a handful), not a scan of the jobs table; the task is looked up
//     by workflow_tasks_job_idx.
//   - FOR UPDATE SKIP LOCKED: a row whose worker is ending its lease (and settling it)
//     is left to it.
const EndCancelledSequencesSQL = `WITH c AS (
	SELECT j.id FROM {s}.jobs j
	WHERE j.status = 'cancelled' AND j.lease_until < now()
		AND j.metadata ? '` + settle.MetaSequence + `'
		AND EXISTS (SELECT FROM {s}.workflow_tasks t WHERE t.job_id = j.id AND t.state = 'released')
	LIMIT $1
	FOR UPDATE OF j SKIP LOCKED
)
UPDATE {s}.jobs SET lease_until = NULL
WHERE id = ANY (ARRAY(SELECT id FROM c)) AND status = 'cancelled'
RETURNING id`

// endCancelledSequences runs EndCancelledSequencesSQL once in tx and returns the jobs
// whose tasks the caller settles in tx; the rest, beyond BatchSize, wait for the next
// sweep.
func (s *Sweeper) endCancelledSequences(ctx context.Context, tx pgx.Tx) ([]int64, error) {
	rows, err := tx.Query(ctx, s.sql.endCancelledSequences, s.cfg.BatchSize)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}
