// This file holds the Client and enqueueing: the per-job options, the single insert
// (Enqueue, EnqueueTx) and the bulk insert (EnqueueMany, EnqueueManyTx), with the
// statements they run. The operator calls on a Client are in admin.go.

package skiplock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/groupcommit"
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
	// must be non-empty; keys and values UTF-8 without NUL; at most 16 KiB as JSON. An
	// args type's default metadata and the call's are merged key by key, the call's
	// winning. Nil means none. The map is copied, not kept.
	Metadata map[string]string
	// PartitionKey puts the job in a flow-control partition (a tenant, a customer): a
	// queue's per-key limit and fair sharing ([QueueLimits]) act per key. At most 255
	// bytes. Defaults to none. To take it from the args' fields, give the args type an
	// EnqueueOptions method ([JobArgsWithOptions]) that returns it.
	PartitionKey string
	// SequenceOnFailure is what a failed attempt of this job does to the sequence it was
	// enqueued in ([Client.EnqueueSequenceTx]): [SequenceHold] (the zero value) or
	// [SequenceMoveOn]. Other enqueues refuse it.
	SequenceOnFailure SequencePolicy
}

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
	logger   *slog.Logger
	notify   *notify.Notifier                      // wake-ups: the channel, the throttle of Enqueue's notifications
	sql      enqueueSQL                            // rendered for schema by NewClient
	wf       workflowSQL                           // the workflow and sequence enqueues' statements (workflow.go)
	flows    *settle.Settler                       // settles workflow tasks' dependents (workflowsettle.go)
	batch    *groupcommit.Batcher[*enqueueRequest] // shares statements among concurrent enqueues; nil when off (coalesce.go)

	hooks        []Hook        // Config.Hooks
	enqueueHooks []EnqueueHook // those of hooks that implement EnqueueHook
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
		sql:      newEnqueueSQL(cfg.Schema),
		wf:       newWorkflowSQL(cfg.Schema),
		flows:    settle.New(cfg.Schema),
	}
	if cfg.CoalesceWindow > 0 {
		c.batch = newEnqueueCoalescer(c, cfg.CoalesceWindow)
	}
	c.hooks = slices.Clone(cfg.Hooks)
	for _, h := range cfg.Hooks {
		if eh, ok := h.(EnqueueHook); ok {
			c.enqueueHooks = append(c.enqueueHooks, eh)
		}
	}
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
	j, err := c.prepare(args, opts)
	if err != nil {
		return nil, err
	}
	done, err := c.enqueuing(ctx, &j)
	if err != nil {
		return nil, err
	}
	row, err := c.enqueueJob(ctx, j)
	done(row, err)
	return row, err
}

// enqueueJob writes one prepared job of Enqueue: with concurrent calls when it can, else
// alone.
func (c *Client) enqueueJob(ctx context.Context, j newJob) (*JobRow, error) {
	if c.batch != nil && j.coalescable() {
		rows, err := c.coalesce(ctx, &enqueueRequest{jobs: []newJob{j}})
		if err == nil {
			return rows[0], nil
		}
		if !errors.Is(err, errInsertAlone) {
			return nil, err
		}
		// The batch was refused as a whole: write this job alone.
	}
	return c.enqueueAlone(ctx, &j)
}

// enqueueAlone writes one job in a statement of its own (and so a transaction of its own).
func (c *Client) enqueueAlone(ctx context.Context, j *newJob) (*JobRow, error) {
	notify := j.dueNow() && c.notify.Throttle.TakeNow(j.queue)
	row, err := c.insertOne(ctx, c.pool, j, notify, false)
	if err == nil && j.dueNow() && !notify {
		c.notify.Throttle.Trailing(j.queue)
	}
	return row, err
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
	j, err := c.prepare(args, opts)
	if err != nil {
		return nil, err
	}
	done, err := c.enqueuing(ctx, &j)
	if err != nil {
		return nil, err
	}
	row, err := c.insertOne(ctx, tx, &j, j.dueNow(), true)
	done(row, err)
	return row, err
}

// insertOne writes one prepared job through db. callerTx says db is the caller's
// transaction, whose isolation level this cannot know (see insertUnique).
func (c *Client) insertOne(ctx context.Context, db DBTX, j *newJob, notify, callerTx bool) (*JobRow, error) {
	if j.uniqueKey != nil {
		return c.insertUnique(ctx, db, j, notify, callerTx)
	}
	// The payload goes as text: as []byte, the simple and exec protocols (PgBouncer
	// setups) would send it as bytea.
	args := []any{j.queue, j.kind, string(j.payload), j.priority, j.runAt, j.maxAttempts, nil, j.timeoutMs, j.metadataText(), j.partitionKey}
	q := c.sql.insert
	if notify {
		q = c.sql.insertNotify
		args = append(args, c.notify.Channel)
	}
	row, err := scanJob(db.QueryRow(ctx, q, args...))
	if err != nil {
		return nil, c.wrapErr("enqueue", err)
	}
	return row, nil
}

// wrapErr adds the operation and turns an undefined table into ErrNotMigrated.
func (c *Client) wrapErr(op string, err error) error { return c.db.WrapErr(op, err) }

// enqueueSQL holds the enqueue statements, rendered for the client's schema.
type enqueueSQL struct {
	insert, insertNotify string
	// insertUnique[gated][notify]: gated inserts only under READ COMMITTED (insertUnique).
	insertUnique [2][2]string
	// insertUnnest[gated]: the bulk insert with unique keys.
	insertUnnest               [2]string
	findUnique                 string
	coalesced, coalescedNotify string // coalesce.go
	coalescedReplay            string // coalesce.go
}

func newEnqueueSQL(schema string) enqueueSQL {
	r := func(q string) string { return pgutil.Render(schema, q) }
	return enqueueSQL{
		insert:       r(insertSQL(false)),
		insertNotify: r(insertSQL(true)),
		insertUnique: [2][2]string{
			{r(insertUniqueSQL(false, false)), r(insertUniqueSQL(false, true))},
			{r(insertUniqueSQL(true, false)), r(insertUniqueSQL(true, true))},
		},
		insertUnnest:    [2]string{r(insertUnnestSQL("")), r(insertUnnestSQL(readCommittedGate))},
		findUnique:      r(findUniqueSQL),
		coalesced:       r(coalescedInsertSQL + coalescedSelectSQL),
		coalescedNotify: r(coalescedInsertSQL + coalescedNotifySQL),
		coalescedReplay: r(coalescedReplaySQL),
	}
}

// Statements around the unique insert under REPEATABLE READ and SERIALIZABLE.
const (
	isolationSQL           = `SELECT current_setting('transaction_isolation')`
	savepointSQL           = `SAVEPOINT skiplock_enqueue`
	rollbackToSavepointSQL = `ROLLBACK TO SAVEPOINT skiplock_enqueue`
	releaseSavepointSQL    = `RELEASE SAVEPOINT skiplock_enqueue`
)

// insertSQL is the single-job insert. run_at defaults to the database clock. With notify,
// pg_notify runs in the same statement (one round trip) and so in the same transaction:
// Postgres delivers it only at commit.
func insertSQL(notify bool) string {
	ins := `INSERT INTO {s}.jobs (queue, kind, payload, priority, run_at, max_attempts, unique_key, timeout_ms, metadata, partition_key)
VALUES ($1, $2, $3, $4, COALESCE($5::timestamptz, now()), $6, $7, $8, $9, $10)
RETURNING ` + jobColumns
	if !notify {
		return ins
	}
	return `WITH ins AS (` + ins + `)
SELECT ins.* FROM ins CROSS JOIN pg_notify($11, $1::text) AS n`
}
