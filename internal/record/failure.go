// This file holds the failure recorder, which writes failed attempts in batches, with
// one fenced statement each.

package record

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/groupcommit"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/ownership"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/internal/settle"
	"github.com/skiplock/skiplock/internal/waiting"
)

// FailureSQL records a batch of failed attempts with one fenced statement. $1 (ascending
// ids), $2 and $3 are the fence's (fenceSQL); $4 is a JSON object that gives, for each
// attempt, keyed "id:fence", [verdict, delay in microseconds, error message]. The verdict is 'retry', 'failed',
// 'cancelled', 'snooze' or 'deadline'. In SET, columns are the row as claimed (attempts is the
// attempt that failed).
//
//   - retry: back to queued at now() + delay, or dead (finished, locked_by kept as the
//     last worker) when the attempts are used up. The delay is the job's own, computed in
//     Go by its retry policy; now() is the database's clock, as for every schedule.
//   - failed, cancelled: final, no retry.
//   - deadline: the job was claimed past its deadline and its handler not run: final
//     (failed), the attempt given back (none started), the error recorded.
//   - snooze: back to queued at now() + delay, and the attempt given back; the error
//     history is left alone (a snooze is not an error). The fence token stays: the next
//     claim takes a new one, so this statement, replayed after a lost reply, cannot
//     match that claim.
//   - Every verdict ends the lease (lease_until NULL).
//   - Every verdict but snooze appends {attempt, at, error} to the error history. Its
//     attempt is the job's attempts as written: the attempt that failed, or for
//     deadline, whose attempt is given back, the attempts that ran before it.
//   - The fence (fenceSQL) is the whole WHERE, so the rows are found exactly as the
//     success statement finds them (by id = ANY($1), matched to their pairs), and a stale
//     worker's failure changes nothing. The per-attempt values are looked up in $4 by the
//     row's own id and token, so of two attempts of one job in a batch, the one the row
//     still belongs to gives its verdict. They are not joined: a join with the unnested
//     arrays let the planner, on a table without statistics, scan the table once per job
//     (seconds for a batch of 200).
//   - The lookup runs once per row: the columns are set together from one sub-SELECT
//     (correlated with the row, so run once for it), whose innermost subquery reads the
//     row's entry of $4 (OFFSET 0 keeps the planner from pulling it up and so repeating it
//     in every expression that uses it). Written out in each SET expression instead, the
//     lookup ran seventeen times a row. The sub-SELECT always returns exactly one row.
//   - RETURNING says, per attempt, what was recorded; an attempt missing from it was
//     stale.
const FailureSQL = `UPDATE {s}.jobs SET
	(status, run_at, attempts, finished_at, locked_at, lease_until, locked_by, last_error, errors) = (SELECT
	CASE
		WHEN v.verdict = 'retry' THEN CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'queued' END
		WHEN v.verdict = 'snooze' THEN 'queued'
		WHEN v.verdict = 'deadline' THEN 'failed'
		ELSE v.verdict END,
	CASE WHEN v.verdict = 'snooze' OR v.verdict = 'retry' AND attempts < max_attempts
		THEN now() + v.delay * interval '1 microsecond' ELSE run_at END,
	CASE WHEN v.verdict IN ('snooze', 'deadline') THEN attempts - 1 ELSE attempts END,
	CASE WHEN v.verdict IN ('failed', 'cancelled', 'deadline') OR v.verdict = 'retry' AND attempts >= max_attempts
		THEN now() END,
	NULL::timestamptz, NULL::timestamptz,
	CASE WHEN v.verdict = 'snooze' OR v.verdict = 'retry' AND attempts < max_attempts
		THEN NULL ELSE locked_by END,
	CASE WHEN v.verdict = 'snooze' THEN last_error ELSE v.msg END,
	CASE WHEN v.verdict = 'snooze' THEN errors ELSE ` + ownership.HistoryEntryHead +
	`CASE WHEN v.verdict = 'deadline' THEN attempts - 1 ELSE attempts END` + ownership.HistoryEntryTail + `left(v.msg, 2048))) END
	FROM (SELECT e ->> 0 AS verdict, (e ->> 1)::bigint AS delay, e ->> 2 AS msg
		FROM (SELECT $4::jsonb -> (id || ':' || fence) AS e OFFSET 0) AS entry OFFSET 0) AS v)
WHERE ` + ownership.FenceSQL + `
RETURNING id, fence, status, run_at`

