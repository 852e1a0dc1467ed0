// This file holds the configurations and their validation: WorkerConfig and QueueConfig,
// the named defaults they fall back to (withDefaults), and the checks of every field of
// WorkerConfig, Config (client.go) and SweeperConfig (sweeper.go) that can be out of
// range.

package skiplock

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/claim"
	"github.com/skiplock/skiplock/internal/enqueue"
	"github.com/skiplock/skiplock/internal/jobtype"
)

// DefaultQueue is the queue a job goes to when [EnqueueOptions].Queue is empty.
const DefaultQueue = enqueue.DefaultQueue

// DefaultSchema is the Postgres schema skiplock's tables live in when none is configured.
const DefaultSchema = "skiplock"

// DefaultMaxAttempts is how many times a job runs before it is dead, unless its options say otherwise.
const DefaultMaxAttempts = enqueue.DefaultMaxAttempts

// DefaultNotifyInterval is the default of [Config].NotifyInterval.
const DefaultNotifyInterval = 5 * time.Millisecond

// DefaultCoalesceWindow is the default of [Config].CoalesceWindow.
const DefaultCoalesceWindow = enqueue.DefaultCoalesceWindow

// maxCoalesceWindow is the largest Config.CoalesceWindow.
const maxCoalesceWindow = enqueue.MaxCoalesceWindow

// Config configures a [Client]. The zero value is valid.
type Config struct {
	// Schema is the Postgres schema holding skiplock's tables, as created by [Migrate].
	// Defaults to "skiplock".
	Schema string
	// MaxPayloadBytes limits the JSON size of a job's args. Defaults to
	// [DefaultMaxPayloadBytes] (1 MiB); zero means the default, negative
	// means no limit of its own: args larger than Postgres's jsonb holds (a string, or
	// one array's or object's elements, past 2^28 - 1 bytes there) are refused with
	// [ErrPayloadTooLarge] whatever the limit.
	MaxPayloadBytes int
	// NotifyInterval throttles the wake-up notifications that [Client.Enqueue] sends: at
	// most one per queue per interval is sent with an insert, and enqueues inside the
	// interval are covered by one trailing notification at its end. Postgres serializes
	// the commits of notifying transactions, so a notification per insert would cap insert
	// throughput. [Client.EnqueueTx] and [Client.EnqueueMany] always notify once per call
	// and queue, inside the transaction. Defaults to [DefaultNotifyInterval] (5ms). Zero
	// means the default; negative means notify on every call.
	//
	// The interval is a trade between latency and insert throughput: at a steady 1–2k
	// Enqueue calls a second, many jobs wait for the trailing notification, and the bench
	// measured an enqueue→start p50 of about 4 ms at 5ms against 2–2.5 ms at 1ms, which
	// cost 11–15 % of single-insert throughput at 1 and 16 producers (bench/README.md,
	// "Scale curves"). At light load a call's notification goes at once either way.
	NotifyInterval time.Duration
	// Logger receives skiplock's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// CoalesceWindow is how long [Client.Enqueue], and [Client.EnqueueMany] of at most 100
	// jobs, may wait for concurrent calls to share its INSERT and its commit. A call that
	// finds fewer than two batches being written goes at once; otherwise it joins the
	// batch that is collecting, which is sent when a batch in flight finishes, when it
	// holds 1000 jobs, or this long after its first job, whichever comes first. Every
	// call still returns only once the commit holding its jobs is done, with its own rows
	// or its own error. Jobs with a UniqueKey never wait: they are written alone.
	// Defaults to [DefaultCoalesceWindow] (1ms); zero means the default; negative turns
	// coalescing off (every call writes in a transaction of its own); at most 100ms.
	CoalesceWindow time.Duration
	// Hooks observe this client's jobs: every [Worker] made from the client runs them
	// around each job (before its own [WorkerConfig].Hooks), and those that implement
	// [EnqueueHook] see each enqueue. Nil means none; a nil entry is an error.
	Hooks []Hook
	// InsertMiddleware rewrite each job before it is written: queue, priority, run_at,
	// args, metadata (see [InsertMiddleware]), in order. Nil means none; a nil entry is an
	// error.
	InsertMiddleware []InsertMiddleware
	// Keyring holds the keys of encrypted args: an enqueue with [EnqueueOptions].Encrypt
	// seals the args with its current key, and a worker made from this client opens a
	// sealed job's args with the key that sealed it before its handler decodes them. Nil
	// means none: Encrypt is refused, and sealed jobs fail with [ErrNoKey] (retried). A
	// sealed payload that fails authentication (altered, or sealed for a job of another
	// kind) fails its job for good, status failed, at its first attempt.
	Keyring *Keyring
}

