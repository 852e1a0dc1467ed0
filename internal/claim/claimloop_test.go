package claim

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/jobtype"
)

// newRunner returns a queue runner with maxWorkers slots, active of them taken, and
// a claim connection pool of conns tokens; no claimer: nothing here touches a database.
func newRunner(maxWorkers, active, conns int) *QueueRunner {
	q := NewQueueRunner("default", maxWorkers, ClaimLoopConfig{Conns: make(chan struct{}, conns)})
	q.active.Store(int64(active))
	return q
}

// woken reports, per claim loop, whether a wake-up waits for it, and takes it.
func woken(q *QueueRunner) []bool {
	out := make([]bool, len(q.wakes))
	for i, c := range q.wakes {
		select {
		case <-c:
			out[i] = true
		default:
		}
	}
	return out
}

func TestQueueRunner_ReserveTakesAtMostTheFreeSlots(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		max        int
		active     int
		limit      int64
		want       int64
		wantActive int64
	}{
		{"an idle worker reserves every slot", 4, 0, 4, 4, 4},
		{"a claim asks no more than its limit", 4, 0, 2, 2, 2},
		{"a busy worker reserves what is left", 4, 3, 4, 1, 4},
		{"a full worker reserves nothing", 4, 4, 4, 0, 4},
		{"a worker over a lowered maximum reserves nothing", 2, 5, 4, 0, 5},
		{"a zero limit reserves nothing", 4, 0, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := newRunner(tt.max, tt.active, 1)
			if got := q.reserve(tt.limit); got != tt.want {
				t.Fatalf("reserve(%d) = %d, want %d", tt.limit, got, tt.want)
			}
			if got := q.active.Load(); got != tt.wantActive {
				t.Fatalf("slots taken after reserve: %d, want %d", got, tt.wantActive)
			}
		})
	}
}

// SetMaxWorkers changes Max at run time: a raised maximum makes room at once, a lowered
// one takes no slot back but reserves nothing until enough jobs finish.
func TestQueueRunner_ReserveFollowsTheMaximumAtRunTime(t *testing.T) {
	t.Parallel()
	q := newRunner(2, 2, 1)
	if n := q.reserve(q.claimSize()); n != 0 {
		t.Fatalf("a full worker reserved %d", n)
	}
	q.Max.Store(5)
	if n := q.reserve(q.claimSize()); n != 3 {
		t.Fatalf("after raising the maximum to 5 with 2 taken, reserved %d, want 3", n)
	}
	q.Max.Store(1)
	for range 4 {
		q.Finished(time.Second)
	}
	if n := q.reserve(q.claimSize()); n != 0 {
		t.Fatalf("lowered to 1 with 1 still running, reserved %d, want 0", n)
	}
	q.Finished(time.Second)
	if n := q.reserve(q.claimSize()); n != 1 {
		t.Fatalf("lowered to 1 with none running, reserved %d, want 1", n)
	}
}

