// This file holds the retention of workflows: the sweeper deletes a workflow, with its
// tasks and edges, once nothing of it can change any more and its jobs finished past
// the archive retention.

package maintenance

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// purgeWorkflowsSQL deletes one batch ($2) of workflows past retention $1. A workflow
// goes when it was created before the cutoff, no task is waiting or released, and no
// job of its tasks is unfinished or finished after the cutoff, in the hot table or the
// archive (a job already purged is past retention). The jobs are looked up by their
// primary keys, the tasks by the workflow's.
//
//   - A sequence's workflow stays while the sequence names it (sequences.workflow_id):
//     the next EnqueueSequence of the key appends to it.
//   - FOR UPDATE SKIP LOCKED: two sweeps never pick the same workflow (the sweep lock
//     already serializes them; this keeps the statement safe without it).
//   - The workflows are taken oldest first (the primary key's order, which is the order
//     of created_at), so each batch starts where the retention's cutoff is.
const purgeWorkflowsSQL = `WITH w AS (
	SELECT w.id FROM {s}.workflows w
	WHERE w.created_at < now() - $1::interval
		AND NOT EXISTS (SELECT 1 FROM {s}.sequences q WHERE q.workflow_id = w.id)
		AND NOT EXISTS (SELECT 1 FROM {s}.workflow_tasks t WHERE t.workflow_id = w.id AND (
			t.state IN ('waiting', 'released')
			OR EXISTS (SELECT 1 FROM {s}.jobs j WHERE j.id = t.job_id
				AND (j.finished_at IS NULL OR j.finished_at >= now() - $1::interval))
			OR EXISTS (SELECT 1 FROM {s}.jobs_archive a WHERE a.id = t.job_id
				AND a.finished_at >= now() - $1::interval)))
	ORDER BY w.id
	LIMIT $2
	FOR UPDATE OF w SKIP LOCKED
),
e AS (
	DELETE FROM {s}.workflow_edges WHERE workflow_id = ANY (ARRAY(SELECT id FROM w))
),
t AS (
	DELETE FROM {s}.workflow_tasks WHERE workflow_id = ANY (ARRAY(SELECT id FROM w))
),
d AS (
	DELETE FROM {s}.workflows WHERE id = ANY (ARRAY(SELECT id FROM w)) RETURNING 1
)
SELECT count(*) FROM d`

// purgeWorkflows deletes the workflows past the archive retention in batches of
// BatchSize, each in a transaction of its own holding the sweep lock, at most
// maxPurgeBatches of them per sweep. It returns how many workflows it deleted.
func (s *Sweeper) purgeWorkflows(ctx context.Context) (int64, error) {
	var total int64
	for range maxPurgeBatches {
		n, done, err := s.purgeWorkflowBatch(ctx)
		if err != nil {
			return total, err
		}
		total += n
		if done {
			break
		}
	}
	return total, nil
}

// purgeWorkflowBatch deletes one batch, and reports whether the sweep is done with
// workflows: the batch was not full, or another sweeper holds the lock.
func (s *Sweeper) purgeWorkflowBatch(ctx context.Context) (n int64, done bool, err error) {
	got, err := s.underSweepLock(ctx, func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, s.sql.purgeWorkflows, s.cfg.ArchiveRetention, s.cfg.BatchSize).Scan(&n)
	})
	if err != nil || !got {
		return 0, true, err
	}
	return n, n < int64(s.cfg.BatchSize), nil
}
