// This file holds the completer: it batches many successes into one fenced statement per
// flush and completion mode (the modes and their statements are in completion.go), and
// reads whether a success CompleteTx wrote in a handler's transaction committed.

package record

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/groupcommit"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/internal/settle"
	"github.com/skiplock/skiplock/internal/waiting"
)

// WriteTimeout bounds the write of one outcome batch, success or failure, retries
// included. Past it (the database out of reach), the batch's jobs are put back in the
// queue (BatchListeners.Unrecorded); at a worker's shutdown, Run waits for it.
const WriteTimeout = 30 * time.Second

// CompleterLoops is how many success batches may be in flight at once.
const CompleterLoops = 2

// completerQueue is how many successes may wait for the batching loops; add waits when
// that many do.
const completerQueue = 4096

// slowSuccessBatch is how long a success batch written with the statement that waits for
// locks may take before the completer switches to the one that passes over locked rows,
// for skipModeFor; then it tries the waiting statement again. Alone on a queue, a
// batch takes about a millisecond and meets no lock, and the waiting statement, which
// costs the database less (measured: 59–64 against 68 µs of server CPU per job in
// bench drain), stays in use; with 16 worker processes on one queue, batches that waited
// took 68–211 ms on average.
const slowSuccessBatch = 25 * time.Millisecond

// skipModeFor: see slowSuccessBatch.
const skipModeFor = 10 * time.Second

// SkipLockedFor is how long a success whose row was locked is tried again in later
// batches with the statement that passes over locked rows; then it goes in one that waits
// for the lock, which also tells a stale attempt (its row reclaimed or cancelled) from a
// locked one. A claim's lock lasts as long as the claim: milliseconds, but 60–240 ms on
// average with 16 busy worker processes on two cores. Its lease is renewed meanwhile.
const SkipLockedFor = 5 * time.Second

// retryAfter is how long a batch of successes passed over waits before it is tried again
// when nothing else comes: as long as its latest one has waited so far (so the waits
// double), at least the batching interval, at most 100 ms.
func (c *Completer) retryAfter(batch []Success) time.Duration {
	waited := time.Duration(1<<63 - 1)
	for _, k := range batch {
		waited = min(waited, time.Since(k.skipped))
	}
	return min(max(waited, c.flushEvery), 100*time.Millisecond)
}

// Completer batches successes into one statement per flush and completion mode: a batch
// whose jobs have different modes (per queue or per kind) is written with one statement
// per mode present, at most len(completionModes), whatever its size.
type Completer struct {
	pool  *pgxpool.Pool
	stmts map[jobtype.Completion]completeStmts
	// committedSQL is committedInTxSQL, rendered.
	committedSQL string
	// wake notifies the waiters of the jobs each batch recorded (internal/waiting), in
	// the batch's transaction and round trip. A batch on the pool runs
	// pgutil.PlanSettingsSQL first: one cached plan per connection, reaching the rows by
	// key at every size. Postgres planned small batches anew at each run (their array
	// of ids costs less than the generic plan's guess of ten): 5,426 plans in 5,969
	// batches, 0.31 ms each, with four worker processes (bench/README.md, round 6).
	wake waiting.Waking
	// modeOf says how a job's success is recorded (its kind's, queue's or worker's mode).
	modeOf func(queue, kind string) jobtype.Completion
	// skipUntil: until then (Unix ns), batches pass over locked rows (see slowSuccessBatch).
	skipUntil  atomic.Int64
	workerID   string
	BatchSize  int
	flushEvery time.Duration
	logger     *slog.Logger

	// done is told what each batch did: which attempts it ended, and how many slots it
	// freed.
	done BatchListeners

	// urgent records the successes of jobs that hold a slot of a concurrency limit. A
	// slot is free again only once its job's success is committed, so they do not wait
	// out the batching interval when nothing else is coming: the success of the last
	// such job of the worker still running sends its batch at once. The others wait for
	// it, or for the interval, so that the jobs of one claim are recorded together and
	// their slots come back together: recorded one by one (tried: flush size 1, claims of
	// 3 jobs), each freed slot made a claim of its own, and per-statement costs took over.
	urgent *groupcommit.Batcher[Success]
	// gate bounds this worker's statements on the queues' rows by the fleet's size
	// (internal/pgutil, gate.go); each statement takes a turn. nil: no bound.
	gate *pgutil.Gate
	// flows settles the workflow tasks of a batch in the batch's transaction
	// (internal/settle); nil: none.
	flows *settle.Settler

	Ch      chan Success
	full    chan struct{} // add signals that fullAt successes wait in ch
	fullAt  int           // a batch's worth: min(batchSize, completerQueue)
	quit    chan struct{}
	stopped chan struct{} // closed when run returned

	mu     sync.RWMutex // add holds it to read; stop to close
	closed bool
}

