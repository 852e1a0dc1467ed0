// This file holds the claim: the statement that takes due jobs for a worker in one
// atomic step, and the per-queue claim loops that decide when to run it and how many jobs
// to ask for (free slots, batching cooldown, backoff on errors). The fallback poll that
// wakes them is in poll.go.

package skiplock

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// prioritiesCTE walks the distinct priorities of queue $1's queued jobs, highest first,
// one index seek each (a skip scan of jobs_claim_idx). Both claim paths start with it
// (claimSQL here, flowPlainPickSQL in flowclaim.go).
const prioritiesCTE = `prios AS (
	(SELECT priority FROM {s}.jobs
	 WHERE status = 'queued' AND queue = $1 AND attempts >= 0
	 ORDER BY priority DESC LIMIT 1)
	UNION ALL
	SELECT (SELECT j.priority FROM {s}.jobs j
	        WHERE j.status = 'queued' AND j.queue = $1 AND j.attempts >= 0 AND j.priority < p.priority
	        ORDER BY j.priority DESC LIMIT 1)
	FROM prios p WHERE p.priority IS NOT NULL
)`

// claimSQL claims up to $2 due jobs of queue $1 for worker $3 in one autocommit statement
// (READ COMMITTED).
//
//   - prios walks the distinct priorities of the queue's queued jobs, highest first, one
//     index seek each (a skip scan over jobs_claim_idx). Stepping priority by priority makes
//     run_at <= now() a range bound of each scan, so jobs scheduled for later (retries in
//     backoff, jobs due tomorrow) are never walked over, whatever their priority: a million
//     future jobs cost the claim nothing. (attempts >= 0 is always true: it reads the heap
//     row, which turns the seek into a plain index scan. An index-only scan would visit the
//     heap for every entry of a job claimed since the last vacuum, and never mark those
//     entries dead, so a draining queue would cost each claim more than the last.)
//   - For each priority, the LATERAL scan reads jobs_claim_idx (queue, priority DESC, run_at,
//     id) WHERE status = 'queued': the rows come out already in claim order, so there is no
//     Sort, and the outer LIMIT stops pulling (and locking) once it has $2 jobs.
//   - FOR UPDATE SKIP LOCKED: concurrent claimers pass over each other's rows instead of
//     waiting on them, so each job goes to exactly one claimer.
//   - The UPDATE finds the locked rows by ctid (a TID scan, no second index descent per
//     row); a row locked FOR UPDATE cannot move before the statement ends.
//   - The UPDATE commits status 'running' with the statement. It is that committed state,
//     not a held lock or an open transaction, that protects the job while its handler runs.
//   - fence + 1 is the fencing token of this claim: no claim of the job before it took the
//     same value, and none after it will. Every later statement about this attempt matches
//     (id, fence, locked_by, status running; see fenceSQL), so a stale worker, or a stale
//     statement of this one, cannot touch a newer claim.
//   - lease_until is this worker's lease: now() + its own visibility timeout ($4). The
//     sweeper takes the job back only once it has passed, whatever its own settings.
//   - timeout_ms is returned beside the row: the job's own limit on this attempt, if any.
const claimSQL = `WITH RECURSIVE ` + prioritiesCTE + `, picked AS (
	SELECT c.ctid FROM prios p CROSS JOIN LATERAL (
		SELECT ctid FROM {s}.jobs
		WHERE status = 'queued' AND queue = $1 AND priority = p.priority AND run_at <= now()
		ORDER BY run_at, id
		LIMIT $2
		FOR UPDATE SKIP LOCKED
	) c
	LIMIT $2
)
UPDATE {s}.jobs
SET status = 'running', locked_at = now(), locked_by = $3, attempts = attempts + 1,
	fence = fence + 1, lease_until = now() + $4::interval
WHERE ctid = ANY (ARRAY(SELECT ctid FROM picked))
RETURNING ` + jobColumns + `, fence, timeout_ms`

// claimer runs the claim statement, rendered for one schema.
type claimer struct {
	pool       *pgxpool.Pool
	sql        string
	visibility time.Duration // the lease a claim writes
	wrapErr    func(op string, err error) error
}

func newClaimer(c *Client, visibility time.Duration) *claimer {
	return &claimer{pool: c.pool, sql: renderSQL(c.schema, claimSQL), visibility: visibility, wrapErr: c.wrapErr}
}

