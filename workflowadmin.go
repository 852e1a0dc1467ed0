// This file holds the calls that inspect and steer workflows after their enqueue:
// GetWorkflow, CancelWorkflow, RetryWorkflow, and DependencyOutputs, which a task calls
// to read what its dependencies recorded.

package skiplock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/internal/settle"
)

// getWorkflowSQL reads a workflow's tasks with their dependencies.
const getWorkflowSQL = `SELECT w.name, w.on_failure, w.created_at, t.name, coalesce(t.job_id, 0), t.state,
	coalesce((SELECT array_agg(e.parent ORDER BY e.parent) FROM {s}.workflow_edges e
		WHERE e.workflow_id = t.workflow_id AND e.child = t.name), '{}')
FROM {s}.workflows w JOIN {s}.workflow_tasks t ON t.workflow_id = w.id
WHERE w.id = $1 ORDER BY t.name`

// GetWorkflow returns the workflow id with the state of each task, or an error that
// matches [ErrWorkflowNotFound].
func (c *Client) GetWorkflow(ctx context.Context, id int64) (*WorkflowInfo, error) {
	info, err := c.readWorkflow(ctx, c.pool, id)
	if err != nil && !errors.Is(err, ErrWorkflowNotFound) {
		return nil, c.wrapErr("get workflow", err)
	}
	return info, err
}

// readWorkflow reads workflow id through db (getWorkflowSQL).
func (c *Client) readWorkflow(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, id int64) (*WorkflowInfo, error) {
	rows, err := db.Query(ctx, pgutil.Render(c.schema, getWorkflowSQL), id)
	if err != nil {
		return nil, err
	}
	info := &WorkflowInfo{ID: id}
	var policy string
	var t WorkflowTaskInfo
	_, err = pgx.ForEachRow(rows, []any{&info.Name, &policy, &info.CreatedAt, &t.Name, &t.JobID, &t.State, &t.DependsOn}, func() error {
		info.Tasks = append(info.Tasks, t)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(info.Tasks) == 0 {
		return nil, fmt.Errorf("%w: id %d", ErrWorkflowNotFound, id)
	}
	if policy == "run" {
		info.OnFailure = RunDependents
	}
	for i := range info.Tasks {
		if len(info.Tasks[i].DependsOn) == 0 {
			info.Tasks[i].DependsOn = nil
		}
	}
	return info, nil
}

// WaitWorkflow waits until every task of the workflow id is final — its job succeeded,
// failed, dead or cancelled, or the task settled without a job — and returns the
// workflow (as [Client.GetWorkflow] does). It waits like [Client.Wait]: woken by the
// notification of each task's outcome, from any process, reading again every second
// without one. It returns ctx.Err() when ctx ends first (within about half a second,
// as Wait does, even when the database has stopped answering), and an error matching
// [ErrWorkflowNotFound] when there is no such workflow (or it is purged meanwhile).
func (c *Client) WaitWorkflow(ctx context.Context, id int64) (*WorkflowInfo, error) {
	var out *WorkflowInfo
	err := c.waiter().Wait(ctx, func(ctx context.Context, conn *pgx.Conn) ([]int64, bool, error) {
		// Taken alone, then released: a settle of the workflow's tasks holds its row
		// FOR SHARE until its transaction ends, so this waits for one in flight, and the
		// read after it, with a newer snapshot, sees what it committed.
		if _, err := conn.Exec(ctx, c.db.Render(waitWorkflowLockSQL), id); err != nil {
			return nil, false, err
		}
		info, err := c.readWorkflow(ctx, conn, id)
		if err != nil {
			return nil, false, err
		}
		out = info
		var ids []int64
		done := true
		for _, t := range info.Tasks {
			if t.JobID != 0 {
				ids = append(ids, t.JobID)
			}
			if t.State == "waiting" || t.State == "released" {
				done = false
			}
		}
		return ids, done, nil
	})
	if err != nil {
		if errors.Is(err, ErrWorkflowNotFound) || ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil, err
		}
		return nil, c.wrapErr("wait workflow", err)
	}
	return out, nil
}

// waitWorkflowLockSQL waits for the settles of workflow $1 in flight (see WaitWorkflow).
const waitWorkflowLockSQL = `SELECT 1 FROM {s}.workflows WHERE id = $1 FOR NO KEY UPDATE`

// lockWorkflowSQL locks workflow $1's row for CancelWorkflow and RetryWorkflow, before
// their statements take their snapshots. Every settle of the workflow's tasks takes the
// row FOR SHARE before its own statement (internal/settle, lockSQL), so the two never
// interleave: a settle that committed first is seen whole (the task it released, with
// its job; the dependency it satisfied), and one that comes later waits for this
// transaction and then reads what it changed. Without it, a settle committing while the
// statement ran released a task the cancel had read as waiting (its job was left queued
// and ran), or satisfied a dependency the retry had read as unsettled (the reopened task
// waited for ever). No row: the workflow does not exist, and the call changes nothing.
const lockWorkflowSQL = `SELECT 1 FROM {s}.workflows WHERE id = $1 FOR UPDATE`

// lockWorkflow takes lockWorkflowSQL in tx and reports whether workflow id exists.
func (c *Client) lockWorkflow(ctx context.Context, tx pgx.Tx, id int64) (bool, error) {
	var one int
	err := tx.QueryRow(ctx, pgutil.Render(c.schema, lockWorkflowSQL), id).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// cancelWorkflowSQL cancels what has not started: waiting tasks, and the queued jobs of
// released ones (with their tasks, so that nothing settles them again). A running job
// finishes (or is cancelled by Client.Cancel); its dependents are already cancelled.
// It runs after lockWorkflowSQL: no settle of the workflow commits meanwhile.
const cancelWorkflowSQL = `WITH w AS (
	UPDATE {s}.workflow_tasks SET state = 'cancelled'
	WHERE workflow_id = $1 AND state = 'waiting'
	RETURNING 1
),
j AS (
	UPDATE {s}.jobs SET status = 'cancelled', finished_at = now()
	WHERE id = ANY (ARRAY(SELECT job_id FROM {s}.workflow_tasks WHERE workflow_id = $1 AND state = 'released'))
		AND status = 'queued'
	RETURNING id
),
r AS (
	UPDATE {s}.workflow_tasks SET state = 'cancelled'
	WHERE workflow_id = $1 AND job_id IN (SELECT id FROM j)
	RETURNING 1
)
SELECT (SELECT count(*) FROM w) + (SELECT count(*) FROM r)`

// CancelWorkflow cancels every task of workflow id that has not started: tasks still
// waiting for dependencies, and queued jobs. Running tasks finish (a failed attempt's
// retries with them); their dependents are cancelled with the rest. It returns how many
// tasks it cancelled (0 for a workflow that does not exist). A task whose last
// dependency's outcome is being recorded at that moment is cancelled too: the call waits
// for that transaction (see docs/workflows.md). On a sequence's workflow the key's
// running job goes on, and the next job enqueued for the key waits for it.
func (c *Client) CancelWorkflow(ctx context.Context, id int64) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if ok, err := c.lockWorkflow(ctx, tx, id); !ok {
			return err
		}
		return tx.QueryRow(ctx, pgutil.Render(c.schema, cancelWorkflowSQL), id).Scan(&n)
	})
	if err != nil {
		return 0, c.wrapErr("cancel workflow", err)
	}
	return n, nil
}