// Defaults of [WorkerConfig], [QueueConfig] and [SweeperConfig]; each field's doc says
// when its default applies.
const (
	// DefaultMaxWorkers is the default of [QueueConfig].MaxWorkers.
	DefaultMaxWorkers = 100
	// DefaultPollInterval is the default of [WorkerConfig].PollInterval.
	DefaultPollInterval = time.Second
	// DefaultFetchCooldown is the default of [WorkerConfig].FetchCooldown.
	DefaultFetchCooldown = time.Millisecond
	// DefaultShutdownTimeout is the default of [WorkerConfig].ShutdownTimeout.
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultVisibilityTimeout is the default of [WorkerConfig].VisibilityTimeout and
	// [SweeperConfig].VisibilityTimeout.
	DefaultVisibilityTimeout = time.Minute
	// DefaultSweepInterval is the default of [WorkerConfig].SweepInterval and
	// [SweeperConfig].Interval.
	DefaultSweepInterval = 30 * time.Second
	// DefaultArchiveRetention is the default of [WorkerConfig].ArchiveRetention and
	// [SweeperConfig].ArchiveRetention.
	DefaultArchiveRetention = 7 * 24 * time.Hour
	// DefaultCompleteBatchSize is the default of [WorkerConfig].CompleteBatchSize.
	DefaultCompleteBatchSize = 500
	// DefaultCompleteFlushInterval is the default of [WorkerConfig].CompleteFlushInterval.
	DefaultCompleteFlushInterval = 2 * time.Millisecond
	// DefaultJobTimeout is the default of [WorkerConfig].JobTimeout.
	DefaultJobTimeout = time.Minute
	// DefaultFleetStatements is the default of [WorkerConfig].FleetStatements.
	DefaultFleetStatements = 8
)

// QueueConfig configures one queue of a [Worker].
type QueueConfig struct {
	// MaxWorkers is how many jobs of this queue run at once in this worker. Defaults to
	// [DefaultMaxWorkers] (100); zero means the default; negative or more than 100000 is
	// an error. While the queue has a backlog, its handlers take under a millisecond on
	// average, it has no Limits and MaxWorkers is over 1, the worker claims up to three
	// times MaxWorkers jobs more, which wait for a free handler (docs/configuration.md,
	// "Claiming ahead"): no more than MaxWorkers handlers run at once.
	MaxWorkers int
	// Limits are the queue's flow-control limits across all workers (global and per-key
	// concurrency, rate, fair sharing). Defaults to none: the zero value takes the plain
	// claim path. Limits set at run time with [Client.SetQueueLimits] replace them. Every
	// worker of a limited queue should declare the same limits.
	Limits QueueLimits
	// Completion says what happens to this queue's succeeded jobs (archive, delete, keep).
	// Defaults to [WorkerConfig].Completion; a kind's [KindConfig].Completion overrides it.
	Completion Completion
	// Retention is how long this queue's finished jobs (archived, or kept succeeded and
	// cancelled ones) are kept before the sweeper deletes them. Defaults to
	// [WorkerConfig].ArchiveRetention; zero means the default, negative is an error; a
	// kind's [KindConfig].Retention overrides it. The sweeper of the worker that leads the
	// fleet's maintenance applies its own configuration: declare the same retention in
	// every worker of the queue.
	Retention time.Duration
}

// KindConfig sets how the succeeded jobs of one kind are recorded and how long its
// finished jobs are kept, over its queue's and the worker's settings (see
// [WorkerConfig].Kinds). The zero value changes nothing.
type KindConfig struct {
	// Completion says what happens to the kind's succeeded jobs. Defaults to the queue's
	// ([QueueConfig].Completion), else the worker's ([WorkerConfig].Completion).
	Completion Completion
	// Retention is how long the kind's finished jobs are kept. Defaults to the queue's
	// ([QueueConfig].Retention), else [WorkerConfig].ArchiveRetention; zero means the
	// default, negative is an error.
	Retention time.Duration
}

