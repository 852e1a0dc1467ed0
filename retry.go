// This file holds what happens when a handler fails: the handler's verdicts (Permanent,
// CancelJob, Snooze), the retry policy (jittered exponential backoff by default), and the
// failureRecorder that writes a failed attempt with one fenced statement.

package skiplock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
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

// appendErrorSQL appends {attempt, at, error: $5} to the error history.
const appendErrorSQL = appendHistory + `left($5::text, 2048)))`

// retrySQL records a failed attempt: back to queued at now() + $4, or dead when the
// attempts are used up.
const retrySQL = `UPDATE {s}.jobs SET
	status = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'queued' END,
	run_at = CASE WHEN attempts >= max_attempts THEN run_at ELSE now() + $4::interval END,
	finished_at = CASE WHEN attempts >= max_attempts THEN now() END,
	locked_at = NULL, lease_until = NULL,
	locked_by = CASE WHEN attempts >= max_attempts THEN locked_by END,
	last_error = $5,
	errors = ` + appendErrorSQL + `
WHERE ` + fenceSQL + `
RETURNING status, run_at`

// failSQL ends the attempt and the job in status $4 (failed or cancelled), with no retry.
const failSQL = `UPDATE {s}.jobs SET
	status = $4, finished_at = now(), locked_at = NULL, lease_until = NULL, last_error = $5,
	errors = ` + appendErrorSQL + `
WHERE ` + fenceSQL + `
RETURNING status, run_at`

// snoozeSQL puts the job back at now() + $4 and gives back the attempt it used. It leaves
// the fence token alone: the next claim takes a new one, so this statement, replayed after
// a lost reply, cannot match that claim.
const snoozeSQL = `UPDATE {s}.jobs SET
	status = 'queued', run_at = now() + $4::interval, attempts = attempts - 1,
	locked_at = NULL, locked_by = NULL, lease_until = NULL
WHERE ` + fenceSQL + `
RETURNING status, run_at`

// failureRecorder writes the failed attempts of one worker.
type failureRecorder struct {
	pool                *pgxpool.Pool
	workerID            string
	logger              *slog.Logger
	retry, fail, snooze string // rendered retrySQL, failSQL, snoozeSQL
}

func newFailureRecorder(pool *pgxpool.Pool, schema, workerID string, logger *slog.Logger) *failureRecorder {
	return &failureRecorder{
		pool: pool, workerID: workerID, logger: logger,
		retry:  renderSQL(schema, retrySQL),
		fail:   renderSQL(schema, failSQL),
		snooze: renderSQL(schema, snoozeSQL),
	}
}

// record writes a failed attempt k of row (retry, dead, failed, cancelled or snoozed)
// with one fenced statement and returns the job's new status.
func (f *failureRecorder) record(k jobKey, row *JobRow, herr error, policy RetryPolicy) JobStatus {
	var (
		q    string
		args = []any{[]int64{k.id}, []int64{k.fence}, f.workerID}
		msg  = storableMessage(herr.Error())
		re   *resultError
	)
	verdict := resultKind(0) // a plain error: retry
	if errors.As(herr, &re) {
		verdict = re.kind
	}
	switch verdict {
	case resultSnooze:
		q = f.snooze
		args = append(args, re.snooze)
	case resultPermanent:
		q = f.fail
		args = append(args, string(StatusFailed), msg)
	case resultCancel:
		q = f.fail
		args = append(args, string(StatusCancelled), msg)
	default:
		var delay time.Duration
		if row.Attempts < row.MaxAttempts {
			delay = policy.NextRetry(row)
		}
		q = f.retry
		args = append(args, delay, msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var status string
	var runAt time.Time
	// Every statement here is fenced on the claim's token: replayed after a lost reply, it
	// matches nothing if the first run committed (the job left running, and any later
	// claim took a new token), so retrying is harmless.
	err := retryDB(ctx, func() error { return f.pool.QueryRow(ctx, q, args...).Scan(&status, &runAt) })
	if errors.Is(err, pgx.ErrNoRows) {
		f.logger.Warn("skiplock: stale result ignored: the job was reclaimed or cancelled since this worker claimed it",
			"job", row.ID, "attempt", row.Attempts)
		return row.Status
	}
	if err != nil {
		f.logger.Error("skiplock: recording a failed attempt failed; the sweeper will reclaim the job",
			"job", row.ID, "attempt", row.Attempts, "err", err)
		return StatusRunning
	}
	f.logger.Debug("skiplock: job attempt failed", "job", row.ID, "kind", row.Kind, "attempt", row.Attempts,
		"status", status, "run_at", runAt, "err", msg)
	return JobStatus(status)
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