// retryLockSQL locks, in id order (the order every batched statement locks jobs in),
// the jobs RetryWorkflow puts back, and says of each whether its handler may still run:
// a job cancelled while running keeps its lease (lease_until) while its worker runs the
// handler (internal/ownership, cancelled.go), and loses it when the handler returns.
// Locked, no lease renewal or end lands between this check and the requeue.
const retryLockSQL = `SELECT t.name, j.id, (j.status = 'cancelled' AND j.lease_until > now()) IS TRUE
FROM {s}.jobs j JOIN {s}.workflow_tasks t ON t.job_id = j.id
WHERE t.workflow_id = $1 AND t.state IN ('failed', 'dead', 'cancelled')
	AND j.status IN ('failed', 'dead', 'cancelled')
ORDER BY j.id
FOR UPDATE OF j`

// retryWorkflowSQL puts a workflow's failed, dead and cancelled tasks back:
//   - req: the jobs of such tasks still in the jobs table go back to queued, due now,
//     their attempts reset, and their tasks to released; in an on_failure = 'run'
//     workflow their children still waiting wait for them again, without their old
//     outcomes in their counts (unsettle: settle.UnsettleSQL; old has those outcomes);
//   - gone: such tasks whose job is not put back — gone from the jobs table (deleted,
//     or purged by DeadRetention or the retention of cancelled jobs) — cannot run again:
//     they stay as they are, and no settle will ever come from them. In an on_failure =
//     'cancel' workflow their descendants (stuck, recursive over workflow_edges) would
//     wait for them for ever, so those are not reopened either; in an 'run' one they
//     count as settled, as below;
//   - cand/back: cancelled tasks whose job never existed (cancelled as dependents, or
//     while waiting), but those in stuck, wait again for their dependencies that will
//     settle again; those with none left are inserted as jobs (ins). A dependency settles
//     again if it is requeued here (rel), reopened here (cand) or still waiting or
//     released; one that stays as it was (succeeded; or ended and its job is gone) is
//     settled already, and is counted into the task's outcome counts, which a batch's
//     callback reads. In an on_failure = 'cancel' workflow only successes satisfy a
//     dependency: every other one is waited for (none is gone: stuck left those out).
//
// It returns the count of tasks put back, the queues to wake, the jobs inserted, and
// the names of the tasks gone and of those left cancelled because of them.
// It runs after lockWorkflowSQL: the states it reads stay as read until it commits.
var retryWorkflowSQL = `WITH RECURSIVE req AS (
	UPDATE {s}.jobs SET status = 'queued', run_at = now(), attempts = 0, finished_at = NULL,
		locked_by = NULL, locked_at = NULL, lease_until = NULL
	WHERE id = ANY (ARRAY(SELECT job_id FROM {s}.workflow_tasks
			WHERE workflow_id = $1 AND state IN ('failed', 'dead', 'cancelled')))
		AND status IN ('failed', 'dead', 'cancelled')
	RETURNING id, queue
),
old AS (
	SELECT workflow_id, name, state FROM {s}.workflow_tasks
	WHERE workflow_id = $1 AND job_id IN (SELECT id FROM req)
),
rel AS (
	UPDATE {s}.workflow_tasks SET state = 'released'
	WHERE workflow_id = $1 AND job_id IN (SELECT id FROM req)
	RETURNING name
),
unsettle AS (
	` + settle.UnsettleSQL("old") + `
),
gone AS (
	SELECT name FROM {s}.workflow_tasks
	WHERE workflow_id = $1 AND state IN ('failed', 'dead', 'cancelled') AND job_id IS NOT NULL
		AND job_id NOT IN (SELECT id FROM req)
),
stuck (name) AS (
	SELECT e.child FROM {s}.workflow_edges e
	JOIN gone g ON g.name = e.parent
	JOIN {s}.workflows w ON w.id = e.workflow_id AND w.on_failure = 'cancel'
	WHERE e.workflow_id = $1
	UNION
	SELECT e.child FROM {s}.workflow_edges e
	JOIN stuck s ON s.name = e.parent
	WHERE e.workflow_id = $1
),
par AS (
	SELECT t.name, w.on_failure, p.state,
		p.name IN (SELECT name FROM rel) OR p.state IN ('waiting', 'released')
			OR (p.state = 'cancelled' AND p.job_id IS NULL AND p.name NOT IN (SELECT name FROM stuck)) AS again
	FROM {s}.workflow_tasks t
	JOIN {s}.workflows w ON w.id = t.workflow_id
	LEFT JOIN {s}.workflow_edges e ON e.workflow_id = t.workflow_id AND e.child = t.name
	LEFT JOIN {s}.workflow_tasks p ON p.workflow_id = e.workflow_id AND p.name = e.parent
	WHERE t.workflow_id = $1 AND t.state = 'cancelled' AND t.job_id IS NULL
		AND t.name NOT IN (SELECT name FROM stuck)
),
cand AS (
	SELECT name,
		count(*) FILTER (WHERE again OR on_failure = 'cancel' AND state <> 'succeeded') AS waiting,
		count(*) FILTER (WHERE NOT again AND state = 'succeeded') AS ns,
		count(*) FILTER (WHERE NOT again AND state = 'failed') AS nf,
		count(*) FILTER (WHERE NOT again AND state = 'dead') AS nd,
		count(*) FILTER (WHERE NOT again AND state = 'cancelled') AS nc
	FROM par GROUP BY name
),
back AS (
	UPDATE {s}.workflow_tasks t SET waiting = c.waiting,
		state = CASE WHEN c.waiting = 0 THEN 'released' ELSE 'waiting' END,
		n_succeeded = c.ns, n_failed = c.nf, n_dead = c.nd, n_cancelled = c.nc
	FROM cand c WHERE t.workflow_id = $1 AND t.name = c.name
	RETURNING t.*
),
ins AS (
	INSERT INTO {s}.jobs (queue, kind, payload, priority, run_at, max_attempts, timeout_ms, metadata, partition_key)
	SELECT queue, kind, payload, priority, now(), max_attempts, timeout_ms,
		CASE WHEN metadata ? '` + settle.MetaBatch + `' THEN metadata || jsonb_build_object(
			'skiplock_succeeded', n_succeeded::text, 'skiplock_failed', n_failed::text,
			'skiplock_dead', n_dead::text, 'skiplock_cancelled', n_cancelled::text)
		ELSE metadata END,
		partition_key
	FROM back WHERE state = 'released'
	RETURNING ` + settle.InsertedTaskColumns + `
)
SELECT (SELECT count(*) FROM rel) + (SELECT count(*) FROM back),
	ARRAY(SELECT queue FROM req),
	coalesce((SELECT array_agg(id) FROM ins), '{}'), coalesce((SELECT array_agg(workflow_id) FROM ins), '{}'),
	coalesce((SELECT array_agg(name) FROM ins), '{}'), coalesce((SELECT array_agg(DISTINCT queue) FROM ins), '{}'),
	ARRAY(SELECT name FROM gone ORDER BY name),
	ARRAY(SELECT t.name FROM {s}.workflow_tasks t
		WHERE t.workflow_id = $1 AND t.state = 'cancelled' AND t.job_id IS NULL
			AND t.name IN (SELECT name FROM stuck) ORDER BY t.name)`

