// This file holds the reclaim by liveness (docs/ownership.md): a running job belongs to
// the worker named in its locked_by for as long as that worker's row in the workers
// table (its worker lease, renewed with its election or registration statement every
// 1.7–3 s, valid workerTTL) has not expired. Every worker, after each renewal of its
// own row, takes back the running jobs whose owner's lease has ended, so a dead
// worker's jobs run elsewhere within about workerTTL whoever leads, and a live worker's
// jobs are never taken however long they run. The leader keeps the purge and the
// vacuum, and the sweeper's lease-based reclaim stays for rows whose owner has no row
// in the workers table (a worker of an earlier release, during a rolling deploy).

package ownership

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/internal/settle"
)

// reclaimDeadSQL takes back running jobs whose owner's row in the workers table has
// expired: the worker died, was cut off from the database for longer than its lease
// (it cancelled its own handlers a third of the lease before), or gave up waiting for
// handlers at a hard stop. The lost attempt counts, as in the sweeper's reclaim, so a
// job that kills every worker that runs it ends dead.
//
//   - The join finds the owner by locked_by; a job whose owner has no row (a worker of a
//     release before the workers table) is left to the sweeper's lease-based reclaim
//     (reclaimSQL), which judges it by its own lease as before.
//   - FOR UPDATE OF j SKIP LOCKED: every worker runs this at once; a row being written
//     (a success, a heartbeat, CompleteTx in a handler's open transaction, another
//     reclaim) is left to the next run rather than waited for.
//   - The uncorrelated EXISTS is a one-time filter: while no worker's row has expired
//     (most of the time: a dead worker's row is pruned a minute after it expired), the
//     statement reads the small workers table and not a single job.
//   - status = 'running' ... ORDER BY locked_at walks jobs_running_idx (running rows
//     only); the UPDATE reaches the rows by primary key (id = ANY (ARRAY(...))), as
//     reclaimSQL does.
//   - run_at is kept (the job goes back to its place in line), and the fence token too
//     (the next claim takes a new one, so the dead owner's late writes match nothing).
//   - The queues of the jobs taken back are notified in the same statement (delivered
//     at its commit): idle workers claim them at once, not at their next poll.
//   - A workflow task's last attempt is left to reclaimDeadTasksSQL: sent dead, its
//     dependents must be settled in the same transaction (internal/settle), and this
//     statement runs alone, autocommitted, after every renewal of every worker, where
//     a transaction around it would add two statements to every idle worker's cost
//     (TestWorker_IdleCostDoesNotGrowWithQueueCount). Its last column says whether
//     there is such a job, so the transaction runs only then.
//   - The running worker's own jobs ($3) are never its to take back: it has just renewed
//     its row, and its own jobs are watched by its heartbeats and watchdog. Its row can
//     read expired here only when something else ended it between the renewal and this
//     statement (an operator, a test); taking back its own live attempts then would
//     cancel handlers that are running fine.
var reclaimDeadSQL = `WITH dead AS (
	SELECT j.id FROM {s}.jobs j JOIN {s}.workers w ON w.id = j.locked_by
	WHERE j.status = 'running' AND w.expires_at < now()
		AND EXISTS (SELECT FROM {s}.workers x WHERE x.expires_at < now())
		AND NOT (j.attempts >= j.max_attempts AND j.metadata ? '` + settle.MetaWorkflow + `')
		AND j.locked_by <> $3
	ORDER BY j.locked_at
	LIMIT $1
	FOR UPDATE OF j SKIP LOCKED
)` + takeBackCTE + `,
	EXISTS (SELECT FROM {s}.jobs j JOIN {s}.workers w ON w.id = j.locked_by
		WHERE j.status = 'running' AND w.expires_at < now()
			AND EXISTS (SELECT FROM {s}.workers x WHERE x.expires_at < now())
			AND j.attempts >= j.max_attempts AND j.metadata ? '` + settle.MetaWorkflow + `'
			AND j.locked_by <> $3)`

