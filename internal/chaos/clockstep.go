// This file holds the server-clock-step fault: the cluster runs under libfaketime
// (pgtest.FakeClock), and the fault steps its wall clock back by ClockStep, holds it
// there for ClockStepFor, and steps it forward to the true time again, as an NTP step or
// a failover to a standby whose clock is off would. The step forward makes every
// timestamp written meanwhile (the workers' rows, the jobs' leases, the leader's term)
// read ClockStep older at once: past the worker lease, the minute after which rows were
// pruned and the jobs' visibility timeout. Workers judge each other by what they saw
// over their own clocks, so no live worker's jobs may be taken (docs/ownership.md §9).
//
// Back first, then forward: a step forward first would leave the jobs enqueued and the
// retries scheduled meanwhile due ClockStep late once the clock came back, and the drain
// would wait for them. Back first, what is written meanwhile is due early, which only
// runs it sooner. The executions' times are the workers' own (package audit), so the
// overlap checks do not depend on the server's clock; the workflow order check compares
// an execution's start with its dependency's finished_at, which the step only makes read
// earlier than it was (it can miss an inversion in the window, never invent one).

package chaos

import (
	"context"
	"fmt"
	"time"
)

// clockStep runs the fault: the server's clock ClockStep back, for ClockStepFor, then
// forward again.
func (r *runner) clockStep(ctx context.Context, f *Fault) error {
	f.At = time.Now().Round(0)
	if err := r.clock.Step(-r.opts.ClockStep); err != nil {
		return err
	}
	waitErr := sleepUntil(ctx, f.At.Add(r.opts.ClockStepFor))
	back := time.Now()
	// Forward again even when ctx ended: the analysis reads the server's clock.
	if err := r.clock.Step(r.opts.ClockStep); err != nil {
		return err
	}
	if waitErr != nil {
		return waitErr
	}
	// Every server process reads the new offset within the clock's cache, which counts
	// whole seconds: a process that read the offset just before the step may keep it for
	// up to twice the cache.
	if err := sleepUntil(ctx, time.Now().Add(2*r.clock.Cache)); err != nil {
		return err
	}
	f.End = time.Now().Round(0)
	// The workers' rows as the server's clock reads them right after the step forward:
	// all expired, yet (what the fault checks) none of their jobs is taken.
	f.Detail = fmt.Sprintf("server clock %s back for %s, then %s forward", fmtDur(r.opts.ClockStep),
		fmtDur(back.Sub(f.At)), fmtDur(r.opts.ClockStep))
	var expired, rows int
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := r.pool.QueryRow(qctx, `SELECT count(*) FILTER (WHERE expires_at < now()), count(*) FROM skiplock.workers`).
		Scan(&expired, &rows); err == nil {
		f.Detail += fmt.Sprintf("; then %d of %d worker rows read expired", expired, rows)
	}
	return nil
}
