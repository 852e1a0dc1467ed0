// This file holds the retention of workflows: the sweeper deletes a workflow, with its
// tasks and edges, once nothing of it can change any more and its jobs finished past
// the archive retention.

package maintenance

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// workflowPastRetention is the condition on workflow w (its alias) to be purged with
// retention $1: created before the cutoff, no sequence names it, no task is waiting or
// released, and no job of its tasks is unfinished or finished after the cutoff, in the
// hot table or the archive (a job already purged is past retention). The jobs are
// looked up by their primary keys, the tasks by the workflow's. A sequence's workflow
// stays while the sequence names it (sequences.workflow_id): the next EnqueueSequence
// of the key appends to it.
const workflowPastRetention = `w.created_at < now() - $1::interval
		AND NOT EXISTS (SELECT 1 FROM {s}.sequences q WHERE q.workflow_id = w.id)
		AND NOT EXISTS (SELECT 1 FROM {s}.workflow_tasks t WHERE t.workflow_id = w.id AND (
			t.state IN ('waiting', 'released')
			OR EXISTS (SELECT 1 FROM {s}.jobs j WHERE j.id = t.job_id
				AND (j.finished_at IS NULL OR j.finished_at >= now() - $1::interval))
			OR EXISTS (SELECT 1 FROM {s}.jobs_archive a WHERE a.id = t.job_id
				AND a.finished_at >= now() - $1::interval)))`

// pickWorkflowsSQL locks one batch ($2) of workflows past retention $1
// (workflowPastRetention) and returns their ids; purgeWorkflowsSQL then deletes them.
//
//   - FOR UPDATE SKIP LOCKED: two sweeps never pick the same workflow (the sweep lock
//     already serializes them; this keeps the statement safe without it), and a
//     workflow that RetryWorkflow or CancelWorkflow holds (FOR UPDATE), or a settle of
//     its tasks (FOR SHARE), is left for the next sweep.
//   - The workflows are taken oldest first (the primary key's order, which is the order
//     of created_at), so each batch starts where the retention's cutoff is.
//
// Its condition is read in the statement's snapshot, taken before the rows are locked:
// a RetryWorkflow that took the row, reopened tasks and committed in between changed
// no column of the row, so the lock does not read the condition again. Hence the
// second statement.
const pickWorkflowsSQL = `SELECT coalesce(array_agg(id), '{}') FROM (
	SELECT w.id FROM {s}.workflows w
	WHERE ` + workflowPastRetention + `
	ORDER BY w.id
	LIMIT $2
	FOR UPDATE OF w SKIP LOCKED
) p`

// purgeWorkflowsSQL deletes, of the workflows $2 that pickWorkflowsSQL locked, those
// still past retention $1, with their tasks and edges. Its snapshot is taken after the
// locks: it sees what a RetryWorkflow (or CancelWorkflow, or a settle) that held a
// workflow's row before them committed, and none can take the row until this
// transaction ends.
const purgeWorkflowsSQL = `WITH w AS (
	SELECT w.id FROM {s}.workflows w
	WHERE w.id = ANY ($2::bigint[]) AND ` + workflowPastRetention + `
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

// purgeWorkflowBatch deletes one batch (pickWorkflowsSQL, then purgeWorkflowsSQL in the
// same transaction), and reports whether the sweep is done with workflows: the batch
// picked was not full, or another sweeper holds the lock.
func (s *Sweeper) purgeWorkflowBatch(ctx context.Context) (n int64, done bool, err error) {
	var picked []int64
	got, err := s.underSweepLock(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, s.sql.pickWorkflows, s.cfg.ArchiveRetention, s.cfg.BatchSize).Scan(&picked); err != nil {
			return err
		}
		if len(picked) == 0 {
			return nil
		}
		return tx.QueryRow(ctx, s.sql.purgeWorkflows, s.cfg.ArchiveRetention, picked).Scan(&n)
	})
	if err != nil || !got {
		return 0, true, err
	}
	return n, len(picked) < s.cfg.BatchSize, nil
}
