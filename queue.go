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
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultQueue is the queue a job goes to when [EnqueueOptions].Queue is empty.
const DefaultQueue = "default"

// DefaultSchema is the Postgres schema skiplock's tables live in when none is configured.
const DefaultSchema = "skiplock"

// DefaultMaxAttempts is how many times a job runs before it is dead, unless its options say otherwise.
const DefaultMaxAttempts = 20

// DefaultNotifyInterval is the default of [Config].NotifyInterval.
const DefaultNotifyInterval = 5 * time.Millisecond

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
}

// EnqueueParams is one job of an [Client.EnqueueMany] call.
type EnqueueParams struct {
	Args    JobArgs
	Options *EnqueueOptions // nil means defaults
}

// Config configures a [Client]. The zero value is valid.
type Config struct {
	// Schema is the Postgres schema holding skiplock's tables, as created by [Migrate].
	// Defaults to "skiplock".
	Schema string
	// MaxPayloadBytes limits the JSON size of a job's args. Defaults to
	// [DefaultMaxPayloadBytes] (1 MiB); zero means the default, negative
	// means no limit.
	MaxPayloadBytes int
	// NotifyInterval throttles the wake-up notifications that [Client.Enqueue] sends: at
	// most one per queue per interval is sent with an insert, and enqueues inside the
	// interval are covered by one trailing notification at its end. Postgres serializes
	// the commits of notifying transactions, so a notification per insert would cap insert
	// throughput. [Client.EnqueueTx] and [Client.EnqueueMany] always notify once per call
	// and queue, inside the transaction. Defaults to [DefaultNotifyInterval] (5ms). Zero
	// means the default; negative means notify on every call.
	NotifyInterval time.Duration
	// Logger receives skiplock's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// CoalesceWindow is how long [Client.Enqueue], and [Client.EnqueueMany] of at most 100
	// jobs, may wait for concurrent calls to share its INSERT and its commit. A call that
	// finds no other batch being written goes at once; otherwise it joins the batch that
	// is collecting, which is sent when a batch in flight finishes, when it holds 1000
	// jobs, or this long after its first job, whichever comes first. Every call still
	// returns only once the commit holding its jobs is done, with its own rows or its own
	// error. Jobs with a UniqueKey never wait: they are written alone. Defaults to
	// [DefaultCoalesceWindow] (1ms); zero means the default; negative turns coalescing
	// off (every call writes in a transaction of its own); at most 100ms.
	CoalesceWindow time.Duration
	// Hooks observe this client's jobs: every [Worker] made from the client runs them
	// around each job (before its own [WorkerConfig].Hooks), and those that implement
	// [EnqueueHook] see each enqueue. Nil means none; a nil entry is an error.
	Hooks []Hook
}

// DBTX is what enqueueing inside the caller's transaction needs; pgx.Tx satisfies it.
// skiplock never begins, commits or rolls back a DBTX it is given.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error)
}

// Client enqueues and inspects jobs. It wraps a pool the caller owns and is safe for
// concurrent use. Create one with [NewClient].
type Client struct {
	pool     *pgxpool.Pool
	schema   string
	maxBytes int
	logger   *slog.Logger
	notify   *notifier                     // wake-ups: the channel, the throttle of Enqueue's notifications
	sql      enqueueSQL                    // rendered for schema by NewClient
	admin    adminSQL                      // the operator calls' statements (admin.go)
	batch    *groupCommit[*enqueueRequest] // shares statements among concurrent enqueues; nil when off (coalesce.go)

	hooks        []Hook        // Config.Hooks
	enqueueHooks []EnqueueHook // those of hooks that implement EnqueueHook
}