// BatchListeners are told what each outcome batch (of successes or of failures) did.
type BatchListeners struct {
	// Written is called with the attempts of each batch once its statement ended, written
	// or not: the worker stops renewing their leases (heldJobs.removeKeys).
	Written func(keys []jobtype.AttemptKey)
	// Freed is called after each batch is recorded: the jobs' slots are free in the
	// database only from then on (flow control claims again then: flowWatch.slotsFreed).
	Freed func(n int)
	// Unrecorded is called, before written, with the attempts whose outcome could not be
	// written: they are put back in the queue (lease.putBackUnrecorded). Left running, no one
	// would take them while this worker lives (ownership is by liveness).
	Unrecorded func(keys []jobtype.AttemptKey)
}

// NewCompleter records successes in the mode modeOf gives each job's queue and kind, at
// most batchSize per statement, a success waiting at most flushEvery for others; each
// statement takes a turn of gate.
func NewCompleter(pool *pgxpool.Pool, schema string, modeOf func(queue, kind string) jobtype.Completion, workerID string, batchSize int, flushEvery time.Duration,
	gate *pgutil.Gate, done BatchListeners, flows *settle.Settler, logger *slog.Logger) *Completer {
	c := &Completer{
		pool: pool, stmts: RenderCompleteStmts(schema), committedSQL: pgutil.Render(schema, committedInTxSQL), wake: waiting.NewWaking(schema).WithPlanSettings(), modeOf: modeOf, workerID: workerID, flows: flows,
		BatchSize: batchSize, flushEvery: flushEvery, gate: gate, done: done, logger: logger,
		Ch: make(chan Success, completerQueue), quit: make(chan struct{}), stopped: make(chan struct{}),
		full: make(chan struct{}, 1), fullAt: min(batchSize, completerQueue),
	}
	// Slot-holding successes wait for locks: their slots are free only once written.
	c.urgent = &groupcommit.Batcher[Success]{Window: flushEvery, MaxRows: batchSize, MaxInFlight: CompleterLoops, Hold: true,
		Write: func(batch []Success) { c.flush(batch, false) }}
	return c
}

// Success is one success to record, with what its handler reported (nil: nothing).
type Success struct {
	key              jobtype.AttemptKey
	mode             jobtype.Completion // how it is recorded (completer.modeOf)
	progress, output *string
	task             bool      // a workflow task: its batch settles it (internal/settle)
	skipped          time.Time // when a batch first passed over its locked row
	// inTx: the handler wrote this success with CompleteTx (jobtype.CompletedInTx). The
	// batch writes it again in case the handler's transaction rolled back; when it
	// committed, the statement matches no row, which is expected, not stale.
	inTx bool
}

// Add reports the success of a held attempt, with what its handler reported (st may be
// nil), and whether the completer took it: after stop it takes nothing (and never blocks),
// and the caller must say so. A send that finds the channel full waits for the batching
// loops, which keep reading until stop. urgent: the job holds a slot of a concurrency
// limit (see c.urgent); last: no other such job of the worker is running, so its batch
// goes now. A workflow task's success also settles its dependents (workflow*.go), in the
// same transaction.
func (c *Completer) Add(k jobtype.AttemptKey, row *jobtype.JobRow, st *jobtype.State, urgent, last bool) bool {
	p, o := st.Reported()
	cp := Success{key: k, mode: c.modeOf(row.Queue, row.Kind), progress: p, output: o, task: settle.IsTask(row),
		inTx: jobtype.CompletedInTx(row)}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return false
	}
	switch {
	case urgent && last:
		c.urgent.PostLast(cp, 1)
		return true
	case urgent:
		c.urgent.Post(cp, 1)
		return true
	}
	c.Ch <- cp
	if len(c.Ch) >= c.fullAt {
		select { // a batch's worth waits: the loop collecting one writes it now
		case c.full <- struct{}{}:
		default:
		}
	}
	return true
}

