package query

// This file holds the statements of the bulk actions of the jobs and dead pages: the
// count a confirmation shows, the batches the action then takes, and the batch cancel
// and delete of queued jobs.

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
)

// bulkPickSQL takes the next batch of jobs matching the filter ({where},
// rendered like exactWindowSQL's, with queue and kind as $3 and $4), in id order from the
// cursor $1: jobs a batch left alone (a requeue skipped for its unique key) are not
// picked again.
const bulkPickSQL = `SELECT id FROM {s}.jobs WHERE {where} AND id > $1 ORDER BY id LIMIT $2`

// bulkCountSQL counts the jobs a bulk action would take, through the partial index of
// their status.
const bulkCountSQL = `SELECT count(*) FROM {s}.jobs WHERE {where}`

// Bulk runs the bulk actions' statements, rendered for every filter shape.
type Bulk struct {
	pool        *pgxpool.Pool
	pick, count map[key]string
	stmts       batchStmts
}

func newBulk(pool *pgxpool.Pool, x func(string) string) *Bulk {
	b := &Bulk{pool: pool, pick: map[key]string{}, count: map[key]string{}, stmts: batchStmts{
		cancelQueued: x(cancelQueuedSQL), queuedTasks: x(queuedTasksSQL), deleteQueued: x(deleteQueuedSQL), still: x(stillSQL), runNow: x(runNowSQL)}}
	for _, k := range keys() {
		b.pick[k] = strings.ReplaceAll(x(bulkPickSQL), "{where}", k.where(2))
		b.count[k] = strings.ReplaceAll(x(bulkCountSQL), "{where}", k.where(0))
	}
	return b
}

// bulkKey is the key of the dead and failed jobs (of f.Status, when set) matching f.
func bulkKey(f Filter) key {
	if f.Status != "" {
		return keyOf(string(f.Status), f)
	}
	return keyOf("stuck", f)
}

// Count counts the jobs of f.Status (dead and failed when unset) matching f's queue and
// kind.
func (b *Bulk) Count(ctx context.Context, f Filter) (int64, error) {
	var n int64
	err := b.pool.QueryRow(ctx, b.count[bulkKey(f)], append([]any{pgx.QueryExecModeExec}, filterArgs(f)...)...).Scan(&n)
	return n, err
}

// Pick returns the ids of the next at most n such jobs above the id after, in id order.
func (b *Bulk) Pick(ctx context.Context, f Filter, after, n int64) ([]int64, error) {
	rows, err := b.pool.Query(ctx, b.pick[bulkKey(f)], append([]any{pgx.QueryExecModeExec, after, n}, filterArgs(f)...)...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// cancelQueuedSQL cancels the queued jobs of $1 that are not workflow tasks, as
// skiplock's Client.Cancel does a queued job (status, finished_at, no lock or lease):
// a batch in one short statement. A workflow task's cancel must settle its workflow, so
// those are left to Client.Cancel (queuedTasksSQL finds them). A DependsOn parent's
// dependents are settled by its trigger (migration 13), as for any cancel.
const cancelQueuedSQL = `UPDATE {s}.jobs SET status = 'cancelled', finished_at = now(), locked_at = NULL, lease_until = NULL
WHERE id = ANY($1) AND status = 'queued' AND NOT metadata ? 'skiplock_workflow'
RETURNING id`

// queuedTasksSQL finds the queued workflow tasks of $1.
const queuedTasksSQL = `SELECT id FROM {s}.jobs WHERE id = ANY($1) AND status = 'queued' AND metadata ? 'skiplock_workflow'`

// deleteQueuedSQL deletes the queued jobs of $1, except workflow tasks (their tasks would
// never settle), as the job page's delete does.
const deleteQueuedSQL = `DELETE FROM {s}.jobs WHERE id = ANY($1) AND status = 'queued' AND NOT metadata ? 'skiplock_workflow'
RETURNING id`

// runNowSQL makes the queued jobs of $1 due now (a job due earlier keeps its place),
// except those that wait for the jobs they depend on (EnqueueOptions.DependsOn: a
// job_waits row; their last parent's success sets their run_at), as Client.Update's run
// now does, for a batch in one statement. It sends no wake-up: workers take the jobs at
// their next poll.
const runNowSQL = `UPDATE {s}.jobs j SET run_at = least(run_at, now())
WHERE id = ANY($1) AND status = 'queued' AND NOT EXISTS (SELECT 1 FROM {s}.job_waits w WHERE w.job_id = j.id)`

// stillSQL finds the jobs of $1 still in status $2.
const stillSQL = `SELECT id FROM {s}.jobs WHERE id = ANY($1) AND status = $2`

// batchStmts are the statements of the bulk actions the client has no batch call for.
type batchStmts struct {
	cancelQueued, queuedTasks, deleteQueued, still, runNow string
}

// CancelQueued cancels the queued jobs of ids that are not workflow tasks, and returns
// how many it cancelled and the queued workflow tasks it left (for Client.Cancel).
func (b *Bulk) CancelQueued(ctx context.Context, ids []int64) (n int64, tasks []int64, err error) {
	tag, err := b.pool.Exec(ctx, b.stmts.cancelQueued, ids)
	if err != nil {
		return 0, nil, err
	}
	tasks, err = b.ids(ctx, b.stmts.queuedTasks, ids)
	return tag.RowsAffected(), tasks, err
}

// DeleteQueued deletes the queued jobs of ids that are not workflow tasks, and says how
// many.
func (b *Bulk) DeleteQueued(ctx context.Context, ids []int64) (int64, error) {
	tag, err := b.pool.Exec(ctx, b.stmts.deleteQueued, ids)
	return tag.RowsAffected(), err
}

// RunNow makes the queued jobs of ids due now (runNowSQL), and says how many.
func (b *Bulk) RunNow(ctx context.Context, ids []int64) (int64, error) {
	tag, err := b.pool.Exec(ctx, b.stmts.runNow, ids)
	return tag.RowsAffected(), err
}

// Still returns the jobs of ids still in status.
func (b *Bulk) Still(ctx context.Context, ids []int64, status skiplock.JobStatus) ([]int64, error) {
	return b.ids(ctx, b.stmts.still, ids, string(status))
}

func (b *Bulk) ids(ctx context.Context, sql string, args ...any) ([]int64, error) {
	rows, err := b.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}