// The verdicts failureSQL knows.
const (
	verdictRetry    = "retry"
	verdictSnooze   = "snooze"
	verdictDeadline = "deadline"
)

// failedAttempt is one failed attempt on its way to the database, and what was recorded.
type failedAttempt struct {
	key     jobtype.AttemptKey
	row     *jobtype.JobRow
	verdict string
	delay   time.Duration
	msg     string

	status jobtype.JobStatus // set by exec: the job's new status
	runAt  time.Time
	stale  bool // set by exec: the job was no longer this attempt's
}

// FailureRecorder writes the failed attempts of one worker in batches, like the completer
// writes successes: a failure storm (a downstream outage fails every job) costs one
// statement and one commit per batch, not per job, and a runner goes on to its next job
// while its failure is written. flush waits for what was recorded.
type FailureRecorder struct {
	pool     *pgxpool.Pool
	workerID string
	logger   *slog.Logger
	sql      string         // failureSQL, rendered
	wake     waiting.Waking // with the plan settings, as the Completer's
	batch    *groupcommit.Batcher[*failedAttempt]
	mu       sync.RWMutex // record holds it to read; stop to close
	closed   bool
	// dueAgain is called with the queue of a job written back due at once (a retry or a
	// snooze without delay), after its commit: nothing notifies a retry, so the worker
	// wakes its own claim loops.
	dueAgain func(queue string)
	// done is told what each batch did: which attempts it ended (written or not), and
	// how many slots it freed.
	done BatchListeners
	// gate bounds this worker's statements on the queues' rows by the fleet's size
	// (internal/pgutil, gate.go); each statement takes a turn. nil: no bound.
	gate *pgutil.Gate
	// flows settles the workflow tasks of a batch in the batch's transaction
	// (internal/settle); nil: none.
	flows *settle.Settler
}

// NewFailureRecorder batches at most batchSize failures per statement; a failure waits at
// most flushEvery for others when a batch is already being written. Each statement takes
// a turn of gate; done and dueAgain (either may be nil) are told what each batch did.
func NewFailureRecorder(pool *pgxpool.Pool, schema, workerID string, batchSize int, flushEvery time.Duration,
	gate *pgutil.Gate, done BatchListeners, dueAgain func(queue string), flows *settle.Settler, logger *slog.Logger) *FailureRecorder {
	if done.Written == nil {
		done.Written = func([]jobtype.AttemptKey) {}
	}
	if done.Freed == nil {
		done.Freed = func(int) {}
	}
	if dueAgain == nil {
		dueAgain = func(string) {}
	}
	f := &FailureRecorder{pool: pool, workerID: workerID, logger: logger, sql: pgutil.Render(schema, FailureSQL), wake: waiting.NewWaking(schema).WithPlanSettings(),
		gate: gate, done: done, dueAgain: dueAgain, flows: flows}
	f.batch = &groupcommit.Batcher[*failedAttempt]{Window: flushEvery, MaxRows: batchSize, MaxInFlight: CompleterLoops, Write: f.write}
	return f
}

// Record hands a failed attempt k of row (retry, dead, failed, cancelled or snoozed) to
// be written, batched with other runners' failures, and returns the status it is
// written with (the job's claimed status is kept if the attempt turns out stale). The
// retry delay is computed here, per job, by policy. After stop it writes nothing and
// returns StatusRunning: the job is taken back when its lease ends.
func (f *FailureRecorder) Record(k jobtype.AttemptKey, row *jobtype.JobRow, herr error, policy jobtype.RetryPolicy) jobtype.JobStatus {
	a := &failedAttempt{key: k, row: row, verdict: verdictRetry, msg: StorableMessage(herr.Error())}
	status := jobtype.StatusQueued
	switch v, snooze := jobtype.VerdictOf(herr); v {
	case jobtype.VerdictSnooze:
		a.verdict, a.delay = verdictSnooze, snooze
	case jobtype.VerdictPermanent:
		a.verdict, status = string(jobtype.StatusFailed), jobtype.StatusFailed
	case jobtype.VerdictCancel:
		a.verdict, status = string(jobtype.StatusCancelled), jobtype.StatusCancelled
	}
	if a.verdict == verdictRetry {
		if row.Attempts < row.MaxAttempts {
			a.delay = f.nextRetry(policy, row)
		} else {
			status = jobtype.StatusDead
		}
	}
	status = a.deadline(herr, status)
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed {
		f.logger.Warn("skiplock: a failure came after the worker stopped recording; the job is retried when its lease ends, this attempt counted",
			"job", row.ID, "attempt", row.Attempts)
		return jobtype.StatusRunning
	}
	f.batch.Post(a, 1)
	return status
}

