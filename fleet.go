// This file holds what a worker does differently when it is one of many processes on
// the same queues: it learns how many processes serve them (the workers table, renewed
// with the election statement, see leader.go), and bounds the statements it keeps in
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
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// workerTTL is how long a worker counts as serving its queues after its last
// registration (with its election statement, every 1.7–3 s): a process that died stops
// counting within this.
const workerTTL = 2 * leaderTTL

// statementsPerProcess is the bound of one of n processes serving the same queues that
// keep budget statements in flight together; 0: no bound (a process alone, or a
// negative budget).
func statementsPerProcess(n, budget int) int {
	if n <= 1 || budget < 0 {
		return 0
	}
	return max(1, budget/n)
}

// stmtGate bounds the statements a worker has in flight on its queues' rows. Its bound
// follows the fleet's size (setFleet); while unbounded, taking and giving back a turn
// costs a lock and nothing more.
type stmtGate struct {
	mu      sync.Mutex
	budget  int // WorkerConfig.FleetStatements
	limit   int // 0: no bound
	used    int
	peers   int           // processes serving the same queues, this one included
	freed   chan struct{} // closed (and replaced) when a turn is given back or the bound rises
	waiting int
}

// newStmtGate returns a gate for a fleet that keeps budget statements in flight (negative:
// no bound), unbounded until it learns the fleet's size.
func newStmtGate(budget int) *stmtGate {
	return &stmtGate{budget: budget, peers: 1, freed: make(chan struct{})}
}

// setFleet sets the bound for a fleet of n processes serving this worker's queues.
func (g *stmtGate) setFleet(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.peers = n
	old := g.limit
	g.limit = statementsPerProcess(n, g.budget)
	if g.waiting > 0 && (g.limit == 0 || g.limit > old) {
		close(g.freed)
		g.freed = make(chan struct{})
	}
}

// fleet returns the size of the fleet last learned and the bound it gives.
func (g *stmtGate) fleet() (peers, limit int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.peers, g.limit
}

// acquire takes a turn, waiting while the bound is reached, until ctx ends. A nil gate
// has no bound.
func (g *stmtGate) acquire(ctx context.Context) error {
	if g == nil {
		return nil
	}
	for {
		g.mu.Lock()
		if g.limit == 0 || g.used < g.limit {
			g.used++
			g.mu.Unlock()
			return nil
		}
		g.waiting++
		ch := g.freed
		g.mu.Unlock()
		select {
		case <-ch:
			g.mu.Lock()
			g.waiting--
			g.mu.Unlock()
		case <-ctx.Done():
			g.mu.Lock()
			g.waiting--
			g.mu.Unlock()
			return ctx.Err()
		}
	}
}

// release gives back a turn.
func (g *stmtGate) release() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.used--
	if g.waiting > 0 {
		close(g.freed)
		g.freed = make(chan struct{})
	}
}

// do runs fn within a turn; it waits for the turn at most until ctx ends.
func (g *stmtGate) do(ctx context.Context, fn func() error) error {
	if err := g.acquire(ctx); err != nil {
		return err
	}
	defer g.release()
	return fn()
}

// pruneWorkersAfter is how long after its expiry a worker's row is deleted (by any
// other worker's election statement).
const pruneWorkersAfter = time.Minute

// WorkerInfo is one worker of the fleet as the workers table knows it (see
// [Client.Workers]).
type WorkerInfo struct {
	ID     string   // WorkerConfig.ID
	Queues []string // the queues it serves, sorted
	// StartedAt is its first registration; ExpiresAt is when it stops counting unless it
	// registers again (every 1.7–3 s while it runs).
	StartedAt, ExpiresAt time.Time
	// Alive: ExpiresAt is still ahead, by the database's clock. A worker that stopped
	// deletes its row; one that died stays listed, not alive, for about a minute.
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
	rows, err := c.pool.Query(ctx, c.admin.workers, maintenanceRole)
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
