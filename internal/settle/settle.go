// Package settle holds the workflow settler: the collaborator the completer and the failure
// recorder call, inside the transaction that records a batch of outcomes, when the batch
// holds workflow tasks. Its one statement settles the finished tasks, releases the
// dependents whose last dependency this was (inserting their jobs), and cancels the
// dependents of failed tasks. See docs/workflows.md.
package settle

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/internal/waiting"
)

// Metadata keys that mark a job as a workflow task; a batch's callback also gets the
// outcome counts of the batch (see [BatchCountsOf]).
const (
	MetaWorkflow = "skiplock_workflow"
	MetaTask     = "skiplock_task"
	MetaBatch    = "skiplock_batch"    // "callback" on a batch's callback task
	MetaSequence = "skiplock_sequence" // a sequence task's policy: "hold" or "move_on"
)

// IsTask reports whether row is a workflow task. It is a hint only: a plain job that
// carries the key costs its batch a transaction, and the settle statement finds no task.
func IsTask(row *jobtype.JobRow) bool {
	_, ok := row.Metadata[MetaWorkflow]
	return ok
}

// settleSQL settles the tasks whose jobs are in $1 (ids of one outcome batch), in the
// transaction that wrote the batch, after its statement.
//
//   - st/fin: a task still released whose job left running — gone from jobs (archived or
//     deleted by its success) or in a final status — takes that outcome as its state. A
//     stale attempt finds its row running (or queued for a retry) and settles nothing, and
//     a task settles once: only released rows match.
//   - ok: outcomes that satisfy a dependency (a success; anything in an on_failure = 'run'
//     workflow), and a failed attempt of a "move on" sequence task whose job is queued
//     for its retry (the retry-bound attempts of a batch: snoozes are not passed in). Its
//     task stays released and settles again at its final outcome; its child is no longer
//     waiting then, so dec leaves it alone. down: every waiting descendant of a task that did not succeed in an
//     on_failure = 'cancel' workflow (recursive over workflow_edges); cx cancels them.
//   - dec: each child's waiting drops by its parents settled here, grouped: one row update
//     per child whatever the batch's size. Two batches that settle two parents of one child
//     serialize on the child's row, and READ COMMITTED recomputes from the newer version,
//     so exactly one takes it to 0 and releases it. A child in down is left to cx (one
//     statement must not update a row twice).
//   - ins: released children become jobs; a batch's callback gets the counts. It returns
//     them for mapJobsSQL, which writes their ids into their tasks and wakes their queues.
const settleSQL = `WITH RECURSIVE st AS (
	SELECT t.workflow_id, t.name, coalesce(j.status, 'succeeded') AS status,
		t.metadata ->> '` + MetaSequence + `' AS seq
	FROM {s}.workflow_tasks t LEFT JOIN {s}.jobs j ON j.id = t.job_id
	WHERE t.job_id = ANY ($1::bigint[]) AND t.state = 'released'
),
fin AS (
	UPDATE {s}.workflow_tasks t SET state = st.status
	FROM st, {s}.workflows w
	WHERE t.workflow_id = st.workflow_id AND t.name = st.name AND t.state = 'released'
		AND st.status IN ('succeeded', 'failed', 'dead', 'cancelled') AND w.id = t.workflow_id
	RETURNING t.workflow_id, t.name, t.state, w.on_failure
),
ok AS (
	SELECT workflow_id, name, state FROM fin WHERE state = 'succeeded' OR on_failure = 'run'
	UNION ALL
	SELECT workflow_id, name, 'failed' FROM st WHERE status = 'queued' AND seq = 'move_on'
),
down (workflow_id, name) AS (
	SELECT e.workflow_id, e.child FROM {s}.workflow_edges e
	JOIN fin f ON e.workflow_id = f.workflow_id AND e.parent = f.name
	WHERE f.state <> 'succeeded' AND f.on_failure = 'cancel'
	UNION
	SELECT e.workflow_id, e.child FROM {s}.workflow_edges e
	JOIN down d ON e.workflow_id = d.workflow_id AND e.parent = d.name
),
cx AS (
	UPDATE {s}.workflow_tasks t SET state = 'cancelled'
	FROM (SELECT DISTINCT workflow_id, name FROM down) d
	WHERE t.workflow_id = d.workflow_id AND t.name = d.name AND t.state = 'waiting'
	RETURNING 1
),
dec AS (
	UPDATE {s}.workflow_tasks t SET waiting = t.waiting - c.n,
		state = CASE WHEN t.waiting - c.n <= 0 THEN 'released' ELSE 'waiting' END,
		n_succeeded = t.n_succeeded + c.ns, n_failed = t.n_failed + c.nf,
		n_dead = t.n_dead + c.nd, n_cancelled = t.n_cancelled + c.nc
	FROM (SELECT e.workflow_id, e.child, count(*) AS n,
			count(*) FILTER (WHERE o.state = 'succeeded') AS ns,
			count(*) FILTER (WHERE o.state = 'failed') AS nf,
			count(*) FILTER (WHERE o.state = 'dead') AS nd,
			count(*) FILTER (WHERE o.state = 'cancelled') AS nc
		FROM {s}.workflow_edges e JOIN ok o ON e.workflow_id = o.workflow_id AND e.parent = o.name
		GROUP BY e.workflow_id, e.child) c
	WHERE t.workflow_id = c.workflow_id AND t.name = c.child AND t.state = 'waiting'
		AND NOT EXISTS (SELECT 1 FROM down d WHERE d.workflow_id = t.workflow_id AND d.name = t.name)
	RETURNING t.*
),
ins AS (
	INSERT INTO {s}.jobs (queue, kind, payload, priority, run_at, max_attempts, timeout_ms, metadata, partition_key)
	SELECT queue, kind, payload, priority, coalesce(run_at, now()), max_attempts, timeout_ms,
		CASE WHEN metadata ? '` + MetaBatch + `' THEN metadata || jsonb_build_object(
			'skiplock_succeeded', n_succeeded::text, 'skiplock_failed', n_failed::text,
			'skiplock_dead', n_dead::text, 'skiplock_cancelled', n_cancelled::text)
		ELSE metadata END,
		partition_key
	FROM dec WHERE state = 'released'
	RETURNING ` + InsertedTaskColumns + `
)
SELECT * FROM ins`

