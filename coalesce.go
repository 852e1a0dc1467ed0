// This file holds the coalescing of enqueues made outside a caller's transaction: concurrent
// Enqueue (and small EnqueueMany) calls share one multi-row INSERT and so one commit — a
// group commit in the client — and each caller gets back its own rows or its own error
// once that commit is done.

package skiplock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultCoalesceWindow is the default of [Config].CoalesceWindow.
const DefaultCoalesceWindow = time.Millisecond

// Limits of the coalescer.
const (
	// coalesceMaxRows is the most jobs one coalesced statement writes: a batch that reaches
	// it is sent at once.
	coalesceMaxRows = 1000
	// coalesceMaxInFlight is how many coalesced statements may run at once (each holds a
	// pooled connection). Batches ready beyond it wait for one to finish.
	coalesceMaxInFlight = 4
	// coalesceManyMax is the largest EnqueueMany that joins a coalesced batch; larger ones
	// write with COPY in a transaction of their own, which is cheaper per row.
	coalesceManyMax = 100
	// coalesceTimeout bounds one coalesced statement. It is the batch's own limit, not a
	// caller's: one caller's deadline must not cut the commit of the others' jobs.
	coalesceTimeout = 30 * time.Second
	// maxCoalesceWindow is the largest Config.CoalesceWindow.
	maxCoalesceWindow = 100 * time.Millisecond
)

// errInsertAlone tells a caller that its batch was refused by the database as a whole
// (nothing of it was written): it must write its jobs on its own, so that a job the
// database refuses fails only its own caller.
var errInsertAlone = errors.New("skiplock: coalesced batch refused; insert alone")

// enqueueRequest is one caller's part of a batch: the jobs of one Enqueue (one) or of one
// EnqueueMany call, written together or not at all.
type enqueueRequest struct {
	jobs []newJob
	many bool // from EnqueueMany: its queues are notified unthrottled, as EnqueueMany promises

	done chan struct{} // closed once rows and err are set
	rows []*JobRow     // the inserted rows, in the order of jobs
	err  error

	batch     *enqueueBatch // guarded by coalescer.mu
	withdrawn bool          // guarded by coalescer.mu: the caller left before its batch was sent
}

// enqueueBatch is the requests that share one statement.
type enqueueBatch struct {
	reqs  []*enqueueRequest
	rows  int         // jobs of the requests not withdrawn
	sent  bool        // its requests are fixed and being written
	timer *time.Timer // seals the batch when the window ends
}

// coalescer groups concurrent enqueues into batches and writes each batch with one
// statement (write). A batch is sent
//
//   - at once when no other batch is being written (an idle client adds no latency),
//   - when a batch in flight finishes (the rows that arrived meanwhile go together),
//   - when it holds coalesceMaxRows jobs, or
//   - window after its first job, whatever else is in flight (the bound on added latency),
//
// and at most coalesceMaxInFlight batches are written at once.
//
// It owns no long-lived goroutine: a batch is written by a goroutine started for it, which
// writes the batches that are ready when it finishes and ends when none is; a timer's
// function only seals a batch. So nothing needs closing, and no goroutine outlives the
// statements in flight.
type coalescer struct {
	window time.Duration
	write  func(reqs []*enqueueRequest) // writes the requests and delivers their results

	mu       sync.Mutex
	open     *enqueueBatch   // collecting jobs; nil when none
	ready    []*enqueueBatch // sealed, waiting for a slot
	inFlight int
}