func TestQueueRunner_ClaimSizeIsTheFreeSlotsOrTheQueuesSlots(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		limits *jobtype.QueueLimits // nil: no limits, the plain claim
		want   int64
	}{
		{"a queue without limits asks for every slot", nil, 8},
		{"a slotted queue asks for at most its global limit", &jobtype.QueueLimits{Concurrency: 3}, 3},
		{"a rate-limited queue asks for every slot", &jobtype.QueueLimits{Concurrency: 3, Rate: 10}, 8},
		{"a keyed queue asks for every slot", &jobtype.QueueLimits{Concurrency: 3, KeyConcurrency: 1}, 8},
		{"a fair queue asks for every slot", &jobtype.QueueLimits{Concurrency: 3, Fair: true}, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := newRunner(8, 0, 1)
			if tt.limits != nil {
				q.flow.Store(&flowQueue{limits: *tt.limits})
			}
			if got := q.claimSize(); got != tt.want {
				t.Fatalf("claimSize = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestQueueRunner_HoldsSlotUnderAConcurrencyLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		limits *jobtype.QueueLimits
		want   bool
	}{
		{"no limits", nil, false},
		{"a global concurrency limit", &jobtype.QueueLimits{Concurrency: 2}, true},
		{"a per-key concurrency limit", &jobtype.QueueLimits{KeyConcurrency: 1}, true},
		{"a rate limit only", &jobtype.QueueLimits{Rate: 5}, false},
		{"fairness only", &jobtype.QueueLimits{Fair: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := newRunner(4, 0, 1)
			if tt.limits != nil {
				q.flow.Store(&flowQueue{limits: *tt.limits})
			}
			if got := q.HoldsSlot(); got != tt.want {
				t.Fatalf("HoldsSlot = %v, want %v", got, tt.want)
			}
		})
	}
}

// A finished job gives its slot back; it wakes the claim loops only when the last claim
// filled its batch (a backlog may wait).
func TestQueueRunner_FinishedGivesTheSlotBack(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		backlog   bool
		wantWoken []bool
	}{
		{"without a backlog it wakes no loop", false, []bool{false, false}},
		{"with a backlog it wakes every loop", true, []bool{true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := newRunner(2, 2, 1)
			q.more.Store(tt.backlog)
			q.Finished(time.Second)
			if n := q.active.Load(); n != 1 {
				t.Fatalf("slots taken after a job finished: %d, want 1", n)
			}
			if got := woken(q); !slices.Equal(got, tt.wantWoken) {
				t.Fatalf("loops woken %v, want %v", got, tt.wantWoken)
			}
			if n := q.reserve(q.claimSize()); n != 1 {
				t.Fatalf("reserved %d after a job finished, want its slot", n)
			}
		})
	}
}

// Freed slots wake one loop when it alone can claim them all with no claim in flight,
// else every loop.
func TestQueueRunner_SlotsFreedWakesOneLoopOrAll(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		freed     int
		claiming  int32 // claim statements in flight
		wantWoken []bool
	}{
		{"one claim can take them, none in flight: one loop", 3, 0, []bool{true, false}},
		{"as many as one claim asks for: one loop", 4, 0, []bool{true, false}},
		{"more than one claim asks for: every loop", 5, 0, []bool{true, true}},
		{"a claim in flight may not see them: every loop", 1, 1, []bool{true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := newRunner(8, 0, 1)
			q.flow.Store(&flowQueue{limits: jobtype.QueueLimits{Concurrency: 4}})
			q.claims.Store(tt.claiming)
			seq := q.wakeSeq.Load()
			q.slotsFreed(tt.freed)
			if got := woken(q); !slices.Equal(got, tt.wantWoken) {
				t.Fatalf("loops woken %v, want %v", got, tt.wantWoken)
			}
			if q.wakeSeq.Load() == seq {
				t.Fatal("the wake-up was not counted: a loop would take it as seen by the claim in flight")
			}
		})
	}
}

// Wake-ups coalesce: many signals leave one wake-up per loop.
func TestQueueRunner_SignalsCoalesce(t *testing.T) {
	t.Parallel()
	q := newRunner(1, 0, 1)
	for range 10 {
		q.Signal()
	}
	if got := woken(q); !slices.Equal(got, []bool{true, true}) {
		t.Fatalf("loops woken %v, want both", got)
	}
	if got := woken(q); !slices.Equal(got, []bool{false, false}) {
		t.Fatalf("a second wake-up waits: %v", got)
	}
}

func TestQueueRunner_AwaitSlotsOnlyWithAFreeSlot(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		max, active  int
		wantFreeSlot bool
	}{
		{"a free slot", 2, 1, true},
		{"no free slot", 2, 2, false},
		{"over a lowered maximum", 1, 3, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := newRunner(tt.max, tt.active, 1)
			if got := q.awaitSlots(context.Background()); got != tt.wantFreeSlot {
				t.Fatalf("awaitSlots = %v, want %v", got, tt.wantFreeSlot)
			}
		})
	}
}

