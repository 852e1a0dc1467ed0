// This file holds the hand-off of a queue's dispatched jobs to its runners (Handoff):
// a queue of jobs that wakes a sleeping runner only when no runner already woken is on
// its way to take them.

package claim

import (
	"sync"
	"sync/atomic"
)

// Handoff passes a queue's dispatched jobs to its runners (internal/execute), first in,
// first out. A channel would wake one sleeping runner per job, a goroutine switch and
// often a thread's wake-up each; Handoff wakes a sleeping runner only when jobs wait
// and no runner is already woken and on its way to them (pending). A runner that takes
// a job and leaves others waiting wakes the next one before it runs its handler, so
// that a handler that blocks never holds the jobs behind it: each waiting job always
// has a runner awake for it, or none is free (every runner is running a handler), as
// with a channel. Runners that finish quickly take the next job without sleeping, and
// a drain of short jobs wakes a few runners instead of one per job.
//
// The runners are started by the Handoff itself (SetSpawn), when a job waits and no
// runner is asleep or on its way to it, up to the queue's slots: a queue has as many
// runners as it ever ran jobs at once, not one per slot from the start. A worker serving
// 10,000 idle queues of 10 slots had 120,027 goroutines and 464 MB of memory with every
// runner started up front (bench -scale queues). A runner, once started, stays until
// Close.
//
// The runner woken is the one that went to sleep last (last in, first out): in a run of
// short jobs the same few runners take them all, their stacks grown and in the caches,
// while the others sleep on. Woken in turn, as a sync.Cond would, every runner took jobs
// between two garbage collections, and each collection shrank the stack of each one
// asleep, which its next handler grew again (bench drain: about 0.4 µs of stack copying
// per job, in the JSON decoding of the args).
type Handoff struct {
	mu       sync.Mutex
	sleepers []*Sleeper // runners asleep in Next, the latest last
	jobs     []Dispatched
	head     int          // jobs[head:] wait
	pending  int          // runners woken or started that have not yet looked at the jobs
	closed   bool         // Close was called: no more jobs come
	started  atomic.Int64 // runners started by spawn; changed under mu, read without it by Runners
	limit    int          // the most runners spawn may start
	spawn    func()       // starts one runner, which calls Arrived and then Next; nil: none
}

// SetSpawn makes the Handoff start a runner with spawn (under its lock: spawn must only
// start a goroutine) whenever a job waits, no runner is asleep or on its way, and fewer
// than limit were started. Called again, it raises or lowers the limit; runners already
// started stay.
func (h *Handoff) SetSpawn(limit int, spawn func()) {
	h.mu.Lock()
	h.limit, h.spawn = limit, spawn
	h.wakeOne()
	h.mu.Unlock()
}

// Sleeper is where one runner sleeps in Next: each runner makes one (NewSleeper) and
// gives it to every Next.
type Sleeper struct{ wake chan struct{} }

// NewSleeper returns a runner's Sleeper.
func NewSleeper() *Sleeper { return &Sleeper{wake: make(chan struct{}, 1)} }

// Arrived is the first call of a runner started by spawn, before its first Next: it is no
// longer on its way.
func (h *Handoff) Arrived() {
	h.mu.Lock()
	h.pending = max(h.pending-1, 0)
	h.mu.Unlock()
}

// Runners returns how many runners the Handoff has started: once started, they stay, so
// after MaxWorkers was lowered they may outnumber it.
func (h *Handoff) Runners() int64 { return h.started.Load() }

// NewHandoff returns an empty Handoff.
func NewHandoff() *Handoff { return &Handoff{} }

// Put adds d for the runners, and wakes one if none is on its way. It never blocks
// for long: the queue has no bound (the queue's slots bound the jobs dispatched).
func (h *Handoff) Put(d Dispatched) {
	h.mu.Lock()
	h.jobs = append(h.jobs, d)
	h.wakeOne()
	h.mu.Unlock()
}

// wakeOne wakes a sleeping runner, or starts one if none sleeps and the limit allows, if
// jobs wait and no runner woken or started before is still on its way to them; h.mu is
// held.
func (h *Handoff) wakeOne() {
	if h.head == len(h.jobs) || h.pending > 0 {
		return
	}
	switch {
	case len(h.sleepers) > 0:
		h.pending++
		last := len(h.sleepers) - 1
		s := h.sleepers[last]
		h.sleepers[last] = nil
		h.sleepers = h.sleepers[:last]
		s.wake <- struct{}{} // never blocks: a sleeper is listed once, and woken once per listing
	case h.spawn != nil && h.started.Load() < int64(h.limit) && !h.closed:
		h.pending++
		h.started.Add(1)
		h.spawn()
	}
}

// Next returns the next job, sleeping in s until there is one; false once Close was
// called and no job is left. Before it returns a job it wakes another runner for the
// jobs still waiting (wakeOne): its caller may block in that job's handler. s is the
// calling runner's own: no two calls share one at once.
func (h *Handoff) Next(s *Sleeper) (Dispatched, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.head == len(h.jobs) {
		if h.closed {
			return Dispatched{}, false
		}
		h.sleepers = append(h.sleepers, s)
		h.mu.Unlock()
		<-s.wake
		h.mu.Lock()
		// Woken by Put or another runner (counted in pending), or by Close (not
		// counted): pending may only be too low, which wakes one runner too many.
		h.pending = max(h.pending-1, 0)
	}
	d := h.jobs[h.head]
	h.jobs[h.head] = Dispatched{} // the runner holds it now, not the queue
	h.head++
	if h.head == len(h.jobs) {
		h.jobs, h.head = h.jobs[:0], 0
	}
	h.wakeOne()
	return d, true
}

// Close tells the runners that no more jobs come: each returns from Next once the
// jobs left are taken.
func (h *Handoff) Close() {
	h.mu.Lock()
	h.closed = true
	for i, s := range h.sleepers {
		s.wake <- struct{}{}
		h.sleepers[i] = nil
	}
	h.sleepers = h.sleepers[:0]
	h.mu.Unlock()
}
