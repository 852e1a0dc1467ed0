// This file holds what is enqueued and its validation: the options of one job, and
// Prepare, which checks args and options and marshals the payload before anything is
// written, so bad input costs the caller's transaction nothing.

package enqueue

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"time"

	"github.com/skiplock/skiplock/internal/pgutil"
)

// Args is what is enqueued: the root package's JobArgs. Its Kind names the handler; the
// value is stored as JSON.
type Args interface {
	Kind() string
}

// Options are one job's enqueue options: the root package's EnqueueOptions, less the
// sequence policy, which only EnqueueSequence takes. The zero value of each field means
// its default.
type Options struct {
	Queue        string
	Priority     int
	RunAt        time.Time
	MaxAttempts  int
	UniqueKey    string
	Unique       *Unique
	Timeout      time.Duration
	Metadata     map[string]string
	PartitionKey string
	// ConcurrencyKeys are the job's keys by dimension (concurrencykeys.go); nil: none.
	ConcurrencyKeys map[string]string
	Encrypt         bool // the root seals the payload (Job.Sealer)
}

// Job is a validated job ready to insert.
type Job struct {
	Queue    string
	Kind     string
	Payload  []byte
	Priority int16
	RunAt    *time.Time // nil: now() by the database clock (plus Delay)
	// Delay is a debounced new job's wait (Unique.Debounce): with RunAt nil it is due
	// Delay after now() by the database clock, as a debounced holder's push is, so an
	// enqueuing host whose clock differs from the server's neither runs it early nor
	// holds it back. Zero: none. Only the single unique insert writes it (insertUniqueSQL).
	Delay       time.Duration
	MaxAttempts int32
	UniqueKey   *string
	// UniqueStates are the finished states in which a job with UniqueKey blocks this one
	// (Unique.States); nil when only queued and running do.
	UniqueStates []string
	// KeyIsCallers: UniqueKey is Options.UniqueKey, whose duplicates also report
	// ErrDuplicateJob.
	KeyIsCallers bool
	// TimeoutMs is Options.Timeout; nil: the kind's or the worker's job timeout.
	TimeoutMs *int64
	Meta      map[string]string // a copy of the options' metadata, hooks add to it
	Metadata  []byte            // Meta as JSON, set by encodeMetadata
	// PartitionKey is Options.PartitionKey; nil: none.
	PartitionKey *string
	// ConcurrencyKeys is Options.ConcurrencyKeys as JSON text; nil: none.
	ConcurrencyKeys *string
	// OnHolder is what a duplicate does to a queued holder of UniqueKey (replace.go):
	// the zero value leaves it as it is.
	OnHolder HolderEdit
	// Sealer, when not nil, encrypts Payload before it is written (Seal, rewrite.go).
	Sealer Sealer
}

// maxMetadataBytes bounds a job's metadata as JSON (see the root's EnqueueOptions.Metadata).
const maxMetadataBytes = 16 << 10

// encodeMetadata checks j.Meta and sets j.Metadata to its JSON.
func (j *Job) encodeMetadata() error {
	if len(j.Meta) == 0 {
		j.Metadata = emptyObject
		return nil
	}
	for k, v := range j.Meta {
		if k == "" || !ValidText(k) || !ValidText(v) {
			return fmt.Errorf("%w: Metadata key %q: keys must be non-empty, keys and values UTF-8 without NUL", ErrInvalidOptions, Truncate(k, 40))
		}
	}
	b, err := json.Marshal(j.Meta)
	if err != nil {
		return fmt.Errorf("%w: Metadata: %v", ErrInvalidOptions, err)
	}
	if len(b) > maxMetadataBytes {
		return fmt.Errorf("%w: Metadata is %d bytes as JSON, at most %d", ErrInvalidOptions, len(b), maxMetadataBytes)
	}
	j.Metadata = b
	return nil
}

// EncodeMetadata checks metadata m as an enqueue does and returns its JSON (an edit of a
// job's metadata, Client.Update).
func EncodeMetadata(m map[string]string) ([]byte, error) {
	j := Job{Meta: m}
	if err := j.encodeMetadata(); err != nil {
		return nil, err
	}
	return j.Metadata, nil
}

var emptyObject = []byte("{}")

// metadataText is the metadata as a statement argument: text, as the payload goes, and
// "{}" for a job that never went through encodeMetadata.
func (j *Job) metadataText() string {
	if len(j.Metadata) == 0 {
		return "{}"
	}
	return string(j.Metadata)
}

// dueNow reports whether the job may run at once (and so deserves a wake-up).
func (j *Job) dueNow() bool {
	if j.RunAt == nil {
		return j.Delay <= 0
	}
	return !j.RunAt.After(time.Now())
}