// nextRetry returns policy's delay before row's retry. A negative delay is zero, as a
// Snooze's is: due now, not in the past, where the retry would go ahead of the jobs due
// before it (claims take the earliest run_at first). A policy that panics falls back
// to the default backoff (jobtype.BackoffPolicy), and the panic is logged: the
// failure is still recorded and retried, and the runner goes on.
func (f *FailureRecorder) nextRetry(policy jobtype.RetryPolicy, row *jobtype.JobRow) (d time.Duration) {
	defer func() {
		if r := recover(); r != nil {
			f.logger.Error("skiplock: the retry policy's NextRetry panicked; the job is retried after the default backoff",
				"job", row.ID, "kind", row.Kind, "attempt", row.Attempts, "policy", fmt.Sprintf("%T", policy),
				"panic", r, "stack", string(debug.Stack()))
			d = jobtype.BackoffPolicy{}.NextRetry(row)
		}
		d = max(d, 0)
	}()
	return policy.NextRetry(row)
}

// deadline applies the job's deadline to the verdict and returns the status: a job
// claimed past it ends without an attempt (verdict deadline); a retry or snooze that
// would be due after it ends the job as failed instead. The retry's time is judged by
// this process's clock (the claim, by the database's, refuses a late start anyway).
func (a *failedAttempt) deadline(herr error, status jobtype.JobStatus) jobtype.JobStatus {
	var ns *jobtype.NotStartedError
	if errors.As(herr, &ns) {
		a.verdict, a.delay = verdictDeadline, 0
		return jobtype.StatusFailed
	}
	d := a.row.Deadline
	if d.IsZero() || status != jobtype.StatusQueued || !time.Now().Add(a.delay).After(d) {
		return status
	}
	next := "retry"
	if a.verdict == verdictSnooze {
		next = "snooze"
	}
	a.verdict, a.delay = string(jobtype.StatusFailed), 0
	a.msg = StorableMessage(fmt.Sprintf("%s: the %s would be due after the job's deadline %s: %s",
		jobtype.ErrDeadlineExceeded, next, d.UTC().Format(time.RFC3339Nano), herr.Error()))
	return jobtype.StatusFailed
}

// Flush waits until every failure recorded so far is written.
func (f *FailureRecorder) Flush() { f.batch.Wait() }

// Start does nothing: the failure batches own no long-lived goroutine (groupCommit).
func (f *FailureRecorder) Start(context.Context) error { return nil }

// Stop makes record refuse later failures, and waits until those it took are written.
func (f *FailureRecorder) Stop() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.Flush()
}

// write records a batch of failed attempts with one statement. If the database refuses
// the statement (not a transient error), each attempt is written alone, so that one it
// refuses cannot keep the others from being recorded.
func (f *FailureRecorder) write(batch []*failedAttempt) {
	// Sorted ids take row locks in one order, so concurrent batches cannot deadlock.
	slices.SortFunc(batch, func(a, b *failedAttempt) int { return cmp.Compare(a.key.ID, b.key.ID) })
	errs := make([]error, len(batch))
	if err := f.exec(batch); err != nil {
		for i := range errs {
			errs[i] = err
		}
		if len(batch) > 1 && !pgutil.Transient(err) {
			for i, a := range batch {
				errs[i] = f.exec([]*failedAttempt{a})
			}
		}
	}
	if slices.Contains(errs, nil) {
		f.done.Freed(len(batch))
	}
	keys := make([]jobtype.AttemptKey, len(batch))
	var unrecorded []jobtype.AttemptKey
	for i, a := range batch {
		keys[i] = a.key
		if errs[i] != nil {
			unrecorded = append(unrecorded, a.key)
		}
	}
	if len(unrecorded) > 0 && f.done.Unrecorded != nil {
		f.done.Unrecorded(unrecorded)
	}
	f.done.Written(keys)
	debug := f.logger.Enabled(context.Background(), slog.LevelDebug)
	for i, a := range batch {
		row := a.row
		switch {
		case errs[i] != nil:
			f.logger.Error("skiplock: recording a failed attempt failed; the job is put back in the queue",
				"job", row.ID, "attempt", row.Attempts, "err", errs[i])
		case a.stale:
			f.logger.Warn("skiplock: stale result ignored: the job was reclaimed or cancelled since this worker claimed it",
				"job", row.ID, "attempt", row.Attempts)
		default:
			if debug { // the attributes' interface values cost allocations even when not logged
				f.logger.Debug("skiplock: job attempt failed", "job", row.ID, "kind", row.Kind, "attempt", row.Attempts,
					"status", a.status, "run_at", a.runAt, "err", a.msg)
			}
			if a.status == jobtype.StatusQueued && a.delay <= 0 {
				f.dueAgain(row.Queue)
			}
		}
	}
}