// UnsettleSQL returns the body of a CTE that takes back what the settle of the tasks in
// the CTE reopened (columns workflow_id, name, state: the tasks put back to released
// by Client.Requeue or RetryWorkflow, with the outcome they had settled with) gave their
// children. In an on_failure = 'run' workflow that outcome satisfied each child's
// dependency (settleSQL's ok and dec): a child still waiting waits for the task again,
// and its outcome counts (a batch's callback reads them) lose the old outcome, which the
// task's next settle replaces. Without it the task settled twice, and the child (a
// batch's callback) was released before its other dependencies had ended, counting the
// task twice. In an on_failure = 'cancel' workflow a failed task satisfied nothing, and
// its waiting descendants were cancelled: there is nothing to take back.
func UnsettleSQL(reopened string) string {
	return `UPDATE {s}.workflow_tasks t SET waiting = t.waiting + c.n,
		n_failed = t.n_failed - c.nf, n_dead = t.n_dead - c.nd, n_cancelled = t.n_cancelled - c.nc
	FROM (SELECT e.workflow_id, e.child, count(*) AS n,
			count(*) FILTER (WHERE o.state = 'failed') AS nf,
			count(*) FILTER (WHERE o.state = 'dead') AS nd,
			count(*) FILTER (WHERE o.state = 'cancelled') AS nc
		FROM ` + reopened + ` o
		JOIN {s}.workflows w ON w.id = o.workflow_id AND w.on_failure = 'run'
		JOIN {s}.workflow_edges e ON e.workflow_id = o.workflow_id AND e.parent = o.name
		WHERE o.state IN ('failed', 'dead', 'cancelled')
		GROUP BY e.workflow_id, e.child) c
	WHERE t.workflow_id = c.workflow_id AND t.name = c.child AND t.state = 'waiting'
	RETURNING 1`
}

