// This file holds the errors enqueueing and the operator calls return, and the limits on
// what is enqueued, and the checks of names and text shared with the enqueue engine. The
// verdicts a handler returns (Permanent, CancelJob, Snooze) are in retry.go.

package skiplock

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/skiplock/skiplock/internal/enqueue"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/periodic"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/internal/sealed"
)

// Input errors. Every one is returned before anything is written, wrapped with a message
// that names the bad value; test for them with [errors.Is].
var (
	// ErrNilArgs is returned when a nil [JobArgs] is enqueued.
	ErrNilArgs = enqueue.ErrNilArgs
	// ErrInvalidKind is returned when a kind is empty or longer than [MaxKindLength].
	ErrInvalidKind = enqueue.ErrInvalidKind
	// ErrInvalidQueue is returned for a queue name outside [a-z0-9_-], 1-64 characters.
	ErrInvalidQueue = enqueue.ErrInvalidQueue
	// ErrInvalidSchema is returned for a schema name outside [a-z_][a-z0-9_], 1-48 characters,
	// or starting with "pg_" (Postgres keeps those names for its own schemas).
	ErrInvalidSchema = errors.New("skiplock: invalid schema name")
	// ErrNoKey is the error of an attempt whose job is encrypted with a key the worker's
	// [Keyring] does not hold (or whose client has none), and of Keyring.Open for such a
	// payload: the attempt fails and is retried like any failure, so a worker of another
	// deploy that holds the key can run it. A sealed payload that fails authentication
	// with a key the ring holds (altered, or sealed for another kind) never opens: that
	// job fails for good (status failed) at its first attempt instead.
	ErrNoKey = sealed.ErrNoKey
	// ErrInvalidPayload is returned when the args do not marshal to JSON, or marshal to
	// JSON that Postgres's jsonb refuses: invalid UTF-8, the escape \u0000, a \u escape
	// of half a surrogate pair, a number beyond numeric's range (more than 131072 digits
	// before the point or 16383 after), or more than 512 levels of nesting.
	ErrInvalidPayload = enqueue.ErrInvalidPayload
	// ErrPayloadTooLarge is returned when the marshalled args exceed Config.MaxPayloadBytes,
	// or hold a string, array or object larger than Postgres's jsonb stores.
	ErrPayloadTooLarge = enqueue.ErrPayloadTooLarge
	// ErrInvalidOptions is returned for out-of-range [EnqueueOptions] (max attempts < 1,
	// priority outside [MinPriority, MaxPriority], an over-long unique key).
	ErrInvalidOptions = enqueue.ErrInvalidOptions
	// ErrInvalidConfig is returned by [NewClient], [NewWorker] and [NewSweeper] when a
	// field of their configuration is out of range; the message names the field and says
	// what to use.
	ErrInvalidConfig = errors.New("skiplock: invalid configuration")
	// ErrDuplicateJob is returned, together with the existing job, when a job with the same
	// UniqueKey is already queued or running. The caller's transaction stays usable.
	ErrDuplicateJob = enqueue.ErrDuplicateJob
	// ErrJobNotFound is returned when no job has the given id.
	ErrJobNotFound = jobtype.ErrJobNotFound
	// ErrPeriodicNotFound is returned by SetPeriodicEnabled and RunPeriodicNow for a
	// schedule no worker declared (or, for RunPeriodicNow, one that is disabled, or
	// inactive: declared by no running worker, so none would enqueue it). The message
	// says which.
	ErrPeriodicNotFound = periodic.ErrNotFound
	// ErrInvalidLimits is returned for negative or out-of-range [QueueLimits].
	ErrInvalidLimits = errors.New("skiplock: invalid queue limits")
	// ErrNotMigrated is returned when the schema's tables do not exist: run [Migrate].
	ErrNotMigrated = pgutil.ErrNotMigrated
	// ErrDependencyOutputGone is returned by [Client.DependencyOutputs] when the job row
	// of a dependency is gone, so that its output cannot be read: the archived row was
	// purged after ArchiveRetention, the job ran under [CompletionDelete], or it was
	// deleted. The message names the dependencies. It is also returned, with
	// [ErrWorkflowNotFound], for a task whose workflow the sweeper deleted (its dead job
	// was kept, then requeued): its dependencies are unknown.
	ErrDependencyOutputGone = errors.New("skiplock: a dependency's job row is gone: its output cannot be read")
)

