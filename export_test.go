package skiplock

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/enqueue"
)

// SetPeriodicBeforeCommit makes w's periodic runner call f between enqueueing due
// occurrences and committing, so tests can fault the transaction there.
func SetPeriodicBeforeCommit(w *Worker, f func()) { w.periodic.BeforeCommit = f }

// Internals the external tests need to reach.

// CoalesceMaxInFlight is how many coalesced statements may run at once.
const CoalesceMaxInFlight = enqueue.CoalesceMaxInFlight

// CoalescerIdle reports whether c's coalescer has no batch collecting, waiting or being
// written (and so no goroutine running).
func CoalescerIdle(c *Client) bool { return c.enq.Idle() }

// WorkerFleet returns how many processes w last learned serve its queues (itself
// included) and the bound on its statements in flight that follows (0: none).
func WorkerFleet(w *Worker) (peers, limit int) { return w.gate.Fleet() }

// SetSweeperVacuumAfter sets when s may vacuum the jobs table again.
func SetSweeperVacuumAfter(s *Sweeper, at time.Time) { s.s.VacuumAfter.Store(at.UnixNano()) }

// SetWaitPoll sets how often c's Wait and WaitWorkflow read again without a
// notification: tests set it long, so that only a notification can wake them in time.
func SetWaitPoll(c *Client, d time.Duration) { c.waitPoll = d }

// SettleTx runs c's workflow settle for the jobs ids in tx, as an outcome batch does
// after writing their outcomes.
func SettleTx(ctx context.Context, c *Client, tx pgx.Tx, ids []int64) error {
	return c.flows.Settle(ctx, tx, ids)
}

// SetWaitRefresh sets how often c's Wait and WaitWorkflow refresh their job_waiters rows
// while they wait.
func SetWaitRefresh(c *Client, d time.Duration) { c.waitRefresh = d }