// stop makes run flush what was added and return. Every add that returned true is
// flushed: stop waits for the adds in flight before it closes quit.
func (c *Completer) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		close(c.quit)
	}
}

// Start starts the batching loops. They outlive ctx: the successes of handlers that
// return during shutdown are still written, until Stop.
func (c *Completer) Start(context.Context) error {
	go c.run()
	return nil
}

// Stop writes what was added and waits for the batching loops.
func (c *Completer) Stop() {
	c.stop()
	<-c.stopped
}

// run runs completerLoops batching loops over the same channel until stop, waits for the
// urgent successes to be written, then closes stopped.
func (c *Completer) run() {
	defer close(c.stopped)
	var wg sync.WaitGroup
	for range CompleterLoops {
		wg.Add(1)
		go func() { defer wg.Done(); c.loop() }()
	}
	wg.Wait()
	c.urgent.Wait()
}

// loop is one batching loop. Idle, it waits for a success; the first one starts a batch,
// which then waits, without the loop reading the channel, until its window ends
// (flushEvery) or enough successes wait in the channel to fill it (add signals full):
// then it takes those waiting and writes them. A success added meanwhile wakes no
// goroutine, so the successes of a window cost one wake-up, not one each.
func (c *Completer) loop() {
	batch := make([]Success, 0, c.BatchSize)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		if len(batch) == 0 {
			select {
			case k := <-c.Ch:
				if batch = c.take(append(batch, k)); len(batch) < c.BatchSize {
					timer.Reset(c.flushEvery)
					continue
				}
			case <-c.quit:
				c.flushRest(batch)
				return
			}
		} else {
			select {
			case <-timer.C:
			case <-c.full:
				if len(batch)+len(c.Ch) < c.fullAt {
					continue // a signal for a batch another loop took
				}
				timer.Stop()
			case <-c.quit:
				timer.Stop()
				c.flushRest(batch)
				return
			}
			batch = c.take(batch)
		}
		batch = c.flush(batch, true)
		if len(batch) > 0 { // passed over: they go with the next batch
			timer.Reset(c.retryAfter(batch))
		}
	}
}

// take adds to batch the successes waiting in the channel, up to a full batch.
func (c *Completer) take(batch []Success) []Success {
	for len(batch) < c.BatchSize {
		select {
		case k := <-c.Ch:
			batch = append(batch, k)
		default:
			return batch
		}
	}
	return batch
}

// flushRest writes batch and every success added before stop, then returns.
func (c *Completer) flushRest(batch []Success) {
	for {
		select {
		case k := <-c.Ch:
			batch = append(batch, k)
			if len(batch) >= c.BatchSize {
				batch = c.flush(batch, true)
			}
		default:
			c.flush(batch, false)
			return
		}
	}
}

// FlushNow records, in the calling goroutine, the successes added while run is not
// running (a Worker's synchronous runs for skiplocktest).
func (c *Completer) FlushNow() {
	var batch []Success
	for {
		select {
		case k := <-c.Ch:
			batch = append(batch, k)
		default:
			c.flush(batch, false)
			c.urgent.Wait()
			return
		}
	}
}

// flush writes batch, one group per completion mode (at most len(completionModes)
// statements), and returns what it carries over to the next batch (flushMode).
func (c *Completer) flush(batch []Success, carry bool) []Success {
	if len(batch) == 0 {
		return batch
	}
	first := batch[0].mode
	if !slices.ContainsFunc(batch, func(k Success) bool { return k.mode != first }) {
		return c.flushMode(batch, carry) // the common case: one mode, no copy
	}
	var carried []Success
	for _, mode := range completionModes {
		var group []Success
		for _, k := range batch {
			if k.mode == mode {
				group = append(group, k)
			}
		}
		if len(group) > 0 {
			carried = append(carried, c.flushMode(group, carry)...)
		}
	}
	return append(batch[:0], carried...)
}

