package jobtype

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Permanent wraps a handler error to say the job must not be retried: the job ends in
// status failed with the error recorded. Use it for bad input that no retry can fix.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &verdictError{kind: resultPermanent, err: err}
}

// CancelJob wraps a handler error to end the job in status cancelled, without retry.
func CancelJob(err error) error {
	if err == nil {
		err = errors.New("cancelled by handler")
	}
	return &verdictError{kind: resultCancel, err: err}
}

// Snooze returned by a handler puts the job back in the queue to run again after d,
// without using up an attempt. d <= 0 means run again as soon as possible.
func Snooze(d time.Duration) error {
	if d < 0 {
		d = 0
	}
	return &verdictError{kind: resultSnooze, snooze: d}
}

type resultKind int

const (
	resultPermanent resultKind = iota + 1
	resultCancel
	resultSnooze
)

// verdictError carries a handler's verdict through the error return.
type verdictError struct {
	kind   resultKind
	err    error
	snooze time.Duration
}

// Error describes the verdict and the handler's error.
func (e *verdictError) Error() string {
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
func (e *verdictError) Unwrap() error { return e.err }

// RetryPolicy decides when a failed job runs again. NextRetry gets the job as claimed
// (job.Attempts is the attempt that just failed, starting at 1) and returns the delay from
// now, by the database clock. A negative delay counts as zero, as [Snooze]'s does: the
// job is due now, not in the past, so it does not go ahead of the jobs due before it
// (claims take the earliest due first). It is not asked when the job has no attempts
// left. A policy that panics is recovered and logged (with the job's id and kind), and the
// default backoff ([BackoffPolicy]) decides the delay instead.
//
// The delay is when the job is due again, not when it runs: a worker claims it at its
// queue's first claim after that. Nothing notifies a retry, so on an otherwise idle queue
// that is the worker's next poll (WorkerConfig.PollInterval in package skiplock, 1s by
// default): a delay shorter than the poll interval is in effect rounded up to the next
// poll, and a retry (given a free slot) runs between its delay and its delay plus
// PollInterval after the failure. Only a delay of zero or less is claimed at once: the
// worker that writes the failure wakes its own claim loops. For shorter retries, set a
// shorter PollInterval.
//
// A kind can have its own policy: give its args type a method RetryPolicy() RetryPolicy.
type RetryPolicy interface {
	NextRetry(job *JobRow) time.Duration
}

// BackoffPolicy is the default [RetryPolicy]: jittered exponential backoff,
// min(Base × 2^attempt, Max) × a random factor in [0.5, 1.0). The jitter spreads jobs that
// failed together (a database blip, a downstream outage) so they do not retry together.
// The delay is never more than Max, whatever Max (up to the longest Duration) and the
// attempt. The zero value is the default policy. It is safe for concurrent use.
type BackoffPolicy struct {
	// Base is the delay unit. Defaults to 1s: the first retry is due 1-2 s after the
	// failure, the tenth 8.5-17 min. Zero or negative means the default. A retry due
	// sooner than the worker's next poll waits for that poll (see [RetryPolicy]), so a
	// Base under the worker's PollInterval retries at the poll's pace, not the Base's.
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
	r := rand.Float64
	if p.Rand != nil {
		r = p.Rand
	}
	return jitter(capBackoff(base, maxD, max(job.Attempts, 1)), r())
}

// capBackoff is min(base × 2^attempt, maxD) for positive base and maxD and attempt >= 1,
// in integers: exact, and never past maxD (a float64 rounds a maxD near the longest
// Duration up to 2^63, which no Duration holds).
func capBackoff(base, maxD time.Duration, attempt int) time.Duration {
	if attempt >= 63 || base > maxD>>attempt {
		return maxD
	}
	return base << attempt
}

// jitter is d × (0.5 + r/2) for r in [0, 1), between d/2 and d. The factor is kept in
// [0.5, 1] (an r outside [0, 1), or NaN, from an injected Rand, gives an end), and the
// product saturates at d: the factor of the largest r below 1 rounds to exactly 1.0, and
// float64(d) for a d near the longest Duration is 2^63, whose conversion overflows.
func jitter(d time.Duration, r float64) time.Duration {
	f := 0.5 + r*0.5
	switch {
	case !(f >= 0.5): // also NaN
		f = 0.5
	case f > 1:
		f = 1
	}
	x := float64(d) * f
	if x >= float64(d) {
		return d
	}
	// x < float64(d) <= 2^63, and float64(d) is d rounded to nearest, so x <= d: the
	// conversion is exact in range.
	return max(time.Duration(x), d/2)
}

// Verdict is a handler's verdict carried by its error: none, Permanent, CancelJob or
// Snooze.
type Verdict int

// The verdicts.
const (
	VerdictNone Verdict = iota
	VerdictPermanent
	VerdictCancel
	VerdictSnooze
)

// VerdictOf returns the verdict err carries (looking through wrapping) and, for Snooze,
// the delay.
func VerdictOf(err error) (Verdict, time.Duration) {
	var ve *verdictError
	if !errors.As(err, &ve) {
		return VerdictNone, 0
	}
	return Verdict(ve.kind), ve.snooze
}
