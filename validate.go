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
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
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
	if args == nil {
		return newJob{}, ErrNilArgs
	}
	if v := reflect.ValueOf(args); v.Kind() == reflect.Pointer && v.IsNil() {
		return newJob{}, fmt.Errorf("%w: a nil %T", ErrNilArgs, args)
	}
	kind := args.Kind()
	if kind == "" || len(kind) > MaxKindLength || !validText(kind) {
		return newJob{}, fmt.Errorf("%w: %q (%T): a kind must be 1-%d bytes of UTF-8 without NUL", ErrInvalidKind, truncate(kind, 40), args, MaxKindLength)
	}
	var o EnqueueOptions
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
		return newJob{}, err
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.MaxAttempts < 1 {
		return newJob{}, fmt.Errorf("%w: MaxAttempts %d: must be at least 1", ErrInvalidOptions, o.MaxAttempts)
	}
	if o.MaxAttempts > 1_000_000 {
		return newJob{}, fmt.Errorf("%w: MaxAttempts %d: must be at most 1000000", ErrInvalidOptions, o.MaxAttempts)
	}
	if o.Priority < MinPriority || o.Priority > MaxPriority {
		return newJob{}, fmt.Errorf("%w: Priority %d: must be in [%d, %d]", ErrInvalidOptions, o.Priority, MinPriority, MaxPriority)
	}
	if len(o.UniqueKey) > 255 || !validText(o.UniqueKey) {
		return newJob{}, fmt.Errorf("%w: UniqueKey %q: at most 255 bytes of UTF-8 without NUL", ErrInvalidOptions, truncate(o.UniqueKey, 40))
	}
	if len(o.PartitionKey) > 255 || !validText(o.PartitionKey) {
		return newJob{}, fmt.Errorf("%w: PartitionKey %q: at most 255 bytes of UTF-8 without NUL", ErrInvalidOptions, truncate(o.PartitionKey, 40))
	}
	if !o.RunAt.IsZero() && (o.RunAt.Year() < 1 || o.RunAt.Year() > 9999) {
		return newJob{}, fmt.Errorf("%w: RunAt %s: the year must be in [1, 9999]", ErrInvalidOptions, o.RunAt.Format(time.RFC3339))
	}
	payload, err := json.Marshal(args)
	if err != nil {
		return newJob{}, fmt.Errorf("%w: kind %q: %v", ErrInvalidPayload, kind, err)
	}
	if err := checkJSONB(payload); err != nil {
		return newJob{}, fmt.Errorf("%w: kind %q: %v", ErrInvalidPayload, kind, err)
	}
	if c.maxBytes > 0 && len(payload) > c.maxBytes {
		return newJob{}, fmt.Errorf("%w: kind %q: %d bytes, the limit is %d (Config.MaxPayloadBytes)", ErrPayloadTooLarge, kind, len(payload), c.maxBytes)
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

// Limits on configuration fields.
const (
	// minInterval is the shortest positive poll, sweep interval or visibility timeout: a
	// shorter one would turn a loop into a busy loop against the database (or, for the
	// visibility timeout, below 3ns, panic in the heartbeat's ticker).
	minInterval = time.Millisecond
	// maxWorkerIDLength is the longest WorkerConfig.ID, in bytes.
	maxWorkerIDLength = 255
	// maxQueueWorkers bounds QueueConfig.MaxWorkers and WorkerConfig.CompleteBatchSize:
	// both size buffers that are allocated up front.
	maxQueueWorkers = 100_000
)

// checkInterval refuses a positive duration under minInterval; zero and negative values
// have their documented meaning.
func checkInterval(field string, d time.Duration, zeroMeans string) error {
	if d > 0 && d < minInterval {
		return &configError{field: field, value: d.String(), fix: "use at least " + minInterval.String() + ", or 0 for " + zeroMeans}
	}
	return nil
}

// validate checks the fields of a Client's configuration that have invalid values.
func (cfg *Config) validate() error {
	if cfg.Schema != "" && !schemaRE.MatchString(cfg.Schema) {
		return &configError{field: "Config.Schema", value: strconv.Quote(cfg.Schema), fix: "use [a-z_][a-z0-9_], 1-48 characters",
			also: ErrInvalidSchema, prefix: "skiplock: invalid schema name in "}
	}
	if cfg.CoalesceWindow > maxCoalesceWindow {
		return &configError{field: "Config.CoalesceWindow", value: cfg.CoalesceWindow.String(),
			fix: "use at most " + maxCoalesceWindow.String() + " (it is added to an Enqueue's latency when the client is busy), 0 for the default or negative for off"}
	}
	for i, h := range cfg.Hooks {
		if h == nil || (reflect.ValueOf(h).Kind() == reflect.Pointer && reflect.ValueOf(h).IsNil()) {
			return &configError{field: fmt.Sprintf("Config.Hooks[%d]", i), value: "nil", fix: "leave nil hooks out"}
		}
	}
	return nil
}

// validate checks every field of a Worker's configuration that has invalid values, before
// defaults are applied: a bad value is an error at NewWorker, not a panic or an endless
// warning loop once the worker runs.
func (cfg *WorkerConfig) validate() error {
	for name, q := range cfg.Queues {
		if validQueue(name) != nil {
			return &configError{field: "the queue name (a WorkerConfig.Queues key)", value: strconv.Quote(truncate(name, 70)), fix: "use [a-z0-9_-], 1-64 characters", also: ErrInvalidQueue}
		}
		field := "WorkerConfig.Queues[" + strconv.Quote(name) + "]"
		if q.MaxWorkers < 0 || q.MaxWorkers > maxQueueWorkers {
			return &configError{field: field + ".MaxWorkers", value: fmt.Sprint(q.MaxWorkers), fix: fmt.Sprintf("use 1 to %d, or 0 for the default (%d)", maxQueueWorkers, DefaultMaxWorkers)}
		}
	}
	if len(cfg.ID) > maxWorkerIDLength || !validText(cfg.ID) {
		return &configError{field: "WorkerConfig.ID", value: strconv.Quote(truncate(cfg.ID, 40)),
			fix: fmt.Sprintf("use at most %d bytes of UTF-8 without NUL (it is stored in locked_by), or \"\" for the default", maxWorkerIDLength)}
	}
	if err := checkInterval("WorkerConfig.PollInterval", cfg.PollInterval, "the default"); err != nil {
		return err
	}
	if err := checkInterval("WorkerConfig.VisibilityTimeout", cfg.VisibilityTimeout, "the default"); err != nil {
		return err
	}
	if err := checkInterval("WorkerConfig.SweepInterval", cfg.SweepInterval, "the default (negative disables the embedded sweeper)"); err != nil {
		return err
	}
	if err := checkInterval("WorkerConfig.JobTimeout", cfg.JobTimeout, "the default (negative means no timeout)"); err != nil {
		return err
	}
	if cfg.Completion < CompletionArchive || cfg.Completion > CompletionKeep {
		return &configError{field: "WorkerConfig.Completion", value: fmt.Sprint(int(cfg.Completion)), fix: "use CompletionArchive, CompletionDelete or CompletionKeep"}
	}
	if cfg.FleetStatements > maxQueueWorkers {
		return &configError{field: "WorkerConfig.FleetStatements", value: fmt.Sprint(cfg.FleetStatements), fix: fmt.Sprintf("use at most %d, 0 for the default (%d), or a negative value for no bound", maxQueueWorkers, DefaultFleetStatements)}
	}
	if cfg.CompleteBatchSize > maxQueueWorkers {
		return &configError{field: "WorkerConfig.CompleteBatchSize", value: fmt.Sprint(cfg.CompleteBatchSize), fix: fmt.Sprintf("use at most %d, or 0 for the default (%d)", maxQueueWorkers, DefaultCompleteBatchSize)}
	}
	if cfg.ListenURL != "" {
		if _, err := pgx.ParseConfig(cfg.ListenURL); err != nil {
			// The URL may hold a password: say why it does not parse, not what it is.
			return &configError{field: "WorkerConfig.ListenURL", value: "not a connection string pgx parses", fix: "use a postgres:// URL or key=value DSN, or \"\" for the pool's settings"}
		}
	}
	for i, h := range cfg.Hooks {
		if h == nil || (reflect.ValueOf(h).Kind() == reflect.Pointer && reflect.ValueOf(h).IsNil()) {
			return &configError{field: fmt.Sprintf("WorkerConfig.Hooks[%d]", i), value: "nil", fix: "leave nil hooks out"}
		}
	}
	return nil
}

// validate checks the fields of a Sweeper's configuration that have invalid values.
func (cfg *SweeperConfig) validate() error {
	if err := checkInterval("SweeperConfig.Interval", cfg.Interval, "the default"); err != nil {
		return err
	}
	return checkInterval("SweeperConfig.VisibilityTimeout", cfg.VisibilityTimeout, "the default")
}
