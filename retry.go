// This file holds what happens when a handler fails: the handler's verdicts (Permanent,
// CancelJob, Snooze), the retry policy (jittered exponential backoff by default), and the
// failureRecorder that writes failed attempts in batches, with one fenced statement each.

package skiplock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Permanent wraps a handler error to say the job must not be retried: the job ends in
// status failed with the error recorded. Use it for bad input that no retry can fix.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &resultError{kind: resultPermanent, err: err}
}

// CancelJob wraps a handler error to end the job in status cancelled, without retry.
func CancelJob(err error) error {
	if err == nil {
		err = errors.New("cancelled by handler")
	}
	return &resultError{kind: resultCancel, err: err}
}

// Snooze returned by a handler puts the job back in the queue to run again after d,
// without using up an attempt. d <= 0 means run again as soon as possible.
func Snooze(d time.Duration) error {
	if d < 0 {
		d = 0
	}
	return &resultError{kind: resultSnooze, snooze: d}
}

type resultKind int

const (
	resultPermanent resultKind = iota + 1
	resultCancel
	resultSnooze
)

// resultError carries a handler's verdict through the error return.
type resultError struct {
	kind   resultKind
	err    error
	snooze time.Duration
}

// Error describes the verdict and the handler's error.
func (e *resultError) Error() string {
	switch e.kind {
	case resultPermanent:
		return "permanent: " + e.err.Error()
	case resultCancel:
		return "cancel: " + e.err.Error()
	default:
		return fmt.Sprintf("snooze %s", e.snooze)
	}
}

// Unwrap returns the handler's error, so errors.Is and errors.As see through the verdict.
func (e *resultError) Unwrap() error { return e.err }

// RetryPolicy decides when a failed job runs again. NextRetry gets the job as claimed
// (job.Attempts is the attempt that just failed, starting at 1) and returns the delay from
// now, by the database clock. It is not asked when the job has no attempts left.
//
// A kind can have its own policy: give its args type a method RetryPolicy() RetryPolicy.
type RetryPolicy interface {
	NextRetry(job *JobRow) time.Duration
}

// BackoffPolicy is the default [RetryPolicy]: jittered exponential backoff,
// min(Base × 2^attempt, Max) × a random factor in [0.5, 1.0). The jitter spreads jobs that
// failed together (a database blip, a downstream outage) so they do not retry together.
// The zero value is the default policy. It is safe for concurrent use.
type BackoffPolicy struct {
	// Base is the delay unit. Defaults to 1s: the first retry waits 1-2 s, the tenth
	// 8.5-17 min. Zero or negative means the default.
	Base time.Duration
	// Max caps the delay before jitter. Defaults to 1h; zero or negative means the default.
	Max time.Duration
	// Rand returns a number in [0, 1). Defaults to math/rand/v2's Float64; tests inject their own.
	Rand func() float64
}

// NextRetry implements [RetryPolicy].
func (p BackoffPolicy) NextRetry(job *JobRow) time.Duration {
	base, maxD := p.Base, p.Max
	if base <= 0 {
		base = time.Second
	}
	if maxD <= 0 {
		maxD = time.Hour
	}
	attempt := max(job.Attempts, 1)
	d := float64(base) * math.Pow(2, float64(attempt))
	if d > float64(maxD) {
		d = float64(maxD)
	}
	r := rand.Float64
	if p.Rand != nil {
		r = p.Rand
	}
	return time.Duration(d * (0.5 + r()*0.5))
}

// retryPolicyArgs is implemented by args types with a kind-specific policy.
type retryPolicyArgs interface {
	RetryPolicy() RetryPolicy
}

// appendHistory starts the expression that appends an entry to the error history,
// keeping the latest 10 ("jsonb - 0" drops the oldest); the message expression and "))"
// complete it. A history that is not a JSON array (written by hand, say) is started
// afresh rather than failing the statement: a broken history must never keep a job from
// being retried or reclaimed.
const appendHistory = `(CASE WHEN coalesce(jsonb_typeof(errors), '') <> 'array' THEN '[]'::jsonb
		WHEN jsonb_array_length(errors) >= 10 THEN errors - 0
		ELSE errors END)
	|| jsonb_build_array(jsonb_build_object('attempt', attempts, 'at', now(), 'error', `