// RetryWorkflow runs workflow id's failed, dead and cancelled tasks again: their jobs go
// back to the queue with their attempts reset, and tasks cancelled before they ran wait
// again for their dependencies. A batch's callback reopened so counts every job of the
// batch: those that stay succeeded, and the retried ones as they end. It returns how
// many tasks it put back (0 for a workflow that does not exist).
//
// A task whose job is gone from the jobs table — deleted ([Client.Delete]), or purged
// by DeadRetention or the retention of cancelled jobs — cannot run again: it stays as it
// is, and so, under [CancelDependents], do the tasks that depend on it, directly or not
// (they would wait for it for ever). RetryWorkflow puts the others back and returns
// their count with an error matching [ErrTaskJobGone] that names the tasks it left; the
// workflow is final once the tasks it put back are ([Client.WaitWorkflow] returns).
//
// A task whose job was cancelled while it ran ([Client.Cancel]) is put back only once
// its handler has returned: until then RetryWorkflow changes nothing and returns an
// error that matches [ErrJobRunning] (call it again once the handler has returned, or
// once its worker is gone and the job's lease has ended). Outcomes recorded while it
// runs wait for it, or are seen by it whole.
func (c *Client) RetryWorkflow(ctx context.Context, id int64) (int, error) {
	var (
		n           int
		gone, stuck []string
	)
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if ok, err := c.lockWorkflow(ctx, tx, id); !ok {
			return err
		}
		if err := c.refuseRunning(ctx, tx, id); err != nil {
			return err
		}
		var queues []string
		var ins settle.Inserted
		if err := tx.QueryRow(ctx, pgutil.Render(c.schema, retryWorkflowSQL), id).Scan(&n, &queues,
			&ins.IDs, &ins.Workflows, &ins.Names, &ins.Queues, &gone, &stuck); err != nil {
			return err
		}
		if err := c.flows.Mapper.Run(ctx, tx, &ins, true); err != nil {
			return err
		}
		if len(queues) == 0 {
			return nil
		}
		return c.notify.Queues(ctx, tx, queues)
	})
	if errors.Is(err, ErrJobRunning) {
		return 0, err
	}
	if err != nil {
		return 0, c.wrapErr("retry workflow", err)
	}
	if len(gone) > 0 {
		also := ""
		if len(stuck) > 0 {
			also = fmt.Sprintf("; tasks %q, which depend on them, stay cancelled", stuck)
		}
		return n, fmt.Errorf("%w: retry workflow %d: tasks %q stay as they are (their jobs were deleted or purged)%s; %d tasks put back",
			ErrTaskJobGone, id, gone, also, n)
	}
	return n, nil
}

