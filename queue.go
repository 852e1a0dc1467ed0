// This file holds the Client and enqueueing one job (and one that depends on existing
// jobs, DependsOn): the per-job options (with an args
// type's defaults and the sequence policy) and their conversion for the enqueue engine
// (internal/enqueue, which checks them and runs the statements), and the single insert
// (Enqueue, EnqueueTx, EnqueueSQLTx) and the bulk insert (EnqueueMany, EnqueueManyTx,
// EnqueueManySQLTx: COPY, or one unnest insert when unique keys are involved, a constant
// number of statements whatever the count). The operator calls on a Client are in admin.go.

package skiplock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/enqueue"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/internal/settle"
)

// EnqueueOptions are per-job settings. The zero value of each field means its default.
type EnqueueOptions struct {
	// Queue is the queue name ([a-z0-9_-], 1-64 characters). Defaults to "default".
	Queue string
	// Priority orders due jobs of a queue: higher runs first. Defaults to 0.
	Priority int
	// RunAt is the earliest time the job may start. Zero means now, by the database clock.
	RunAt time.Time
	// MaxAttempts is how many times the job may run before it is dead. Defaults to
	// [DefaultMaxAttempts] (20); zero means the default, negative is an error.
	MaxAttempts int
	// UniqueKey, when set, allows only one queued or running job with this key: a second
	// enqueue returns the existing job (Duplicate set) and [ErrDuplicateJob]. At most 255
	// bytes. Set UniqueKey or Unique, not both.
	UniqueKey string
	// Unique makes the job unique by its kind, args, queue and time bucket, in the states
	// it names; a duplicate enqueue returns the existing job with Duplicate set and a nil
	// error. Nil means not unique (unless UniqueKey is set).
	Unique *UniqueOpts
	// Timeout bounds each attempt of this job, overriding the kind's Timeout method and
	// [WorkerConfig].JobTimeout (see there). Zero means those; negative is an error.
	// Stored in milliseconds.
	Timeout time.Duration
	// Metadata is stored with the job and readable in handlers and hooks
	// ([JobRow].Metadata): user tags, and the trace context a tracing hook adds. Keys
	// must be non-empty; keys and values UTF-8 without NUL; at most 16 KiB as JSON. Keys
	// starting with "skiplock_" are skiplock's own (workflow, batch and sequence marks)
	// and are refused with [ErrInvalidOptions]. An args type's default metadata and the
	// call's are merged key by key, the call's winning. Nil means none. The map is
	// copied, not kept.
	Metadata map[string]string
	// PartitionKey puts the job in a flow-control partition (a tenant, a customer): a
	// queue's per-key limit and fair sharing ([QueueLimits]) act per key. At most 255
	// bytes. Defaults to none. To take it from the args' fields, give the args type an
	// EnqueueOptions method ([JobArgsWithOptions]) that returns it.
	PartitionKey string
	// ConcurrencyKeys are the job's keys in further flow-control dimensions, by
	// dimension: {"region": "eu", "account": "a-7"}. A queue's per-dimension limits
	// ([QueueLimits].ConcurrencyKeys) count the job against each of its keys while it runs,
	// and start it only when every one is under its limit. At most 8 dimensions, named
	// [a-z0-9_-] (1-64 characters); keys of 1-255 bytes. An args type's keys and the
	// call's are merged dimension by dimension, the call's winning. Not for workflow
	// tasks or sequences. Nil means none; the map is not kept. See docs/flow-control.md.
	ConcurrencyKeys map[string]string
	// SequenceOnFailure is what a failed attempt of this job does to the sequence it was
	// enqueued in ([Client.EnqueueSequenceTx]): [SequenceHold] (the zero value) or
	// [SequenceMoveOn]. Other enqueues refuse it.
	SequenceOnFailure SequencePolicy
	// Encrypt seals the job's args with the client's [Keyring] (AES-GCM, its current
	// key): the jobs table, its backups, the CLI and the dashboard see only ciphertext and
	// the key's id, and a worker opens them just before the handler decodes them.
	// Metadata, the kind, the queue and a unique key are not encrypted (a UniqueOpts key
	// over the args is a hash of the plaintext: equal args give equal keys). Needs
	// [Config].Keyring. An args type can set it for every job of its kind
	// ([JobArgsWithOptions]).
	Encrypt bool
	// DependsOn makes the job wait until the jobs with these ids (already enqueued, by
	// any enqueue) have succeeded: it is inserted queued with run_at 9999-12-31 (UTC), so no
	// worker claims it, and the transaction that records its last parent's success gives
	// it back its RunAt. A parent archived after its success counts as succeeded. What a
	// parent that ends otherwise (failed, dead, cancelled, or deleted before it ran) does
	// is OnDependencyFailure. An id found neither in jobs nor in the archive (a purged or
	// deleted job cannot be told from one that never existed) fails the enqueue with
	// [ErrDependencyNotFound], nothing written. For [Client.Enqueue] and
	// [Client.EnqueueTx] only, without UniqueKey or Unique; at most 1,000 ids. The
	// enqueue holds each unfinished parent's row until its transaction ends, so a
	// parent's outcome (and its heartbeat) waits for it: keep such a transaction short.
	// See docs/workflows.md, "Depending on existing jobs". Nil means none.
	DependsOn []int64
	// Deadline is the time after which no attempt of the job starts, by the database
	// clock: a worker that claims it later ends it as failed with [ErrDeadlineExceeded]
	// in its error history, without running it and without counting an attempt; a
	// running attempt's context ends at the deadline (with the cause
	// [ErrDeadlineExceeded], like a timeout, whichever comes first) and the job fails
	// without retry; a retry or snooze due after it ends the job as failed instead. It
	// is kept in the job's metadata (the reserved key "skiplock_deadline"), so it holds
	// across retries, restarts and workers, and [JobRow].Deadline shows it. Zero means
	// none; outside the years 1 to 9999 (UTC) it is refused with [ErrInvalidOptions]. See
	// docs/enqueueing.md, "Deadlines".
	Deadline time.Time
	// OnDependencyFailure is what a parent in DependsOn that does not succeed does to
	// the job: [CancelDependents] (the zero value) cancels it, [RunDependents] counts
	// that parent as settled.
	OnDependencyFailure OnFailure
}