// A turn holds a claim connection token and the slots reserved; without a free slot it
// holds nothing.
func TestQueueRunner_TakeTurnHoldsATokenOnlyWithSlots(t *testing.T) {
	t.Parallel()
	t.Run("with free slots it reserves them and keeps the token", func(t *testing.T) {
		t.Parallel()
		q := newRunner(3, 1, 1)
		free, ok := q.takeTurn(context.Background())
		if !ok || free != 2 {
			t.Fatalf("takeTurn = %d, %v; want 2, true", free, ok)
		}
		if len(q.cfg.Conns) != 1 || q.active.Load() != 3 {
			t.Fatalf("tokens held %d, slots taken %d; want 1, 3", len(q.cfg.Conns), q.active.Load())
		}
	})
	t.Run("without a free slot it gives the token back", func(t *testing.T) {
		t.Parallel()
		q := newRunner(3, 3, 1)
		if free, ok := q.takeTurn(context.Background()); ok || free != 0 {
			t.Fatalf("takeTurn = %d, %v; want 0, false", free, ok)
		}
		if len(q.cfg.Conns) != 0 {
			t.Fatal("a turn without slots kept its connection token")
		}
	})
	t.Run("when no token comes before ctx ends it reserves nothing", func(t *testing.T) {
		t.Parallel()
		q := newRunner(3, 0, 1)
		q.cfg.Conns <- struct{}{} // another queue's claim holds the only token
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if free, ok := q.takeTurn(ctx); ok || free != 0 {
			t.Fatalf("takeTurn = %d, %v; want 0, false", free, ok)
		}
		if q.active.Load() != 0 {
			t.Fatalf("%d slots reserved without a turn", q.active.Load())
		}
	})
}