// refuseRunning runs retryLockSQL in tx for workflow id and returns an error matching
// [ErrJobRunning] for the first job it would put back whose handler may still run.
func (c *Client) refuseRunning(ctx context.Context, tx pgx.Tx, id int64) error {
	rows, err := tx.Query(ctx, pgutil.Render(c.schema, retryLockSQL), id)
	if err != nil {
		return err
	}
	var (
		name, busyName string
		job, busyJob   int64
		running        bool
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &job, &running}, func() error {
		if running && busyJob == 0 {
			busyName, busyJob = name, job
		}
		return nil
	})
	if err != nil || busyJob == 0 {
		return err
	}
	return fmt.Errorf("%w: retry workflow %d: task %q (job %d) was cancelled while it ran and its handler has not returned yet; "+
		"retry the workflow once it has (at the latest once the job's lease ends)", ErrJobRunning, id, busyName, busyJob)
}

// dependencyOutputsSQL reads the outputs of a task's dependencies, from the hot table or
// the archive, and says of each whether its job row is gone: the task became a job
// (job_id is set, as it is from its release on) and neither table holds it any more. The
// task's own row comes first: a task without dependencies has one row with a NULL name,
// and one whose workflow was purged (its job outlived it: a dead job requeued) none.
const dependencyOutputsSQL = `SELECT p.name, coalesce(j.output, a.output), p.job_id IS NOT NULL AND j.id IS NULL AND a.id IS NULL
FROM {s}.workflow_tasks t
LEFT JOIN {s}.workflow_edges e ON e.workflow_id = t.workflow_id AND e.child = t.name
LEFT JOIN {s}.workflow_tasks p ON p.workflow_id = e.workflow_id AND p.name = e.parent
LEFT JOIN {s}.jobs j ON j.id = p.job_id
LEFT JOIN {s}.jobs_archive a ON a.id = p.job_id
WHERE t.workflow_id = $1 AND t.name = $2
ORDER BY p.name`

