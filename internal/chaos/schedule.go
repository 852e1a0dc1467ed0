// This file holds the run's schedule: when the work (jobs, workflows, durable jobs, the
// limited queue's limit changes) goes, tied to the faults as they actually happen.
//
// The plan gives fault i the slot [Warmup + i×FaultInterval, Warmup + (i+1)×FaultInterval)
// of the fault window, and spreads the work over the window. A fault can outlast its slot
// (the held pool needs rounds of 2 s transactions, the clock step 5 s, the black hole
// twice the visibility timeout), and the faults after it start late. Were the work spread
// over the planned window, it could all be done before the late faults, which would then
// meet an idle fleet and never see a completion after them. So slot i starts when its
// planned time has come and fault i-1 is over, whichever is later; the work planned in a
// slot goes that much later, at the same offset into the slot; and the last batch of jobs
// waits until the last fault is over. Every fault but the last thus has its next slot's
// work after it, and the last the last batch.

package chaos

import (
	"context"
	"sync"
	"time"
)

// schedule maps the planned times of the run's work (offsets from the start of the fault
// window) to real times, as the faults' slots start. inject starts the slots and says when
// the last fault is over; the producers of work wait on it.
type schedule struct {
	start    time.Time     // the start of the fault window
	warmup   time.Duration // the planned start of slot 0
	interval time.Duration // the planned length of a slot
	faults   int           // the number of slots

	mu      sync.Mutex
	began   []time.Time   // the real start of each slot started so far
	over    bool          // every fault is over
	changed chan struct{} // closed (and replaced) when began or over changes
}

func newSchedule(start time.Time, warmup, interval time.Duration, faults int) *schedule {
	return &schedule{start: start, warmup: warmup, interval: interval, faults: faults, changed: make(chan struct{})}
}

// window is the planned length of the fault window: the warmup and one slot per fault.
func (s *schedule) window() time.Duration {
	return s.warmup + time.Duration(s.faults)*s.interval
}

// planned is the planned start of slot i, from the start of the window.
func (s *schedule) planned(i int) time.Duration {
	return s.warmup + time.Duration(i)*s.interval
}

// slotOf is the slot the planned offset d falls in: -1 for the warmup, the last slot for
// any offset past it.
func (s *schedule) slotOf(d time.Duration) int {
	if d < s.warmup || s.faults == 0 {
		return -1
	}
	return min(int((d-s.warmup)/s.interval), s.faults-1)
}

// begin records that slot i started at t. Slots start in order.
func (s *schedule) begin(i int, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i != len(s.began) {
		panic("chaos: schedule: slots must start in order")
	}
	s.began = append(s.began, t)
	s.notify()
}

// finish records that every fault is over.
func (s *schedule) finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.over = true
	s.notify()
}

// notify wakes the waiters; s.mu is held.
func (s *schedule) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// await waits until ready (called with s.mu held) returns true, or ctx ends.
func (s *schedule) await(ctx context.Context, ready func() bool) error {
	for {
		s.mu.Lock()
		ok, ch := ready(), s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// at returns the real time of the planned offset d: in the warmup, the window's start
// plus d; in slot i, once the slot has started, its start plus d's offset into it.
func (s *schedule) at(ctx context.Context, d time.Duration) (time.Time, error) {
	i := s.slotOf(d)
	if i < 0 {
		return s.start.Add(d), nil
	}
	if err := s.await(ctx, func() bool { return len(s.began) > i }); err != nil {
		return time.Time{}, err
	}
	s.mu.Lock()
	began := s.began[i]
	s.mu.Unlock()
	return began.Add(d - s.planned(i)), nil
}

// wait sleeps until the real time of the planned offset d (see at).
func (s *schedule) wait(ctx context.Context, d time.Duration) error {
	t, err := s.at(ctx, d)
	if err != nil {
		return err
	}
	return sleepUntil(ctx, t)
}

// afterFaults waits until every fault is over.
func (s *schedule) afterFaults(ctx context.Context) error {
	return s.await(ctx, func() bool { return s.over })
}

// recoveryFrom is the time from which a fault's recovery is counted (Fault.FirstCompletion
// is the first completion after it): the fault's end; after a failover, the moment every
// process of the old primary was gone (every completion stamped after it is the new
// primary's: now() is the transaction's start); for a black hole and a starvation, their
// start (the other workers keep completing jobs through a black hole, and every worker
// through a starvation).
func (r *runner) recoveryFrom(f *Fault) time.Time {
	switch {
	case f.Kind == FaultFailover && r.fo != nil:
		return r.fo.killed
	case f.Kind == FaultBlackhole || f.Kind == FaultStarve:
		return f.At
	}
	return f.End
}

// completedAfterSQL reports whether a job completed (moved to the archive) after $1.
const completedAfterSQL = `SELECT EXISTS (SELECT 1 FROM skiplock.jobs_archive WHERE finished_at > $1)`

// awaitRecovery waits until a job has completed after fault f (fault i of n; see
// recoveryFrom), so that the next fault does not hit before the run recovered from this
// one, for at most FaultInterval: a fault the run does not recover from within that is
// logged, and the next goes anyway (the analysis then measures what it finds).
func (r *runner) awaitRecovery(ctx context.Context, f *Fault, i, n int) error {
	after := r.recoveryFrom(f)
	deadline := time.Now().Add(r.opts.FaultInterval)
	for {
		var done bool
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		err := r.pool.QueryRow(qctx, completedAfterSQL, after).Scan(&done)
		cancel()
		switch {
		case err == nil && done:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case time.Now().After(deadline):
			r.rec.logf("fault %d/%d: no job completed within %s after it; the next fault goes anyway", i, n, fmtDur(r.opts.FaultInterval))
			return nil
		}
		if err := sleepUntil(ctx, time.Now().Add(50*time.Millisecond)); err != nil {
			return err
		}
	}
}