// reclaimDeadTasksSQL takes back the running jobs that reclaimDeadSQL leaves: the last
// attempts of workflow tasks whose owner's lease ended. They go dead, and their
// dependents are settled in the same transaction (reclaimer.takeBack), so it runs in one
// of its own, and only when reclaimDeadSQL reported such a job (its last column): an
// idle worker's reclaim stays one autocommit statement. Before, these jobs waited for the
// sweeper's lease-based reclaim (60–90 s at defaults), and for ever with no sweeper.
var reclaimDeadTasksSQL = `WITH dead AS (
	SELECT j.id FROM {s}.jobs j JOIN {s}.workers w ON w.id = j.locked_by
	WHERE j.status = 'running' AND w.expires_at < now()
		AND j.attempts >= j.max_attempts AND j.metadata ? '` + settle.MetaWorkflow + `'
		AND j.locked_by <> $3
	ORDER BY j.locked_at
	LIMIT $1
	FOR UPDATE OF j SKIP LOCKED
)` + takeBackCTE

// reclaimPredecessorSQL takes back, when a worker starts and before its first claim, the
// running jobs locked by its own id ($3): a process restarted with a fixed
// WorkerConfig.ID renews the row its dead predecessor left, which would otherwise keep
// the predecessor's jobs alive forever. None of them can be this process's own: it has
// claimed nothing yet. (Two live processes must never share an id.)
var reclaimPredecessorSQL = `WITH dead AS (
	SELECT id FROM {s}.jobs WHERE status = 'running' AND locked_by = $3
	ORDER BY locked_at
	LIMIT $1
	FOR UPDATE SKIP LOCKED
)` + takeBackCTE

// takeBackCTE puts back the jobs of the CTE dead, counting the lost attempt, and
// returns how many it took back, how many queues it notified, and the workflow tasks
// that went dead (their dependents are settled in the same transaction, as the
// sweeper's reclaim does).
var takeBackCTE = `, back AS (
	UPDATE {s}.jobs SET ` + TakeBackSet(`'worker ' || coalesce(locked_by, '?') || ' is gone: its worker lease ended'`) + `
	WHERE id = ANY (ARRAY(SELECT id FROM dead))
	RETURNING id, queue, status, metadata ? '` + settle.MetaWorkflow + `' AS task
)
SELECT (SELECT count(*) FROM back),
	(SELECT count(pg_notify($2, q)) FROM (SELECT DISTINCT queue AS q FROM back) d),
	coalesce((SELECT array_agg(id) FROM back WHERE status = 'dead' AND task), '{}')`

// TakeBackSet is the SET list of every statement that takes a running job back from a
// worker that is gone (reclaimDeadSQL, reclaimPredecessorSQL, the sweeper's reclaimSQL):
// the lost attempt counts, so a job with none left goes dead (keeping locked_by, the
// worker it was lost on), any other goes back to the queue; reason, an SQL expression, is
// its last error and joins its error history. The fence token and run_at are kept (the
// next claim takes a new token; the job goes back to its place in line).
func TakeBackSet(reason string) string {
	return `status = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'queued' END,
		finished_at = CASE WHEN attempts >= max_attempts THEN now() END,
		last_error = ` + reason + `,
		errors = ` + AppendHistory + reason + `)),
		locked_at = NULL, lease_until = NULL,
		locked_by = CASE WHEN attempts >= max_attempts THEN locked_by END`
}

// reclaimDeadBatch bounds the jobs one run of reclaimDeadSQL takes back; the next
// renewal, a couple of seconds later, takes the rest.
const reclaimDeadBatch = 1000

// reclaimDeadTimeout bounds one run of reclaimDeadSQL.
const reclaimDeadTimeout = leaderStatementTimeout

// expireWorkerSQL ends this worker's lease at once, keeping its row: a worker that gave
// up waiting for handlers at a hard stop (Worker.StopAndCancel) leaves its jobs to be
// taken back by the next worker's reclaim. (Deleting the row would leave them to their
// own leases, a minute at defaults.) The row is pruned with the other expired ones.
const expireWorkerSQL = `UPDATE {s}.workers SET expires_at = now() WHERE id = $1`