// NewClient returns a Client on pool. The pool is not closed by skiplock. A field out of
// range is an error that matches [ErrInvalidConfig] and names the field.
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
		pool:     pool,
		schema:   cfg.Schema,
		maxBytes: cfg.MaxPayloadBytes,
		logger:   cfg.Logger,
		notify:   newNotifier(pool, cfg.Schema, cfg.NotifyInterval, cfg.Logger),
		sql:      newEnqueueSQL(cfg.Schema),
		admin:    newAdminSQL(cfg.Schema),
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
// insert the job twice.
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
	notify := j.dueNow() && c.notify.throttle.takeNow(j.queue)
	row, err := c.insertOne(ctx, c.pool, j, notify, false)
	if err == nil && j.dueNow() && !notify {
		c.notify.throttle.trailing(j.queue)
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
		args = append(args, c.notify.channel)
	}
	row, err := scanJob(db.QueryRow(ctx, q, args...))
	if err != nil {
		return nil, c.wrapErr("enqueue", err)
	}
	return row, nil
}

// insertUnique writes a job with a unique key, or finds the job that holds the key.
//
// The insert is ON CONFLICT DO NOTHING on the active-key index, so a duplicate is not an
// error and the caller's transaction stays usable. Under REPEATABLE READ or SERIALIZABLE,
// though, a conflict with a row committed after the transaction's snapshot raises a
// serialization failure, which would abort the caller's transaction. So inside the
// caller's transaction the insert runs only when the transaction is READ COMMITTED (the
// statement checks; no round trip is added); otherwise, once the lookup has found no
// visible holder, it runs again inside a savepoint that absorbs such a failure.
func (c *Client) insertUnique(ctx context.Context, db DBTX, j *newJob, notify, callerTx bool) (*JobRow, error) {
	args := []any{j.queue, j.kind, string(j.payload), j.priority, j.runAt, j.maxAttempts, *j.uniqueKey, j.uniqueStates, j.timeoutMs, j.metadataText(), j.partitionKey}
	if notify {
		args = append(args, c.notify.channel)
	}
	q := c.sql.insertUnique[b2i(callerTx)][b2i(notify)]
	// A holder that finishes between the insert and the lookup frees the key (unless its
	// final state counts): try again a few times.
	for range 3 {
		row, err := scanJob(db.QueryRow(ctx, q, args...))
		if err == nil {
			return row, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, c.wrapErr("enqueue", err)
		}
		existing, err := scanJob(db.QueryRow(ctx, c.sql.findUnique, *j.uniqueKey, j.uniqueStates))
		if err == nil {
			return c.duplicate(j, existing)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, c.wrapErr("enqueue", err)
		}
		if callerTx {
			var iso string
			if err := db.QueryRow(ctx, isolationSQL).Scan(&iso); err != nil {
				return nil, c.wrapErr("enqueue", err)
			}
			if iso != "read committed" {
				return c.insertUniqueSavepoint(ctx, db, j, args, notify)
			}
		}
	}
	return nil, fmt.Errorf("%w: key %q: the job holding it keeps changing state; try again", ErrDuplicateJob, *j.uniqueKey)
}

// insertUniqueSavepoint is the unique insert in a transaction that is not READ COMMITTED:
// inside a savepoint, so that a serialization failure (the key is held by a job this
// transaction's snapshot cannot see) is rolled back to the savepoint and reported as a
// duplicate, leaving the caller's transaction usable. It costs three round trips.
func (c *Client) insertUniqueSavepoint(ctx context.Context, db DBTX, j *newJob, args []any, notify bool) (*JobRow, error) {
	if _, err := db.Exec(ctx, savepointSQL); err != nil {
		return nil, c.wrapErr("enqueue", err)
	}
	row, err := scanJob(db.QueryRow(ctx, c.sql.insertUnique[0][b2i(notify)], args...))
	if err != nil {
		// Roll back even if ctx ended: the caller's transaction must not stay aborted.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, rerr := db.Exec(rctx, rollbackToSavepointSQL); rerr != nil {
			return nil, c.wrapErr("enqueue", errors.Join(err, rerr))
		}
		if _, rerr := db.Exec(rctx, releaseSavepointSQL); rerr != nil {
			return nil, c.wrapErr("enqueue", rerr)
		}
		var pgErr *pgconn.PgError
		if errors.Is(err, pgx.ErrNoRows) || errors.As(err, &pgErr) && pgErr.Code == "40001" {
			return nil, fmt.Errorf("%w: key %q is held by a job committed after this transaction's snapshot (%s); the transaction is still usable",
				ErrDuplicateJob, *j.uniqueKey, "REPEATABLE READ or SERIALIZABLE")
		}
		return nil, c.wrapErr("enqueue", err)
	}
	if _, err := db.Exec(ctx, releaseSavepointSQL); err != nil {
		return nil, c.wrapErr("enqueue", err)
	}
	return row, nil
}

