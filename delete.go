// This file holds deleting jobs: one by id (Delete) or all that match a ListParams
// (DeleteMany), from the jobs table and the archive, never a running job.

package skiplock

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/ownership"
	"github.com/skiplock/skiplock/internal/settle"
)

// ErrJobRunning is returned by [Client.Delete] for a job that is running: cancel it
// first ([Client.Cancel]), then delete it once its handler has returned. It is matched
// too by the error of [Client.RetryWorkflow] for a workflow with a job cancelled while
// it ran whose handler has not returned yet.
var ErrJobRunning = errors.New("skiplock: job is running")

// ErrTaskPending is returned by [Client.Delete] for the queued job of a workflow task
// (or a batch job, or a sequence's job): deleting it would leave the task unsettled, its
// dependents (or the batch's callback, or the sequence's next job) waiting for ever.
// Cancel it instead ([Client.Cancel], or [Client.CancelWorkflow]): a cancelled task is
// settled, and its job can be deleted once it is final.
var ErrTaskPending = errors.New("skiplock: job is a workflow task that has not finished")

// notPendingTask is the condition that keeps the queued jobs of workflow tasks from being
// deleted (ErrTaskPending): a task settles only when its job reaches a final state, and a
// deleted job never does (the settle statement reads a missing job as one its success
// deleted).
const notPendingTask = `NOT (status = 'queued' AND metadata ? '` + settle.MetaWorkflow + `')`

// notOpenAttempt keeps a job cancelled while its handler ran until that attempt has
// ended (ownership.CancelledAttemptOpen): deleted before, a sequence task's job left its
// task released for ever, the key's next job waiting.
const notOpenAttempt = `NOT ` + ownership.CancelledAttemptOpen

// openAttemptSQL says whether job $1 is a job cancelled while its handler ran whose
// attempt has not ended.
const openAttemptSQL = `SELECT ` + ownership.CancelledAttemptOpen + ` FROM {s}.jobs WHERE id = $1`

// deleteBatch is how many jobs of each table one statement of DeleteMany deletes: each
// batch is a transaction of its own, so locks and WAL stay small and a long DeleteMany
// never holds back vacuum.
const deleteBatch = 1000

// deleteSQL deletes job $1 from whichever table holds it (and its log records, l),
// unless it is running: a running
// job's worker still writes to its row (heartbeats, completion), fenced by status, and a
// job deleted under it would vanish without a final state. A claim that locked the row
// first makes the DELETE wait and then re-check status, so it never deletes a job a
// worker has just claimed.
const deleteSQL = `WITH h AS (
	DELETE FROM {s}.jobs WHERE id = $1 AND status <> 'running' AND ` + notPendingTask + ` AND ` + notOpenAttempt + `
	RETURNING ` + jobColumns + `
), a AS (
	DELETE FROM {s}.jobs_archive WHERE id = $1 RETURNING ` + archiveJobColumns + `
), l AS (
	DELETE FROM {s}.job_logs WHERE job_id = $1 AND (EXISTS (SELECT 1 FROM h) OR EXISTS (SELECT 1 FROM a))
)
SELECT * FROM h UNION ALL SELECT * FROM a`

// deleteManySQL deletes up to $9 jobs matching listFilter, none running, from the jobs
// table first, then from the archive for what remains of $9, and counts them. The ids
// are picked along each primary key first (id = ANY (ARRAY(...)) reaches them through
// it), and the filter is checked again on the row being deleted: a job claimed between
// the pick and the delete is running by then and stays. SKIP LOCKED leaves rows a worker
// is claiming or completing at this moment to a later batch or the next call, instead of
// waiting on them.
const deleteManySQL = `WITH h AS (
	DELETE FROM {s}.jobs WHERE id = ANY (ARRAY(
		SELECT id FROM {s}.jobs WHERE status <> 'running' AND ` + notPendingTask + ` AND ` + notOpenAttempt + `
			AND ` + listFilter + `
		ORDER BY id LIMIT $9 FOR UPDATE SKIP LOCKED))
		AND status <> 'running' AND ` + notPendingTask + ` AND ` + notOpenAttempt + ` AND ` + listFilter + `
	RETURNING 1
), a AS (
	DELETE FROM {s}.jobs_archive WHERE id = ANY (ARRAY(
		SELECT id FROM {s}.jobs_archive
		WHERE ` + listFilter + ` AND ($1::text IS NULL OR $1::text NOT IN ('queued', 'running'))
		ORDER BY id LIMIT greatest($9 - (SELECT count(*) FROM h), 0)))
	RETURNING 1
)
SELECT (SELECT count(*) FROM h), (SELECT count(*) FROM a)`

