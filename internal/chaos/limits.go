// This file holds the changes of the limited queue's limits during a run, and the check
// that the limit in force at each moment held: after a limit is set or lowered, no job of
// the queue starts until fewer than the new limit are running.

package chaos

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/chaos/audit"
)

// limitSchedule is what the run sets on the limited queue, in order, between faults: each
// change of claim path and each direction (the slot path for a Concurrency alone, the
// lock path with a Rate). Every limit is at most audit.LimitedConcurrency, the limit the
// workers declare, which the last entry (nil: ResetQueueLimits) goes back to.
var limitSchedule = []*skiplock.QueueLimits{
	{Concurrency: 3},               // slot path, lowered from 6
	{Concurrency: 4, Rate: 1000},   // slot path to lock path, raised
	{Concurrency: 2},               // lock path to slot path, lowered
	{Concurrency: 5},               // slot path, raised
	{Concurrency: 3, Rate: 100000}, // slot path to lock path, lowered
	nil,                            // back to the declared limit (6, slot path), raised
}

// limitGrace is how long after a lowering returned the run still allows starts up to the
// previous limit: the workers hear of a change through a notification, and a claim made
// just before may start its jobs just after.
const limitGrace = 300 * time.Millisecond

// LimitChange is one change of the limited queue's limits during the run.
type LimitChange struct {
	At          time.Duration // since the run's start, when the call was made
	Took        time.Duration // until it returned
	Concurrency int           // the new global limit
	Limits      string        // as set, or "reset"
}

// LimitPeriod is a span of the run under one limit: from the start of the run or the
// moment a change took hold (a raise when it was made, a lowering limitGrace after it
// returned) to the next. MostAtStart is the most executions of the limited queue running
// just after one of them started in it, which must not exceed Limit.
type LimitPeriod struct {
	From        time.Duration // since the run's start
	Limit       int
	Starts      int
	MostAtStart int
}

// limitTimes is when limit changes are made, as planned offsets into the fault window
// (see schedule.go): between two faults (mid-interval), spread over all but the last
// fault (the black hole, which lasts long after its start).
func (r *runner) limitTimes(faults int) []time.Duration {
	if r.opts.Failover != NoFailover || faults < 2 {
		return nil
	}
	k := len(limitSchedule)
	out := make([]time.Duration, k)
	for j := range k {
		i := j * (faults - 1) / k
		out[j] = r.opts.Warmup + time.Duration(i)*r.opts.FaultInterval + r.opts.FaultInterval/2
	}
	return out
}

// changeLimits makes the changes of limitSchedule at the given planned offsets, on the
// run's schedule.
func (r *runner) changeLimits(ctx context.Context, sched *schedule, offsets []time.Duration) error {
	for j, d := range offsets {
		if err := sched.wait(ctx, d); err != nil {
			return err
		}
		l := limitSchedule[j]
		c := LimitChange{At: time.Since(r.rec.t0), Concurrency: audit.LimitedConcurrency, Limits: "reset"}
		if l != nil {
			c.Concurrency, c.Limits = l.Concurrency, fmt.Sprintf("%+v", *l)
		}
		began := time.Now()
		err := retryDB(ctx, func(ctx context.Context) error {
			if l == nil {
				return r.client.ResetQueueLimits(ctx, audit.LimitedQueue)
			}
			return r.client.SetQueueLimits(ctx, audit.LimitedQueue, *l)
		})
		if err != nil {
			return fmt.Errorf("chaos: changing the limited queue's limits: %w", err)
		}
		c.Took = time.Since(began)
		r.mu.Lock()
		r.limitChanges = append(r.limitChanges, c)
		r.mu.Unlock()
		r.rec.logf("limited queue: limits %s (concurrency %d)", c.Limits, c.Concurrency)
	}
	return nil
}

// limitPeriods turns the changes made into the spans of the limit in force.
func limitPeriods(changes []LimitChange) []LimitPeriod {
	periods := []LimitPeriod{{From: 0, Limit: audit.LimitedConcurrency}}
	for _, c := range changes {
		cur := periods[len(periods)-1]
		from := c.At
		if c.Concurrency < cur.Limit {
			from = c.At + c.Took + limitGrace
		}
		if from <= cur.From {
			// A raise before the lowering before it took hold: that lowering never did.
			periods[len(periods)-1].Limit = max(cur.Limit, c.Concurrency)
			continue
		}
		periods = append(periods, LimitPeriod{From: from, Limit: c.Concurrency})
	}
	return periods
}

// checkLimitPeriods fills each period's starts and MostAtStart from the executions of the
// limited queue (see concurrencyEvents), t0 being the run's start, and returns how many
// starts left more executions running than the limit in force.
func checkLimitPeriods(periods []LimitPeriod, evs []concurrencyEvent, t0 time.Time, example func(kind, format string, args ...any)) int64 {
	var over int64
	n := 0
	for _, ev := range evs {
		n += ev.d
		if ev.d < 0 {
			continue
		}
		at := ev.at.Sub(t0)
		i, found := slices.BinarySearchFunc(periods, at, func(p LimitPeriod, at time.Duration) int {
			switch {
			case p.From < at:
				return -1
			case p.From > at:
				return 1
			}
			return 0
		})
		if !found {
			i--
		}
		p := &periods[max(i, 0)]
		p.Starts++
		p.MostAtStart = max(p.MostAtStart, n)
		if n > p.Limit {
			over++
			example("limited start above the limit in force", "at %s: %d running after it, limit %d since %s",
				fmtDur(at), n, p.Limit, fmtDur(p.From))
		}
	}
	return over
}