// submit adds the jobs of one call to a batch and waits until the commit that holds them,
// or until ctx ends. It returns the inserted rows, the caller's own error, or errInsertAlone.
//
// If ctx ends first, submit returns at once with an error that wraps ctx's. The jobs are
// then not inserted if their batch had not been sent yet (they are withdrawn from it); if
// it had, they are inserted if the batch commits, which it does unless the database
// refuses it — as with any statement whose reply a cancelled caller stops waiting for. The
// error says which of the two happened.
func (c *coalescer) submit(ctx context.Context, req *enqueueRequest) ([]*JobRow, error) {
	req.done = make(chan struct{})
	c.mu.Lock()
	b := c.open
	fresh := b == nil
	if fresh {
		b = &enqueueBatch{}
		c.open = b
	}
	b.reqs = append(b.reqs, req)
	b.rows += len(req.jobs)
	req.batch = b
	switch {
	case b.rows >= coalesceMaxRows || c.inFlight == 0:
		c.seal(b)
	case fresh:
		b.timer = time.AfterFunc(c.window, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.open == b {
				c.seal(b)
				c.dispatch()
			}
		})
	}
	c.dispatch()
	c.mu.Unlock()

	select {
	case <-req.done:
		return req.rows, req.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	sent := req.batch.sent
	if !sent {
		req.withdrawn = true
		req.batch.rows -= len(req.jobs)
	}
	c.mu.Unlock()
	if !sent {
		return nil, fmt.Errorf("skiplock: enqueue: %w (the job was not inserted: it was still waiting for its batch)", ctx.Err())
	}
	return nil, fmt.Errorf("skiplock: enqueue: %w (the job was already being written with others; it is inserted if that commit succeeds)", ctx.Err())
}

// seal closes the open batch b to new jobs and queues it for writing. c.mu is held.
func (c *coalescer) seal(b *enqueueBatch) {
	if b.timer != nil {
		b.timer.Stop()
	}
	if c.open == b {
		c.open = nil
	}
	c.ready = append(c.ready, b)
}

// dispatch starts a writing goroutine for each ready batch while slots are free. c.mu is
// held.
func (c *coalescer) dispatch() {
	for c.inFlight < coalesceMaxInFlight {
		b := c.next()
		if b == nil {
			return
		}
		c.inFlight++
		go c.run(b)
	}
}

// next takes the first ready batch and fixes its requests (marks it sent), or returns nil.
// c.mu is held.
func (c *coalescer) next() *enqueueBatch {
	if len(c.ready) == 0 {
		return nil
	}
	b := c.ready[0]
	c.ready[0] = nil
	c.ready = c.ready[1:]
	b.sent = true
	return b
}

// run writes b, then every batch that is ready, or sealed because this one finished, and
// ends when there is none.
func (c *coalescer) run(b *enqueueBatch) {
	for b != nil {
		live := slices.DeleteFunc(b.reqs, func(r *enqueueRequest) bool { return r.withdrawn })
		if len(live) > 0 {
			c.write(live)
		}
		c.mu.Lock()
		if len(c.ready) == 0 && c.open != nil {
			// The jobs that arrived while this batch was written go now.
			c.seal(c.open)
		}
		b = c.next()
		if b == nil {
			c.inFlight--
		}
		c.mu.Unlock()
	}
}

// coalescedInsertSQL writes the jobs of a coalesced batch with one statement, so one
// commit covers them all (autocommit: the statement is its own transaction).
//
//   - unnest turns the per-column arrays into rows; the payload goes as text and is cast,
//     as in the single insert (the simple protocol would send []byte as bytea).
//   - run_at NULL means due now by the database clock.
//   - No ON CONFLICT: jobs with a unique key never join a batch (their duplicate answer
//     needs a lookup per job), so every row is inserted or the statement fails as a whole.
//   - Rows are matched back to their callers by id: the rows of the SELECT are inserted in
//     array order and each takes the next identity value as it is inserted, so ascending
//     ids follow the arrays' order, whatever order RETURNING sends them in.
const coalescedInsertSQL = `INSERT INTO {s}.jobs (queue, kind, payload, priority, max_attempts, run_at)
SELECT q, k, p::jsonb, pr, ma, COALESCE(ra, now())
FROM unnest($1::text[], $2::text[], $3::text[], $4::smallint[], $5::int[], $6::timestamptz[])
	AS t(q, k, p, pr, ma, ra)
RETURNING ` + jobColumns