// JobArgsWithOptions is implemented by args types that carry their own default
// [EnqueueOptions] (for example a queue or max attempts for every job of the kind).
// Options passed to an enqueue call override these field by field.
type JobArgsWithOptions interface {
	JobArgs
	EnqueueOptions() EnqueueOptions
}

// SequencePolicy is what a failed attempt of a sequence job does to the jobs enqueued
// after it with the same key ([EnqueueOptions].SequenceOnFailure).
type SequencePolicy int

const (
	// SequenceHold, the zero value, holds the sequence: the next job of the key waits
	// while this one waits for its retries, until it succeeds or ends failed, dead or
	// cancelled. Jobs of the key run strictly one at a time, in order.
	SequenceHold SequencePolicy = iota
	// SequenceMoveOn moves on: the first failed attempt of this job (one that will be
	// retried, or its final failure, death or cancellation) releases the next job of the
	// key, in the transaction that records the failure. The job's own retries then run
	// whenever they are due, out of order, possibly at the same time as later jobs of the
	// key; the jobs after it still run one at a time, each after the previous one's first
	// attempt has ended. A snooze is not a failure.
	SequenceMoveOn
)

// EnqueueParams is one job of an [Client.EnqueueMany] call.
type EnqueueParams struct {
	Args    JobArgs
	Options *EnqueueOptions // nil means defaults
}

// DBTX is what enqueueing inside the caller's transaction needs; pgx.Tx satisfies it.
// skiplock never begins, commits or rolls back a DBTX it is given.
type DBTX = jobtype.DBTX

// Client enqueues and inspects jobs. It wraps a pool the caller owns and is safe for
// concurrent use. Create one with [NewClient].
type Client struct {
	db       pgutil.DB // the pool, the schema and the wake-up channel, as the engine takes them
	pool     *pgxpool.Pool
	schema   string
	maxBytes int
	keyring  *Keyring // encrypt.go; nil: none
	logger   *slog.Logger
	notify   *notify.Notifier  // wake-ups: the channel, the throttle of Enqueue's notifications
	flows    *settle.Settler   // settles workflow tasks' dependents (internal/settle)
	enq      *enqueue.Inserter // writes jobs, workflows and sequences; coalesces Enqueue's calls

	hooks []Hook // Config.Hooks
	// waitPoll is how often Wait and WaitWorkflow read again without a notification;
	// zero: every second.
	waitPoll time.Duration
}

