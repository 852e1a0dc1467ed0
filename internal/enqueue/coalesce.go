// This file holds the coalescing of enqueues made outside a caller's transaction: concurrent
// Enqueue (and small EnqueueMany) calls share one multi-row INSERT and so one commit — a
// group commit in the client — and each caller gets back its own rows or its own error
// once that commit is done.

package enqueue

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/skiplock/skiplock/internal/groupcommit"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// DefaultCoalesceWindow is the default of the root Config.CoalesceWindow.
const DefaultCoalesceWindow = time.Millisecond

// Limits of the coalescer.
const (
	// coalesceMaxRows is the most jobs one coalesced statement writes: a batch that reaches
	// it is sent at once.
	coalesceMaxRows = 1000
	// CoalesceMaxInFlight is how many coalesced statements may run at once (each holds a
	// pooled connection). Batches ready beyond it wait for one to finish.
	CoalesceMaxInFlight = 4
	// coalesceSendAtOnce is the Batcher's SendAtOnce: a second coalesced statement goes
	// at once beside a first one in flight. With one, the callers that arrive while a
	// statement runs and commits all wait for it to end: on two cores 16 producers
	// enqueued 15.1k jobs/s (median of 8 rounds) with one and 18.7k with two, in
	// statements of 8 and 4.9 jobs; three made smaller statements and did worse
	// (bench/README.md, "Issue 45 round 8").
	coalesceSendAtOnce = 2
	// coalesceManyMax is the largest EnqueueMany that joins a coalesced batch; larger ones
	// write with COPY in a transaction of their own, which is cheaper per row.
	coalesceManyMax = 100
	// coalesceTimeout bounds one coalesced statement. It is the batch's own limit, not a
	// caller's: one caller's deadline must not cut the commit of the others' jobs.
	coalesceTimeout = 30 * time.Second
	// MaxCoalesceWindow is the largest Config.CoalesceWindow.
	MaxCoalesceWindow = 100 * time.Millisecond
)

// errInsertAlone tells a caller that its batch was refused by the database as a whole
// (nothing of it was written): it must write its jobs on its own, so that a job the
// database refuses fails only its own caller.
var errInsertAlone = errors.New("skiplock: coalesced batch refused; insert alone")

// enqueueRequest is one caller's part of a coalesced enqueue: the jobs of one Enqueue
// (one) or of one EnqueueMany call, written together or not at all.
type enqueueRequest struct {
	jobs []Job
	many bool // from EnqueueMany: its queues are notified unthrottled, as EnqueueMany promises

	rows []*jobtype.JobRow // the inserted rows, in the order of jobs
	err  error
}

// coalescer is the group commit of an Inserter's enqueues: the batcher that collects
// concurrent calls' jobs, and the statements that write a batch.
type coalescer struct {
	w     *writer
	batch *groupcommit.Batcher[*enqueueRequest]
	sql   coalesceSQL // rendered for the writer's schema by newCoalescer
}

// coalesceSQL holds the coalesced statements, rendered for a schema.
type coalesceSQL struct {
	coalesced, coalescedNotify string
	// one and oneNotify are the keyed statement for a batch of one job (coalescedOneSQL).
	one, oneNotify  string
	coalescedReplay string
}

// newCoalescer returns the group commit of w's enqueues, which waits up to window for
// concurrent calls.
func newCoalescer(w *writer, window time.Duration) *coalescer {
	r := func(q string) string { return pgutil.Render(w.schema, q) }
	co := &coalescer{w: w, sql: coalesceSQL{
		coalesced:       r(coalescedInsertSQL + coalescedSelectSQL),
		coalescedNotify: r(coalescedInsertSQL + coalescedNotifySQL),
		one:             r(coalescedOneSQL + coalescedSelectSQL),
		oneNotify:       r(coalescedOneSQL + coalescedOneNotifySQL),
		coalescedReplay: r(coalescedReplaySQL),
	}}
	co.batch = &groupcommit.Batcher[*enqueueRequest]{
		Window: window, MaxRows: coalesceMaxRows, MaxInFlight: CoalesceMaxInFlight, SendAtOnce: coalesceSendAtOnce,
		Write: co.writeBatch,
	}
	return co
}

