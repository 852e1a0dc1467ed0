package query

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// runningNowSQL lists the running jobs by worker with their progress, for the workers
// page. jobs_running_idx holds exactly them, so the read is as small as the fleet's
// slots; $1 bounds it anyway.
const runningNowSQL = `SELECT id, queue, kind, coalesce(locked_by, ''), locked_at,
	(progress->>'value')::float8, coalesce(progress->>'message', ''), overrun_fence IS NOT DISTINCT FROM fence
FROM {s}.jobs WHERE status = 'running'
ORDER BY locked_by, id
LIMIT $1`

// MaxRunningShown bounds the running jobs the workers page lists.
const MaxRunningShown = 500

// RunningJob is one running job of the workers page.
type RunningJob struct {
	ID              int64
	Queue, Kind     string
	Worker          string
	Since           *time.Time // the last heartbeat
	Progress        *float64
	ProgressMessage string
	// Overrunning: the handler has run past its job timeout without returning (its worker
	// marked the attempt, skiplock.QueueStats.Overrunning).
	Overrunning bool
}

// Running reads the running jobs of the workers page.
type Running struct {
	pool *pgxpool.Pool
	sql  string
}

func newRunning(pool *pgxpool.Pool, x func(string) string) *Running {
	return &Running{pool: pool, sql: x(runningNowSQL)}
}

// List returns the running jobs by worker: at most MaxRunningShown+1, so the page can
// tell there are more.
func (r *Running) List(ctx context.Context) ([]RunningJob, error) {
	rows, err := r.pool.Query(ctx, r.sql, MaxRunningShown+1)
	if err != nil {
		return nil, err
	}
	var out []RunningJob
	var j RunningJob
	_, err = pgx.ForEachRow(rows, []any{&j.ID, &j.Queue, &j.Kind, &j.Worker, &j.Since, &j.Progress, &j.ProgressMessage, &j.Overrunning}, func() error {
		out = append(out, j)
		j = RunningJob{}
		return nil
	})
	return out, err
}