// NewClient returns a Client on pool. The pool is not closed by skiplock. A field out of
// range is an error that matches [ErrInvalidConfig] and names the field. NewClient does
// no I/O: call [Client.CheckSchema] to learn at start-up that the schema is not migrated.
func NewClient(pool *pgxpool.Pool, cfg Config) (*Client, error) {
	if pool == nil {
		return nil, errors.New("skiplock: NewClient: pool is nil")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Schema == "" {
		cfg.Schema = DefaultSchema
	}
	if cfg.MaxPayloadBytes == 0 {
		cfg.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if cfg.NotifyInterval == 0 {
		cfg.NotifyInterval = DefaultNotifyInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.CoalesceWindow == 0 {
		cfg.CoalesceWindow = DefaultCoalesceWindow
	}
	c := &Client{
		db:       pgutil.DB{Pool: pool, Schema: cfg.Schema, Channel: notify.JobsChannel(cfg.Schema)},
		pool:     pool,
		schema:   cfg.Schema,
		maxBytes: cfg.MaxPayloadBytes,
		logger:   cfg.Logger,
		notify:   notify.New(pool, cfg.Schema, cfg.NotifyInterval, cfg.Logger),
		flows:    settle.New(cfg.Schema),
		hooks:    slices.Clone(cfg.Hooks),
		keyring:  cfg.Keyring,
	}
	var enqueueHooks []EnqueueHook // those of the hooks that implement EnqueueHook
	for _, h := range cfg.Hooks {
		if eh, ok := h.(EnqueueHook); ok {
			enqueueHooks = append(enqueueHooks, eh)
		}
	}
	c.enq = enqueue.New(enqueue.Config{Pool: pool, Schema: cfg.Schema, Notifier: c.notify, Mapper: c.flows.Mapper,
		Hooks: enqueueHooks, CoalesceWindow: cfg.CoalesceWindow, InsertMiddleware: cfg.InsertMiddleware,
		MaxPayloadBytes: cfg.MaxPayloadBytes})
	return c, nil
}

// Pool returns the pool the client was built on, for callers (the dashboard, tests) that
// read skiplock's tables with their own queries.
func (c *Client) Pool() *pgxpool.Pool { return c.pool }

// Schema returns the schema the client works in.
func (c *Client) Schema() string { return c.schema }

// Enqueue inserts one job outside any transaction of the caller and returns it once it is
// committed. It is the fast path for jobs that need not share a transaction with other
// writes: concurrent calls share one INSERT and one commit (see [Config].CoalesceWindow),
// and each returns its own row or its own error — a job the database refuses fails only
// its own call. The wake-up notification is throttled as [Config].NotifyInterval says.
// opts may be nil.
//
// If ctx ends while the call waits, Enqueue returns at once with an error that wraps
// ctx.Err(). The job is then not inserted if it was still waiting for its batch to be
// sent; if its batch was already being written, it is inserted if that commit succeeds.
// The error message says which. (The same holds for a single statement whose reply a
// caller stops waiting for.) Use a UniqueKey if a retry after such an error must not
// insert the job twice. A batch whose commit's answer is lost (the connection breaks, or
// a pooler reports its own error) is sent again by the library with its key, for up to
// 30 seconds, without inserting its jobs twice: the call returns its job once that is
// settled.
func (c *Client) Enqueue(ctx context.Context, args JobArgs, opts *EnqueueOptions) (*JobRow, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("skiplock: enqueue: %w", err)
	}
	if opts != nil && len(opts.DependsOn) > 0 {
		return c.enqueueDependent(ctx, nil, args, opts)
	}
	j, err := c.prepare(args, opts)
	if err != nil {
		return nil, err
	}
	return c.enq.Enqueue(ctx, j)
}

// EnqueueTx inserts one job inside the caller's transaction tx (a pgx.Tx): if tx rolls
// back there is no job, if it commits there is. The wake-up notification is part of the
// same transaction, so workers hear of the job only after the commit. skiplock does not
// commit or roll back tx. opts may be nil.
func (c *Client) EnqueueTx(ctx context.Context, tx DBTX, args JobArgs, opts *EnqueueOptions) (*JobRow, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("skiplock: enqueue: %w", err)
	}
	if tx == nil {
		return nil, errors.New("skiplock: EnqueueTx: tx is nil")
	}
	if opts != nil && len(opts.DependsOn) > 0 {
		return c.enqueueDependent(ctx, tx, args, opts)
	}
	j, err := c.prepare(args, opts)
	if err != nil {
		return nil, err
	}
	return c.enq.EnqueueTx(ctx, tx, j)
}

// EnqueueSQLTx is [Client.EnqueueTx] for a database/sql transaction, as services using
// sqlc, GORM or sqlx over pgx's database/sql driver (github.com/jackc/pgx/v5/stdlib) hold
// one: if tx rolls back there is no job, if it commits there is, and the wake-up
// notification is sent by Postgres at the commit. It runs the same statements as
// EnqueueTx, so it keeps the same promise that its errors leave tx usable: bad input is
// refused in Go before anything is sent, a duplicate unique key is not an error to
// Postgres (ON CONFLICT DO NOTHING), and under REPEATABLE READ or SERIALIZABLE the unique
// insert runs inside a savepoint. skiplock does not commit or roll back tx. tx must use
// pgx's driver ("pgx" in sql.Open, or stdlib.OpenDBFromPool); other drivers cannot send
// the statements' array parameters. opts may be nil.
func (c *Client) EnqueueSQLTx(ctx context.Context, tx *sql.Tx, args JobArgs, opts *EnqueueOptions) (*JobRow, error) {
	if tx == nil {
		return nil, errors.New("skiplock: EnqueueSQLTx: tx is nil")
	}
	return c.EnqueueTx(ctx, enqueue.SQLTx(tx), args, opts)
}

// EnqueueMany inserts many jobs in one transaction of its own with a constant number of
// statements (COPY, or one multi-row insert when unique keys are used) and returns how
// many were inserted. Every job is validated, and one refused writes nothing: the jobs
// are committed all together or not at all, and the error names the first refused job.
// Jobs whose UniqueKey is already active are skipped and not counted.
//
// A call of 1000 jobs or more, on a client with no enqueue hooks and no insert
// middleware, prepares each job (marshals its args) while COPY sends the jobs before
// it, in a goroutine of pgx's: the args' Kind, EnqueueOptions and MarshalJSON methods
// then run there, one job at a time, in order, while EnqueueMany waits; a panic in them
// still reaches the caller.
//
// A call of at most 100 jobs without unique keys shares its statement and commit with
// concurrent Enqueue and EnqueueMany calls, as [Client.Enqueue] does (and with the same
// answer when ctx ends while it waits); its jobs still commit all together or not at all.
func (c *Client) EnqueueMany(ctx context.Context, params []EnqueueParams) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("skiplock: enqueue many: %w", err)
	}
	// The jobs are prepared as the engine asks for them: a large call's are prepared while
	// COPY sends those before them (internal/enqueue, stream.go).
	return c.enq.EnqueueManyFunc(ctx, len(params), func(i int) (enqueue.Job, error) {
		return c.prepareBulk(params[i])
	})
}