// flushMode writes batch, whose successes share one completion mode, and returns what it
// carries over to the next batch. While the completer passes over locked rows
// (skipping), and with carry, that is the successes whose rows were locked (see
// completeSQL), for up to skipLockedFor; the others, and all of them otherwise, are
// written with the statement that waits for locks.
func (c *Completer) flushMode(batch []Success, carry bool) []Success {
	// Sorted ids take row locks in one order, so concurrent batches cannot deadlock.
	slices.SortFunc(batch, func(a, b Success) int { return cmp.Compare(a.key.ID, b.key.ID) })
	var wait, carried []Success
	if carry && !c.skipping() {
		// The waiting statement costs less (it locks each row once, by deleting or
		// updating it); it is used until one of its batches is slow.
		carry = slices.ContainsFunc(batch, func(k Success) bool { return !k.skipped.IsZero() })
	}
	if carry {
		// Most batches go whole with the skipping statement: then batch itself is skip.
		skip := batch
		if slices.ContainsFunc(batch, skipTooLong) {
			skip = make([]Success, 0, len(batch))
			for _, k := range batch {
				if skipTooLong(k) {
					wait = append(wait, k)
				} else {
					skip = append(skip, k)
				}
			}
		}
		if len(skip) > 0 {
			carried = c.writeSkipping(skip)
		}
	} else {
		wait = batch
	}
	if len(wait) > 0 {
		c.write(wait)
	}
	return append(batch[:0], carried...)
}

// skipTooLong reports whether k was passed over for SkipLockedFor already: it goes with
// the statement that waits for locks.
func skipTooLong(k Success) bool {
	return !k.skipped.IsZero() && time.Since(k.skipped) >= SkipLockedFor
}

// Args returns the statement for batch, whose successes share one mode (skipping locked
// rows or not), and its arguments.
func (c *Completer) Args(batch []Success, skip bool) (string, []any) {
	st := c.stmts[batch[0].mode]
	ids := make([]int64, len(batch))
	fences := make([]int64, len(batch))
	report := false
	for i, k := range batch {
		ids[i], fences[i] = k.key.ID, k.key.Fence
		report = report || k.output != nil || k.progress != nil
	}
	// As text (pgutil.Int8ArrayText): pgx sends it as it is, no work per element; the
	// wake-up takes the ids' parameter too (args[0]).
	q, args := st.sql, []any{pgutil.Int8ArrayText(ids), pgutil.Int8ArrayText(fences), c.workerID}
	if skip {
		q = st.sqlSkip
	}
	if report && st.sqlReport != "" {
		outputs, progress := make([]*string, len(batch)), make([]*string, len(batch))
		for i, k := range batch {
			outputs[i], progress[i] = k.output, k.progress
		}
		q, args = st.sqlReport, append(args, outputs, progress)
		if skip {
			q = st.sqlReportSkip
		}
	}
	return q, args
}

// skipping reports whether success batches pass over locked rows now.
func (c *Completer) skipping() bool { return time.Now().UnixNano() < c.skipUntil.Load() }

// SkipFor makes success batches pass over locked rows for skipModeFor from now.
func (c *Completer) SkipFor() { c.skipUntil.Store(time.Now().Add(skipModeFor).UnixNano()) }

// writeSkipping writes batch with the statement that passes over locked rows, and returns
// the successes it passed over.
func (c *Completer) writeSkipping(batch []Success) (passed []Success) {
	q, args := c.Args(batch, true)
	ctx, cancel := context.WithTimeout(context.Background(), WriteTimeout)
	defer cancel()
	// recorded[i]: batch[i]'s row was recorded. batch is sorted by id (flushMode): a
	// returned id is found by a binary search.
	recorded := make([]bool, len(batch))
	// A replay after a lost reply is harmless: rows the first run recorded no longer
	// match the fence. They are carried, and after skipLockedFor the waiting statement
	// finds them stale and logs them so (a warning that, in this rare case, is wrong).
	err := pgutil.Retry(ctx, func() error {
		return c.gate.Do(ctx, func() error {
			return c.flows.Run(ctx, c.pool, taskIDs(batch), func(db jobtype.DBTX) error {
				clear(recorded)
				return c.wake.Query(ctx, db, q, args, args[0], func(rows pgx.Rows) error {
					var id int64
					_, err := pgx.ForEachRow(rows, []any{&id}, func() error {
						i, _ := slices.BinarySearchFunc(batch, id, func(k Success, id int64) int { return cmp.Compare(k.key.ID, id) })
						for ; i < len(batch) && batch[i].key.ID == id; i++ {
							recorded[i] = true // every attempt of the id, as a set of ids would
						}
						return nil
					})
					return err
				})
			})
		})
	})
	if err != nil {
		c.logger.Error("skiplock: recording successes failed; the jobs are put back in the queue and will run again",
			"jobs", len(batch), "err", err)
		c.Finish(batch, false)
		return nil
	}
	if !slices.Contains(recorded, false) {
		c.Finish(batch, true) // the common case: all recorded, nothing carried
		return nil
	}
	done := make([]Success, 0, len(batch))
	now := time.Now()
	for i, k := range batch {
		if recorded[i] {
			done = append(done, k)
			continue
		}
		if k.skipped.IsZero() {
			k.skipped = now
		}
		passed = append(passed, k)
	}
	c.Finish(done, true)
	return passed
}