// claimedJob is one job a claim returned: the row, the fencing token the claim took, the
// job's own timeout (0: none), and when the claim statement started, by the worker's clock
// (the lease lasts at least the visibility timeout from then).
type claimedJob struct {
	row     *JobRow
	fence   int64
	timeout time.Duration
	leased  time.Time
}

// extraScan scans a row of jobColumns followed by extra columns into scanJob's
// destinations and then extra.
type extraScan struct {
	pgx.Rows
	extra []any
}

func (r extraScan) Scan(dest ...any) error { return r.Rows.Scan(append(dest, r.extra...)...) }

// claim takes up to limit due jobs of queue for the worker id.
func (c *claimer) claim(ctx context.Context, queue string, limit int, workerID string) ([]claimedJob, error) {
	began := time.Now()
	rows, err := c.pool.Query(ctx, c.sql, queue, limit, workerID, c.visibility)
	if err != nil {
		return nil, c.wrapErr("claim", err)
	}
	out, err := scanClaimed(rows, began)
	if err != nil {
		return nil, c.wrapErr("claim", err)
	}
	return out, nil
}

// scanClaimed reads the rows of a claim statement (jobColumns, fence, timeout_ms) whose
// statement started at began, by the worker's clock.
func scanClaimed(rows pgx.Rows, began time.Time) ([]claimedJob, error) {
	defer rows.Close()
	var out []claimedJob
	for rows.Next() {
		cj := claimedJob{leased: began}
		var timeoutMs *int64
		row, err := scanJob(extraScan{rows, []any{&cj.fence, &timeoutMs}})
		if err != nil {
			return nil, err
		}
		cj.row = row
		if timeoutMs != nil {
			cj.timeout = time.Duration(*timeoutMs) * time.Millisecond
		}
		out = append(out, cj)
	}
	return out, rows.Err()
}

// claimTimeout bounds one claim statement.
const claimTimeout = 30 * time.Second

// fetchersPerQueue is how many claim loops each queue runs. While one loop's claim is in
// flight, another can claim the slots that free up meanwhile: the claims pipeline, and a
// busy database gives the worker's claims a fairer share of its CPU.
const fetchersPerQueue = 2

// maxClaimConns bounds the claim statements one worker has in flight at once, across all
// its queues, and so the pooled connections its claims use: 100 queues with a backlog
// must not take 200 connections. Two cores of database gain nothing from more claims at
// once than this; a worker with fewer queues uses fetchersPerQueue per queue.
const maxClaimConns = 8

// claimConns is how many claim statements a worker with queues queues has in flight at most.
func claimConns(queues int) int { return min(fetchersPerQueue*queues, maxClaimConns) }

// claimLoopConfig is what a queue's claim loops need from the worker.
type claimLoopConfig struct {
	claimer       *claimer
	workerID      string
	fetchCooldown time.Duration // negative: never wait for more free slots
	logger        *slog.Logger
	// conns holds one token per claim statement allowed in flight (claimConns), shared by
	// every queue of the worker.
	conns chan struct{}
	// gate bounds the claims and outcome batches in flight by the number of processes
	// serving the queues (fleet.go); a claim takes a turn after its connection token.
	gate *stmtGate
	// start registers a claimed job (its context, its lease) and returns it ready for
	// the runners.
	start func(jobBase context.Context, job claimedJob) dispatched
	// stale reports whether the lease a claim wrote may be ending already (the claim's
	// reply came late, held up in a hanging connection): such a job must not start, since
	// another worker may soon hold it.
	stale func(job claimedJob) bool
	// release puts stale claims back in the queue, fenced: one already taken back is left
	// alone.
	release func(jobs []claimedJob)
}

// dispatched is a claimed job on its way to a runner.
type dispatched struct {
	ctx     context.Context
	cancel  context.CancelCauseFunc
	key     jobKey
	row     *JobRow
	timeout time.Duration // the job's own timeout; 0: the kind's or the worker's
	slot    bool          // claimed under a concurrency limit (Worker.holdsSlot)
}

