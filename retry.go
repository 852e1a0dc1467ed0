package skiplock

import (
	"math"
	"math/rand/v2"
	"time"
)

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
	// Base is the delay unit. Defaults to 1s: the first retry waits 1-2 s, the tenth 8.5-17 min.
	Base time.Duration
	// Max caps the delay before jitter. Defaults to 1h.
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

// appendErrorSQL appends {attempt, at, error: $5} to the error history.
var appendErrorSQL = appendError(`left($5::text, 2048)`)

// appendError is the expression that appends an entry with the message msg to the error
// history, keeping the latest 10 ("jsonb - 0" drops the oldest). A history that is not a
// JSON array (written by hand, say) is started afresh rather than failing the statement:
// a broken history must never keep a job from being retried or reclaimed.
func appendError(msg string) string {
	return `(CASE WHEN coalesce(jsonb_typeof(errors), '') <> 'array' THEN '[]'::jsonb
		WHEN jsonb_array_length(errors) >= 10 THEN errors - 0
		ELSE errors END)
	|| jsonb_build_array(jsonb_build_object('attempt', attempts, 'at', now(), 'error', ` + msg + `))`
}

// fenceSQL matches exactly the attempt a worker claimed. A job that was reclaimed by the
// sweeper, re-claimed by another worker, cancelled or released no longer matches, so a
// stale worker's late result changes nothing.
const fenceSQL = `id = $1 AND attempts = $2 AND locked_by = $3 AND status = 'running'`

// retrySQL records a failed attempt: back to queued at now() + $4, or dead when the
// attempts are used up.
var retrySQL = `UPDATE {s}.jobs SET
	status = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'queued' END,
	run_at = CASE WHEN attempts >= max_attempts THEN run_at ELSE now() + $4::interval END,
	finished_at = CASE WHEN attempts >= max_attempts THEN now() END,
	locked_at = NULL,
	locked_by = CASE WHEN attempts >= max_attempts THEN locked_by END,
	last_error = $5,
	errors = ` + appendErrorSQL + `
WHERE ` + fenceSQL + `
RETURNING status, run_at`

// failSQL ends the attempt and the job in status $4 (failed or cancelled), with no retry.
var failSQL = `UPDATE {s}.jobs SET
	status = $4, finished_at = now(), locked_at = NULL, last_error = $5,
	errors = ` + appendErrorSQL + `
WHERE ` + fenceSQL + `
RETURNING status, run_at`

// snoozeSQL puts the job back at now() + $4 and gives back the attempt it used.
const snoozeSQL = `UPDATE {s}.jobs SET
	status = 'queued', run_at = now() + $4::interval, attempts = attempts - 1,
	locked_at = NULL, locked_by = NULL
WHERE ` + fenceSQL + `
RETURNING status, run_at`