// coalesce writes req's jobs in a batch with other calls' and returns their rows, the
// call's own error, or errInsertAlone.
//
// If ctx ends first, it returns at once with an error that wraps ctx's. The jobs are
// then not inserted if their batch had not been sent yet (they are withdrawn from it); if
// it had, they are inserted if the batch commits, which it does unless the database
// refuses it — as with any statement whose reply a cancelled caller stops waiting for. The
// error says which of the two happened.
func (co *coalescer) coalesce(ctx context.Context, req *enqueueRequest) ([]*jobtype.JobRow, error) {
	sent, err := co.batch.Submit(ctx, req, len(req.jobs))
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
//   - ins inserts the jobs. unnest turns the per-column arrays into rows; the payload
//     goes as text and is cast, as in the single insert (the simple protocol would send
//     []byte as bytea); run_at NULL means due now by the database clock.
//   - No ON CONFLICT on the jobs: jobs with a unique key never join a batch (their
//     duplicate answer needs a lookup per job), so every row is inserted or the statement
//     fails as a whole.
//   - batch records the statement's key ($11, random, new for every batch and kept across
//     its retries) with its jobs' ids. No ON CONFLICT: when the key is there, an earlier
//     try of this same statement committed (the connection failed after the commit,
//     before the answer), and the unique violation rolls this try back whole, its jobs
//     with it; writeBatch then reads that try's rows back (coalescedReplaySQL). If the
//     earlier try is still in progress, the insert waits for it to end, and so cannot
//     miss it. (The ids come from the identity, as in every insert: drawing them here
//     with nextval would need a grant on the sequence that the README's app role lacks.)
//   - Rows are matched back to their callers by id: the rows of the SELECT are inserted in
//     array order and each takes the next identity value as it is inserted, so ascending
//     ids follow the arrays' order, whatever order RETURNING sends them in; batch stores
//     them ascending, so in array order too.
const coalescedInsertSQL = `WITH ins AS (
	INSERT INTO {s}.jobs (queue, kind, payload, priority, max_attempts, run_at, timeout_ms, metadata, partition_key, concurrency_keys)
	SELECT q, k, p::jsonb, pr, ma, COALESCE(ra, now()), tm, md::jsonb, pk, ck::jsonb
	FROM unnest($1::text[], $2::text[], $3::text[], $4::smallint[], $5::int[], $6::timestamptz[], $7::bigint[], $8::text[], $9::text[], $10::text[])
		AS t(q, k, p, pr, ma, ra, tm, md, pk, ck)
	RETURNING ` + jobColumns + `
), batch AS (
	INSERT INTO {s}.enqueue_batches (key, ids)
	SELECT $11::uuid, array_agg(id ORDER BY id) FROM ins
)`

// coalescedOneSQL is coalescedInsertSQL for a batch of one job (an idle client's
// Enqueue): the same two inserts and key, with the job's values as plain parameters in
// a one-row VALUES instead of arrays to unnest. The arrays cost an idle client's call
// about 0.2 ms more (their encoding here, the unnest and the aggregate on the server);
// a retry after an ambiguous failure reads the rows back with coalescedReplaySQL, given
// the job as one-element arrays.
const coalescedOneSQL = `WITH ins AS (
	INSERT INTO {s}.jobs (queue, kind, payload, priority, max_attempts, run_at, timeout_ms, metadata, partition_key, concurrency_keys)
	VALUES ($1, $2, $3::jsonb, $4, $5, COALESCE($6::timestamptz, now()), $7, $8::jsonb, $9, $10::jsonb)
	RETURNING ` + jobColumns + `
), batch AS (
	INSERT INTO {s}.enqueue_batches (key, ids)
	SELECT $11::uuid, ARRAY[id] FROM ins
)`

// coalescedOneNotifySQL ends coalescedOneSQL and also wakes the job's queue ($1) on
// channel $12, in the same transaction, as coalescedNotifySQL does.
const coalescedOneNotifySQL = `
SELECT ins.* FROM ins CROSS JOIN pg_notify($12, $1::text) AS n`

// coalescedSelectSQL ends coalescedInsertSQL: the inserted rows.
const coalescedSelectSQL = `
SELECT * FROM ins`

// coalescedNotifySQL ends coalescedInsertSQL and also wakes the queues in $13 on channel
// $12, in the same transaction (delivered at its commit, not at all without it). The
// notifying CTE is volatile, so it is run exactly once and not inlined; the join with its
// single row makes the statement run it.
const coalescedNotifySQL = `, woke AS (
	SELECT count(pg_notify($12, q)) FROM unnest($13::text[]) AS q
)
SELECT ins.* FROM ins CROSS JOIN woke`

// coalescedReplaySQL gives back, for a batch whose key ($11) an earlier try of the same
// statement committed (its ids ascending, so in array order), each job as that try inserted it and returned it: the ids it
// recorded, the values of the arrays (the same arrays, sent again), status queued and the
// transaction's now() it recorded as created_at (and run_at when none was given). The jobs
// themselves are not read: they may have run, and been archived or deleted, since.
const coalescedReplaySQL = `SELECT b.ids[t.n], q, k, p::jsonb, 'queued', pr, COALESCE(ra, b.created_at), 0, ma,
	NULL::timestamptz, NULL::text, NULL::text, NULL::jsonb, NULL::text, b.created_at, NULL::timestamptz,
	md::jsonb, NULL::jsonb, NULL::jsonb
FROM {s}.enqueue_batches b
CROSS JOIN unnest($1::text[], $2::text[], $3::text[], $4::smallint[], $5::int[], $6::timestamptz[], $7::bigint[], $8::text[], $9::text[], $10::text[])
	WITH ORDINALITY AS t(q, k, p, pr, ma, ra, tm, md, pk, ck, n)
WHERE b.key = $11::uuid
ORDER BY t.n`

// coalesceRetryDelay is the first wait before a coalesced statement is sent again after
// an ambiguous failure; it doubles up to coalesceMaxRetryDelay, until coalesceTimeout.
const (
	coalesceRetryDelay    = 10 * time.Millisecond
	coalesceMaxRetryDelay = time.Second
)

// writeBatch writes the jobs of reqs with one statement and gives each request its rows
// or an error. Queues with due jobs are woken like Enqueue's: through the throttle,
// except the queues of EnqueueMany calls, which are always notified.
func (co *coalescer) writeBatch(reqs []*enqueueRequest) {
	var (
		n       int
		args    []any
		due     map[string]bool
		q       string
		key     = newBatchKey() // the statement's, kept across its retries
		onlyJob = len(reqs) == 1 && len(reqs[0].jobs) == 1
	)
	if onlyJob {
		n, args, due = oneColumns(reqs[0], key)
	} else {
		n, args, due = batchColumns(reqs, key)
	}
	notify, trailing := co.notifyPlan(due)
	switch {
	case onlyJob && len(notify) > 0:
		q, args = co.sql.oneNotify, append(args, co.w.notify.Channel)
	case onlyJob:
		q = co.sql.one
	case len(notify) > 0:
		q, args = co.sql.coalescedNotify, append(args, co.w.notify.Channel, notify)
	default:
		q = co.sql.coalesced
	}

	ctx, cancel := context.WithTimeout(context.Background(), coalesceTimeout)
	defer cancel()
	// One job alone (an idle client) is keyed too, with the one-row statement: a keyless
	// insert whose commit's answer was lost (a pooler's "08P01 server conn crashed?")
	// could only give its caller an error, and a caller that retried inserted the job
	// twice (issue 41). Refused, it is written alone as a batch's jobs are, and its
	// caller gets that insert's answer.
	got, err := co.sendBatch(ctx, q, args, reqs, key)
	if err == nil && len(got) != n {
		// Cannot happen (the statement inserts every row or fails), but a caller must
		// never get another caller's row.
		err = fmt.Errorf("skiplock: enqueue: the batch statement returned %d rows for %d jobs; they were committed", len(got), n)
	}
	if err != nil {
		for _, r := range reqs {
			r.err = err
		}
		return
	}
	for _, q := range trailing {
		co.w.notify.Throttle.Trailing(q)
	}
	slices.SortFunc(got, func(a, b *jobtype.JobRow) int { return cmp.Compare(a.ID, b.ID) })
	for _, r := range reqs {
		r.rows, got = got[:len(r.jobs):len(r.jobs)], got[len(r.jobs):]
	}
}

// batchColumns lays the jobs of reqs out as the coalesced statement's column arrays, in
// the callers' order, with the batch's key last; due maps each queue with jobs due now to
// whether a call of EnqueueMany has some (its notification is never throttled).
func batchColumns(reqs []*enqueueRequest, key string) (n int, args []any, due map[string]bool) {
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
		ckeys = make([]*string, 0, n)
	)
	due = map[string]bool{}
	for _, r := range reqs {
		for i := range r.jobs {
			j := &r.jobs[i]
			queue, kind, pay = append(queue, j.Queue), append(kind, j.Kind), append(pay, string(j.Payload))
			prio, maxA, runAt = append(prio, j.Priority), append(maxA, j.MaxAttempts), append(runAt, j.RunAt)
			tmo, meta = append(tmo, j.TimeoutMs), append(meta, j.metadataText())
			part, ckeys = append(part, j.PartitionKey), append(ckeys, j.ConcurrencyKeys)
			if j.dueNow() {
				due[j.Queue] = due[j.Queue] || r.many
			}
		}
	}
	return n, []any{queue, kind, pay, prio, maxA, runAt, tmo, meta, part, ckeys, key}, due
}