// queueRunner holds one queue's claim loops and slots, and the channel to its runners.
type queueRunner struct {
	cfg    claimLoopConfig
	name   string
	max    int64
	active atomic.Int64 // slots taken: jobs running, or reserved by a claim in flight
	more   atomic.Bool  // the last claim filled its batch: there may be a backlog
	paused atomic.Bool  // the queue is paused: claim nothing (pause.go)
	wakes  []chan struct{}
	jobs   chan dispatched // to the runners; room for max jobs, so a send never blocks

	// flow is the queue's limited claim path (flow.go); nil: the plain claim (claimSQL).
	flow atomic.Pointer[flowQueue]
	// plainMu is held for reading by each plain claim in flight (flowQueue.adopt).
	plainMu sync.RWMutex
	// slotWait: the last claim of a slotted queue (flowclaim.go) found fewer free slots
	// or due jobs than it asked for; it claims again once this worker's finished jobs are
	// recorded (flowWatch.slotsFreed), when their slots are free in the database.
	slotWait atomic.Bool
	claims   atomic.Int32 // claim statements of this queue in flight
	// wakeSeq counts signals; claimSeq is the count when the latest claim statement
	// started. A slotted queue's loop woken by signals that all came before a claim
	// started does not claim: that claim saw what they announced.
	wakeSeq, claimSeq atomic.Uint64
}

func newQueueRunner(name string, maxWorkers int, cfg claimLoopConfig) *queueRunner {
	q := &queueRunner{cfg: cfg, name: name, max: int64(maxWorkers), jobs: make(chan dispatched, maxWorkers)}
	for range fetchersPerQueue {
		q.wakes = append(q.wakes, make(chan struct{}, 1))
	}
	return q
}

