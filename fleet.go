// This file holds what a worker does differently when it is one of many processes on
// the same queues: it learns how many processes serve them (the workers table, renewed
// with the election statement, see internal/ownership, leader.go), and bounds the statements it keeps in
// flight on the queues' rows by that count, so that the fleet as a whole keeps about
// WorkerConfig.FleetStatements of them in flight whatever its size. (Measured on two
// cores: 16 processes with one statement each in flight drained at 0.9–1.2 of one
// process; with two each, at 0.35–0.4.)
//
// Why: a claim walks the head of its queue's claim index, and an entry of a job claimed
// moments ago leaves it only once no statement's snapshot can still see the queued row.
// With a few statements in flight that is at once; with dozens (16 processes, each with
// two claim loops and two batching loops, on a server whose cores they share) the oldest
// snapshot is that of the slowest statement, every claim walks the entries of the jobs
// the others just claimed, and gets slower still: the drain settles at a third of one
// process's rate (bench/README, "Many worker processes"). A lone process keeps its full
// pipeline: the bound applies only from a second process on.

package skiplock

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/ownership"
)

// WorkerInfo is one worker of the fleet as the workers table knows it (see
// [Client.Workers]).
type WorkerInfo struct {
	ID     string   // WorkerConfig.ID
	Queues []string // the queues it serves, sorted
	// StartedAt is its first registration; ExpiresAt is when it stops counting unless it
	// registers again (every 1.7–3 s while it runs). A worker that gave up on its
	// handlers at a hard stop ([Worker.StopAndCancel]) sets both to that moment.
	StartedAt, ExpiresAt time.Time
	// Alive: ExpiresAt is still ahead, by the database's clock (which a step of the
	// server's clock moves: the workers themselves judge each other by their own clocks,
	// see docs/ownership.md). A worker that stopped deletes its row; one that died stays
	// listed, not alive, until about a minute after the other workers judged it dead.
	Alive bool
	// Leader: it holds the fleet's maintenance (the sweep, the archive purge, the vacuum
	// check) now.
	Leader bool
}

// workersSQL lists the workers table with who leads the maintenance.
const workersSQL = `SELECT w.id, w.queues, w.started_at, w.expires_at, w.expires_at > now(),
	coalesce(l.leader_id = w.id AND l.expires_at > now(), false)
FROM {s}.workers w LEFT JOIN {s}.leader l ON l.name = $1
ORDER BY w.id`

// Workers lists the workers registered in the schema: each running worker keeps a row,
// renewed every few seconds (with its election statement, or, with a negative
// SweepInterval, a registration of its own), and deletes it when it stops. It tells how
// many processes serve which queues, and which of them leads the maintenance.
func (c *Client) Workers(ctx context.Context) ([]WorkerInfo, error) {
	rows, err := c.pool.Query(ctx, c.db.Render(workersSQL), ownership.MaintenanceRole)
	if err != nil {
		return nil, c.wrapErr("workers", err)
	}
	var w WorkerInfo
	out := []WorkerInfo{}
	_, err = pgx.ForEachRow(rows, []any{&w.ID, &w.Queues, &w.StartedAt, &w.ExpiresAt, &w.Alive, &w.Leader}, func() error {
		out = append(out, w)
		w.Queues = nil
		return nil
	})
	if err != nil {
		return nil, c.wrapErr("workers", err)
	}
	return out, nil
}