// Prepare validates a job of kind (from [ArgsKind]) with args and options o (the args
// type's defaults merged in, see [MergeOptions]), fills the defaults, and marshals the
// payload, which must fit maxPayloadBytes (zero or negative: no limit). It writes nothing.
func Prepare(kind string, args Args, o Options, maxPayloadBytes int) (Job, error) {
	if err := checkOptions(&o); err != nil {
		return Job{}, err
	}
	payload, err := encodePayload(kind, args, maxPayloadBytes)
	if err != nil {
		return Job{}, err
	}
	j := Job{Queue: o.Queue, Kind: kind, Payload: payload, Priority: int16(o.Priority), MaxAttempts: int32(o.MaxAttempts)}
	if !o.RunAt.IsZero() {
		t := o.RunAt
		j.RunAt = &t
	}
	if o.UniqueKey != "" {
		k := o.UniqueKey
		j.UniqueKey, j.KeyIsCallers = &k, true
	}
	if o.Unique != nil {
		if o.UniqueKey != "" {
			return Job{}, fmt.Errorf("%w: set UniqueKey or Unique, not both", ErrInvalidOptions)
		}
		k, states, err := o.Unique.key(kind, o.Queue, payload, j.RunAt, time.Now())
		if err != nil {
			return Job{}, err
		}
		j.UniqueKey, j.UniqueStates = &k, states
		if j.OnHolder, err = o.Unique.holderEdit(); err != nil {
			return Job{}, err
		}
		if d := o.Unique.Debounce; d > 0 && j.RunAt == nil {
			j.Delay = d // due at now() + d by the database clock (insertUniqueSQL)
		}
	}
	if o.Timeout < 0 || (o.Timeout > 0 && o.Timeout < time.Millisecond) {
		return Job{}, fmt.Errorf("%w: Timeout %s: must be zero (the kind's or worker's timeout) or at least 1ms", ErrInvalidOptions, o.Timeout)
	}
	if o.Timeout > 0 {
		ms := o.Timeout.Milliseconds()
		j.TimeoutMs = &ms
	}
	if len(o.Metadata) > 0 {
		j.Meta = maps.Clone(o.Metadata) // hooks add to it; the caller's map stays as it was
	}
	if o.PartitionKey != "" {
		k := o.PartitionKey
		j.PartitionKey = &k
	}
	j.ConcurrencyKeys = concurrencyKeysJSON(o.ConcurrencyKeys)
	return j, nil
}

// ArgsKind checks args and returns its kind.
func ArgsKind(args Args) (string, error) {
	if args == nil {
		return "", ErrNilArgs
	}
	if v := reflect.ValueOf(args); v.Kind() == reflect.Pointer && v.IsNil() {
		return "", fmt.Errorf("%w: a nil %T", ErrNilArgs, args)
	}
	kind := args.Kind()
	if kind == "" || len(kind) > MaxKindLength || !ValidText(kind) {
		return "", fmt.Errorf("%w: %q (%T): a kind must be 1-%d bytes of UTF-8 without NUL", ErrInvalidKind, Truncate(kind, 40), args, MaxKindLength)
	}
	return kind, nil
}

// checkOptions fills the defaults of o and checks the fields that need no payload.
func checkOptions(o *Options) error {
	if o.Queue == "" {
		o.Queue = DefaultQueue
	}
	if err := ValidQueue(o.Queue); err != nil {
		return err
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.MaxAttempts < 1 {
		return fmt.Errorf("%w: MaxAttempts %d: must be at least 1", ErrInvalidOptions, o.MaxAttempts)
	}
	if o.MaxAttempts > 1_000_000 {
		return fmt.Errorf("%w: MaxAttempts %d: must be at most 1000000", ErrInvalidOptions, o.MaxAttempts)
	}
	if o.Priority < MinPriority || o.Priority > MaxPriority {
		return fmt.Errorf("%w: Priority %d: must be in [%d, %d]", ErrInvalidOptions, o.Priority, MinPriority, MaxPriority)
	}
	if len(o.UniqueKey) > 255 || !ValidText(o.UniqueKey) {
		return fmt.Errorf("%w: UniqueKey %q: at most 255 bytes of UTF-8 without NUL", ErrInvalidOptions, Truncate(o.UniqueKey, 40))
	}
	if len(o.PartitionKey) > 255 || !ValidText(o.PartitionKey) {
		return fmt.Errorf("%w: PartitionKey %q: at most 255 bytes of UTF-8 without NUL", ErrInvalidOptions, Truncate(o.PartitionKey, 40))
	}
	if err := checkConcurrencyKeys(o.ConcurrencyKeys); err != nil {
		return err
	}
	if !o.RunAt.IsZero() && (o.RunAt.Year() < 1 || o.RunAt.Year() > 9999) {
		return fmt.Errorf("%w: RunAt %s: the year must be in [1, 9999]", ErrInvalidOptions, o.RunAt.Format(time.RFC3339))
	}
	return nil
}

// encodePayload marshals args to the JSON stored as the job's payload, and checks that
// jsonb takes it and that it fits maxBytes. What json.Marshal returns is valid JSON (it
// validates a MarshalJSON method's output too), so only jsonb's own limits are checked.
func encodePayload(kind string, args Args, maxBytes int) ([]byte, error) {
	payload, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("%w: kind %q: %v", ErrInvalidPayload, kind, err)
	}
	return payload, checkJSONB(kind, payload, maxBytes)
}

