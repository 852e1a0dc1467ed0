// This file holds the validation of what is enqueued: schema, queue and kind names,
// options, and payloads Postgres would refuse. Everything here runs before anything is
// written, so bad input costs the caller's transaction nothing.

package skiplock

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/skiplock/skiplock/internal/pgutil"
)

var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,47}$`)

// validSchema checks a schema name; names are also quoted wherever they are used.
func validSchema(s string) error {
	if !schemaRE.MatchString(s) {
		return fmt.Errorf("%w: %q: use [a-z_][a-z0-9_], 1-48 characters", ErrInvalidSchema, s)
	}
	return nil
}

// validQueue checks a queue name. It runs for every enqueued job, so it is a loop, not
// a regular expression (which cost 4% of a bulk insert's CPU).
func validQueue(q string) error {
	ok := len(q) >= 1 && len(q) <= MaxQueueLength
	for i := 0; ok && i < len(q); i++ {
		c := q[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-'
	}
	if !ok {
		return fmt.Errorf("%w: %q: use [a-z0-9_-], 1-64 characters", ErrInvalidQueue, q)
	}
	return nil
}

// newJob is a validated job ready to insert.
type newJob struct {
	queue       string
	kind        string
	payload     []byte
	priority    int16
	runAt       *time.Time // nil: now() by the database clock
	maxAttempts int32
	uniqueKey   *string
	// uniqueStates are the finished states in which a job with uniqueKey blocks this one
	// (UniqueOpts.States); nil when only queued and running do.
	uniqueStates []string
	// keyIsCallers: uniqueKey is EnqueueOptions.UniqueKey, whose duplicates also report
	// ErrDuplicateJob.
	keyIsCallers bool
	// timeoutMs is EnqueueOptions.Timeout; nil: the kind's or the worker's job timeout.
	timeoutMs *int64
	meta      map[string]string // a copy of the options' metadata, hooks add to it
	metadata  []byte            // meta as JSON, set by encodeMetadata
	// partitionKey is EnqueueOptions.PartitionKey; nil: none.
	partitionKey *string
}

// maxMetadataBytes bounds a job's metadata as JSON (see [EnqueueOptions].Metadata).
const maxMetadataBytes = 16 << 10

// encodeMetadata checks j.meta and sets j.metadata to its JSON.
func (j *newJob) encodeMetadata() error {
	if len(j.meta) == 0 {
		j.metadata = emptyObject
		return nil
	}
	for k, v := range j.meta {
		if k == "" || !validText(k) || !validText(v) {
			return fmt.Errorf("%w: Metadata key %q: keys must be non-empty, keys and values UTF-8 without NUL", ErrInvalidOptions, truncate(k, 40))
		}
	}
	b, err := json.Marshal(j.meta)
	if err != nil {
		return fmt.Errorf("%w: Metadata: %v", ErrInvalidOptions, err)
	}
	if len(b) > maxMetadataBytes {
		return fmt.Errorf("%w: Metadata is %d bytes as JSON, at most %d", ErrInvalidOptions, len(b), maxMetadataBytes)
	}
	j.metadata = b
	return nil
}

var emptyObject = []byte("{}")

// metadataText is the metadata as a statement argument: text, as the payload goes, and
// "{}" for a job that never went through encodeMetadata.
func (j *newJob) metadataText() string {
	if len(j.metadata) == 0 {
		return "{}"
	}
	return string(j.metadata)
}

// dueNow reports whether the job may run at once (and so deserves a wake-up).
func (j *newJob) dueNow() bool { return j.runAt == nil || !j.runAt.After(time.Now()) }

// prepare validates args and options and marshals the payload. It writes nothing.
func (c *Client) prepare(args JobArgs, opts *EnqueueOptions) (newJob, error) {
	kind, err := argsKind(args)
	if err != nil {
		return newJob{}, err
	}
	o, err := jobOptions(args, opts)
	if err != nil {
		return newJob{}, err
	}
	payload, err := c.encodePayload(kind, args)
	if err != nil {
		return newJob{}, err
	}
	j := newJob{queue: o.Queue, kind: kind, payload: payload, priority: int16(o.Priority), maxAttempts: int32(o.MaxAttempts)}
	if !o.RunAt.IsZero() {
		t := o.RunAt
		j.runAt = &t
	}
	if o.UniqueKey != "" {
		k := o.UniqueKey
		j.uniqueKey, j.keyIsCallers = &k, true
	}
	if o.Unique != nil {
		if o.UniqueKey != "" {
			return newJob{}, fmt.Errorf("%w: set UniqueKey or Unique, not both", ErrInvalidOptions)
		}
		k, states, err := o.Unique.uniqueKey(kind, o.Queue, payload, j.runAt, time.Now())
		if err != nil {
			return newJob{}, err
		}
		j.uniqueKey, j.uniqueStates = &k, states
	}
	if o.Timeout < 0 || (o.Timeout > 0 && o.Timeout < time.Millisecond) {
		return newJob{}, fmt.Errorf("%w: Timeout %s: must be zero (the kind's or worker's timeout) or at least 1ms", ErrInvalidOptions, o.Timeout)
	}
	if o.Timeout > 0 {
		ms := o.Timeout.Milliseconds()
		j.timeoutMs = &ms
	}
	if len(o.Metadata) > 0 {
		j.meta = maps.Clone(o.Metadata) // hooks add to it; the caller's map stays as it was
	}
	if o.PartitionKey != "" {
		k := o.PartitionKey
		j.partitionKey = &k
	}
	return j, nil
}

// argsKind checks args and returns its kind.
func argsKind(args JobArgs) (string, error) {
	if args == nil {
		return "", ErrNilArgs
	}
	if v := reflect.ValueOf(args); v.Kind() == reflect.Pointer && v.IsNil() {
		return "", fmt.Errorf("%w: a nil %T", ErrNilArgs, args)
	}
	kind := args.Kind()
	if kind == "" || len(kind) > MaxKindLength || !validText(kind) {
		return "", fmt.Errorf("%w: %q (%T): a kind must be 1-%d bytes of UTF-8 without NUL", ErrInvalidKind, truncate(kind, 40), args, MaxKindLength)
	}
	return kind, nil
}

// jobOptions merges the args type's default options with opts, fills the defaults, and
// checks the fields that need no payload.
func jobOptions(args JobArgs, opts *EnqueueOptions) (EnqueueOptions, error) {
	var o EnqueueOptions
	if opts != nil && opts.SequenceOnFailure != SequenceHold {
		return o, fmt.Errorf("%w: SequenceOnFailure is for EnqueueSequence and EnqueueSequenceTx only", ErrInvalidOptions)
	}
	if d, ok := args.(JobArgsWithOptions); ok {
		o = d.EnqueueOptions()
	}
	if opts != nil {
		o = mergeOptions(o, *opts)
	}
	if o.Queue == "" {
		o.Queue = DefaultQueue
	}
	if err := validQueue(o.Queue); err != nil {
		return o, err
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.MaxAttempts < 1 {
		return o, fmt.Errorf("%w: MaxAttempts %d: must be at least 1", ErrInvalidOptions, o.MaxAttempts)
	}
	if o.MaxAttempts > 1_000_000 {
		return o, fmt.Errorf("%w: MaxAttempts %d: must be at most 1000000", ErrInvalidOptions, o.MaxAttempts)
	}
	if o.Priority < MinPriority || o.Priority > MaxPriority {
		return o, fmt.Errorf("%w: Priority %d: must be in [%d, %d]", ErrInvalidOptions, o.Priority, MinPriority, MaxPriority)
	}
	if len(o.UniqueKey) > 255 || !validText(o.UniqueKey) {
		return o, fmt.Errorf("%w: UniqueKey %q: at most 255 bytes of UTF-8 without NUL", ErrInvalidOptions, truncate(o.UniqueKey, 40))
	}
	if len(o.PartitionKey) > 255 || !validText(o.PartitionKey) {
		return o, fmt.Errorf("%w: PartitionKey %q: at most 255 bytes of UTF-8 without NUL", ErrInvalidOptions, truncate(o.PartitionKey, 40))
	}
	if !o.RunAt.IsZero() && (o.RunAt.Year() < 1 || o.RunAt.Year() > 9999) {
		return o, fmt.Errorf("%w: RunAt %s: the year must be in [1, 9999]", ErrInvalidOptions, o.RunAt.Format(time.RFC3339))
	}
	return o, nil
}

// encodePayload marshals args to the JSON stored as the job's payload, and checks that
// jsonb takes it and that it fits Config.MaxPayloadBytes.
func (c *Client) encodePayload(kind string, args JobArgs) ([]byte, error) {
	payload, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("%w: kind %q: %v", ErrInvalidPayload, kind, err)
	}
	if err := checkJSONB(payload); err != nil {
		return nil, fmt.Errorf("%w: kind %q: %v", ErrInvalidPayload, kind, err)
	}
	if c.maxBytes > 0 && len(payload) > c.maxBytes {
		return nil, fmt.Errorf("%w: kind %q: %d bytes, the limit is %d (Config.MaxPayloadBytes)", ErrPayloadTooLarge, kind, len(payload), c.maxBytes)
	}
	return payload, nil
}

func mergeOptions(base, over EnqueueOptions) EnqueueOptions {
	if over.Queue != "" {
		base.Queue = over.Queue
	}
	if over.Priority != 0 {
		base.Priority = over.Priority
	}
	if !over.RunAt.IsZero() {
		base.RunAt = over.RunAt
	}
	if over.MaxAttempts != 0 {
		base.MaxAttempts = over.MaxAttempts
	}
	if over.UniqueKey != "" {
		base.UniqueKey = over.UniqueKey
	}
	if over.Unique != nil {
		base.Unique = over.Unique
	}
	if over.Timeout != 0 {
		base.Timeout = over.Timeout
	}
	if len(over.Metadata) > 0 {
		if len(base.Metadata) == 0 {
			base.Metadata = over.Metadata
		} else { // key by key: the call's entries win
			m := maps.Clone(base.Metadata)
			maps.Copy(m, over.Metadata)
			base.Metadata = m
		}
	}
	if over.PartitionKey != "" {
		base.PartitionKey = over.PartitionKey
	}
	return base
}

// validText reports whether Postgres can store s as text.
func validText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// checkJSONB rejects JSON that Postgres's jsonb would refuse (see [pgutil.CheckJSONB]).
func checkJSONB(b []byte) error { return pgutil.CheckJSONB(b) }
