package skiplock

import (
	"errors"
	"fmt"
	"time"
)

// Input errors. Every one is returned before anything is written, wrapped with a message
// that names the bad value; test for them with [errors.Is].
var (
	// ErrNilArgs is returned when a nil [JobArgs] is enqueued.
	ErrNilArgs = errors.New("skiplock: job args are nil")
	// ErrInvalidKind is returned when a kind is empty or longer than [MaxKindLength].
	ErrInvalidKind = errors.New("skiplock: invalid job kind")
	// ErrInvalidQueue is returned for a queue name outside [a-z0-9_-], 1-64 characters.
	ErrInvalidQueue = errors.New("skiplock: invalid queue name")
	// ErrInvalidSchema is returned for a schema name outside [a-z_][a-z0-9_], 1-48 characters.
	ErrInvalidSchema = errors.New("skiplock: invalid schema name")
	// ErrInvalidPayload is returned when the args do not marshal to a JSON object or value.
	ErrInvalidPayload = errors.New("skiplock: job args do not marshal to JSON")
	// ErrPayloadTooLarge is returned when the marshalled args exceed Config.MaxPayloadBytes.
	ErrPayloadTooLarge = errors.New("skiplock: job payload too large")
	// ErrInvalidOptions is returned for out-of-range [EnqueueOptions] (max attempts < 1,
	// priority outside [MinPriority, MaxPriority], an over-long unique key).
	ErrInvalidOptions = errors.New("skiplock: invalid enqueue options")
	// ErrDuplicateJob is returned, together with the existing job, when a job with the same
	// UniqueKey is already queued or running. The caller's transaction stays usable.
	ErrDuplicateJob = errors.New("skiplock: a job with this unique key is already active")
	// ErrJobNotFound is returned when no job has the given id.
	ErrJobNotFound = errors.New("skiplock: job not found")
	// ErrNotMigrated is returned when the schema's tables do not exist: run [Migrate].
	ErrNotMigrated = errors.New("skiplock: schema is not migrated")
)

// Limits on enqueued jobs.
const (
	// MaxKindLength is the longest kind name, in bytes.
	MaxKindLength = 255
	// MaxQueueLength is the longest queue name, in bytes.
	MaxQueueLength = 64
	// DefaultMaxPayloadBytes is the default limit on a job's JSON payload (1 MiB).
	DefaultMaxPayloadBytes = 1 << 20
	// MinPriority and MaxPriority bound [EnqueueOptions].Priority (a Postgres smallint).
	MinPriority, MaxPriority = -32768, 32767
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
