package claim

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/jobtype"
)

// runHandoff starts n runners taking jobs from h until it is closed, each calling
// handle with the job's id, and returns a function that waits for them to end.
func runHandoff(h *Handoff, n int, handle func(id int64)) (wait func()) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			s := NewSleeper()
			for {
				d, ok := h.Next(s)
				if !ok {
					return
				}
				handle(d.Key.ID)
			}
		})
	}
	return wg.Wait
}

// within fails t unless done is closed within a generous bound: a hand-off that held a
// job behind a blocked runner would never close it.
func within(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: still waiting after 30 s", what)
	}
}

// Every job starts while the runners before it block in their handlers: each handler
// waits until all the jobs have started. A hand-off that woke no runner for the jobs
// behind a blocked one (a runner taking its job without waking the next) would hang.
func TestHandoff_BlockedHandlersHoldNoJobBehindThem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		runners, jobs int
		putWhileBusy  bool // jobs put one by one while earlier handlers already block
	}{
		{"a batch put at once", 50, 50, false},
		{"jobs put one by one", 50, 50, true},
		{"more runners than jobs", 100, 30, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := NewHandoff()
			var started sync.WaitGroup
			started.Add(tc.jobs)
			all := make(chan struct{})
			go func() { started.Wait(); close(all) }()
			wait := runHandoff(h, tc.runners, func(int64) {
				started.Done()
				<-all // blocks until every job has started
			})
			asleep(t, h, tc.runners) // each job put must wake a runner
			for i := range tc.jobs {
				if tc.putWhileBusy && i > 0 {
					runtimeYield()
				}
				h.Put(Dispatched{Key: jobtype.AttemptKey{ID: int64(i + 1)}})
			}
			within(t, all, "jobs started")
			h.Close()
			wait()
		})
	}
}

// asleep waits until n runners sleep in h's Next.
func asleep(t *testing.T, h *Handoff, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		h.mu.Lock()
		idle := len(h.sleepers)
		h.mu.Unlock()
		if idle == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d runners asleep after 30 s, want %d", idle, n)
		}
		runtime.Gosched()
	}
}

// runtimeYield lets the runners woken so far reach their handlers.
func runtimeYield() {
	for range 10 {
		runtime.Gosched()
	}
}

// The jobs come out first in, first out, each once; after Close the runners take the
// jobs left and then end.
func TestHandoff_EachJobOnceInOrderThenCloses(t *testing.T) {
	t.Parallel()
	h := NewHandoff()
	const n = 10000
	for i := range n / 2 {
		h.Put(Dispatched{Key: jobtype.AttemptKey{ID: int64(i + 1)}})
	}
	var mu sync.Mutex
	var order []int64
	var count atomic.Int64
	wait := runHandoff(h, 1, func(id int64) {
		mu.Lock()
		order = append(order, id)
		mu.Unlock()
		count.Add(1)
	})
	for i := n / 2; i < n; i++ {
		h.Put(Dispatched{Key: jobtype.AttemptKey{ID: int64(i + 1)}})
	}
	h.Close()
	done := make(chan struct{})
	go func() { wait(); close(done) }()
	within(t, done, "runner ended after Close")
	if len(order) != n {
		t.Fatalf("%d jobs taken, want %d", len(order), n)
	}
	for i, id := range order {
		if id != int64(i+1) {
			t.Fatalf("job %d taken at position %d: not first in, first out", id, i)
		}
	}
	if _, ok := h.Next(NewSleeper()); ok {
		t.Fatal("Next returned a job after Close with none left")
	}
	// Many runners, each job once.
	h = NewHandoff()
	seen := make([]atomic.Int32, n)
	wait = runHandoff(h, 100, func(id int64) { seen[id-1].Add(1) })
	for i := range n {
		h.Put(Dispatched{Key: jobtype.AttemptKey{ID: int64(i + 1)}})
	}
	h.Close()
	done = make(chan struct{})
	go func() { wait(); close(done) }()
	within(t, done, "100 runners ended after Close")
	for i := range seen {
		if c := seen[i].Load(); c != 1 {
			t.Fatalf("job %d taken %d times", i+1, c)
		}
	}
}

// The runner woken is the one that went to sleep last: jobs put one at a time, each
// once the one before it was handled, all go to the same runner, whose stack and caches
// are warm, while the others sleep on.
func TestHandoff_WakesTheRunnerThatSleptLast(t *testing.T) {
	t.Parallel()
	h := NewHandoff()
	const runners = 4
	var wg sync.WaitGroup
	took := make(chan int, 1)
	for r := range runners {
		wg.Go(func() {
			s := NewSleeper()
			for {
				if _, ok := h.Next(s); !ok {
					return
				}
				took <- r
			}
		})
	}
	asleep(t, h, runners)
	first := -1
	for i := range 20 {
		h.Put(Dispatched{Key: jobtype.AttemptKey{ID: int64(i + 1)}})
		r := <-took
		if first < 0 {
			first = r
		} else if r != first {
			t.Fatalf("job %d went to runner %d, job 1 to runner %d: not the runner that slept last", i+1, r, first)
		}
		asleep(t, h, runners)
	}
	h.Close()
	wg.Wait()
}

// A Handoff with SetSpawn starts runners as jobs come: none while no job came, one per job
// that finds every started runner busy in its handler, never more than the limit, and a
// raised limit lets the jobs left waiting start. Every job runs.
func TestHandoff_SpawnsRunnersAsJobsNeedThem(t *testing.T) {
	t.Parallel()
	h := NewHandoff()
	var (
		wg      sync.WaitGroup
		spawned atomic.Int32
		ran     atomic.Int32
		release = make(chan struct{})
		running = make(chan struct{}, 100)
	)
	spawn := func() {
		spawned.Add(1)
		wg.Go(func() {
			h.Arrived()
			s := NewSleeper()
			for {
				d, ok := h.Next(s)
				if !ok {
					return
				}
				running <- struct{}{}
				<-release // every handler blocks until released
				ran.Add(1)
				_ = d
			}
		})
	}
	h.SetSpawn(5, spawn)
	if n := spawned.Load(); n != 0 {
		t.Fatalf("%d runners started with no job", n)
	}
	for i := range 8 {
		h.Put(Dispatched{Key: jobtype.AttemptKey{ID: int64(i)}})
	}
	for range 5 {
		within(t, waitRecv(running), "a runner for each of the first 5 jobs")
	}
	if n := spawned.Load(); n != 5 {
		t.Fatalf("%d runners started for 8 jobs under a limit of 5, want 5", n)
	}
	h.SetSpawn(8, spawn) // raised: the 3 jobs left start
	for range 3 {
		within(t, waitRecv(running), "a runner for each of the 3 jobs left")
	}
	if n := spawned.Load(); n != 8 {
		t.Fatalf("%d runners started, want 8", n)
	}
	close(release)
	h.Close()
	wg.Wait()
	if n := ran.Load(); n != 8 {
		t.Fatalf("%d jobs ran, want 8", n)
	}
}

// waitRecv returns a channel closed once one value was received from c.
func waitRecv(c <-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	go func() { <-c; close(done) }()
	return done
}