// checkPayload checks that payload, from anywhere, is JSON that jsonb takes and that it
// fits maxBytes.
func checkPayload(kind string, payload []byte, maxBytes int) error {
	if !json.Valid(payload) {
		return fmt.Errorf("%w: kind %q: the payload is not valid JSON", ErrInvalidPayload, kind)
	}
	return checkJSONB(kind, payload, maxBytes)
}

// checkJSONB checks that jsonb takes payload, valid JSON, and that it fits maxBytes.
func checkJSONB(kind string, payload []byte, maxBytes int) error {
	if err := pgutil.CheckJSONB(payload); err != nil {
		return fmt.Errorf("%w: kind %q: %v", PayloadErr(err), kind, err)
	}
	if maxBytes > 0 && len(payload) > maxBytes {
		return fmt.Errorf("%w: kind %q: %d bytes, the limit is %d (Config.MaxPayloadBytes)", ErrPayloadTooLarge, kind, len(payload), maxBytes)
	}
	return nil
}

// PayloadErr is the sentinel for err, a refusal of pgutil.CheckJSONB: ErrPayloadTooLarge
// for a document larger than jsonb holds, ErrInvalidPayload for the others.
func PayloadErr(err error) error {
	if errors.Is(err, pgutil.ErrJSONBTooLarge) {
		return ErrPayloadTooLarge
	}
	return ErrInvalidPayload
}

// MergeOptions returns base (an args type's default options) with the fields over (the
// call's options) sets; metadata is merged key by key, over's entries winning.
func MergeOptions(base, over Options) Options {
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
	if len(over.ConcurrencyKeys) > 0 { // dimension by dimension: the call's keys win
		m := maps.Clone(base.ConcurrencyKeys)
		if m == nil {
			m = map[string]string{}
		}
		maps.Copy(m, over.ConcurrencyKeys)
		base.ConcurrencyKeys = m
	}
	base.Encrypt = base.Encrypt || over.Encrypt
	return base
}

// CheckBulk refuses, for EnqueueMany, the unique options that only a single enqueue
// honours.
func (j *Job) CheckBulk() error {
	if j.OnHolder.any() {
		return fmt.Errorf("%w: Unique.Replace and Unique.Debounce are for Enqueue and EnqueueTx, not EnqueueMany", ErrInvalidOptions)
	}
	return nil
}

// Sealer encrypts a payload of kind for storage (the root's Keyring).
type Sealer func(kind string, payload []byte) ([]byte, error)

// Seal replaces j's payload by its encryption when j is to be encrypted, once, and checks
// that the result still fits maxBytes. Every path that writes a job calls it last (the
// enqueues through Enqueuing, workflows, batches and sequences after prepare).
func (j *Job) Seal(maxBytes int) error {
	if j.Sealer == nil {
		return nil
	}
	sealed, err := j.Sealer(j.Kind, j.Payload)
	if err != nil {
		return fmt.Errorf("%w: kind %q: encrypting the args: %v", ErrInvalidPayload, j.Kind, err)
	}
	if maxBytes > 0 && len(sealed) > maxBytes {
		return fmt.Errorf("%w: kind %q: %d bytes once encrypted, the limit is %d (Config.MaxPayloadBytes)", ErrPayloadTooLarge, j.Kind, len(sealed), maxBytes)
	}
	// With no limit of the caller's, the sealed form (a third larger) may pass what
	// jsonb holds though the args did not: refused here, not by the server, which would
	// abort the caller's transaction.
	if err := pgutil.CheckJSONBSize(sealed); err != nil {
		return fmt.Errorf("%w: kind %q: once encrypted: %v", ErrPayloadTooLarge, j.Kind, err)
	}
	j.Payload, j.Sealer = sealed, nil
	return nil
}