// duplicate returns the job that holds a key as the answer to a duplicate enqueue. A
// caller-chosen UniqueKey also reports ErrDuplicateJob, as it did before UniqueOpts.
func (c *Client) duplicate(j *newJob, existing *JobRow) (*JobRow, error) {
	existing.Duplicate = true
	if j.keyIsCallers {
		return existing, fmt.Errorf("%w: key %q is held by job %d", ErrDuplicateJob, *j.uniqueKey, existing.ID)
	}
	return existing, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// EnqueueMany inserts many jobs in one transaction of its own with a constant number of
// statements (COPY, or one multi-row insert when unique keys are used) and returns how
// many were inserted. Every job is validated before anything is written, and the jobs are
// committed all together or not at all. Jobs whose UniqueKey is already active are
// skipped and not counted.
//
// A call of at most 100 jobs without unique keys shares its statement and commit with
// concurrent Enqueue and EnqueueMany calls, as [Client.Enqueue] does (and with the same
// answer when ctx ends while it waits); its jobs still commit all together or not at all.
func (c *Client) EnqueueMany(ctx context.Context, params []EnqueueParams) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("skiplock: enqueue many: %w", err)
	}
	jobs, err := c.prepareMany(params)
	if err != nil || len(jobs) == 0 {
		return 0, err
	}
	finish, err := c.enqueuingMany(ctx, jobs)
	if err != nil {
		return 0, err
	}
	n, err := c.enqueueMany(ctx, jobs)
	finish(err)
	return n, err
}

// enqueueMany writes the prepared jobs of EnqueueMany: with concurrent calls when it can,
// else in a transaction of their own.
func (c *Client) enqueueMany(ctx context.Context, jobs []newJob) (int, error) {
	if c.batch != nil && len(jobs) <= coalesceManyMax && !slices.ContainsFunc(jobs, func(j newJob) bool { return !j.coalescable() }) {
		rows, err := c.coalesce(ctx, &enqueueRequest{jobs: jobs, many: true})
		if err == nil {
			return len(rows), nil
		}
		if !errors.Is(err, errInsertAlone) {
			return 0, err
		}
		// The batch was refused as a whole: write these jobs alone.
	}
	// READ COMMITTED whatever the server's default: a unique conflict then never raises.
	tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return 0, c.wrapErr("enqueue many", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	n, err := c.insertMany(ctx, tx, jobs, false)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, c.wrapErr("enqueue many", err)
	}
	return n, nil
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
	finish, err := c.enqueuingMany(ctx, jobs)
	if err != nil {
		return 0, err
	}
	n, err := c.insertMany(ctx, tx, jobs, true)
	finish(err)
	return n, err
}

// enqueuingMany runs enqueuing for every job of an EnqueueMany call. The returned function
// must be called once with the insert's result (there are no rows to give the hooks); on
// error it has been called already.
func (c *Client) enqueuingMany(ctx context.Context, jobs []newJob) (func(error), error) {
	dones := make([]func(*JobRow, error), 0, len(jobs))
	finish := func(err error) {
		for _, d := range dones {
			d(nil, err)
		}
	}
	for i := range jobs {
		done, err := c.enqueuing(ctx, &jobs[i])
		if err != nil {
			err = fmt.Errorf("job %d of %d: %w", i, len(jobs), err)
			finish(err)
			return nil, err
		}
		dones = append(dones, done)
	}
	return finish, nil
}

func (c *Client) prepareMany(params []EnqueueParams) ([]newJob, error) {
	jobs := make([]newJob, len(params))
	for i := range params {
		j, err := c.prepare(params[i].Args, params[i].Options)
		if err != nil {
			return nil, fmt.Errorf("job %d of %d: %w", i, len(params), err)
		}
		jobs[i] = j
	}
	return jobs, nil
}

var copyColumns = []string{"queue", "kind", "payload", "priority", "max_attempts", "run_at"}