// signal wakes the claim loops; wake-ups coalesce.
func (q *queueRunner) signal() {
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
func (q *queueRunner) slotsFreed(n int) {
	if q.claims.Load() > 0 || int64(n) > q.claimSize() {
		q.signal()
		return
	}
	q.wakeSeq.Add(1)
	select {
	case q.wakes[0] <- struct{}{}:
	default:
	}
}

// finished gives back the slot of a job whose handler returned, and wakes the claim
// loops when the queue may have a backlog.
func (q *queueRunner) finished() {
	q.active.Add(-1)
	if q.more.Load() {
		q.signal()
	}
}

// reserve takes the free slots for one claim, at most limit, and returns how many; the
// claim gives back those it does not fill. Two claim loops never count the same slot.
func (q *queueRunner) reserve(limit int64) int64 {
	for {
		cur := q.active.Load()
		n := min(q.max-cur, limit)
		if n <= 0 {
			return 0
		}
		if q.active.CompareAndSwap(cur, cur+n) {
			return n
		}
	}
}

// claimSize is the most jobs one claim asks for: every free slot of the worker, or, on
// a slotted queue, at most the queue's global limit (a claim cannot take more), so that
// the other claim loop keeps slots to claim with while this one's claim is in flight.
func (q *queueRunner) claimSize() int64 {
	if f := q.flow.Load(); f != nil && f.limits.slotted() {
		return int64(f.limits.Concurrency)
	}
	return q.max
}

// claim takes up to n jobs: through the limited path when the queue has limits, else
// through claimSQL, exactly as if flow control did not exist.
func (q *queueRunner) claim(ctx context.Context, n int) ([]claimedJob, claimHint, error) {
	q.plainMu.RLock()
	if f := q.flow.Load(); f != nil {
		q.plainMu.RUnlock()
		if err := f.adopt(ctx, q); err != nil {
			return nil, claimHint{}, err
		}
		return f.claimer.claim(ctx, q.name, f.limits, n, q.cfg.workerID)
	}
	defer q.plainMu.RUnlock()
	jobs, err := q.cfg.claimer.claim(ctx, q.name, n, q.cfg.workerID)
	return jobs, claimHint{}, err
}

// run is one claim loop. It sleeps until it is signalled — by a notification for the
// queue, by the fallback poll finding due jobs in it, or by a finished job with a backlog
// behind it — and then claims until the queue has no due job left or no free slot, until
// ctx ends. An idle queue costs the database nothing: its loops run no statement until
// one of those signals comes. Claimed jobs go to the runners with contexts derived from
// jobBase. A rate-limited queue also wakes when its next token is due.
func (q *queueRunner) run(ctx, jobBase context.Context, wake <-chan struct{}) {
	const firstDelay = 10 * time.Millisecond
	errDelay := firstDelay
	// token fires when a rate-limited queue's next token is due (flow.go); nil otherwise.
	var token *time.Timer
	var tokenC <-chan time.Time
	defer func() {
		if token != nil {
			token.Stop()
		}
	}()
	for {
		woken := false // by a signal, not by the token timer
		select {
		case <-ctx.Done():
			return
		case <-wake:
			woken = true
		case <-tokenC:
		}
		tokenC = nil
		if f := q.flow.Load(); f != nil && !f.limits.slotted() && wake != (<-chan struct{})(q.wakes[0]) {
			// This limited queue's claims take turns under one lock across all processes:
			// a second claim loop would only wait in that line. The first loop claims.
			continue
		} else if f != nil && f.limits.slotted() && woken && q.claimSeq.Load() >= q.wakeSeq.Load() {
			// Every signal so far came before a claim of the other loop started (a
			// wake-up kept while this loop claimed): that claim saw what they announced.
			continue
		}
		var next time.Duration // a rate limit's next token, if a claim was cut by it
		for ctx.Err() == nil && !q.paused.Load() {
			if free := q.max - q.active.Load(); free <= 0 {
				break
			} else if free < (q.max+3)/4 && q.more.Load() && q.cfg.fetchCooldown > 0 {
				// A backlog and few free slots: let a few more handlers finish so the next
				// claim is a batch, not a trickle.
				sleepCtx(ctx, q.cfg.fetchCooldown)
			}
			select {
			case q.cfg.conns <- struct{}{}:
			case <-ctx.Done():
				return
			}
			// Slots are counted once the turn is ours: slots freed while waiting for it
			// join this claim.
			if q.cfg.gate.acquire(ctx) != nil {
				<-q.cfg.conns
				return
			}
			free := q.reserve(q.claimSize())
			if free == 0 {
				q.cfg.gate.release()
				<-q.cfg.conns
				break
			}
			// The claim must not be cut off by shutdown: cancelling it mid-flight could commit
			// the claim and lose its result, leaving jobs running for nobody until the
			// sweeper takes them back. Jobs it returns run; shutdown waits for them.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
			q.claims.Add(1)
			for seq := q.wakeSeq.Load(); ; {
				if cur := q.claimSeq.Load(); cur >= seq || q.claimSeq.CompareAndSwap(cur, seq) {
					break
				}
			}
			jobs, hint, err := q.claim(cctx, int(free))
			q.claims.Add(-1)
			cancel()
			q.cfg.gate.release()
			<-q.cfg.conns
			q.active.Add(int64(len(jobs)) - free) // give back the slots not filled
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				q.cfg.logger.Warn("skiplock: claim failed; retrying", "queue", q.name, "err", err, "retry_in", errDelay)
				sleepCtx(ctx, errDelay)
				// A terminated server leaves every pooled connection dead: the first retries
				// are quick, each one discards a dead connection; then back off.
				if errDelay < 40*time.Millisecond {
					errDelay += firstDelay / 2
				} else {
					errDelay = min(errDelay*2, 5*time.Second)
				}
				continue
			}
			errDelay = firstDelay
			q.more.Store(int64(len(jobs)) == free && !hint.slotWait || hint.more)
			q.slotWait.Store(hint.slotWait)
			var stale []claimedJob
			for _, j := range jobs {
				if q.cfg.stale(j) {
					stale = append(stale, j)
					continue
				}
				q.jobs <- q.cfg.start(jobBase, j)
			}
			if len(stale) > 0 {
				q.cfg.logger.Warn("skiplock: a claim's reply came too late to run its jobs safely; putting them back",
					"queue", q.name, "jobs", len(stale))
				q.cfg.release(stale)
				q.active.Add(-int64(len(stale)))
			}
			if hint.retryIn > 0 {
				next = hint.retryIn
			}
			if (int64(len(jobs)) < free || hint.slotWait) && !hint.again {
				break
			}
			// A full batch: there may be more due jobs, so claim again at once.
		}
		if next > 0 {
			if token == nil {
				token = time.NewTimer(next)
			} else {
				token.Reset(next)
			}
			tokenC = token.C
		}
	}
}
