package query

import (
	"context"
	"time"

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

// Workflows reads the workflows page.
type Workflows struct {
	pool *pgxpool.Pool
	list string
}

func newWorkflows(pool *pgxpool.Pool, x func(string) string) *Workflows {
	return &Workflows{pool: pool, list: x(workflowListSQL)}
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