// insertMany writes jobs with at most four statements whatever their number: COPY for
// jobs due now (run_at from the column default, the database clock), COPY for scheduled
// jobs, or one unnest insert when unique keys need ON CONFLICT; then one notification
// per queue with due jobs.
func (c *Client) insertMany(ctx context.Context, db DBTX, jobs []newJob, callerTx bool) (int, error) {
	queues := map[string]bool{}
	hasUnique := false // or a per-job timeout or partition key, which the COPY columns do not carry
	hasMeta := false
	for i := range jobs {
		if jobs[i].dueNow() {
			queues[jobs[i].queue] = true
		}
		if jobs[i].uniqueKey != nil || jobs[i].timeoutMs != nil || jobs[i].partitionKey != nil {
			hasUnique = true
		}
		if len(jobs[i].metadata) > 2 {
			hasMeta = true
		}
	}
	var total int64
	if hasUnique {
		n, err := c.insertManyUnique(ctx, db, jobs, callerTx)
		if err != nil {
			return 0, err
		}
		total = n
	} else {
		// Metadata is copied only when some job has any: the column default ('{}')
		// costs the COPY nothing.
		var now, later [][]any
		nowCols, laterCols := copyColumns[:5:5], copyColumns
		if hasMeta {
			nowCols, laterCols = append(nowCols, "metadata"), append(laterCols[:len(laterCols):len(laterCols)], "metadata")
		}
		for i := range jobs {
			j := &jobs[i]
			var r []any
			if j.runAt == nil {
				r = []any{j.queue, j.kind, j.payload, j.priority, j.maxAttempts}
			} else {
				r = []any{j.queue, j.kind, j.payload, j.priority, j.maxAttempts, *j.runAt}
			}
			if hasMeta {
				r = append(r, j.metadata)
			}
			if j.runAt == nil {
				now = append(now, r)
			} else {
				later = append(later, r)
			}
		}
		table := pgx.Identifier{c.schema, "jobs"}
		if len(now) > 0 {
			n, err := db.CopyFrom(ctx, table, nowCols, pgx.CopyFromRows(now))
			if err != nil {
				return 0, c.wrapErr("enqueue many", err)
			}
			total += n
		}
		if len(later) > 0 {
			n, err := db.CopyFrom(ctx, table, laterCols, pgx.CopyFromRows(later))
			if err != nil {
				return 0, c.wrapErr("enqueue many", err)
			}
			total += n
		}
	}
	if len(queues) > 0 {
		names := make([]string, 0, len(queues))
		for q := range queues {
			names = append(names, q)
		}
		if err := c.notify.queues(ctx, db, names); err != nil {
			return 0, c.wrapErr("enqueue many", err)
		}
	}
	return int(total), nil
}

// insertManyUnique writes jobs of which some have unique keys with one unnest insert that
// skips duplicates. As in insertUnique, inside the caller's transaction the statement
// inserts only under READ COMMITTED; when it inserts nothing the isolation level is read,
// and under a stricter one the insert runs again inside a savepoint, so that a
// serialization failure leaves the caller's transaction usable.
func (c *Client) insertManyUnique(ctx context.Context, db DBTX, jobs []newJob, callerTx bool) (int64, error) {
	cols := unnestColumns(jobs)
	tag, err := db.Exec(ctx, c.sql.insertUnnest[b2i(callerTx)], cols...)
	if err != nil {
		return 0, c.wrapErr("enqueue many", err)
	}
	if tag.RowsAffected() > 0 || !callerTx {
		return tag.RowsAffected(), nil
	}
	var iso string
	if err := db.QueryRow(ctx, isolationSQL).Scan(&iso); err != nil {
		return 0, c.wrapErr("enqueue many", err)
	}
	if iso == "read committed" {
		return 0, nil // every job was a duplicate
	}
	if _, err := db.Exec(ctx, savepointSQL); err != nil {
		return 0, c.wrapErr("enqueue many", err)
	}
	tag, err = db.Exec(ctx, c.sql.insertUnnest[0], cols...)
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, rerr := db.Exec(rctx, rollbackToSavepointSQL); rerr != nil {
			return 0, c.wrapErr("enqueue many", errors.Join(err, rerr))
		}
		if _, rerr := db.Exec(rctx, releaseSavepointSQL); rerr != nil {
			return 0, c.wrapErr("enqueue many", rerr)
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40001" {
			return 0, fmt.Errorf("%w: a unique key is held by a job committed after this transaction's snapshot (%s); nothing was inserted and the transaction is still usable",
				ErrDuplicateJob, iso)
		}
		return 0, c.wrapErr("enqueue many", err)
	}
	if _, err := db.Exec(ctx, releaseSavepointSQL); err != nil {
		return 0, c.wrapErr("enqueue many", err)
	}
	return tag.RowsAffected(), nil
}