// EnqueueManyTx is [Client.EnqueueMany] inside the caller's transaction tx.
func (c *Client) EnqueueManyTx(ctx context.Context, tx DBTX, params []EnqueueParams) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("skiplock: enqueue many: %w", err)
	}
	if tx == nil {
		return 0, errors.New("skiplock: EnqueueManyTx: tx is nil")
	}
	jobs, err := c.prepareMany(params)
	if err != nil || len(jobs) == 0 {
		return 0, err
	}
	return c.enq.EnqueueManyTx(ctx, tx, jobs)
}

// EnqueueManySQLTx is [Client.EnqueueManyTx] for a database/sql transaction (see
// [Client.EnqueueSQLTx]). database/sql has no COPY, so the jobs go in one unnest insert,
// as EnqueueManyTx sends jobs with unique keys: one statement for the jobs and one for
// the wake-ups, whatever their number.
func (c *Client) EnqueueManySQLTx(ctx context.Context, tx *sql.Tx, params []EnqueueParams) (int, error) {
	if tx == nil {
		return 0, errors.New("skiplock: EnqueueManySQLTx: tx is nil")
	}
	return c.EnqueueManyTx(ctx, enqueue.SQLTx(tx), params)
}

// prepareMany prepares every job of params, or returns the first error, naming its job.
func (c *Client) prepareMany(params []EnqueueParams) ([]enqueue.Job, error) {
	jobs := make([]enqueue.Job, len(params))
	for i := range params {
		j, err := c.prepareBulk(params[i])
		if err != nil {
			return nil, fmt.Errorf("job %d of %d: %w", i, len(params), err)
		}
		jobs[i] = j
	}
	return jobs, nil
}