// write writes batch with the statement that waits for locked rows.
func (c *Completer) write(batch []Success) {
	q, args := c.Args(batch, false)
	ctx, cancel := context.WithTimeout(context.Background(), WriteTimeout)
	defer cancel()
	var n int64
	var began time.Time
	// A replay after a lost reply is harmless: rows the first run recorded no longer
	// match the fence.
	err := pgutil.Retry(ctx, func() error {
		return c.gate.Do(ctx, func() error {
			began = time.Now() // the statement's own time, not the wait for a turn
			return c.flows.Run(ctx, c.pool, taskIDs(batch), func(db jobtype.DBTX) error {
				tag, err := c.wake.Exec(ctx, db, q, args, args[0])
				n = tag.RowsAffected()
				return err
			})
		})
	})
	if err == nil && time.Since(began) > slowSuccessBatch {
		c.SkipFor()
	}
	switch {
	case err != nil:
		c.logger.Error("skiplock: recording successes failed; the jobs are put back in the queue and will run again",
			"jobs", len(batch), "err", err)
	case n < expectedMatches(batch):
		c.logger.Warn("skiplock: stale successes ignored: jobs were reclaimed or cancelled since this worker claimed them",
			"stale", expectedMatches(batch)-n)
	}
	c.Finish(batch, err == nil)
}

// expectedMatches is how many rows a success statement for batch must match for none of
// its successes to be stale: every one but those CompleteTx wrote already (inTx).
func expectedMatches(batch []Success) int64 {
	n := int64(len(batch))
	for _, k := range batch {
		if k.inTx {
			n--
		}
	}
	return n
}

// Finish tells the worker that batch is written (ok) or given up: slots are free, leases
// no longer renewed.
func (c *Completer) Finish(batch []Success, ok bool) {
	if len(batch) == 0 {
		return
	}
	if ok && c.done.Freed != nil {
		c.done.Freed(len(batch))
	}
	keys := make([]jobtype.AttemptKey, len(batch))
	for i, k := range batch {
		keys[i] = k.key
	}
	if !ok && c.done.Unrecorded != nil {
		c.done.Unrecorded(keys)
	}
	if c.done.Written != nil {
		c.done.Written(keys)
	}
}

// taskIDs returns the ids of the workflow tasks in batch (nil when none).
func taskIDs(batch []Success) []int64 {
	var ids []int64
	for _, k := range batch {
		if k.task {
			ids = append(ids, k.key.ID)
		}
	}
	return ids
}

// committedInTxSQL says whether the success of attempt ($1 id, $2 token) that CompleteTx
// wrote in a handler's transaction has committed: the archive holds the row as succeeded
// with the attempt's token (archive mode), the hot table does (keep mode), or the row is
// in neither (delete mode). A transaction that rolled back left the row running with the
// token, which none of the three matches. Each test reaches a row by its primary key.
const committedInTxSQL = `SELECT EXISTS (SELECT 1 FROM {s}.jobs_archive WHERE id = $1 AND fence = $2 AND status = 'succeeded')
	OR EXISTS (SELECT 1 FROM {s}.jobs WHERE id = $1 AND fence = $2 AND status = 'succeeded')
	OR NOT EXISTS (SELECT 1 FROM {s}.jobs WHERE id = $1) AND NOT EXISTS (SELECT 1 FROM {s}.jobs_archive WHERE id = $1)`

// committedCheckTimeout bounds CommittedInTx: past it (the database out of reach), the
// attempt is recorded by what its handler returned, as before CompleteTx.
const committedCheckTimeout = 5 * time.Second

// CommittedInTx reports whether the success of attempt k, which CompleteTx wrote in its
// handler's transaction, has committed (committedInTxSQL).
func (c *Completer) CommittedInTx(k jobtype.AttemptKey) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), committedCheckTimeout)
	defer cancel()
	var ok bool
	err := c.pool.QueryRow(ctx, c.committedSQL, k.ID, k.Fence).Scan(&ok)
	return ok, err
}