// oneColumns is batchColumns for a batch of one job (coalescedOneSQL): its values as
// plain parameters, in the arrays' order, with the batch's key last.
func oneColumns(r *enqueueRequest, key string) (n int, args []any, due map[string]bool) {
	j := &r.jobs[0]
	due = map[string]bool{}
	if j.dueNow() {
		due[j.Queue] = r.many
	}
	return 1, []any{j.Queue, j.Kind, string(j.Payload), j.Priority, j.MaxAttempts, j.RunAt, j.TimeoutMs,
		j.metadataText(), j.PartitionKey, j.ConcurrencyKeys, key}, due
}

// notifyPlan splits the queues with due jobs into those the batch notifies now (a call
// of EnqueueMany, or the queue's throttle allows it) and those left to the throttle's
// trailing notification once the batch committed.
func (co *coalescer) notifyPlan(due map[string]bool) (notify, trailing []string) {
	for q, forced := range due {
		if forced || co.w.notify.Throttle.TakeNow(q) {
			notify = append(notify, q)
		} else {
			trailing = append(trailing, q)
		}
	}
	return notify, trailing
}

// sendBatch runs the coalesced statement q (args ends with key, the batch's; reqs are its
// jobs, which a replay reads back) until it has an answer it can trust, and returns its
// rows. A failure that certainly wrote nothing
// on the first try returns errInsertAlone: each caller then writes alone, so that a job the
// database refuses fails only its own caller. Any other failure (the connection lost, or a
// pooler's own error, after the statement may have committed) is ambiguous: the same
// statement, with the same key, is sent again (on another connection) after a short wait.
// The key makes that safe: if an earlier try committed, the new one inserts nothing and the
// rows that try inserted are read back, so every caller gets its job's id exactly once.
// It gives up, with an error that says the jobs may or may not have been inserted, when
// ctx ends.
func (co *coalescer) sendBatch(ctx context.Context, q string, args []any, reqs []*enqueueRequest, key string) ([]*jobtype.JobRow, error) {
	delay := coalesceRetryDelay
	for try := 0; ; try++ {
		got, err := co.tryBatch(ctx, q, args)
		switch {
		case err == nil:
			return got, nil
		case try == 0 && refused(err):
			// Nothing was written: each caller writes alone and gets its own answer.
			return nil, errInsertAlone
		case try > 0 && (keyTaken(err) || refusedRows(err)):
			// The key was there (an earlier try committed), or this try's rows were refused
			// before its key was written: an earlier try may still have committed them.
			// The replay takes the batch's jobs as arrays, whichever statement wrote them.
			_, replay, _ := batchColumns(reqs, key)
			old, rerr := co.replayBatch(ctx, replay)
			switch {
			case rerr == nil && old != nil:
				return old, nil // the earlier try's rows, as it inserted them
			case rerr == nil && !keyTaken(err):
				return nil, errInsertAlone // no try committed: nothing of the batch was written
			case rerr == nil:
				err = errors.New("skiplock: enqueue: the batch's key was found, then not: its jobs were inserted, their rows cannot be read back")
			default:
				err = rerr
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, wrapErr(co.w.schema, "enqueue", fmt.Errorf("the connection failed while the job's batch was being committed, and retries until %s did not tell whether it was; the job may or may not have been inserted: %w", coalesceTimeout, err))
		case <-t.C:
		}
		delay = min(2*delay, coalesceMaxRetryDelay)
	}
}

// tryBatch sends the coalesced statement once.
func (co *coalescer) tryBatch(ctx context.Context, q string, args []any) ([]*jobtype.JobRow, error) {
	rows, err := co.w.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	// collectJobs closes rows, which waits for the end of the statement and so for its
	// commit: an error in the commit surfaces here.
	return jobtype.CollectJobs(rows)
}

// replayBatch reads back the rows of a batch an earlier try committed (coalescedReplaySQL),
// or returns none when no try committed; args are the statement's arrays and key.
func (co *coalescer) replayBatch(ctx context.Context, args []any) ([]*jobtype.JobRow, error) {
	rows, err := co.w.pool.Query(ctx, co.sql.coalescedReplay, args...)
	if err != nil {
		return nil, err
	}
	return jobtype.CollectJobs(rows)
}

// newBatchKey returns a random version-4 UUID, the key of one coalesced statement.
func newBatchKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// refused reports whether err means the statement certainly wrote nothing: it was never
// sent, or the server answered with an ERROR (the statement is its own transaction, so an
// error rolls it all back). Not an error of class 08 (connection exception: a pooler such
// as PgBouncer makes up "08P01 server conn crashed?" when it loses the server connection,
// which may be after the commit) or 57P (the server shutting down, or the connection
// terminated by an operator), nor a FATAL or PANIC, after which the connection is gone:
// whether the commit happened is then unknown.
func refused(err error) bool {
	if pgconn.SafeToRetry(err) {
		return true
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Severity != "ERROR" {
		return false
	}
	return !strings.HasPrefix(pgErr.Code, "08") && !strings.HasPrefix(pgErr.Code, "57P")
}

// keyTaken reports whether err is the unique violation of a coalesced statement's key: an
// earlier try of the statement committed.
func keyTaken(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "enqueue_batches_pkey"
}

// refusedRows reports whether err is the server refusing a batch's rows (a data exception,
// class 22, or a broken constraint, class 23, other than the key's): an answer about the
// rows, given before the statement wrote its key. Other errors (a timeout, a lock not
// granted, a cancellation) may come while the statement waits for an earlier try holding
// the key, and so say nothing about that try.
func refusedRows(err error) bool {
	var pgErr *pgconn.PgError
	return refused(err) && errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "23"))
}

// coalescable reports whether a job may share a coalesced statement: any job without a
// unique key.
func (j *Job) coalescable() bool { return j.UniqueKey == nil }