func unnestColumns(jobs []newJob) []any {
	var (
		queue  = make([]string, len(jobs))
		kind   = make([]string, len(jobs))
		pay    = make([]string, len(jobs))
		prio   = make([]int16, len(jobs))
		maxA   = make([]int32, len(jobs))
		runAt  = make([]*time.Time, len(jobs))
		uniq   = make([]*string, len(jobs))
		states = make([]*string, len(jobs))
		tmo    = make([]*int64, len(jobs))
		meta   = make([]string, len(jobs))
		part   = make([]*string, len(jobs))
	)
	for i := range jobs {
		j := &jobs[i]
		queue[i], kind[i], pay[i], prio[i], maxA[i], runAt[i], uniq[i] = j.queue, j.kind, string(j.payload), j.priority, j.maxAttempts, j.runAt, j.uniqueKey
		if j.uniqueStates != nil {
			s := strings.Join(j.uniqueStates, ",")
			states[i] = &s
		}
		tmo[i] = j.timeoutMs
		meta[i] = j.metadataText()
		part[i] = j.partitionKey
	}
	return []any{queue, kind, pay, prio, maxA, runAt, uniq, states, tmo, meta, part}
}

// wrapErr adds the operation and turns an undefined table into ErrNotMigrated.
func (c *Client) wrapErr(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") {
		return fmt.Errorf("skiplock: %s: %w: run skiplock.Migrate for schema %q (%v)", op, ErrNotMigrated, c.schema, err)
	}
	return fmt.Errorf("skiplock: %s: %w", op, err)
}

// renderSQL puts the sanitized schema identifier where a statement template says {s}.
// Every owner of statements calls it once, at construction.
func renderSQL(schema, template string) string {
	return strings.ReplaceAll(template, "{s}", pgx.Identifier{schema}.Sanitize())
}

// enqueueSQL holds the enqueue statements, rendered for the client's schema.
type enqueueSQL struct {
	insert, insertNotify string
	// insertUnique[gated][notify]: gated inserts only under READ COMMITTED (insertUnique).
	insertUnique [2][2]string
	// insertUnnest[gated]: the bulk insert with unique keys.
	insertUnnest               [2]string
	findUnique                 string
	coalesced, coalescedNotify string // coalesce.go
}

func newEnqueueSQL(schema string) enqueueSQL {
	r := func(q string) string { return renderSQL(schema, q) }
	return enqueueSQL{
		insert:       r(insertSQL(false)),
		insertNotify: r(insertSQL(true)),
		insertUnique: [2][2]string{
			{r(insertUniqueSQL(false, false)), r(insertUniqueSQL(false, true))},
			{r(insertUniqueSQL(true, false)), r(insertUniqueSQL(true, true))},
		},
		insertUnnest:    [2]string{r(insertUnnestSQL("")), r(insertUnnestSQL(readCommittedGate))},
		findUnique:      r(findUniqueSQL),
		coalesced:       r(coalescedInsertSQL),
		coalescedNotify: r(coalescedInsertNotifySQL),
	}
}

// onConflictUnique names the partial unique index on unique_key, so an active job with the
// same key makes the insert a no-op instead of an error that would abort the caller's
// transaction.
const onConflictUnique = `ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('queued', 'running') DO NOTHING`

// readCommittedGate makes an insert insert nothing outside READ COMMITTED, where an ON
// CONFLICT with an invisible row would raise instead of doing nothing (insertUnique).
const readCommittedGate = `
	AND current_setting('transaction_isolation') = 'read committed'`

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