// failureSQL records a batch of failed attempts with one fenced statement. $1 (ascending
// ids), $2 and $3 are the fence's (fenceSQL); for each id, at the same position:
// $4 the verdict ('retry', 'failed', 'cancelled' or 'snooze'), $5 the delay in
// microseconds (retry and snooze), $6 the error message. In SET, columns are the row as
// claimed (attempts is the attempt that failed).
//
//   - retry: back to queued at now() + delay, or dead (finished, locked_by kept as the
//     last worker) when the attempts are used up. The delay is the job's own, computed in
//     Go by its retry policy; now() is the database's clock, as for every schedule.
//   - failed, cancelled: final, no retry.
//   - snooze: back to queued at now() + delay, and the attempt given back; the error
//     history is left alone (a snooze is not an error).
//   - Every verdict but snooze appends {attempt, at, error} to the error history.
//   - The fence (fenceSQL) is the WHERE, so a stale worker's failure changes nothing; the
//     per-job values are joined by id (v.vid = id, next to the fence's id = ANY($1), which
//     is what the planner looks the rows up by).
//   - RETURNING says, per job, what was recorded; a job missing from it was stale.
const failureSQL = `UPDATE {s}.jobs SET
	status = CASE
		WHEN v.verdict = 'retry' THEN CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'queued' END
		WHEN v.verdict = 'snooze' THEN 'queued'
		ELSE v.verdict END,
	run_at = CASE WHEN v.verdict = 'snooze' OR v.verdict = 'retry' AND attempts < max_attempts
		THEN now() + v.delay_us * interval '1 microsecond' ELSE run_at END,
	attempts = CASE WHEN v.verdict = 'snooze' THEN attempts - 1 ELSE attempts END,
	finished_at = CASE WHEN v.verdict IN ('failed', 'cancelled') OR v.verdict = 'retry' AND attempts >= max_attempts
		THEN now() END,
	locked_at = NULL,
	locked_by = CASE WHEN v.verdict = 'snooze' OR v.verdict = 'retry' AND attempts < max_attempts
		THEN NULL ELSE locked_by END,
	last_error = CASE WHEN v.verdict = 'snooze' THEN last_error ELSE v.msg END,
	errors = CASE WHEN v.verdict = 'snooze' THEN errors ELSE ` + appendHistory + `left(v.msg, 2048))) END
FROM unnest($1::bigint[], $4::text[], $5::bigint[], $6::text[]) AS v(vid, verdict, delay_us, msg)
WHERE ` + fenceSQL + ` AND v.vid = id
RETURNING id, status, run_at`

// The verdicts failureSQL knows.
const (
	verdictRetry  = "retry"
	verdictSnooze = "snooze"
)

// failedAttempt is one failed attempt on its way to the database, and what was recorded.
type failedAttempt struct {
	key     jobKey
	row     *JobRow
	verdict string
	delay   time.Duration
	msg     string

	status JobStatus // set when written: the job's new status, or its claimed one if stale
	runAt  time.Time
	err    error // the statement failed: the job stays running until the sweeper takes it back
	stale  bool
}

// failureRecorder writes the failed attempts of one worker, in batches: a failure storm
// (a downstream outage fails every job) costs one statement and one commit per batch, not
// per job. A runner waits until its failure is written, so the status it reports is the
// one recorded.
type failureRecorder struct {
	pool     *pgxpool.Pool
	workerID string
	logger   *slog.Logger
	sql      string // failureSQL, rendered
	batch    *groupCommit[*failedAttempt]
}

// newFailureRecorder batches at most batchSize failures per statement; a failure waits at
// most flushEvery for others when a batch is already being written.
func newFailureRecorder(pool *pgxpool.Pool, schema, workerID string, batchSize int, flushEvery time.Duration, logger *slog.Logger) *failureRecorder {
	f := &failureRecorder{pool: pool, workerID: workerID, logger: logger, sql: renderSQL(schema, failureSQL)}
	f.batch = &groupCommit[*failedAttempt]{window: flushEvery, maxRows: batchSize, maxInFlight: completerLoops, write: f.write}
	return f
}

