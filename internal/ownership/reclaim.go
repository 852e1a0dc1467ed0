// This file holds the reclaim by liveness (docs/ownership.md): a running job belongs to
// the worker named in its locked_by for as long as that worker's row in the workers
// table (its worker lease, renewed with its election or registration statement every
// 1.7–3 s) keeps being renewed. Every worker, after each renewal of its own row, takes
// back the running jobs of the workers it judges dead — whose row it saw unchanged for
// a lease, workerTTL, by its own clock (observer.go) — so a dead worker's jobs run
// elsewhere within about workerTTL whoever leads, and a live worker's jobs are never
// taken however long they run, whatever the server's clock does. The leader keeps the
// purge and the vacuum, and the sweeper's lease-based reclaim stays for jobs whose owner
// has no row in the workers table (a worker of an earlier release, a row pruned).

package ownership

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/internal/settle"
)

// reclaimDeadSQL takes back running jobs whose owner this worker has judged dead
// (observer.go): the worker died, was cut off from the database for longer than its
// lease (it cancelled its own handlers a third of the lease before), or gave up waiting
// for handlers at a hard stop. The lost attempt counts, as in the sweeper's reclaim, so a
// job that kills every worker that runs it ends dead. In the same statement it reads the
// other workers' rows for the next judgement.
//
//   - $4 and $5 are the workers judged dead and, at the same place, the expires_at seen
//     of each. The database's clock plays no part: a row is taken for dead only while its
//     expires_at is still the value seen, unchanged for a worker lease by this process's
//     clock, so a step of the server's clock changes nothing, and a worker that renewed
//     since it was last seen is never taken for dead. The pairs are a hashed subplan
//     ("OR false", as in FenceSQL).
//   - The join finds the owner by locked_by; a job whose owner has no row (a worker of a
//     release before the workers table, a row pruned) is left to the sweeper's
//     lease-based reclaim (reclaimSQL), which judges it by its own lease as before.
//   - FOR UPDATE OF j SKIP LOCKED: every worker runs this at once; a row being written
//     (a success, a heartbeat, CompleteTx in a handler's open transaction, another
//     reclaim) is left to the next run rather than waited for.
//   - The first line of judgedDead is a one-time filter: while this worker judges no one
//     dead and no worker ended its own lease (most of the time), the statement reads the
//     small workers table and not a single job. That read is the observation (its last three columns: the other workers' ids,
//     their expires_at, and whether each carries the mark of a lease its worker ended).
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
//     (TestWorker_IdleCostDoesNotGrowWithQueueCount). Its fourth column says whether
//     there is such a job, so the transaction runs only then.
//   - The running worker's own jobs ($3) are never its to take back: it has just renewed
//     its row, and its own jobs are watched by its heartbeats and watchdog. (It never
//     observes its own row either.)
var reclaimDeadSQL = `WITH dead AS (
	SELECT j.id FROM {s}.jobs j JOIN {s}.workers w ON w.id = j.locked_by
	WHERE j.status = 'running' AND ` + judgedDead + `
		AND NOT (j.attempts >= j.max_attempts AND j.metadata ? '` + settle.MetaWorkflow + `')
	ORDER BY j.locked_at
	LIMIT $1
	FOR UPDATE OF j SKIP LOCKED
)` + takeBackCTE + `,
	EXISTS (SELECT FROM {s}.jobs j JOIN {s}.workers w ON w.id = j.locked_by
		WHERE j.status = 'running' AND ` + judgedDead + `
			AND j.attempts >= j.max_attempts AND j.metadata ? '` + settle.MetaWorkflow + `'),
	o.ids, o.seen, o.ended
FROM (SELECT array_agg(id ORDER BY id) AS ids, array_agg(expires_at ORDER BY id) AS seen,
	array_agg(started_at = expires_at ORDER BY id) AS ended
	FROM {s}.workers WHERE id <> $3) o`

// judgedDead is the condition on a running job j and its owner's row w that picks the
// jobs of the workers judged dead ($4, with the values seen in $5) and of those that
// ended their own lease (started_at = expires_at, expireWorkerSQL: taken at once, by the
// first statement that sees the mark), never the running worker's own ($3). Its first
// line is a one-time filter (it names no column of j or w): while no one is judged dead
// and no row carries the mark, no job is read.
var judgedDead = `(cardinality($4::text[]) > 0 OR EXISTS (SELECT FROM {s}.workers x WHERE x.started_at = x.expires_at))
		AND (((w.id, w.expires_at) IN (SELECT * FROM unnest($4::text[], $5::timestamptz[])) OR false)
			OR w.started_at = w.expires_at)
		AND j.locked_by <> $3`