// Claim loops and finishing runners reserve and give back slots concurrently: no slot
// is counted twice, the reservations never exceed the maximum, and the count returns
// to zero once everything is given back.
func TestQueueRunner_ReservationsBalanceUnderConcurrency(t *testing.T) {
	t.Parallel()
	const maxWorkers, goroutines, rounds = 5, 64, 2000
	q := newRunner(maxWorkers, 0, 1)
	var held atomic.Int64 // slots the goroutines hold, by their own count
	var over atomic.Int64 // times they held more than the maximum
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range rounds {
				n := q.reserve(int64(1 + (g+i)%3))
				if n == 0 {
					continue
				}
				if held.Add(n) > maxWorkers || q.active.Load() > maxWorkers {
					over.Add(1)
				}
				runtime.Gosched() // hold the slots a while, as a claim in flight does
				held.Add(-n)
				if i%2 == 0 { // a claim that filled none of its slots gives them back at once
					q.active.Add(-n)
				} else { // or each job finishes on its own
					for range n {
						q.Finished(time.Second)
					}
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if n := over.Load(); n != 0 {
		t.Fatalf("the goroutines held more than %d slots %d times", maxWorkers, n)
	}
	if n := q.active.Load(); n != 0 {
		t.Fatalf("%d slots taken after every one was given back, want 0", n)
	}
}

// claimedAt returns n claimed jobs of priority 0, the first of them at id first.
func claimedAt(first int64, n int) []ClaimedJob {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var jobs []ClaimedJob
	for i := range int64(n) {
		jobs = append(jobs, ClaimedJob{Row: &jobtype.JobRow{ID: first + (int64(n) - 1 - i), RunAt: at}})
	}
	return jobs
}

// A claim loop resumes where its last claim took jobs only after a full batch, and walks
// from the front at least every FullWalkEvery and after any shorter claim or failure.
func TestResumeState_ResumesOnlyBehindAFullBatchAndNotForLong(t *testing.T) {
	t.Parallel()
	var w resumeState
	t0 := time.Now()
	require.Nil(t, w.next(t0), "the first claim walks from the front")

	w.after(true, t0, 3, claimedAt(10, 3))
	from := w.next(t0.Add(FullWalkEvery / 2))
	require.NotNil(t, from, "a full batch: the next claim resumes")
	assert.Equal(t, Resume{Priority: 0, RunAt: claimedAt(10, 1)[0].Row.RunAt, ID: 10}, *from, "at the earliest job it took")
	assert.Nil(t, w.next(t0.Add(FullWalkEvery)), "FullWalkEvery after the last walk from the front")

	w.after(false, t0.Add(FullWalkEvery/2), 3, claimedAt(20, 3))
	require.NotNil(t, w.next(t0.Add(FullWalkEvery/2)))
	assert.Nil(t, w.next(t0.Add(FullWalkEvery)), "a resumed claim does not push the next walk from the front back")

	w.after(true, t0.Add(FullWalkEvery), 3, claimedAt(30, 2))
	assert.Nil(t, w.next(t0.Add(FullWalkEvery)), "a short batch: the queue may be drained, the next claim walks from the front")

	w.after(true, t0.Add(FullWalkEvery), 3, claimedAt(40, 3))
	require.NotNil(t, w.next(t0.Add(FullWalkEvery)))
	w.forget()
	assert.Nil(t, w.next(t0.Add(FullWalkEvery)), "after a failed or limited claim")
}

// The resume place is the earliest job, in claim order, of the highest priority claimed.
func TestResumeAt_IsTheFirstJobOfTheHighestPriority(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	job := func(id int64, prio int, runAt time.Time) ClaimedJob {
		return ClaimedJob{Row: &jobtype.JobRow{ID: id, Priority: prio, RunAt: runAt}}
	}
	r, ok := resumeAt([]ClaimedJob{
		job(1, 0, at), job(9, 3, at.Add(time.Second)), job(7, 3, at.Add(time.Second)), job(8, 3, at.Add(2*time.Second)), job(2, -1, at),
	})
	require.True(t, ok)
	assert.Equal(t, Resume{Priority: 3, RunAt: at.Add(time.Second), ID: 7}, r)
	_, ok = resumeAt(nil)
	assert.False(t, ok)
}

// A queue claims ahead of its free slots, up to 3 × MaxWorkers jobs more, only while it has
// a backlog, its handlers are short on average, it has no limits, more than one slot
// and no more runners than slots; a run of long handlers brings it back to MaxWorkers.
func TestQueueRunner_ClaimsAheadOnlyWhileHandlersAreShort(t *testing.T) {
	t.Parallel()
	q := newRunner(4, 0, 1)
	q.more.Store(true) // a backlog
	if n := q.reserve(100); n != 4 {
		t.Fatalf("a new queue reserved %d, want MaxWorkers (4): its handlers are not yet known to be short", n)
	}
	for range 32 { // short handlers; each gives its slot back and the claim takes it again
		q.Finished(50 * time.Microsecond)
		q.active.Add(1)
	}
	q.more.Store(false)
	if q.claimsAhead() {
		t.Fatal("a queue without a backlog (its last claim took fewer jobs than it asked for) claims ahead")
	}
	q.more.Store(true)
	if !q.claimsAhead() {
		t.Fatalf("after 32 handlers of 50µs the queue does not claim ahead (average %v)", time.Duration(q.handlerAvg.Load()))
	}
	if n := q.claimSize(); n != 16 {
		t.Fatalf("a queue claiming ahead asks for %d jobs at most in a claim, want 16 (4 × MaxWorkers)", n)
	}
	if n := q.reserve(100); n != 12 {
		t.Fatalf("with 4 jobs held and short handlers, reserved %d, want 12 more (4 × MaxWorkers held)", n)
	}
	if n := q.reserve(100); n != 0 {
		t.Fatalf("with 16 held, reserved %d more, want 0", n)
	}
	q.flow.Store(&flowQueue{limits: jobtype.QueueLimits{Rate: 10, RatePeriod: time.Second}})
	if q.claimsAhead() {
		t.Fatal("a queue with limits claims ahead")
	}
	q.flow.Store(nil)
	q.Jobs.started.Store(6) // MaxWorkers was 6, lowered to 4: six runners wait for jobs
	if q.claimsAhead() {
		t.Fatal("a queue with more runners than MaxWorkers claims ahead: its jobs claimed ahead would run at once")
	}
	q.Jobs.started.Store(4)
	q.Max.Store(1)
	if q.claimsAhead() {
		t.Fatal("a queue of one slot claims ahead: its jobs would not start in claim order")
	}
	q.Max.Store(4)
	for range 16 { // handlers turned long
		q.Finished(20 * time.Millisecond)
		q.active.Add(1)
	}
	if q.claimsAhead() {
		t.Fatalf("after 16 handlers of 20ms the queue still claims ahead (average %v)", time.Duration(q.handlerAvg.Load()))
	}
	for range 13 {
		q.Finished(20 * time.Millisecond)
	}
	if n := q.claimSize(); n != 4 {
		t.Fatalf("after handlers turned long a claim asks for %d jobs at most, want MaxWorkers (4)", n)
	}
	if n := q.reserve(100); n != 1 {
		t.Fatalf("with 3 of 16 held after handlers turned long, reserved %d, want 1 (back to MaxWorkers 4)", n)
	}
}