// InsertedTaskColumns are what a statement that inserts the jobs of released tasks
// returns of each: the job's id, its task, its queue (for mapJobsSQL).
const InsertedTaskColumns = `id, (metadata ->> '` + MetaWorkflow + `')::bigint AS workflow_id,
	metadata ->> '` + MetaTask + `' AS name, queue`

// mapJobsSQL writes the ids of the jobs just inserted for released tasks ($1) into their
// task rows ($2 workflow, $3 name), and wakes the queues $5 (on channel $4) at commit. A
// statement of its own, after the one that inserted the jobs: that one may not update the
// rows it updated already, and the ids are known only once the jobs are inserted.
const mapJobsSQL = `WITH m AS (
	UPDATE {s}.workflow_tasks t SET job_id = x.id
	FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS x(id, workflow_id, name)
	WHERE t.workflow_id = x.workflow_id AND t.name = x.name
	RETURNING 1
)
SELECT (SELECT count(*) FROM m), count(n.*) FROM unnest($5::text[]) AS q CROSS JOIN LATERAL pg_notify($4, q) AS n`

// Inserted are the jobs a statement inserted for released tasks.
type Inserted struct {
	IDs, Workflows []int64
	Names, Queues  []string
}

// Scan reads rows of insertedTaskColumns.
func (j *Inserted) Scan(rows pgx.Rows) error {
	var id, wf int64
	var name, queue string
	seen := map[string]bool{}
	_, err := pgx.ForEachRow(rows, []any{&id, &wf, &name, &queue}, func() error {
		j.IDs, j.Workflows, j.Names = append(j.IDs, id), append(j.Workflows, wf), append(j.Names, name)
		if !seen[queue] {
			seen[queue] = true
			j.Queues = append(j.Queues, queue)
		}
		return nil
	})
	return err
}

// JobMapper runs mapJobsSQL, rendered once for a schema, with the channel that wakes
// the queues of the jobs it maps.
type JobMapper struct{ sql, channel string }

// NewJobMapper renders mapJobsSQL for schema.
func NewJobMapper(schema string) JobMapper {
	return JobMapper{sql: pgutil.Render(schema, mapJobsSQL), channel: notify.JobsChannel(schema)}
}

// Run runs mapJobsSQL for j through db, waking the jobs' queues when wake; nothing when
// j is empty.
func (m JobMapper) Run(ctx context.Context, db jobtype.DBTX, j *Inserted, wake bool) error {
	if len(j.IDs) == 0 {
		return nil
	}
	queues := j.Queues
	if !wake {
		queues = nil
	}
	_, err := db.Exec(ctx, m.sql, j.IDs, j.Workflows, j.Names, m.channel, queues)
	return err
}

// lockSQL takes, before settleSQL runs as a statement of its own, the locks of the
// workflows of the tasks whose jobs are in $1 (their snapshot is then taken after them):
//
//   - their sequence rows, FOR UPDATE in key order: settleSQL's snapshot sees every job
//     an enqueue that held the row has chained behind them (an enqueue, in turn, reads
//     its tail's state only once it holds the row; internal/enqueue, sequence.go). Tasks
//     of plain workflows have no sequence row.
//   - their workflow rows, FOR SHARE in id order: settles of one workflow do not wait
//     for each other, but CancelWorkflow and RetryWorkflow (the root's workflowadmin.go)
//     hold the row FOR UPDATE while they read and change its tasks, so a settle either
//     commits before they take their snapshots or waits for them and reads what they
//     changed; without it, one committing in between released a task the cancel had
//     read as waiting, or satisfied a dependency the retry had read as unsettled.
//
// A settle holds its jobs' rows (the outcome it writes) before these; CancelWorkflow and
// RetryWorkflow take the workflow row first and then only jobs a settle does not hold
// (queued, or final with a final task), and Client.Cancel takes the workflow row before
// the job's (the root's admin.go), so the orders cannot form a cycle.
const lockSQL = `WITH w AS (
	SELECT DISTINCT workflow_id AS id FROM {s}.workflow_tasks WHERE job_id = ANY ($1::bigint[])
)
SELECT (SELECT count(*) FROM (SELECT 1 FROM {s}.sequences WHERE workflow_id = ANY (ARRAY(SELECT id FROM w))
		ORDER BY key FOR UPDATE) s),
	(SELECT count(*) FROM (SELECT 1 FROM {s}.workflows WHERE id = ANY (ARRAY(SELECT id FROM w))
		ORDER BY id FOR SHARE) f)`