// finishedHolderSQL finds a finished job that holds key $7 in one of the finished states
// $8 that count, in the hot table (jobs_unique_key_done_idx) and the archive
// (jobs_archive_unique_key_idx). Active holders are the ON CONFLICT's business.
const finishedHolderSQL = `SELECT 1 FROM {s}.jobs d
		WHERE d.unique_key = $7 AND d.status NOT IN ('queued', 'running') AND d.status = ANY ($8::text[])
		UNION ALL
		SELECT 1 FROM {s}.jobs_archive a WHERE a.unique_key = $7 AND a.status = ANY ($8::text[])`

// insertUniqueSQL is the single-job insert with a unique key $7: nothing is inserted when
// a finished job holds the key in a state of $8 (NULL: no finished state counts, and the
// lookup is never run), nor when an active job holds it (ON CONFLICT DO NOTHING, which
// also settles concurrent inserts of one key: the later waits for the earlier to commit).
// gated adds readCommittedGate. $9 is the job's timeout_ms, $10 its metadata, $11 its
// partition_key; the channel of notify is $12.
func insertUniqueSQL(gated, notify bool) string {
	gate := ""
	if gated {
		gate = readCommittedGate
	}
	ins := `INSERT INTO {s}.jobs (queue, kind, payload, priority, run_at, max_attempts, unique_key, timeout_ms, metadata, partition_key)
SELECT $1::text, $2::text, $3::jsonb, $4::smallint, COALESCE($5::timestamptz, now()), $6::integer, $7::text, $9::bigint, $10::jsonb, $11::text
WHERE ($8::text[] IS NULL OR NOT EXISTS (` + finishedHolderSQL + `))` + gate + `
` + onConflictUnique + `
RETURNING ` + jobColumns
	if !notify {
		return ins
	}
	return `WITH ins AS (` + ins + `)
SELECT ins.* FROM ins CROSS JOIN pg_notify($12, $1::text) AS n`
}

// insertUnnestSQL is the bulk insert with unique keys: as insertUniqueSQL for every row,
// the finished states that count given per row as a comma-separated list (us).
func insertUnnestSQL(gate string) string {
	return `INSERT INTO {s}.jobs (queue, kind, payload, priority, max_attempts, run_at, unique_key, timeout_ms, metadata, partition_key)
SELECT q, k, p::jsonb, pr, ma, COALESCE(ra, now()), uk, tm, md::jsonb, pk
FROM unnest($1::text[], $2::text[], $3::text[], $4::smallint[], $5::int[], $6::timestamptz[], $7::text[], $8::text[], $9::bigint[], $10::text[], $11::text[])
	AS t(q, k, p, pr, ma, ra, uk, us, tm, md, pk)
WHERE (uk IS NULL OR us IS NULL OR NOT EXISTS (
		SELECT 1 FROM {s}.jobs d
		WHERE d.unique_key = t.uk AND d.status NOT IN ('queued', 'running') AND d.status = ANY (string_to_array(t.us, ','))
		UNION ALL
		SELECT 1 FROM {s}.jobs_archive a WHERE a.unique_key = t.uk AND a.status = ANY (string_to_array(t.us, ','))))` + gate + `
` + onConflictUnique
}

// findUniqueSQL returns the job holding key $1: an active one first, else a finished one
// in a state of $2 that counts, from the hot table or the archive.
const findUniqueSQL = `(SELECT ` + jobColumns + ` FROM {s}.jobs
	WHERE unique_key = $1 AND (status IN ('queued', 'running') OR status = ANY ($2::text[]))
	ORDER BY status IN ('queued', 'running') DESC, id DESC LIMIT 1)
UNION ALL
(SELECT ` + archiveJobColumns + ` FROM {s}.jobs_archive
	WHERE unique_key = $1 AND status = ANY ($2::text[]) ORDER BY id DESC LIMIT 1)
LIMIT 1`

// archiveJobColumns is jobColumns for a jobs_archive row, which keeps no lease.
const archiveJobColumns = `id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
	NULL::timestamptz, locked_by, last_error, errors, unique_key, created_at, finished_at,
	metadata, progress, output`
