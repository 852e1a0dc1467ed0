// This file holds a queue's claim loops (queueRunner): when to run a claim and how many
// jobs to ask for (free slots, batching cooldown, backoff on errors, a rate limit's next
// token), and the hand-off of the claimed jobs to the runners (internal/execute, execute.go). The claim
// statements are in claim.go (plain) and flowclaim.go (under limits); the fallback poll
// that wakes the loops is in poll.go.

package claim

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/lifecycle"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// fetchersPerQueue is how many claim loops each queue runs. While one loop's claim is in
// flight, another can claim the slots that free up meanwhile: the claims pipeline, and a
// busy database gives the worker's claims a fairer share of its CPU.
const fetchersPerQueue = 2

// MaxClaimConns bounds the claim statements one worker has in flight at once, across all
// its queues, and so the pooled connections its claims use: 100 queues with a backlog
// must not take 200 connections. Two cores of database gain nothing from more claims at
// once than this; a worker with fewer queues uses fetchersPerQueue per queue.
const MaxClaimConns = 8

// ClaimConns is how many claim statements a worker with queues queues has in flight at most.
func ClaimConns(queues int) int { return min(fetchersPerQueue*queues, MaxClaimConns) }

// ClaimLoopConfig is what a queue's claim loops need from the worker.
type ClaimLoopConfig struct {
	Claimer       *Claimer
	WorkerID      string
	FetchCooldown time.Duration // negative: never wait for more free slots
	Logger        *slog.Logger
	// Conns holds one token per claim statement allowed in flight (claimConns), shared by
	// every queue of the worker.
	Conns chan struct{}
	// Gate bounds the claims and outcome batches in flight by the number of processes
	// serving the queues (internal/pgutil, gate.go); a claim takes a turn after its connection token.
	Gate *pgutil.Gate
	// Start registers a claimed job (its context, its lease) and returns it ready for
	// the runners (jobStarter, internal/execute, execute.go); slot: it holds a slot of a concurrency limit.
	// False, with nothing registered, when the worker already runs the attempt (see Holds).
	Start func(job ClaimedJob, slot bool) (Dispatched, bool)
	// StaleAfter is how old a claim may be when its reply arrives: after that the lease
	// it wrote, counted from the claim's start, may not outlast the worker's next
	// heartbeat (the reply came late, held up in a hanging connection), and its jobs must
	// not start: the watchdog could cancel them before any heartbeat renewed them, and
	// another worker may soon hold them (ownership.StaleClaimAfter).
	StaleAfter time.Duration
	// Release puts stale claims back in the queue, fenced: one already taken back is left
	// alone (lease.releaseJobs).
	Release func(keys []jobtype.AttemptKey)
	// LeaseEnding reports whether the worker's own lease has gone unrenewed for so long
	// that its watchdog may cancel its handlers at its next look (one look before
	// workerCancelAfter: ownership.Lease.OwnLeaseEnding), so it claims nothing, and
	// starts no job a claim returns, until a renewal lands. nil: never.
	LeaseEnding func() bool
	// LapsedSince reports whether the worker's own lease lapsed at any time since the
	// given time (a renewal landed again after a lapse): the jobs of a claim started
	// before such a lapse are put back, never run (docs/ownership.md). nil: never.
	LapsedSince func(t time.Time) bool
	// Holds reports whether the worker already runs the attempt: a claim that hands out a
	// token the worker holds (a claim's commit lost with an asynchronous primary, or
	// under synchronous_commit = off, lets the next claim take the same token) is not
	// run twice, nor put back when its claim came too late. Start looks for the jobs it
	// starts itself, in the same step. nil: never.
	Holds func(jobtype.AttemptKey) bool
}

// Dispatched is a claimed job on its way to a runner.
type Dispatched struct {
	// Job is the attempt's context (from the starter): its cancel, and its state, which
	// its held entry shares.
	Job     *jobtype.JobCtx
	Key     jobtype.AttemptKey
	Row     *jobtype.JobRow
	Timeout time.Duration // the job's own timeout; 0: the kind's or the worker's
	Slot    bool          // claimed under a concurrency limit (queueRunner.holdsSlot)
}