// LockWorkflowOfJobSQL takes the row of the workflow of the task whose job is $1 FOR
// SHARE (nothing for a job that is no task), as lockSQL does: a caller that writes the
// job's outcome itself and then settles it (Client.Cancel) runs it first, so that it
// takes the workflow's row before the job's, as CancelWorkflow does.
const LockWorkflowOfJobSQL = `SELECT 1 FROM {s}.workflows
WHERE id = (SELECT workflow_id FROM {s}.workflow_tasks WHERE job_id = $1) FOR SHARE`

// Settler runs settleSQL for outcome batches that hold workflow tasks. A nil
// settler settles nothing (batches run as they would without workflows).
type Settler struct {
	sql     string // settleSQL, rendered
	lockSQL string // lockSQL, rendered
	wake    waiting.Waking
	Mapper  JobMapper
}

// New renders the settle statements for schema; a Client builds one
// (Client.flows), which its workers, sweepers and operator calls share.
func New(schema string) *Settler {
	return &Settler{sql: pgutil.Render(schema, settleSQL), lockSQL: pgutil.Render(schema, lockSQL),
		wake: waiting.NewWaking(schema), Mapper: NewJobMapper(schema)}
}

// Run runs write on pool. When tasks (job ids of workflow tasks in the batch write
// records) is empty, write runs alone, exactly as without workflows; otherwise write
// and the settle statement share one transaction, so a dependency is released exactly
// when the outcome that satisfies it commits, and not at all if it does not.
func (s *Settler) Run(ctx context.Context, pool *pgxpool.Pool, tasks []int64, write func(db jobtype.DBTX) error) error {
	if s == nil || len(tasks) == 0 {
		return write(pool)
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := write(tx); err != nil {
			return err
		}
		return s.Settle(ctx, tx, tasks)
	})
}

// Settle runs the settle statement in tx for the jobs ids, whose outcomes tx has
// written; ids that are not workflow tasks, or not finished, settle nothing.
//
// It wakes the jobs' waiters again once it holds the workflows' rows, in the round trip
// of lockSQL: Client.WaitWorkflow registers for a task's job, then waits for the
// workflow's row (internal/waiting has the protocol of a plain wait). A wait that took
// the row before this lock registered before this wake-up's snapshot, so it is told at
// the commit; one that comes after waits for the commit and reads the settled tasks. The
// wake-up the batch sent with its own statement came before the lock: a wait registered
// between the two was missed by it, read the task as running, and slept until its poll.
func (s *Settler) Settle(ctx context.Context, tx jobtype.DBTX, ids []int64) error {
	arr := pgutil.Int8ArrayText(ids) // the ids' parameter of the three statements
	if _, err := s.wake.Exec(ctx, tx, s.lockSQL, []any{arr}, arr); err != nil {
		return err
	}
	rows, err := tx.Query(ctx, s.sql, arr)
	if err != nil {
		return err
	}
	var ins Inserted
	if err := ins.Scan(rows); err != nil {
		return err
	}
	return s.Mapper.Run(ctx, tx, &ins, true)
}