// perJobValues returns failureSQL's $4 for batch: a JSON object that maps each attempt's
// "id:fence" to [verdict, delay in microseconds, error message]. It is the JSON that
// json.Marshal makes of that map (a key twice: the later attempt's entry, as jsonb
// keeps), written straight from the batch: no map, no interface value per entry, no
// reflection or key sorting (jsonb does not keep the order). Strings are escaped by
// encoding/json, through one encoder for the whole object.
func perJobValues(batch []*failedAttempt) []byte {
	var b bytes.Buffer
	b.Grow(32 + 64*len(batch))
	enc := json.NewEncoder(&b)
	str := func(s string) {
		_ = enc.Encode(s)       // a string always encodes
		b.Truncate(b.Len() - 1) // Encode's newline
	}
	var num [20]byte
	b.WriteByte('{')
	for i, a := range batch {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.Write(strconv.AppendInt(num[:0], a.key.ID, 10))
		b.WriteByte(':')
		b.Write(strconv.AppendInt(num[:0], a.key.Fence, 10))
		b.WriteString(`":[`)
		str(a.verdict)
		b.WriteByte(',')
		b.Write(strconv.AppendInt(num[:0], a.delay.Microseconds(), 10))
		b.WriteByte(',')
		str(a.msg)
		b.WriteByte(']')
	}
	b.WriteByte('}')
	return b.Bytes()
}

// exec runs failureSQL for batch and stores what each attempt became.
func (f *FailureRecorder) exec(batch []*failedAttempt) error {
	n := len(batch)
	ids, fences := make([]int64, n), make([]int64, n)
	for i, a := range batch {
		ids[i], fences[i] = a.key.ID, a.key.Fence
	}
	perJob := perJobValues(batch)
	ctx, cancel := context.WithTimeout(context.Background(), WriteTimeout)
	defer cancel()
	type recorded struct {
		status string
		runAt  time.Time
	}
	var got map[jobtype.AttemptKey]recorded
	var tasks []int64
	for _, a := range batch {
		if settle.IsTask(a.row) && a.verdict != verdictSnooze { // a snooze settles nothing
			tasks = append(tasks, a.key.ID)
		}
	}
	// The statement is fenced: replayed after a lost reply, it matches nothing the first
	// run recorded, so retrying is harmless.
	err := pgutil.Retry(ctx, func() error {
		return f.gate.Do(ctx, func() error {
			return f.flows.Run(ctx, f.pool, tasks, func(db jobtype.DBTX) error {
				// As text: the simple and exec protocols (PgBouncer setups) would send []byte as bytea.
				args := []any{pgutil.Int8ArrayText(ids), pgutil.Int8ArrayText(fences), f.workerID, string(perJob)}
				return f.wake.Query(ctx, db, f.sql, args, args[0], func(rows pgx.Rows) error {
					got = make(map[jobtype.AttemptKey]recorded, n)
					var k jobtype.AttemptKey
					var r recorded
					_, err := pgx.ForEachRow(rows, []any{&k.ID, &k.Fence, &r.status, &r.runAt}, func() error {
						got[k] = r
						return nil
					})
					return err
				})
			})
		})
	})
	if err != nil {
		return err
	}
	for _, a := range batch {
		r, ok := got[a.key]
		a.stale = !ok
		a.status, a.runAt = jobtype.JobStatus(r.status), r.runAt
	}
	return nil
}

// maxErrorBytes bounds a recorded error message.
const maxErrorBytes = 8192

// StorableMessage makes a handler's error message fit a text column: Postgres refuses
// NUL bytes and invalid UTF-8, and a refused statement would leave the job running for
// nobody until the sweeper took it back. Long messages are cut at a rune boundary.
func StorableMessage(msg string) string {
	msg = strings.ToValidUTF8(strings.ReplaceAll(msg, "\x00", ""), "\uFFFD")
	if len(msg) <= maxErrorBytes {
		return msg
	}
	cut := maxErrorBytes
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}
