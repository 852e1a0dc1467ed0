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

// enqueueRequest is one caller's part of a coalesced enqueue: the jobs of one Enqueue
// (one) or of one EnqueueMany call, written together or not at all.
type enqueueRequest struct {
	jobs []newJob
	many bool // from EnqueueMany: its queues are notified unthrottled, as EnqueueMany promises

	rows []*JobRow // the inserted rows, in the order of jobs
	err  error
}

// newEnqueueCoalescer returns the group commit of a client's enqueues.
func newEnqueueCoalescer(c *Client, window time.Duration) *groupCommit[*enqueueRequest] {
	return &groupCommit[*enqueueRequest]{
		window: window, maxRows: coalesceMaxRows, maxInFlight: coalesceMaxInFlight, write: c.writeBatch,
	}
}

// coalesce writes req's jobs in a batch with other calls' and returns their rows, the
// call's own error, or errInsertAlone.
//
// If ctx ends first, it returns at once with an error that wraps ctx's. The jobs are
// then not inserted if their batch had not been sent yet (they are withdrawn from it); if
// it had, they are inserted if the batch commits, which it does unless the database
// refuses it — as with any statement whose reply a cancelled caller stops waiting for. The
// error says which of the two happened.
func (c *Client) coalesce(ctx context.Context, req *enqueueRequest) ([]*JobRow, error) {
	sent, err := c.batch.submit(ctx, req, len(req.jobs))
	switch {
	case err == nil:
		return req.rows, req.err
	case !sent:
		return nil, fmt.Errorf("skiplock: enqueue: %w (the job was not inserted: it was still waiting for its batch)", err)
	default:
		return nil, fmt.Errorf("skiplock: enqueue: %w (the job was already being written with others; it is inserted if that commit succeeds)", err)
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
const coalescedInsertSQL = `INSERT INTO {s}.jobs (queue, kind, payload, priority, max_attempts, run_at, timeout_ms, metadata, partition_key)
SELECT q, k, p::jsonb, pr, ma, COALESCE(ra, now()), tm, md::jsonb, pk
FROM unnest($1::text[], $2::text[], $3::text[], $4::smallint[], $5::int[], $6::timestamptz[], $7::bigint[], $8::text[], $9::text[])
	AS t(q, k, p, pr, ma, ra, tm, md, pk)
RETURNING ` + jobColumns

// coalescedInsertNotifySQL is coalescedInsertSQL that also wakes the queues in $11 on
// channel $10, in the same transaction (delivered at its commit, not at all without it).
// The notifying CTE is volatile, so it is run exactly once and not inlined; the join with
// its single row makes the statement run it.
const coalescedInsertNotifySQL = `WITH ins AS (
` + coalescedInsertSQL + `
), woke AS (
	SELECT count(pg_notify($10, q)) FROM unnest($11::text[]) AS q
)
SELECT ins.* FROM ins CROSS JOIN woke`

// writeBatch writes the jobs of reqs with one statement and gives each request its rows
// or an error. Queues with due jobs are woken like Enqueue's: through the throttle,
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
		tmo   = make([]*int64, 0, n)
		meta  = make([]string, 0, n)
		part  = make([]*string, 0, n)
		due   = map[string]bool{} // queues with due jobs -> a call of EnqueueMany has some
	)
	for _, r := range reqs {
		for i := range r.jobs {
			j := &r.jobs[i]
			queue, kind, pay = append(queue, j.queue), append(kind, j.kind), append(pay, string(j.payload))
			prio, maxA, runAt = append(prio, j.priority), append(maxA, j.maxAttempts), append(runAt, j.runAt)
			tmo, meta = append(tmo, j.timeoutMs), append(meta, j.metadataText())
			part = append(part, j.partitionKey)
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
	q, args := c.sql.coalesced, []any{queue, kind, pay, prio, maxA, runAt, tmo, meta, part}
	if len(notify) > 0 {
		q, args = c.sql.coalescedNotify, append(args, c.notify.channel, notify)
	}

	ctx, cancel := context.WithTimeout(context.Background(), coalesceTimeout)
	defer cancel()
	if n == 1 {
		// One job alone (an idle client): the single-row insert, as if not coalesced, and
		// its error is its caller's own.
		r := reqs[0]
		row, err := c.insertOne(ctx, c.pool, &r.jobs[0], len(notify) > 0, false)
		if err != nil {
			r.err = err
			return
		}
		for _, q := range trailing {
			c.notify.throttle.trailing(q)
		}
		r.rows = []*JobRow{row}
		return
	}
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
		}
		return
	}
	for _, q := range trailing {
		c.notify.throttle.trailing(q)
	}
	slices.SortFunc(got, func(a, b *JobRow) int { return cmp.Compare(a.ID, b.ID) })
	for _, r := range reqs {
		r.rows, got = got[:len(r.jobs):len(r.jobs)], got[len(r.jobs):]
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
