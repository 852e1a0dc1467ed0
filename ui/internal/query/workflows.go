package query

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// workflowListSQL reads the newest workflows with their tasks counted by state. The
// workflows are picked first (by the primary key, newest first), so the counting reads
// the tasks of those only.
const workflowListSQL = `SELECT w.id, w.name, w.created_at, count(t.name),
	count(t.name) FILTER (WHERE t.state = 'waiting'),
	count(t.name) FILTER (WHERE t.state = 'released'),
	count(t.name) FILTER (WHERE t.state = 'succeeded'),
	count(t.name) FILTER (WHERE t.state IN ('failed', 'dead')),
	count(t.name) FILTER (WHERE t.state = 'cancelled')
FROM (SELECT id, name, created_at FROM {s}.workflows ORDER BY id DESC LIMIT $1) w
LEFT JOIN {s}.workflow_tasks t ON t.workflow_id = w.id
GROUP BY w.id, w.name, w.created_at
ORDER BY w.id DESC`

// WorkflowRow is one line of the workflows page.
type WorkflowRow struct {
	ID                                                     int64
	Name                                                   string
	CreatedAt                                              time.Time
	Tasks, Waiting, Released, Succeeded, Failed, Cancelled int64
}

// Workflows reads the workflows pages.
type Workflows struct {
	pool              *pgxpool.Pool
	list, head, tasks string
}

func newWorkflows(pool *pgxpool.Pool, x func(string) string) *Workflows {
	return &Workflows{pool: pool, list: x(workflowListSQL), head: x(workflowHeadSQL), tasks: x(workflowTasksSQL)}
}

// Head returns workflow id with its tasks counted by state; ok is false when there is no
// such workflow, or it has no tasks.
func (w *Workflows) Head(ctx context.Context, id int64) (h WorkflowHead, ok bool, err error) {
	h.ID = id
	err = w.pool.QueryRow(ctx, w.head, id).Scan(&h.Name, &h.OnFailure, &h.CreatedAt, &h.Tasks,
		&h.Waiting, &h.Released, &h.Succeeded, &h.Failed, &h.Dead, &h.Cancelled)
	if errors.Is(err, pgx.ErrNoRows) {
		return h, false, nil
	}
	if err != nil {
		return h, false, err
	}
	return h, h.Tasks > 0, nil
}

// Tasks returns the first limit tasks of workflow id in name order, each with its first
// maxDeps dependencies in name order and how many it has. It reads those tasks, and the
// workflow's edges once: linear in the workflow's edges, bounded in what it returns.
func (w *Workflows) Tasks(ctx context.Context, id int64, limit, maxDeps int) ([]WorkflowTask, error) {
	rows, err := w.pool.Query(ctx, w.tasks, id, limit, maxDeps)
	if err != nil {
		return nil, err
	}
	var list []WorkflowTask
	var t WorkflowTask
	_, err = pgx.ForEachRow(rows, []any{&t.Name, &t.JobID, &t.State, &t.DependsOn, &t.Deps}, func() error {
		list = append(list, t)
		t = WorkflowTask{}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return list, nil
}

// List returns the newest limit workflows with their task counts.
func (w *Workflows) List(ctx context.Context, limit int) ([]WorkflowRow, error) {
	rows, err := w.pool.Query(ctx, w.list, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var list []WorkflowRow
	for rows.Next() {
		var x WorkflowRow
		if err := rows.Scan(&x.ID, &x.Name, &x.CreatedAt, &x.Tasks, &x.Waiting, &x.Released, &x.Succeeded, &x.Failed, &x.Cancelled); err != nil {
			return nil, err
		}
		list = append(list, x)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return list, nil
}

// workflowHeadSQL reads one workflow and its tasks counted by state: one aggregate over
// the workflow's range of the tasks' primary key, however many tasks it holds. No row:
// no such workflow.
const workflowHeadSQL = `SELECT w.name, w.on_failure, w.created_at, count(t.name),
	count(t.name) FILTER (WHERE t.state = 'waiting'),
	count(t.name) FILTER (WHERE t.state = 'released'),
	count(t.name) FILTER (WHERE t.state = 'succeeded'),
	count(t.name) FILTER (WHERE t.state = 'failed'),
	count(t.name) FILTER (WHERE t.state = 'dead'),
	count(t.name) FILTER (WHERE t.state = 'cancelled')
FROM {s}.workflows w
LEFT JOIN {s}.workflow_tasks t ON t.workflow_id = w.id
WHERE w.id = $1
GROUP BY w.id`

// workflowTasksSQL reads the first $2 tasks of workflow $1 in name order (the range of
// the tasks' primary key, cut by the LIMIT before anything else is read) with the first
// $3 of each one's dependencies in name order and how many it has. The edges are read
// once, by the workflow's range of their primary key, and joined to the tasks kept: one
// pass, where a lookup per task by child (which no index leads with) would read the
// workflow's edges once per task.
const workflowTasksSQL = `WITH t AS (
	SELECT name, job_id, state FROM {s}.workflow_tasks
	WHERE workflow_id = $1
	ORDER BY name
	LIMIT $2
), d AS (
	SELECT e.child, count(*) AS n, (array_agg(e.parent ORDER BY e.parent))[1:$3] AS parents
	FROM {s}.workflow_edges e JOIN t ON t.name = e.child
	WHERE e.workflow_id = $1
	GROUP BY e.child
)
SELECT t.name, coalesce(t.job_id, 0), t.state, coalesce(d.parents, '{}'), coalesce(d.n, 0)
FROM t LEFT JOIN d ON d.child = t.name
ORDER BY t.name`

// WorkflowHead is one workflow with its tasks counted by state.
type WorkflowHead struct {
	ID                                                    int64
	Name                                                  string
	OnFailure                                             string // "cancel" or "run", as the workflows table says
	CreatedAt                                             time.Time
	Tasks                                                 int64
	Waiting, Released, Succeeded, Failed, Dead, Cancelled int64
}

// WorkflowTask is one task of a workflow page.
type WorkflowTask struct {
	Name      string
	JobID     int64    // 0 until released
	State     string   // as the workflow_tasks table says
	DependsOn []string // its first dependencies in name order, at most the limit Tasks was given
	Deps      int64    // how many dependencies it has
}