// Delete deletes the job with the given id from the jobs table or the archive and
// returns it as it was. A queued job is deleted (it will not run; its unique key is
// free again); a running one is not: Delete returns it with [ErrJobRunning], as it does
// a job cancelled while it ran until its handler has returned (or its lease has passed);
// nor is the queued job of a workflow task, which returns [ErrTaskPending]. It returns
// [ErrJobNotFound] when there is no such job.
func (c *Client) Delete(ctx context.Context, id int64) (*JobRow, error) {
	// A job moved to the archive while this statement waited on its row is in neither
	// table for this statement's snapshot: look again.
	for range 3 {
		row, err := scanJob(c.pool.QueryRow(ctx, c.db.Render(deleteSQL), id))
		if err == nil {
			return row, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, c.wrapErr("delete", err)
		}
		cur, err := c.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if cur.Status == StatusRunning {
			return cur, fmt.Errorf("%w: job %d: cancel it first, then delete it", ErrJobRunning, id)
		}
		if cur.Status == StatusCancelled {
			var open bool
			if err := c.pool.QueryRow(ctx, c.db.Render(openAttemptSQL), id).Scan(&open); err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return nil, c.wrapErr("delete", err)
			}
			if open {
				return cur, fmt.Errorf("%w: job %d was cancelled while it ran and its handler has not returned: delete it once it has", ErrJobRunning, id)
			}
		}
		if _, task := cur.Metadata[settle.MetaWorkflow]; task && cur.Status == StatusQueued {
			return cur, fmt.Errorf("%w: job %d: cancel it (or its workflow) first, then delete it", ErrTaskPending, id)
		}
	}
	return nil, fmt.Errorf("skiplock: delete: job %d keeps moving; try again", id)
}

// DeleteMany deletes the jobs that match p's filters from the jobs table and the archive,
// and returns how many it deleted. Running jobs (and jobs cancelled while they ran whose
// handlers have not returned, as [Client.Delete]), and the queued jobs of workflow tasks
// ([ErrTaskPending]), are never deleted: they are left as they are, not counted, and not
// waited for (cancel them first; delete them once finished).
// A job being claimed or completed at that very moment may be left too. At least one
// filter must be set, so that an empty ListParams cannot delete every job; to delete all
// finished jobs, call it once per final status. p.Limit, when positive, caps the count;
// otherwise every match is deleted. p.Cursor is refused and p.Descending ignored.
//
// It deletes in batches of 1000 jobs per table, each a statement and transaction of its
// own: if ctx ends or a statement fails, the batches already done stay deleted, and the
// count of those comes back with the error.
func (c *Client) DeleteMany(ctx context.Context, p ListParams) (int64, error) {
	if p.Cursor != "" {
		return 0, invalidParams("DeleteMany takes no Cursor")
	}
	if p.Status == "" && p.Queue == "" && p.Kind == "" && len(p.Metadata) == 0 && p.CreatedSince.IsZero() &&
		p.CreatedUntil.IsZero() && p.FinishedSince.IsZero() && p.FinishedUntil.IsZero() {
		return 0, invalidParams("DeleteMany needs at least one filter (Status, Queue, Kind, Metadata or a time bound)")
	}
	lim := p.Limit
	args, err := listArgs(p)
	if err != nil {
		return 0, err
	}
	var total int64
	for lim <= 0 || total < int64(lim) {
		n := int64(deleteBatch)
		if lim > 0 {
			n = min(n, int64(lim)-total)
		}
		var hot, arch int64
		if err := c.pool.QueryRow(ctx, c.db.Render(deleteManySQL), append(args, n)...).Scan(&hot, &arch); err != nil {
			return total, c.wrapErr("delete many", err)
		}
		total += hot + arch
		if hot+arch < n {
			break
		}
	}
	return total, nil
}