// reclaimDeadTasksSQL takes back the running jobs that reclaimDeadSQL leaves: the last
// attempts of workflow tasks whose owner was judged dead. They go dead, and their
// dependents are settled in the same transaction (reclaimer.takeBack), so it runs in one
// of its own, and only when reclaimDeadSQL reported such a job (its fourth column): an
// idle worker's reclaim stays one autocommit statement. Before, these jobs waited for the
// sweeper's lease-based reclaim (60–90 s at defaults), and for ever with no sweeper.
var reclaimDeadTasksSQL = `WITH dead AS (
	SELECT j.id FROM {s}.jobs j JOIN {s}.workers w ON w.id = j.locked_by
	WHERE j.status = 'running' AND ` + judgedDead + `
		AND j.attempts >= j.max_attempts AND j.metadata ? '` + settle.MetaWorkflow + `'
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
// own leases, a minute at defaults.) The row is pruned with the other dead ones.
//
// started_at = expires_at is the mark of a lease its worker ended (observer.go): a
// renewal writes a new expires_at too, which an observer reads as a sign of life, and no
// renewal writes an expires_at equal to started_at (it writes now() plus the lease). The
// workers of the previous release read expires_at = now() as before: ended at once.
const expireWorkerSQL = `UPDATE {s}.workers SET expires_at = now(), started_at = now() WHERE id = $1`

// errWorkerLeaseExpiring is the cancel cause of a handler whose worker could not renew
// its row in the workers table in time (the database is unreachable or the connection
// hangs): once the row expires, another worker takes its jobs.
var errWorkerLeaseExpiring = errors.New("skiplock: this worker's lease could not be renewed (database unreachable); another worker may run its jobs")

// workerCancelAfter is how long after the start of its last committed renewal a worker
// cancels its handlers: a third of its lease before the row can expire, by the margins
// measured under CPU starvation (docs/ownership.md §7: a renewal came at most 4.2 s
// after the previous one with a follower stopped for 3 s).
const workerCancelAfter = workerTTL - workerTTL/CancelMargin

// reclaimer runs reclaimDeadSQL for one worker, after each renewal of its row, and keeps
// the worker's judgement of who is dead (obs).
type reclaimer struct {
	db          pgutil.DB
	obs         *observer
	sql         string // reclaimDeadSQL, rendered
	tasks       string // reclaimDeadTasksSQL, rendered
	predecessor string // reclaimPredecessorSQL, rendered
	flows       *settle.Settler
}

func newReclaimer(db pgutil.DB, flows *settle.Settler) *reclaimer {
	return &reclaimer{db: db, obs: newObserver(), sql: db.Render(reclaimDeadSQL), tasks: db.Render(reclaimDeadTasksSQL), predecessor: db.Render(reclaimPredecessorSQL),
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

// run takes back, once, the running jobs of the workers this worker judges dead, reads
// the other workers' rows for its next judgement, and returns how many jobs it took.
func (r *reclaimer) run(ctx context.Context, workerID string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, reclaimDeadTimeout)
	defer cancel()
	ids, seen := r.obs.dead(time.Now(), workerTTL)
	var n, queues int64
	var dead []int64 // always empty: reclaimDeadSQL leaves dying workflow tasks to reclaimDeadTasksSQL
	var tasksLeft bool
	var others []string
	var values []pgtype.Timestamptz
	var ended []bool
	err := r.db.Pool.QueryRow(ctx, r.sql, reclaimDeadBatch, r.db.Channel, workerID, ids, seen).
		Scan(&n, &queues, &dead, &tasksLeft, &others, &values, &ended)
	if err != nil {
		return n, err
	}
	// Seen now, after the statement's snapshot: no earlier than the renewals it read.
	r.obs.observe(time.Now(), others, values, ended)
	if !tasksLeft {
		return n, nil
	}
	t, err := r.takeBack(ctx, r.tasks, reclaimDeadBatch, r.db.Channel, workerID, ids, seen)
	return n + t, err
}

// prunable returns the workers dead to this worker for long enough that their rows may
// go (pruneWorkersAfter after the judgement), with the values seen: the registration
// statement deletes them (registrationCTEs).
func (r *reclaimer) prunable() (ids []string, seen []pgtype.Timestamptz) {
	return r.obs.dead(time.Now(), workerTTL+pruneWorkersAfter)
}

// AppendHistory starts the expression that appends an entry to the error history (the
// attempt, when it started (the row's locked_at before the statement's SET) and ended,
// the worker that ran it, the error), keeping the latest 10
// ("jsonb - 0" drops the oldest); the message expression and "))" complete it. A history that is not a JSON array (written by hand, say) is started
// afresh rather than failing the statement: a broken history must never keep a job from
// being retried or reclaimed. The entry's attempt is the row's attempts before the SET:
// the attempt that ended, which these statements count, so it is the job's attempts
// after them.
const AppendHistory = HistoryEntryHead + `attempts` + HistoryEntryTail

// HistoryEntryHead and HistoryEntryTail are AppendHistory around the entry's attempt, for
// a statement that numbers it otherwise: one that gives the attempt back numbers the
// entry as the job's attempts after it (attempts - 1), as every other entry is numbered.
const (
	HistoryEntryHead = `(CASE WHEN coalesce(jsonb_typeof(errors), '') <> 'array' THEN '[]'::jsonb
		WHEN jsonb_array_length(errors) >= 10 THEN errors - 0
		ELSE errors END)
	|| jsonb_build_array(jsonb_build_object('attempt', `
	HistoryEntryTail = `, 'at', now(), 'started_at', locked_at, 'worker', locked_by, 'error', `
)