// QueueRunner holds one queue's claim loops and slots, and the hand-off to its runners (handoff.go).
type QueueRunner struct {
	cfg    ClaimLoopConfig
	name   string
	Max    atomic.Int64 // MaxWorkers; changed at run time by Worker.SetMaxWorkers
	active atomic.Int64 // slots taken: jobs running or waiting for a runner, or reserved by a claim in flight
	// handlerAvg is a running average of the queue's handler durations (ns), which
	// decides whether it claims ahead (claimsAhead). It starts long: a queue claims
	// ahead only once its handlers have shown they are short.
	handlerAvg atomic.Int64
	more       atomic.Bool // the last claim filled its batch: there may be a backlog
	paused     atomic.Bool // the queue is paused: claim nothing (the root's flow.go, its pause part)
	wakes      []chan struct{}
	Jobs       *Handoff // to the runners (handoff.go); a Put never blocks

	// flow is the queue's limited claim path (the root's flow.go); nil: the plain claim (claimSQL).
	flow atomic.Pointer[flowQueue]
	// plainMu is held for reading by each plain claim in flight (flowQueue.adopt).
	plainMu sync.RWMutex
	// pathMu is held for reading by every claim in flight, from reading q.flow to the end
	// of its statement: flowWatch.apply waits for it after changing the path, so that no
	// claim under the old limits starts a job once the new ones are in force.
	pathMu sync.RWMutex
	// slotWait: the last claim of a slotted queue (flowclaim.go) found fewer free slots
	// or due jobs than it asked for; it claims again once this worker's finished jobs are
	// recorded (flowWatch.slotsFreed), when their slots are free in the database.
	slotWait atomic.Bool
	claims   atomic.Int32 // claim statements of this queue in flight
	// wakeSeq counts signals; claimSeq is the count when the latest claim statement
	// started. A slotted queue's loop woken by signals that all came before a claim
	// started does not claim: that claim saw what they announced.
	wakeSeq, claimSeq atomic.Uint64

	// Loops are the queue's claim loops, started by claimLoops; the Worker stops them
	// alone when it removes the queue at run time (queueset.go).
	Loops lifecycle.Goroutines
	// Ran waits for the queue's runners (internal/execute, execute.go), which Jobs starts
	// as jobs come; they end once Jobs is closed (CloseJobs) and their job is done.
	Ran       sync.WaitGroup
	closeOnce sync.Once
}

func NewQueueRunner(name string, maxWorkers int, cfg ClaimLoopConfig) *QueueRunner {
	q := &QueueRunner{cfg: cfg, name: name, Jobs: NewHandoff()}
	q.Max.Store(int64(maxWorkers))
	q.handlerAvg.Store(int64(handlerAvgStart * ClaimAheadBelow))
	for range fetchersPerQueue {
		q.wakes = append(q.wakes, make(chan struct{}, 1))
	}
	return q
}