// prepareBulk prepares one job of an EnqueueMany call: as prepare, and refusing the
// options only a single enqueue honours.
func (c *Client) prepareBulk(p EnqueueParams) (enqueue.Job, error) {
	j, err := c.prepare(p.Args, p.Options)
	if err == nil {
		err = j.CheckBulk()
	}
	return j, err
}

// reservedMetadataPrefix starts the metadata keys skiplock writes itself (the workflow,
// task, batch and sequence marks the settle statement and DependencyOutputs read); a
// caller's metadata may not set them.
const reservedMetadataPrefix = "skiplock_"

// prepare validates args and options and marshals the payload. It writes nothing.
func (c *Client) prepare(args JobArgs, opts *EnqueueOptions) (enqueue.Job, error) {
	kind, err := enqueue.ArgsKind(args)
	if err != nil {
		return enqueue.Job{}, err
	}
	o, err := jobOptions(args, opts)
	if err != nil {
		return enqueue.Job{}, err
	}
	for k := range o.Metadata {
		if strings.HasPrefix(k, reservedMetadataPrefix) {
			return enqueue.Job{}, fmt.Errorf("%w: Metadata key %q: keys starting with %q are reserved for skiplock's own marks (workflow tasks, batches, sequences)",
				ErrInvalidOptions, enqueue.Truncate(k, 40), reservedMetadataPrefix)
		}
	}
	j, err := enqueue.Prepare(kind, args, o, c.maxBytes)
	if err == nil {
		err = setDeadline(&j, deadlineOf(args, opts))
	}
	if err != nil || !o.Encrypt {
		return j, err
	}
	if c.keyring == nil {
		return enqueue.Job{}, fmt.Errorf("%w: Encrypt needs Config.Keyring", ErrInvalidOptions)
	}
	j.Sealer = c.keyring.Seal
	return j, nil
}

// deadlineOf is the job's deadline: opts', else the args type's default; zero: none.
func deadlineOf(args JobArgs, opts *EnqueueOptions) time.Time {
	if opts != nil && !opts.Deadline.IsZero() {
		return opts.Deadline
	}
	if d, ok := args.(JobArgsWithOptions); ok {
		return d.EnqueueOptions().Deadline
	}
	return time.Time{}
}

// setDeadline keeps d (unless zero) in j's metadata, under the reserved key
// [jobtype.MetaDeadline], which every insert path carries with the job. The map is copied.
// A deadline outside the years 1 to 9999 (UTC) is refused with [ErrInvalidOptions]: its
// RFC 3339 form, which the metadata holds, cannot be read back, and a worker would see no
// deadline at all.
func setDeadline(j *enqueue.Job, d time.Time) error {
	if d.IsZero() {
		return nil
	}
	if y := d.UTC().Year(); y < 1 || y > 9999 {
		return fmt.Errorf("%w: Deadline %s: the year must be in [1, 9999]", ErrInvalidOptions, d.UTC().Format(time.RFC3339))
	}
	meta := make(map[string]string, len(j.Meta)+1)
	maps.Copy(meta, j.Meta)
	meta[jobtype.MetaDeadline] = jobtype.FormatDeadline(d)
	j.Meta = meta
	return nil
}

// jobOptions merges the args type's default options with opts, for the engine, which
// fills the defaults and checks them.
func jobOptions(args JobArgs, opts *EnqueueOptions) (enqueue.Options, error) {
	var o enqueue.Options
	if opts != nil && opts.SequenceOnFailure != SequenceHold {
		return o, fmt.Errorf("%w: SequenceOnFailure is for EnqueueSequence and EnqueueSequenceTx only", ErrInvalidOptions)
	}
	if opts != nil && len(opts.DependsOn) > 0 {
		return o, fmt.Errorf("%w: DependsOn is for Enqueue and EnqueueTx only (a workflow's tasks name theirs in WorkflowTask.DependsOn)", ErrInvalidOptions)
	}
	if d, ok := args.(JobArgsWithOptions); ok {
		o = d.EnqueueOptions().engine()
	}
	if opts != nil {
		o = enqueue.MergeOptions(o, opts.engine())
	}
	return o, nil
}

