// This file holds the errors the engine returns for bad input, the limits and defaults
// of what is enqueued, and the checks of names and text shared by every enqueue.

package enqueue

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// Input errors, returned before anything is written. The root package re-exports them
// and its doc comments say when each is returned.
var (
	// ErrNilArgs is returned when nil args are enqueued.
	ErrNilArgs = errors.New("skiplock: job args are nil")
	// ErrInvalidKind is returned when a kind is empty or longer than [MaxKindLength].
	ErrInvalidKind = errors.New("skiplock: invalid job kind")
	// ErrInvalidQueue is returned for a queue name outside [a-z0-9_-], 1-64 characters.
	ErrInvalidQueue = errors.New("skiplock: invalid queue name")
	// ErrInvalidPayload is returned when the args do not marshal to JSON that jsonb takes.
	ErrInvalidPayload = errors.New("skiplock: job args do not marshal to JSON")
	// ErrPayloadTooLarge is returned when the marshalled args exceed the payload limit.
	ErrPayloadTooLarge = errors.New("skiplock: job payload too large")
	// ErrInvalidOptions is returned for out-of-range [Options].
	ErrInvalidOptions = errors.New("skiplock: invalid enqueue options")
	// ErrDuplicateJob is returned, together with the existing job, when a job with the
	// same caller-chosen unique key is already active.
	ErrDuplicateJob = errors.New("skiplock: a job with this unique key is already active")
	// ErrInvalidWorkflow is matched by every error that refuses a workflow, a batch or a
	// sequence job before anything is written.
	ErrInvalidWorkflow = errors.New("skiplock: invalid workflow")
)

// Limits and defaults of enqueued jobs; the root package re-exports them.
const (
	// MaxKindLength is the longest kind name, in bytes.
	MaxKindLength = 255
	// MaxQueueLength is the longest queue name, in bytes.
	MaxQueueLength = 64
	// MinPriority and MaxPriority bound [Options].Priority (a Postgres smallint).
	MinPriority, MaxPriority = -32768, 32767
	// DefaultQueue is the queue of a job whose options name none.
	DefaultQueue = "default"
	// DefaultMaxAttempts is how many times a job runs before it is dead, unless its
	// options say otherwise.
	DefaultMaxAttempts = 20
)

// jobColumns are the columns jobtype.ScanJob reads, in its order.
const jobColumns = jobtype.Columns

// archiveJobColumns is jobColumns for a jobs_archive row, which keeps no lease.
const archiveJobColumns = jobtype.ArchiveColumns

// ValidQueue checks a queue name. It runs for every enqueued job, so it is a loop, not
// a regular expression (which cost 4% of a bulk insert's CPU).
func ValidQueue(q string) error {
	ok := len(q) >= 1 && len(q) <= MaxQueueLength
	for i := 0; ok && i < len(q); i++ {
		c := q[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-'
	}
	if !ok {
		return fmt.Errorf("%w: %q: use [a-z0-9_-], 1-64 characters", ErrInvalidQueue, Truncate(q, 80))
	}
	return nil
}

// ValidText reports whether Postgres can store s as text.
func ValidText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// Truncate returns s cut to at most n bytes, at the start of a character (never inside
// one's UTF-8 encoding), marked with an ellipsis when cut, for messages.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// wrapErr adds the operation and turns an undefined table into ErrNotMigrated
// (pgutil.DB.WrapErr).
func wrapErr(schema, op string, err error) error {
	return pgutil.DB{Schema: schema}.WrapErr(op, err)
}