// record writes a failed attempt k of row (retry, dead, failed, cancelled or snoozed),
// batched with other runners' failures, and returns the job's new status, and whether it
// is queued again due at once (a retry or snooze without delay). The retry delay is
// computed here, per job, by policy.
func (f *failureRecorder) record(k jobKey, row *JobRow, herr error, policy RetryPolicy) (JobStatus, bool) {
	a := &failedAttempt{key: k, row: row, verdict: verdictRetry, msg: storableMessage(herr.Error())}
	var re *resultError
	if errors.As(herr, &re) {
		switch re.kind {
		case resultSnooze:
			a.verdict, a.delay = verdictSnooze, re.snooze
		case resultPermanent:
			a.verdict = string(StatusFailed)
		case resultCancel:
			a.verdict = string(StatusCancelled)
		}
	}
	if a.verdict == verdictRetry && row.Attempts < row.MaxAttempts {
		a.delay = policy.NextRetry(row)
	}
	_, _ = f.batch.submit(context.Background(), a, 1) // never cancelled: returns once written
	switch {
	case a.err != nil:
		f.logger.Error("skiplock: recording a failed attempt failed; the sweeper will reclaim the job",
			"job", row.ID, "attempt", row.Attempts, "err", a.err)
		return StatusRunning, false
	case a.stale:
		f.logger.Warn("skiplock: stale result ignored: the job was reclaimed or cancelled since this worker claimed it",
			"job", row.ID, "attempt", row.Attempts)
		return row.Status, false
	}
	f.logger.Debug("skiplock: job attempt failed", "job", row.ID, "kind", row.Kind, "attempt", row.Attempts,
		"status", a.status, "run_at", a.runAt, "err", a.msg)
	return a.status, a.status == StatusQueued && a.delay <= 0
}

// write records a batch of failed attempts with one statement. If the database refuses
// the statement (not a transient error), each attempt is written alone, so that one it
// refuses cannot keep the others from being recorded.
func (f *failureRecorder) write(batch []*failedAttempt) {
	// Sorted ids take row locks in one order, so concurrent batches cannot deadlock.
	slices.SortFunc(batch, func(a, b *failedAttempt) int { return cmp.Compare(a.key.id, b.key.id) })
	err := f.exec(batch)
	if err != nil && len(batch) > 1 && !transient(err) {
		for _, a := range batch {
			a.err = f.exec([]*failedAttempt{a})
		}
		return
	}
	for _, a := range batch {
		a.err = err
	}
}

// exec runs failureSQL for batch and stores what each attempt became.
func (f *failureRecorder) exec(batch []*failedAttempt) error {
	n := len(batch)
	ids, tokens := make([]int64, n), make([]int32, n)
	verdicts, delays, msgs := make([]string, n), make([]int64, n), make([]string, n)
	for i, a := range batch {
		ids[i], tokens[i] = a.key.id, int32(a.key.attempts)
		verdicts[i], delays[i], msgs[i] = a.verdict, a.delay.Microseconds(), a.msg
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type recorded struct {
		status string
		runAt  time.Time
	}
	var got map[int64]recorded
	// The statement is fenced: replayed after a lost reply, it matches nothing the first
	// run recorded, so retrying is harmless.
	err := retryDB(ctx, func() error {
		rows, err := f.pool.Query(ctx, f.sql, ids, tokens, f.workerID, verdicts, delays, msgs)
		if err != nil {
			return err
		}
		got = make(map[int64]recorded, n)
		var id int64
		var r recorded
		_, err = pgx.ForEachRow(rows, []any{&id, &r.status, &r.runAt}, func() error {
			got[id] = r
			return nil
		})
		return err
	})
	if err != nil {
		return err
	}
	for _, a := range batch {
		r, ok := got[a.key.id]
		a.stale = !ok
		a.status, a.runAt = JobStatus(r.status), r.runAt
	}
	return nil
}

// maxErrorBytes bounds a recorded error message.
const maxErrorBytes = 8192

// storableMessage makes a handler's error message fit a text column: Postgres refuses
// NUL bytes and invalid UTF-8, and a refused statement would leave the job running for
// nobody until the sweeper took it back. Long messages are cut at a rune boundary.
func storableMessage(msg string) string {
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