// errWorkerLeaseExpiring is the cancel cause of a handler whose worker could not renew
// its row in the workers table in time (the database is unreachable or the connection
// hangs): once the row expires, another worker takes its jobs.
var errWorkerLeaseExpiring = errors.New("skiplock: this worker's lease could not be renewed (database unreachable); another worker may run its jobs")

// workerCancelAfter is how long after the start of its last committed renewal a worker
// cancels its handlers: a third of its lease before the row can expire, by the margins
// measured under CPU starvation (docs/ownership.md §7: a renewal came at most 4.2 s
// after the previous one with a follower stopped for 3 s).
const workerCancelAfter = workerTTL - workerTTL/CancelMargin

// reclaimer runs reclaimDeadSQL for one worker, after each renewal of its row.
type reclaimer struct {
	db          pgutil.DB
	sql         string // reclaimDeadSQL, rendered
	tasks       string // reclaimDeadTasksSQL, rendered
	predecessor string // reclaimPredecessorSQL, rendered
	flows       *settle.Settler
}

func newReclaimer(db pgutil.DB, flows *settle.Settler) *reclaimer {
	return &reclaimer{db: db, sql: db.Render(reclaimDeadSQL), tasks: db.Render(reclaimDeadTasksSQL), predecessor: db.Render(reclaimPredecessorSQL),
		flows: flows}
}

// takeBack runs one batch of reclaimPredecessorSQL and settles the workflow tasks it
// sent dead, in one transaction: a dead task's dependents are cancelled or released with
// it, never left waiting. (It runs at start only; reclaimDeadSQL leaves such tasks to
// the sweeper.)
func (r *reclaimer) takeBack(ctx context.Context, sql string, args ...any) (n int64, err error) {
	err = pgx.BeginFunc(ctx, r.db.Pool, func(tx pgx.Tx) error {
		var queues int64
		var dead []int64
		if err := tx.QueryRow(ctx, sql, args...).Scan(&n, &queues, &dead); err != nil {
			return err
		}
		if len(dead) == 0 {
			return nil
		}
		return r.flows.Settle(ctx, tx, dead)
	})
	return n, err
}

// Predecessors takes back the running jobs left under this worker's id by an earlier
// process (reclaimPredecessorSQL), at start, until none is left.
func (r *reclaimer) Predecessors(ctx context.Context, workerID string) (int64, error) {
	var total int64
	for {
		n, err := r.takeBack(ctx, r.predecessor, reclaimDeadBatch, r.db.Channel, workerID)
		if err != nil {
			return total, err
		}
		total += n
		if n < reclaimDeadBatch {
			return total, nil
		}
	}
}

// run takes back the running jobs of dead workers once, and returns how many.
func (r *reclaimer) run(ctx context.Context, workerID string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, reclaimDeadTimeout)
	defer cancel()
	var n, queues int64
	var dead []int64 // always empty: reclaimDeadSQL leaves dying workflow tasks to reclaimDeadTasksSQL
	var tasksLeft bool
	err := r.db.Pool.QueryRow(ctx, r.sql, reclaimDeadBatch, r.db.Channel, workerID).Scan(&n, &queues, &dead, &tasksLeft)
	if err != nil || !tasksLeft {
		return n, err
	}
	t, err := r.takeBack(ctx, r.tasks, reclaimDeadBatch, r.db.Channel, workerID)
	return n + t, err
}

// AppendHistory starts the expression that appends an entry to the error history (the
// attempt, when it ended, the worker that ran it, the error), keeping the latest 10
// ("jsonb - 0" drops the oldest); the message expression and "))" complete it. A history that is not a JSON array (written by hand, say) is started
// afresh rather than failing the statement: a broken history must never keep a job from
// being retried or reclaimed.
const AppendHistory = `(CASE WHEN coalesce(jsonb_typeof(errors), '') <> 'array' THEN '[]'::jsonb
		WHEN jsonb_array_length(errors) >= 10 THEN errors - 0
		ELSE errors END)
	|| jsonb_build_array(jsonb_build_object('attempt', attempts, 'at', now(), 'worker', locked_by, 'error', `