// coalescedInsertNotifySQL is coalescedInsertSQL that also wakes the queues in $8 on
// channel $7, in the same transaction (delivered at its commit, not at all without it).
// The notifying CTE is volatile, so it is run exactly once and not inlined; the join with
// its single row makes the statement run it.
const coalescedInsertNotifySQL = `WITH ins AS (
` + coalescedInsertSQL + `
), woke AS (
	SELECT count(pg_notify($7, q)) FROM unnest($8::text[]) AS q
)
SELECT ins.* FROM ins CROSS JOIN woke`

// writeBatch writes the jobs of reqs with one statement and delivers each request its
// rows or an error. Queues with due jobs are woken like Enqueue's: through the throttle,
// except the queues of EnqueueMany calls, which are always notified.
func (c *Client) writeBatch(reqs []*enqueueRequest) {
	n := 0
	for _, r := range reqs {
		n += len(r.jobs)
	}
	var (
		queue = make([]string, 0, n)
		kind  = make([]string, 0, n)
		pay   = make([]string, 0, n)
		prio  = make([]int16, 0, n)
		maxA  = make([]int32, 0, n)
		runAt = make([]*time.Time, 0, n)
		due   = map[string]bool{} // queues with due jobs -> a call of EnqueueMany has some
	)
	for _, r := range reqs {
		for i := range r.jobs {
			j := &r.jobs[i]
			queue, kind, pay = append(queue, j.queue), append(kind, j.kind), append(pay, string(j.payload))
			prio, maxA, runAt = append(prio, j.priority), append(maxA, j.maxAttempts), append(runAt, j.runAt)
			if j.dueNow() {
				due[j.queue] = due[j.queue] || r.many
			}
		}
	}
	var notify, trailing []string
	for q, forced := range due {
		if forced || c.notify.throttle.takeNow(q) {
			notify = append(notify, q)
		} else {
			trailing = append(trailing, q)
		}
	}
	q, args := c.sql.coalesced, []any{queue, kind, pay, prio, maxA, runAt}
	if len(notify) > 0 {
		q, args = c.sql.coalescedNotify, append(args, c.notify.channel, notify)
	}

	ctx, cancel := context.WithTimeout(context.Background(), coalesceTimeout)
	defer cancel()
	rows, err := c.pool.Query(ctx, q, args...)
	var got []*JobRow
	if err == nil {
		// collectJobs closes rows, which waits for the end of the statement and so for
		// its commit: an error in the commit surfaces here.
		got, err = collectJobs(rows)
	}
	if err == nil && len(got) != n {
		// Cannot happen (the statement inserts every row or fails), but a caller must
		// never get another caller's row.
		err = fmt.Errorf("skiplock: enqueue: the batch statement returned %d rows for %d jobs; they were committed", len(got), n)
		for _, r := range reqs {
			r.err = err
			close(r.done)
		}
		return
	}
	if err != nil {
		deliver := c.wrapErr("enqueue", fmt.Errorf("the connection failed while the job's batch was being committed; the job may or may not have been inserted: %w", err))
		if refused(err) {
			// Nothing was written: each caller writes alone and gets its own answer.
			deliver = errInsertAlone
		}
		for _, r := range reqs {
			r.err = deliver
			close(r.done)
		}
		return
	}
	for _, q := range trailing {
		c.notify.throttle.trailing(q)
	}
	slices.SortFunc(got, func(a, b *JobRow) int { return cmp.Compare(a.ID, b.ID) })
	for _, r := range reqs {
		r.rows, got = got[:len(r.jobs):len(r.jobs)], got[len(r.jobs):]
		close(r.done)
	}
}

// refused reports whether err means the statement certainly wrote nothing: Postgres
// refused it (the statement is its own transaction, so an error rolls it all back), or it
// was never sent.
func refused(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) || pgconn.SafeToRetry(err)
}

// coalescable reports whether a job may share a coalesced statement: any job without a
// unique key.
func (j *newJob) coalescable() bool { return j.uniqueKey == nil }