// Signal wakes the claim loops; wake-ups coalesce.
func (q *QueueRunner) Signal() {
	q.wakeSeq.Add(1)
	for _, c := range q.wakes {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// slotsFreed wakes the claim loops of a limited queue after n of the worker's jobs were
// recorded, freeing their slots in the database: one loop when none is claiming and one
// claim can take them all (two would run the same claim side by side, and the second,
// skipping the slots the first locked, would find none), else all, so that an idle loop
// claims what the claim in flight, whose snapshot may be older than the freeing, does
// not see, or what one claim cannot take.
func (q *QueueRunner) slotsFreed(n int) {
	if q.claims.Load() > 0 || int64(n) > q.claimSize() {
		q.Signal()
		return
	}
	q.wakeSeq.Add(1)
	select {
	case q.wakes[0] <- struct{}{}:
	default:
	}
}

// Finished gives back the slot of a job whose handler returned after d, and wakes the
// claim loops when the queue may have a backlog.
func (q *QueueRunner) Finished(d time.Duration) {
	q.active.Add(-1)
	// A running average over about the last eight jobs. Runners finishing at once may
	// each overwrite the other's update: an average that loses a sample now and then
	// still tells short handlers from long ones, and costs no compare-and-swap loop.
	avg := q.handlerAvg.Load()
	q.handlerAvg.Store(avg + (int64(d)-avg)/8)
	if q.more.Load() {
		q.Signal()
	}
}

// Claiming ahead. A slot is taken from the start of the claim that fills it until the
// job's handler returns: with handlers much shorter than a claim's round trip, a
// queue's slots spend most of their time waiting for claims, and MaxWorkers bounds the
// drain at about MaxWorkers ÷ (a claim's round trip) jobs a second. A queue with a
// backlog whose handlers take under ClaimAheadBelow on average, and which has no limits
// (flow control: its claims hold its global slots, its keys' and its rate's tokens),
// claims up to (claimAheadFactor - 1) × MaxWorkers jobs more than it runs, in claims as
// large as that: they wait in the hand-off for the first runner free, for about three
// handlers' durations at most. The runners stay MaxWorkers: no more handlers run at
// once. The jobs waiting are the worker's like any it runs (its lease, its heartbeat);
// at shutdown they run while the worker waits for its handlers, and those still waiting
// when it cuts the handlers off do not start (internal/execute: put back).
const (
	// handlerAvgStart is the average a queue starts with, in multiples of
	// ClaimAheadBelow: well above it, so about sixteen short jobs bring it below.
	handlerAvgStart = 8
	// claimAheadFactor × MaxWorkers is how many jobs a queue that claims ahead holds at
	// most. Against 2 × with claims of MaxWorkers, alternated in one run (2026-12-07,
	// 5 rounds): drain ÷ floor 0.45–0.49 → 0.50–0.58, storm 0.42–0.50 → 0.47–0.57
	// (bench/README.md, "Issue 45 round 11").
	claimAheadFactor = 4
)

// ClaimAheadBelow is the average handler duration under which a queue claims ahead. It is
// a variable only for the chaos worker (internal/chaos/worker), whose handlers write two
// audit rows each (over a millisecond together): it raises it before it starts its
// Worker, so that the fault runs claim ahead too. Nothing else changes it.
var ClaimAheadBelow = time.Millisecond

// claimsAhead reports whether the queue claims ahead of its free slots now. Only while
// it has a backlog (its last claim filled its batch): a queue that keeps up claims each
// job as it comes, and a second claim loop claiming ahead beside the first would run a
// claim statement that finds nothing for every wake-up (bench latency: +0.1 ms p50,
// 2026-12-07). Never with one slot: its jobs start one at a time in claim order
// (docs/workers.md, "Claim order"), which two claims in flight, either of which may
// come back first, would not keep. Not while the queue has more runners than MaxWorkers
// (it was lowered at run time: runners, once started, stay), which would run the jobs
// claimed ahead at once, more than MaxWorkers.
func (q *QueueRunner) claimsAhead() bool {
	max := q.Max.Load()
	return max > 1 && q.more.Load() && q.handlerAvg.Load() < int64(ClaimAheadBelow) &&
		q.flow.Load() == nil && q.Jobs.Runners() <= max
}

// held is how many of the queue's jobs the worker holds at most: MaxWorkers, or
// claimAheadFactor times that while it claims ahead.
func (q *QueueRunner) held() int64 {
	if q.claimsAhead() {
		return claimAheadFactor * q.Max.Load()
	}
	return q.Max.Load()
}

// reserve takes the free slots for one claim, at most limit, and returns how many; the
// claim gives back those it does not fill. Two claim loops never count the same slot.
func (q *QueueRunner) reserve(limit int64) int64 {
	for {
		cur := q.active.Load()
		n := min(q.held()-cur, limit)
		if n <= 0 {
			return 0
		}
		if q.active.CompareAndSwap(cur, cur+n) {
			return n
		}
	}
}

// claimSize is the most jobs one claim asks for: every free slot of the worker (those
// it may claim ahead included), or, on a slotted queue, at most the queue's global limit
// (a claim cannot take more), so that the other claim loop keeps slots to claim with
// while this one's claim is in flight.
func (q *QueueRunner) claimSize() int64 {
	if f := q.flow.Load(); f != nil && slotted(f.limits) {
		return int64(f.limits.Concurrency)
	}
	return q.held()
}

// claimsDrained returns once every claim that was in flight when it was called has
// ended (a barrier on pathMu); flowWatch.apply calls it after changing q.flow.
func (q *QueueRunner) claimsDrained() {
	q.pathMu.Lock()
	q.pathMu.Unlock() //nolint:staticcheck // empty on purpose: a barrier
}

// claim takes up to n jobs: through the limited path when the queue has limits, else
// through claimSQL, exactly as if flow control did not exist.
// A plain claim resumes where the loop's last one took jobs, when walk allows it.
func (q *QueueRunner) claim(ctx context.Context, n int, walk *resumeState) ([]ClaimedJob, claimHint, error) {
	q.pathMu.RLock()
	defer q.pathMu.RUnlock()
	q.plainMu.RLock()
	if f := q.flow.Load(); f != nil {
		q.plainMu.RUnlock()
		walk.forget()
		if err := f.adopt(ctx, q.name, &q.plainMu); err != nil {
			return nil, claimHint{}, err
		}
		return f.claimer.Claim(ctx, q.name, f.limits, n, q.cfg.WorkerID)
	}
	defer q.plainMu.RUnlock()
	began := time.Now()
	from := walk.next(began)
	jobs, err := q.cfg.Claimer.Claim(ctx, q.name, n, q.cfg.WorkerID, from)
	if err != nil {
		walk.forget()
	} else {
		walk.after(from == nil, began, n, jobs)
	}
	return jobs, claimHint{}, err
}

// resumeState is where one claim loop's next plain claim starts its walk of the claim
// index (Resume, resumedPrioritiesCTE): from the front, or where its last claim took
// jobs. It resumes only after a claim that filled its batch (the queue has a backlog
// beyond what it took), and walks from the front at least every FullWalkEvery, so a job
// queued behind the resume place waits at most that long. Owned by its loop's goroutine.
type resumeState struct {
	from     Resume
	ok       bool      // from holds a place to resume at
	fullWalk time.Time // when the loop's last claim from the front started
}

// next returns where a claim starting at now resumes; nil: from the front.
func (w *resumeState) next(now time.Time) *Resume {
	if !w.ok || now.Sub(w.fullWalk) >= FullWalkEvery {
		return nil
	}
	return &w.from
}

// after records a claim that asked for n jobs, started at began, from the front when
// full, and took jobs.
func (w *resumeState) after(full bool, began time.Time, n int, jobs []ClaimedJob) {
	if full {
		w.fullWalk = began
	}
	w.ok = false
	if len(jobs) == n {
		w.from, w.ok = resumeAt(jobs)
	}
}

// forget makes the next claim walk from the front.
func (w *resumeState) forget() { w.ok = false }

// HoldsSlot reports whether the queue's jobs are claimed under a concurrency limit now:
// their slots are free again only once their outcomes are recorded.
func (q *QueueRunner) HoldsSlot() bool {
	f := q.flow.Load()
	return f != nil && (f.limits.Concurrency > 0 || f.limits.KeyConcurrency > 0)
}

// run is one claim loop. It sleeps until it is signalled — by a notification for the
// queue, by the fallback poll finding due jobs in it, or by a finished job with a backlog
// behind it — and then claims until the queue has no due job left or no free slot, until
// ctx ends. An idle queue costs the database nothing: its loops run no statement until
// one of those signals comes. A rate-limited queue also wakes when its next token is due.
func (q *QueueRunner) run(ctx context.Context, wake <-chan struct{}) {
	errDelay := firstClaimRetry
	var token tokenTimer // fires when a rate-limited queue's next token is due (flowclaim.go)
	var walk resumeState // where this loop's next plain claim starts
	defer token.stop()
	for {
		woken := false // by a signal, not by the token timer
		select {
		case <-ctx.Done():
			return
		case <-wake:
			woken = true
		case <-token.c:
		}
		token.c = nil
		if q.leaveWake(wake, woken) {
			continue
		}
		token.arm(q.claimWhileDue(ctx, &errDelay, &walk))
	}
}

// leaveWake reports whether this loop leaves a wake-up to the queue's other loop.
func (q *QueueRunner) leaveWake(wake <-chan struct{}, woken bool) bool {
	f := q.flow.Load()
	if f == nil {
		return false
	}
	if !slotted(f.limits) {
		// This limited queue's claims take turns under one lock across all processes:
		// a second claim loop would only wait in that line. The first loop claims.
		return wake != (<-chan struct{})(q.wakes[0])
	}
	// Every signal so far came before a claim of the other loop started (a wake-up kept
	// while this loop claimed): that claim saw what they announced.
	return woken && q.claimSeq.Load() >= q.wakeSeq.Load()
}

// claimWhileDue claims until the queue has no due job left or no free slot, or ctx
// ends, and returns when a rate limit's next token is due, if a claim was cut by it
// (0: none). errDelay is the loop's backoff after a failed claim; walk is where its
// plain claims start.
func (q *QueueRunner) claimWhileDue(ctx context.Context, errDelay *time.Duration, walk *resumeState) (next time.Duration) {
	for ctx.Err() == nil && !q.paused.Load() {
		if !q.awaitRenewal(ctx) || !q.awaitSlots(ctx) {
			break
		}
		free, ok := q.takeTurn(ctx)
		if !ok {
			break
		}
		jobs, hint, err := q.claimReserved(ctx, free, walk)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			q.backoff(ctx, err, errDelay)
			continue
		}
		*errDelay = firstClaimRetry
		q.more.Store(int64(len(jobs)) == free && !hint.slotWait || hint.more)
		q.slotWait.Store(hint.slotWait)
		q.dispatch(jobs)
		if hint.retryIn > 0 {
			next = hint.retryIn
		}
		if (int64(len(jobs)) < free || hint.slotWait) && !hint.again {
			break
		}
		// A full batch: there may be more due jobs, so claim again at once.
	}
	return next
}

// awaitRenewal waits while the worker's own lease is ending (claimLoopConfig.leaseEnding),
// and reports whether it may claim: false when ctx ended first. A black-holed worker
// whose path came back before its renewal did claimed jobs only for the watchdog to
// cancel them at once, spending an attempt of each (the chaos run's black-holed worker).
func (q *QueueRunner) awaitRenewal(ctx context.Context) bool {
	for q.cfg.LeaseEnding != nil && q.cfg.LeaseEnding() && ctx.Err() == nil {
		pgutil.Sleep(ctx, leaseEndingPoll)
	}
	return ctx.Err() == nil
}

// leaseEndingPoll is how often a claim loop held by an ending lease looks again.
const leaseEndingPoll = 50 * time.Millisecond

// awaitSlots reports whether the queue has a free slot. With a backlog and few free
// slots, it first lets a few more handlers finish (FetchCooldown), so that the next claim
// is a batch, not a trickle.
func (q *QueueRunner) awaitSlots(ctx context.Context) bool {
	max := q.held()
	free := max - q.active.Load()
	if free <= 0 {
		return false
	}
	if free < (max+3)/4 && q.more.Load() && q.cfg.FetchCooldown > 0 {
		pgutil.Sleep(ctx, q.cfg.FetchCooldown)
	}
	return true
}

// takeTurn takes a claim connection token and a turn of the fleet's gate, then reserves
// the free slots for one claim and returns how many; false when ctx ended, no slot is
// free or the queue was paused meanwhile, with nothing held.
func (q *QueueRunner) takeTurn(ctx context.Context) (free int64, ok bool) {
	select {
	case q.cfg.Conns <- struct{}{}:
	case <-ctx.Done():
		return 0, false
	}
	if q.cfg.Gate.Acquire(ctx) != nil {
		<-q.cfg.Conns
		return 0, false
	}
	// Slots are counted once the turn is ours: slots freed while waiting for it join
	// this claim. A pause that came while it waited (a connection, a turn, the batching
	// cooldown) stops it here: the worker claims nothing of a queue it knows is paused.
	if q.paused.Load() {
		free = 0
	} else {
		free = q.reserve(q.claimSize())
	}
	if free == 0 {
		q.cfg.Gate.Release()
		<-q.cfg.Conns
		return 0, false
	}
	return free, true
}

// claimReserved runs one claim for the free slots reserved by takeTurn, gives the turn
// back, and gives back the slots the claim did not fill.
func (q *QueueRunner) claimReserved(ctx context.Context, free int64, walk *resumeState) ([]ClaimedJob, claimHint, error) {
	// The claim must not be cut off by shutdown: cancelling it mid-flight could commit
	// the claim and lose its result, leaving jobs running for nobody until the sweeper
	// takes them back. Jobs it returns run; shutdown waits for them.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ClaimTimeout)
	defer cancel()
	q.claims.Add(1)
	for seq := q.wakeSeq.Load(); ; {
		if cur := q.claimSeq.Load(); cur >= seq || q.claimSeq.CompareAndSwap(cur, seq) {
			break
		}
	}
	jobs, hint, err := q.claim(cctx, int(free), walk)
	q.claims.Add(-1)
	q.cfg.Gate.Release()
	<-q.cfg.Conns
	q.active.Add(int64(len(jobs)) - free)
	return jobs, hint, err
}

// dispatch hands the claimed jobs to the runners, except those whose claim came back too
// late to run them safely (StaleAfter), or all of them while the worker's own lease is
// ending (LeaseEnding) or when it lapsed since the claim started (LapsedSince): it puts
// those back in the queue.
func (q *QueueRunner) dispatch(jobs []ClaimedJob) {
	if len(jobs) == 0 {
		return
	}
	// The jobs of one claim share its start (leased) and its path: one clock reading
	// and one look at the path serve them all.
	now, slot := time.Now(), q.HoldsSlot()
	ending := q.cfg.LeaseEnding != nil && q.cfg.LeaseEnding() ||
		q.cfg.LapsedSince != nil && q.cfg.LapsedSince(jobs[0].Leased)
	var stale []jobtype.AttemptKey
	for _, j := range jobs {
		key := jobtype.AttemptKey{ID: j.Row.ID, Fence: j.Fence}
		if ending || now.Sub(j.Leased) > q.cfg.StaleAfter {
			if q.cfg.Holds != nil && q.cfg.Holds(key) {
				q.heldTwice(key) // not put back: the attempt runs here
				continue
			}
			stale = append(stale, key)
			continue
		}
		d, ok := q.cfg.Start(j, slot)
		if !ok {
			q.heldTwice(key)
			continue
		}
		q.Jobs.Put(d)
	}
	if len(stale) > 0 {
		q.cfg.Logger.Warn("skiplock: a claim's reply came too late to run its jobs safely; putting them back",
			"queue", q.name, "jobs", len(stale))
		q.cfg.Release(stale)
		q.active.Add(-int64(len(stale)))
	}
}

// ErrHeldTwice is a claim that handed out an attempt's token the worker already runs
// (see ClaimLoopConfig.Holds): the claim loops log it and drop the attempt (heldTwice),
// the root's Worker.workOne returns it.
var ErrHeldTwice = errors.New("skiplock: a claim handed out a token this worker already runs (a claim's commit was lost: asynchronous replication or synchronous_commit = off)")

// heldTwice drops the claimed attempt key, which the worker already runs: the same token
// again, whose writes match the running attempt's; a second run would be a twin, and
// there is nothing to put back.
func (q *QueueRunner) heldTwice(key jobtype.AttemptKey) {
	q.cfg.Logger.Warn(ErrHeldTwice.Error()+"; not running it twice",
		"queue", q.name, "job", key.ID, "fence", key.Fence)
	q.active.Add(-1)
}

// firstClaimRetry is the first wait after a failed claim.
const firstClaimRetry = 10 * time.Millisecond

// backoff logs a failed claim and waits *delay, then lengthens it. A terminated server
// leaves every pooled connection dead: the first retries are quick, each one discards a
// dead connection; then it backs off, up to 5 s.
func (q *QueueRunner) backoff(ctx context.Context, err error, delay *time.Duration) {
	q.cfg.Logger.Warn("skiplock: claim failed; retrying", "queue", q.name, "err", err, "retry_in", *delay)
	pgutil.Sleep(ctx, *delay)
	if *delay < 40*time.Millisecond {
		*delay += firstClaimRetry / 2
	} else {
		*delay = min(*delay*2, 5*time.Second)
	}
}

// tokenTimer wakes a claim loop when a rate-limited queue's next token is due.
type tokenTimer struct {
	t *time.Timer
	c <-chan time.Time // nil: not armed
}

// arm makes the timer fire after d; d <= 0 leaves it unarmed.
func (t *tokenTimer) arm(d time.Duration) {
	if d <= 0 {
		return
	}
	if t.t == nil {
		t.t = time.NewTimer(d)
	} else {
		t.t.Reset(d)
	}
	t.c = t.t.C
}

func (t *tokenTimer) stop() {
	if t.t != nil {
		t.t.Stop()
	}
}

// CloseJobs closes the hand-off to the queue's runners, once its claim loops have
// stopped: each runner ends once the jobs handed off are taken and its own is done.
func (q *QueueRunner) CloseJobs() { q.closeOnce.Do(q.Jobs.Close) }

// ClaimLoops is the Service of all the claim loops of a worker's queues. They end with
// Run's context: a worker shutting down claims nothing more. Each queue's loops are a
// group of their own (queueRunner.loops), so that a queue added or removed at run time
// starts or stops alone; Stop stops every group, those of queues added at run time too.
type ClaimLoops struct {
	Queues *QueueSet
	ctx    context.Context // Start's; nil before Start
}

// Start starts fetchersPerQueue loops per queue.
func (c *ClaimLoops) Start(ctx context.Context) error {
	c.ctx = ctx
	for _, q := range c.Queues.All() {
		c.StartQueue(q)
	}
	return nil
}

// StartQueue starts the claim loops of q, whose goroutines end with Start's context (or
// when q is removed).
func (c *ClaimLoops) StartQueue(q *QueueRunner) {
	ctx := q.Loops.Begin(c.ctx, lifecycle.UntilCancel)
	for _, wake := range q.wakes {
		q.Loops.Go(func() { q.run(ctx, wake) })
	}
}

// Stop waits for the loops; the claims in flight finish first.
func (c *ClaimLoops) Stop() {
	for _, q := range c.Queues.All() {
		q.Loops.Stop()
	}
}
