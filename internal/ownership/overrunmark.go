// This file holds the database's mark of an overrunning attempt (migration 010): when a
// handler runs past its timeout without returning, its worker writes the attempt's fence
// token into the job's overrun_fence, once, so that Stats, the dashboard and every
// process see the job (QueueStats.Overrunning). The job is not taken from its worker.

package ownership

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// markOverrunSQL marks the attempt ($1, $2) of worker $3 overrunning; fenced like every
// write of an attempt, so a mark that comes late for an attempt no longer running, or
// for a job taken back, changes nothing.
const markOverrunSQL = `UPDATE {s}.jobs SET overrun_fence = fence
WHERE id = $1 AND fence = $2 AND (status || '') = 'running' AND locked_by = $3`

// overrunMarkTimeout bounds one mark.
const overrunMarkTimeout = 10 * time.Second

// OverrunMarks writes the marks of one worker's overrunning attempts. Each mark is
// written by the goroutine that reports the overrun (internal/execute, execute.go); the executor's Stop
// waits for those in flight, so none outlives the worker.
type OverrunMarks struct {
	pool     *pgxpool.Pool
	sql      string // markOverrunSQL, rendered
	workerID string
	logger   *slog.Logger
	wg       sync.WaitGroup
}

func NewOverrunMarks(pool *pgxpool.Pool, schema, workerID string, logger *slog.Logger) *OverrunMarks {
	return &OverrunMarks{pool: pool, sql: pgutil.Render(schema, markOverrunSQL), workerID: workerID, logger: logger}
}

// Begin counts a mark about to be written; it is called while the handler still runs,
// so before the executor's Stop waits.
func (m *OverrunMarks) Begin() {
	if m != nil {
		m.wg.Add(1)
	}
}

// Write marks attempt k overrunning; begin was called for it.
func (m *OverrunMarks) Write(k jobtype.AttemptKey) {
	if m == nil {
		return
	}
	defer m.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), overrunMarkTimeout)
	defer cancel()
	if _, err := m.pool.Exec(ctx, m.sql, k.ID, k.Fence, m.workerID); err != nil {
		m.logger.Warn("skiplock: could not mark an overrunning job in the database; Stats does not count it", "job", k.ID, "err", err)
	}
}

// Wait returns once every mark begun has been written.
func (m *OverrunMarks) Wait() {
	if m != nil {
		m.wg.Wait()
	}
}