// engine returns o as the engine's options (all but SequenceOnFailure, which only the
// sequence enqueues read).
func (o EnqueueOptions) engine() enqueue.Options {
	var u *enqueue.Unique
	if o.Unique != nil {
		e := enqueue.Unique(*o.Unique)
		u = &e
	}
	return enqueue.Options{Queue: o.Queue, Priority: o.Priority, RunAt: o.RunAt, MaxAttempts: o.MaxAttempts,
		UniqueKey: o.UniqueKey, Unique: u, Timeout: o.Timeout, Metadata: o.Metadata, PartitionKey: o.PartitionKey,
		ConcurrencyKeys: o.ConcurrencyKeys, Encrypt: o.Encrypt}
}

// wrapErr adds the operation and turns an undefined table into ErrNotMigrated.
func (c *Client) wrapErr(op string, err error) error { return c.db.WrapErr(op, err) }

// b2i is 1 for true and 0 for false, to index statement variants by a flag.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ErrDependencyNotFound is returned by an enqueue whose [EnqueueOptions].DependsOn names
// a job id found neither in the jobs table nor in the archive; nothing is written.
var ErrDependencyNotFound = enqueue.ErrDependencyNotFound

// enqueueDependent enqueues a job with DependsOn: in tx (the caller's, inside a
// savepoint, so that a refusal leaves it usable and writes nothing), or, when tx is nil,
// in a transaction of its own. The job is inserted first, then its parents are locked
// and judged (internal/enqueue, dependson.go).
func (c *Client) enqueueDependent(ctx context.Context, tx DBTX, args JobArgs, opts *EnqueueOptions) (*JobRow, error) {
	parents, err := enqueue.CheckDependsOn(opts.DependsOn)
	if err != nil {
		return nil, err
	}
	policy := opts.OnDependencyFailure
	if policy != CancelDependents && policy != RunDependents {
		return nil, fmt.Errorf("%w: OnDependencyFailure %d: use CancelDependents or RunDependents", ErrInvalidOptions, policy)
	}
	o := *opts
	o.DependsOn, o.OnDependencyFailure = nil, CancelDependents
	if o.UniqueKey != "" || o.Unique != nil {
		return nil, fmt.Errorf("%w: DependsOn cannot be used with UniqueKey or Unique", ErrInvalidOptions)
	}
	j, err := c.prepare(args, &o)
	if err != nil {
		return nil, err
	}
	// The enqueue hooks hear once the job's fate is known: after its edges are written
	// (and, without tx, committed), not after the insert alone, which a refused edge rolls
	// back.
	var told func(*JobRow, error)
	attach := func(db DBTX) (*JobRow, error) {
		row, done, err := c.enq.EnqueueTxUntold(ctx, db, j)
		told = done
		if err != nil {
			return nil, err
		}
		if err := c.enq.Attach(ctx, db, row, parents, enqueue.OnFailure(policy)); err != nil {
			return nil, fmt.Errorf("skiplock: enqueue: %w", err)
		}
		return row, nil
	}
	row, err := c.writeDependent(ctx, tx, attach)
	if err != nil {
		row = nil
	}
	if told != nil {
		told(row, err)
	}
	return row, err
}

// writeDependent runs attach in tx inside a savepoint (a refusal leaves tx as it was),
// or, without tx, in a transaction of its own.
func (c *Client) writeDependent(ctx context.Context, tx DBTX, attach func(DBTX) (*JobRow, error)) (*JobRow, error) {
	if tx == nil {
		var row *JobRow
		err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) (err error) {
			row, err = attach(tx)
			return err
		})
		return row, err
	}
	if _, err := tx.Exec(ctx, `SAVEPOINT skiplock_depends_on`); err != nil {
		return nil, fmt.Errorf("skiplock: enqueue: %w", err)
	}
	row, err := attach(tx)
	if err != nil {
		if _, rerr := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT skiplock_depends_on`); rerr != nil {
			return nil, errors.Join(err, rerr)
		}
	}
	if _, rerr := tx.Exec(ctx, `RELEASE SAVEPOINT skiplock_depends_on`); rerr != nil && err == nil {
		return nil, fmt.Errorf("skiplock: enqueue: %w", rerr)
	}
	return row, err
}