// Limits on enqueued jobs.
const (
	// MaxKindLength is the longest kind name, in bytes.
	MaxKindLength = enqueue.MaxKindLength
	// MaxQueueLength is the longest queue name, in bytes.
	MaxQueueLength = enqueue.MaxQueueLength
	// DefaultMaxPayloadBytes is the default limit on a job's JSON payload (1 MiB).
	DefaultMaxPayloadBytes = 1 << 20
	// MinPriority and MaxPriority bound [EnqueueOptions].Priority (a Postgres smallint).
	MinPriority, MaxPriority = enqueue.MinPriority, enqueue.MaxPriority
)

// ErrJobTimeout is the cause (see context.Cause) of a handler's context cancelled because
// the attempt ran past its timeout ([WorkerConfig].JobTimeout, a kind's Timeout method or
// [EnqueueOptions].Timeout). The attempt counts as failed.
var ErrJobTimeout = jobtype.ErrJobTimeout

// ErrDeadlineExceeded is the error of a job that reached its deadline
// ([EnqueueOptions].Deadline): its error history says so, and a running attempt's
// context ends with it as the cause ([context.Cause]).
var ErrDeadlineExceeded = jobtype.ErrDeadlineExceeded

// configError is an out-of-range configuration field. It matches [ErrInvalidConfig] and,
// for names, the sentinel of the name's kind (ErrInvalidSchema, ErrInvalidQueue).
type configError struct {
	field string // e.g. "WorkerConfig.VisibilityTimeout"
	value string // the value as the message shows it
	fix   string // what to use instead
	also  error  // a more specific sentinel, or nil
	// prefix, when set, opens the message instead of "skiplock: ", so a message starts as
	// the more specific sentinel's does (callers match on "invalid schema name").
	prefix string
}

func (e *configError) Error() string {
	if e.prefix != "" {
		return e.prefix + e.field + ": " + e.value + ": " + e.fix
	}
	return "skiplock: " + e.field + " is " + e.value + ": " + e.fix
}

func (e *configError) Unwrap() []error {
	if e.also != nil {
		return []error{ErrInvalidConfig, e.also}
	}
	return []error{ErrInvalidConfig}
}

var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,47}$`)

// schemaRule says which schema names skiplock takes, for error messages.
const schemaRule = `use [a-z_][a-z0-9_], 1-48 characters, not starting with "pg_"`

// schemaNameOK reports whether s is a schema name skiplock takes: schemaRE, and not a
// name Postgres keeps for its own schemas (CREATE SCHEMA refuses "pg_" names).
func schemaNameOK(s string) bool { return schemaRE.MatchString(s) && !strings.HasPrefix(s, "pg_") }

// validSchema checks a schema name; names are also quoted wherever they are used.
func validSchema(s string) error {
	if !schemaNameOK(s) {
		return fmt.Errorf("%w: %q: %s", ErrInvalidSchema, s, schemaRule)
	}
	return nil
}

// validQueue checks a queue name (see [enqueue.ValidQueue]).
func validQueue(q string) error { return enqueue.ValidQueue(q) }

// validText reports whether Postgres can store s as text.
func validText(s string) bool { return enqueue.ValidText(s) }

// truncate returns s cut to n bytes, marked when cut, for messages.
func truncate(s string, n int) string { return enqueue.Truncate(s, n) }

// checkJSONB rejects JSON that Postgres's jsonb would refuse (see [pgutil.CheckJSONB]).
func checkJSONB(b []byte) error { return pgutil.CheckJSONB(b) }

// payloadErr is the sentinel for a refusal of checkJSONB: [ErrPayloadTooLarge] for a
// document larger than jsonb holds, [ErrInvalidPayload] for the others.
func payloadErr(err error) error { return enqueue.PayloadErr(err) }

// optionsError is an argument that a call other than an enqueue refuses by itself: its
// message speaks of that argument (what: "update", "ListParams", "RequeueFilter"), not
// of enqueue options, and it matches [ErrInvalidOptions].
type optionsError struct{ what, msg string }

func (e *optionsError) Error() string { return "skiplock: invalid " + e.what + ": " + e.msg }

func (e *optionsError) Unwrap() error { return ErrInvalidOptions }
