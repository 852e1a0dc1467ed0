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
		return tx.QueryRow(ctx, pgutil.Render(c.schema, settle.CancelWorkflowSQL), id).Scan(&n)
	})
	if err != nil {
		return 0, c.wrapErr("cancel workflow", err)
	}
	return n, nil
}

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
		if err := tx.QueryRow(ctx, pgutil.Render(c.schema, settle.RetryWorkflowSQL), id).Scan(&n, &queues,
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

// refuseRunning runs settle.RetryLockSQL in tx for workflow id and returns an error matching
// [ErrJobRunning] for the first job it would put back whose handler may still run.
func (c *Client) refuseRunning(ctx context.Context, tx pgx.Tx, id int64) error {
	rows, err := tx.Query(ctx, pgutil.Render(c.schema, settle.RetryLockSQL), id)
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