// DependencyOutputs returns, for the workflow task whose job is row, the output each of
// its dependencies recorded with [SetOutput], by task name (nil for one that recorded
// none, or that never ran: cancelled, or settled without a job). A job that is not a
// workflow task has no dependencies: the map is empty.
//
// A dependency whose job row is gone (purged from the archive after ArchiveRetention,
// deleted on success under [CompletionDelete], or deleted) has an output nobody can read
// any more: DependencyOutputs then returns an error matching [ErrDependencyOutputGone]
// that names it, with the map of the other dependencies' outputs. Keep finished jobs
// ([WorkerConfig].ArchiveRetention, a completion mode that keeps them) for as long as a
// task may run after its dependencies. A task whose workflow is gone (the sweeper
// deletes a workflow whose tasks all ended past ArchiveRetention, while a dead job is
// kept, and may be requeued) cannot know its dependencies: the error matches both
// ErrDependencyOutputGone and [ErrWorkflowNotFound], with an empty map. A nil row is an
// error (and no map).
func (c *Client) DependencyOutputs(ctx context.Context, row *JobRow) (map[string]json.RawMessage, error) {
	if row == nil {
		return nil, errors.New("skiplock: DependencyOutputs: row is nil: pass the task's job.JobRow")
	}
	out := map[string]json.RawMessage{}
	wf, err := strconv.ParseInt(row.Metadata[settle.MetaWorkflow], 10, 64)
	if err != nil {
		return out, nil
	}
	rows, err := c.pool.Query(ctx, pgutil.Render(c.schema, dependencyOutputsSQL), wf, row.Metadata[settle.MetaTask])
	if err != nil {
		return nil, c.wrapErr("dependency outputs", err)
	}
	var (
		name    *string
		o       []byte
		rowGone *bool
		gone    []string
		task    bool
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &o, &rowGone}, func() error {
		task = true
		switch {
		case name == nil: // a task without dependencies
		case *rowGone:
			gone = append(gone, *name)
		case o != nil:
			out[*name] = json.RawMessage(append([]byte(nil), o...))
		default:
			out[*name] = nil
		}
		return nil
	})
	if err != nil {
		return nil, c.wrapErr("dependency outputs", err)
	}
	if !task {
		return out, fmt.Errorf("%w: task %q: %w: id %d (purged by retention while the task's job was kept: "+
			"its dependencies and their outputs are unknown)", ErrDependencyOutputGone, row.Metadata[settle.MetaTask], ErrWorkflowNotFound, wf)
	}
	if len(gone) > 0 {
		return out, fmt.Errorf("%w: dependencies %q of task %q (workflow %d): keep finished jobs for as long as a task may run after them (ArchiveRetention, the completion mode)",
			ErrDependencyOutputGone, gone, row.Metadata[settle.MetaTask], wf)
	}
	return out, nil
}