// WorkerConfig configures a [Worker]. The zero value works: it runs the "default" queue.
type WorkerConfig struct {
	// Queues to work, by name. Defaults to {"default": {}}: the default queue with
	// [DefaultMaxWorkers] slots.
	Queues map[string]QueueConfig
	// ID identifies this worker in locked_by; it must be unique among live workers, and at
	// most 255 bytes of UTF-8 without NUL. Defaults to hostname-pid-random. A worker
	// started with an id takes back, before its first claim, the running jobs left under
	// it (by an earlier process with the same id that died): two live processes sharing
	// an id would take each other's jobs, and each logs so at Error once it sees the
	// other renew their registration (docs/many-hosts.md, "Worker IDs").
	ID string
	// PollInterval is the fallback poll: this often, one statement asks which of the
	// worker's queues have due jobs, and wakes their claim loops, even when no
	// notification arrives (notifications are lost while nobody listens, and scheduled,
	// retried and reclaimed jobs send none). It is one statement per interval however
	// many queues the worker has. It bounds how soon a delayed retry or snooze runs: one
	// due sooner than the next poll waits for that poll, so a retry policy with sub-second
	// delays needs a PollInterval as short (see [RetryPolicy]). Defaults to [DefaultPollInterval] (1s); zero or negative
	// means the default; a positive value under 1ms is an error.
	PollInterval time.Duration
	// FetchCooldown is how long the claim loop may wait for more free slots when only a few
	// are free and the queue has a backlog, so that it claims in batches. Defaults to
	// [DefaultFetchCooldown] (1ms); zero means the default, negative means never wait.
	FetchCooldown time.Duration
	// ShutdownTimeout is how long Run waits for running handlers after its context is
	// cancelled, before cancelling their contexts. Handlers that then return have their
	// jobs put back in the queue (or their results recorded); Run waits for every
	// handler, their leases renewed, logging every ShutdownTimeout which jobs hold it up
	// (see [Worker.Run]; [Worker.StopAndCancel] gives up waiting). Defaults to [DefaultShutdownTimeout]
	// (10s); zero or negative means the default.
	ShutdownTimeout time.Duration
	// VisibilityTimeout is the lease this worker takes on each job it claims: the claim
	// writes the lease end (now() + VisibilityTimeout) in the job's row, and heartbeats
	// renew it every VisibilityTimeout/3, each heartbeat given at most that long. It does
	// not decide when a crashed worker's jobs are taken back: that is its worker lease
	// (its row in the workers table, 10 s), judged by the other workers; the job's lease
	// decides only for the sweeper's take-back of jobs whose owner has no such row (a
	// worker of an earlier release). If this worker's heartbeats stop landing, it cancels
	// its own handlers VisibilityTimeout/3 before their leases can end. Defaults to
	// [DefaultVisibilityTimeout] (1m): three heartbeat periods of 20s, long enough to ride
	// out a database failover or a long GC pause without running a job twice. Zero or
	// negative means the default; a positive value under 1ms is an error.
	VisibilityTimeout time.Duration
	// JobTimeout bounds one attempt of a job: when it passes, the handler's context is
	// cancelled with cause [ErrJobTimeout] (read it with context.Cause) and the attempt
	// counts as failed, retried by the retry policy. A kind overrides it with a method
	// Timeout() time.Duration on its args type (negative: no timeout for the kind), a job
	// with [EnqueueOptions].Timeout. A handler that returns after its timeout, nil
	// included, has failed. A handler that ignores the cancellation keeps its job, its
	// lease renewed, until it returns (no other worker runs it meanwhile); it is logged
	// every heartbeat interval and counted by [Worker.Overrunning]. Defaults to [DefaultJobTimeout] (1m); zero means the default,
	// negative means no timeout; a positive value under 1ms is an error.
	JobTimeout time.Duration
	// SweepInterval is how often this worker's embedded [Sweeper] runs when this worker
	// is the elected leader of the fleet's maintenance (one worker per schema at a time;
	// see [Sweeper]). Defaults to [DefaultSweepInterval] (30s); zero means the default,
	// negative disables the embedded sweeper, and this worker then takes no part in the
	// election (run a [Sweeper] elsewhere then; it still registers in the workers table,
	// see FleetStatements); a positive value under 1ms is an error.
	SweepInterval time.Duration
	// ArchiveRetention is how long finished jobs are kept before the embedded sweeper
	// deletes them. Defaults to [DefaultArchiveRetention] (7 days); zero or negative means
	// the default.
	ArchiveRetention time.Duration
	// DeadRetention is how long jobs that ended without success (dead or failed) are kept
	// before the embedded sweeper deletes them: [SweeperConfig].DeadRetention. Defaults to
	// 0: kept until deleted or requeued; negative is an error.
	DeadRetention time.Duration
	// Completion says what happens to succeeded jobs. Defaults to CompletionArchive; a
	// queue's [QueueConfig].Completion or a kind's [KindConfig].Completion overrides it.
	Completion Completion
	// Kinds sets, per job kind, how its succeeded jobs are recorded and how long its
	// finished jobs are kept, over the settings of its queue and of the worker: e.g.
	// {"resize": {Completion: CompletionDelete}} leaves no history of that kind, while
	// the others are archived. A kind needs no handler here to be listed. Defaults to
	// none; a key that is not a valid kind is an error. Declare the same retentions in
	// every worker: the sweeper of the one that leads the fleet's maintenance applies its
	// own.
	Kinds map[string]KindConfig
	// CompleteBatchSize is the most successes, and the most failures, recorded by one
	// statement. Defaults to
	// [DefaultCompleteBatchSize] (500); zero or negative means the default; more than
	// 100000 is an error.
	CompleteBatchSize int
	// CompleteFlushInterval is how long a success may wait to be batched with others. A
	// failure (retry, dead, failed, cancelled, snooze) is written at once when no other
	// failure is being written, and otherwise waits at most this long for others to share
	// its statement; its runner waits until it is written. Defaults to
	// [DefaultCompleteFlushInterval] (2ms); zero or negative means the default.
	CompleteFlushInterval time.Duration
	// FleetStatements is how many claims and outcome batches (successes, failures) the
	// workers serving this worker's queues keep in flight at once, together. Each worker
	// learns how many live workers serve one of its queues (n, counted with its election
	// statement, see the workers table); alone it keeps its full pipeline, and one of
	// n > 1 keeps at most max(1, FleetStatements/n) of those statements in flight. Dozens
	// of claims at once on one queue's rows walk each other's fresh index entries and can
	// make the whole fleet drain slower than one worker (docs/many-hosts.md, "Running many
	// workers"); a bigger server takes more at once. Heartbeats are never bounded.
	// Defaults to [DefaultFleetStatements] (8); zero means the default, negative means no
	// bound; more than 100000 is an error.
	FleetStatements int
	// RetryPolicy computes the delay before a failed job runs again. Defaults to
	// BackoffPolicy{}. A kind's args type may override it with a RetryPolicy() method.
	RetryPolicy RetryPolicy
	// ListenURL is a connection string for the LISTEN connection, for setups where the
	// pool goes through a transaction-pooling PgBouncer (LISTEN needs a real session).
	// Defaults to the pool's own connection settings. NewWorker refuses one pgx cannot parse.
	ListenURL string
	// Logger receives the worker's logs. Defaults to the client's logger.
	Logger *slog.Logger
	// Hooks are told when each job starts and ends, for metrics and tracing; they run
	// after the client's [Config].Hooks. Nil means none; a nil entry is an error.
	Hooks []Hook
	// PeriodicJobs are the jobs this worker enqueues on a schedule (see [PeriodicJob]).
	// Declare the same set in every worker that may enqueue them: each occurrence is
	// enqueued once, by whichever of them gets to it first. A schedule that no running
	// worker declares for a minute is marked inactive. Defaults to none.
	PeriodicJobs []PeriodicJob
}

// defaultWorkerID is the default of [WorkerConfig].ID: hostname-pid-random.
func defaultWorkerID() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "worker"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// withDefaults returns cfg with the default of every field left at its zero value (or
// at a value that means the default); logger is the client's.
func (cfg WorkerConfig) withDefaults(logger *slog.Logger) WorkerConfig {
	if len(cfg.Queues) == 0 {
		cfg.Queues = map[string]QueueConfig{DefaultQueue: {}}
	}
	if cfg.ID == "" {
		cfg.ID = defaultWorkerID()
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.FetchCooldown == 0 {
		cfg.FetchCooldown = DefaultFetchCooldown
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.VisibilityTimeout <= 0 {
		cfg.VisibilityTimeout = DefaultVisibilityTimeout
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = DefaultSweepInterval
	}
	if cfg.ArchiveRetention <= 0 {
		cfg.ArchiveRetention = DefaultArchiveRetention
	}
	if cfg.Completion == 0 {
		cfg.Completion = CompletionArchive
	}
	if cfg.FleetStatements == 0 {
		cfg.FleetStatements = DefaultFleetStatements
	}
	if cfg.CompleteBatchSize <= 0 {
		cfg.CompleteBatchSize = DefaultCompleteBatchSize
	}
	if cfg.CompleteFlushInterval <= 0 {
		cfg.CompleteFlushInterval = DefaultCompleteFlushInterval
	}
	if cfg.RetryPolicy == nil {
		cfg.RetryPolicy = BackoffPolicy{}
	}
	if cfg.JobTimeout == 0 {
		cfg.JobTimeout = DefaultJobTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = logger
	}
	return cfg
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
	if cfg.Schema != "" && !schemaNameOK(cfg.Schema) {
		return &configError{field: "Config.Schema", value: strconv.Quote(cfg.Schema), fix: schemaRule,
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
	for i, mw := range cfg.InsertMiddleware {
		if mw == nil {
			return &configError{field: fmt.Sprintf("Config.InsertMiddleware[%d]", i), value: "nil", fix: "leave nil middleware out"}
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
		if err := q.validate("WorkerConfig.Queues[" + strconv.Quote(name) + "]"); err != nil {
			return err
		}
	}
	for kind, k := range cfg.Kinds {
		field := "WorkerConfig.Kinds[" + strconv.Quote(truncate(kind, 70)) + "]"
		if kind == "" || len(kind) > MaxKindLength {
			return &configError{field: "the kind (a WorkerConfig.Kinds key)", value: strconv.Quote(truncate(kind, 70)), fix: fmt.Sprintf("use 1 to %d bytes", MaxKindLength), also: ErrInvalidKind}
		}
		if err := checkRetention(field, k.Completion, k.Retention, "the queue's or worker's"); err != nil {
			return err
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
	if cfg.DeadRetention < 0 {
		return &configError{field: "WorkerConfig.DeadRetention", value: cfg.DeadRetention.String(), fix: "use a positive duration, or 0 to keep dead and failed jobs"}
	}
	if err := checkRetention("WorkerConfig", cfg.Completion, 0, ""); err != nil {
		return err
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

// validate checks a queue's configuration; field names it in messages.
func (q QueueConfig) validate(field string) error {
	if q.MaxWorkers < 0 || q.MaxWorkers > maxQueueWorkers {
		return &configError{field: field + ".MaxWorkers", value: fmt.Sprint(q.MaxWorkers), fix: fmt.Sprintf("use 1 to %d, or 0 for the default (%d)", maxQueueWorkers, DefaultMaxWorkers)}
	}
	return checkRetention(field, q.Completion, q.Retention, "the worker's")
}

// checkRetention refuses an unknown completion mode and a negative retention; field
// names the struct that holds them, zeroMeans what their zero value means.
func checkRetention(field string, c Completion, retention time.Duration, zeroMeans string) error {
	if c < 0 || c > CompletionKeep {
		return &configError{field: field + ".Completion", value: fmt.Sprint(int(c)), fix: "use CompletionArchive, CompletionDelete or CompletionKeep, or 0 for the default"}
	}
	if retention < 0 {
		return &configError{field: field + ".Retention", value: retention.String(), fix: "use a positive duration, or 0 for " + zeroMeans}
	}
	return nil
}

// Completion says what happens to a job row when its handler succeeds. The zero value
// means the default: for [WorkerConfig].Completion, CompletionArchive; for a queue's
// ([QueueConfig].Completion) or a kind's ([KindConfig].Completion), the one of the level
// above (kind, then queue, then worker).
type Completion = jobtype.Completion

// The completion modes.
const (
	// CompletionArchive moves the row to jobs_archive with status succeeded: the hot table
	// stays small and the history stays queryable until the archive retention deletes it.
	CompletionArchive = jobtype.CompletionArchive
	// CompletionDelete deletes the row: the least work per job, no history.
	CompletionDelete = jobtype.CompletionDelete
	// CompletionKeep keeps the row in the jobs table with status succeeded; the sweeper
	// deletes it after the archive retention.
	CompletionKeep = jobtype.CompletionKeep
)

// completionModeOf returns how a success of a job of queue and kind is recorded: its
// kind's mode, else its queue's (queues may change at run time), else the worker's. The
// function holds cfg and queues, not the Worker.
func completionModeOf(cfg WorkerConfig, queues *claim.QueueSet) func(queue, kind string) Completion {
	return func(queue, kind string) Completion {
		if k := cfg.Kinds[kind].Completion; k != 0 {
			return k
		}
		if m := queues.Mode(queue); m != 0 {
			return m
		}
		return cfg.Completion
	}
}

// retentionRules returns the per-queue and per-kind retentions of cfg, for the embedded
// sweeper.
func retentionRules(cfg WorkerConfig) (queues, kinds map[string]time.Duration) {
	queues, kinds = map[string]time.Duration{}, map[string]time.Duration{}
	for name, q := range cfg.Queues {
		if q.Retention > 0 {
			queues[name] = q.Retention
		}
	}
	for kind, k := range cfg.Kinds {
		if k.Retention > 0 {
			kinds[kind] = k.Retention
		}
	}
	return queues, kinds
}
