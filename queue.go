// This file holds the Client and enqueueing: the per-job options, the single insert
// (Enqueue, EnqueueTx) and the bulk insert (EnqueueMany, EnqueueManyTx), with the
// statements they run. The operator calls on a Client are in admin.go.

package skiplock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	// enqueue returns the existing job and [ErrDuplicateJob]. At most 255 bytes.
	UniqueKey string
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
	notify   *notifier  // wake-ups: the channel, the throttle of Enqueue's notifications
	sql      enqueueSQL // rendered for schema by NewClient
	admin    adminSQL   // the operator calls' statements (admin.go)
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
	return &Client{
		pool:     pool,
		schema:   cfg.Schema,
		maxBytes: cfg.MaxPayloadBytes,
		logger:   cfg.Logger,
		notify:   newNotifier(pool, cfg.Schema, cfg.NotifyInterval, cfg.Logger),
		sql:      newEnqueueSQL(cfg.Schema),
		admin:    newAdminSQL(cfg.Schema),
	}, nil
}

// Pool returns the pool the client was built on, for callers (the dashboard, tests) that
// read skiplock's tables with their own queries.
func (c *Client) Pool() *pgxpool.Pool { return c.pool }

// Schema returns the schema the client works in.
func (c *Client) Schema() string { return c.schema }

// Enqueue inserts one job in its own transaction and returns it. It is the fast path for
// jobs that need not share a transaction with other writes; the wake-up notification is
// throttled as Config.NotifyInterval says. opts may be nil.
func (c *Client) Enqueue(ctx context.Context, args JobArgs, opts *EnqueueOptions) (*JobRow, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("skiplock: enqueue: %w", err)
	}
	j, err := c.prepare(args, opts)
	if err != nil {
		return nil, err
	}
	notify := j.dueNow() && c.notify.throttle.takeNow(j.queue)
	row, err := c.insertOne(ctx, c.pool, &j, notify)
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
	return c.insertOne(ctx, tx, &j, j.dueNow())
}

func (c *Client) insertOne(ctx context.Context, db DBTX, j *newJob, notify bool) (*JobRow, error) {
	// The payload goes as text: as []byte, the simple and exec protocols (PgBouncer
	// setups) would send it as bytea.
	args := []any{j.queue, j.kind, string(j.payload), j.priority, j.runAt, j.maxAttempts, j.uniqueKey}
	var q string
	switch {
	case notify && j.uniqueKey != nil:
		q = c.sql.insertUniqueNotify
	case notify:
		q = c.sql.insertNotify
	case j.uniqueKey != nil:
		q = c.sql.insertUnique
	default:
		q = c.sql.insert
	}
	if notify {
		args = append(args, c.notify.channel)
	}
	row, err := scanJob(db.QueryRow(ctx, q, args...))
	if errors.Is(err, pgx.ErrNoRows) && j.uniqueKey != nil {
		// ON CONFLICT DO NOTHING: an active job holds the key.
		existing, gerr := scanJob(db.QueryRow(ctx, c.sql.getByUniqueKey, *j.uniqueKey))
		if gerr != nil {
			if errors.Is(gerr, pgx.ErrNoRows) { // it finished in between: the caller may retry
				return nil, fmt.Errorf("%w: key %q", ErrDuplicateJob, *j.uniqueKey)
			}
			return nil, c.wrapErr("enqueue", gerr)
		}
		return existing, fmt.Errorf("%w: key %q is held by job %d", ErrDuplicateJob, *j.uniqueKey, existing.ID)
	}
	if err != nil {
		return nil, c.wrapErr("enqueue", err)
	}
	return row, nil
}

// EnqueueMany inserts many jobs in one transaction of its own with a constant number of
// statements (COPY, or one multi-row insert when unique keys are used) and returns how
// many were inserted. Every job is validated before anything is written. Jobs whose
// UniqueKey is already active are skipped and not counted.
func (c *Client) EnqueueMany(ctx context.Context, params []EnqueueParams) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("skiplock: enqueue many: %w", err)
	}
	jobs, err := c.prepareMany(params)
	if err != nil || len(jobs) == 0 {
		return 0, err
	}
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return 0, c.wrapErr("enqueue many", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	n, err := c.insertMany(ctx, tx, jobs)
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
	return c.insertMany(ctx, tx, jobs)
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
func (c *Client) insertMany(ctx context.Context, db DBTX, jobs []newJob) (int, error) {
	queues := map[string]bool{}
	hasUnique := false
	for i := range jobs {
		if jobs[i].dueNow() {
			queues[jobs[i].queue] = true
		}
		if jobs[i].uniqueKey != nil {
			hasUnique = true
		}
	}
	var total int64
	if hasUnique {
		cols := unnestColumns(jobs)
		tag, err := db.Exec(ctx, c.sql.insertUnnest, cols...)
		if err != nil {
			return 0, c.wrapErr("enqueue many", err)
		}
		total = tag.RowsAffected()
	} else {
		var now, later [][]any
		for i := range jobs {
			j := &jobs[i]
			if j.runAt == nil {
				now = append(now, []any{j.queue, j.kind, j.payload, j.priority, j.maxAttempts})
			} else {
				later = append(later, []any{j.queue, j.kind, j.payload, j.priority, j.maxAttempts, *j.runAt})
			}
		}
		table := pgx.Identifier{c.schema, "jobs"}
		if len(now) > 0 {
			n, err := db.CopyFrom(ctx, table, copyColumns[:5], pgx.CopyFromRows(now))
			if err != nil {
				return 0, c.wrapErr("enqueue many", err)
			}
			total += n
		}
		if len(later) > 0 {
			n, err := db.CopyFrom(ctx, table, copyColumns, pgx.CopyFromRows(later))
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

func unnestColumns(jobs []newJob) []any {
	var (
		queue = make([]string, len(jobs))
		kind  = make([]string, len(jobs))
		pay   = make([]string, len(jobs))
		prio  = make([]int16, len(jobs))
		maxA  = make([]int32, len(jobs))
		runAt = make([]*time.Time, len(jobs))
		uniq  = make([]*string, len(jobs))
	)
	for i := range jobs {
		j := &jobs[i]
		queue[i], kind[i], pay[i], prio[i], maxA[i], runAt[i], uniq[i] = j.queue, j.kind, string(j.payload), j.priority, j.maxAttempts, j.runAt, j.uniqueKey
	}
	return []any{queue, kind, pay, prio, maxA, runAt, uniq}
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
	insert, insertNotify, insertUnique, insertUniqueNotify string
	insertUnnest, getByUniqueKey                           string
}

func newEnqueueSQL(schema string) enqueueSQL {
	return enqueueSQL{
		insert:             renderSQL(schema, insertSQL("", false)),
		insertNotify:       renderSQL(schema, insertSQL("", true)),
		insertUnique:       renderSQL(schema, insertSQL(onConflictUnique, false)),
		insertUniqueNotify: renderSQL(schema, insertSQL(onConflictUnique, true)),
		insertUnnest:       renderSQL(schema, insertUnnestSQL),
		getByUniqueKey:     renderSQL(schema, getByUniqueKeySQL),
	}
}

// onConflictUnique names the partial unique index on unique_key, so an active job with the
// same key makes the insert a no-op instead of an error that would abort the caller's
// transaction.
const onConflictUnique = `ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('queued', 'running') DO NOTHING`

// insertSQL is the single-job insert. run_at defaults to the database clock. With notify,
// pg_notify runs in the same statement (one round trip) and so in the same transaction:
// Postgres delivers it only at commit.
func insertSQL(conflict string, notify bool) string {
	ins := `INSERT INTO {s}.jobs (queue, kind, payload, priority, run_at, max_attempts, unique_key)
VALUES ($1, $2, $3, $4, COALESCE($5::timestamptz, now()), $6, $7) ` + conflict + `
RETURNING ` + jobColumns
	if !notify {
		return ins
	}
	return `WITH ins AS (` + ins + `)
SELECT ins.* FROM ins CROSS JOIN pg_notify($8, $1::text) AS n`
}

const insertUnnestSQL = `INSERT INTO {s}.jobs (queue, kind, payload, priority, max_attempts, run_at, unique_key)
SELECT q, k, p::jsonb, pr, ma, COALESCE(ra, now()), uk
FROM unnest($1::text[], $2::text[], $3::text[], $4::smallint[], $5::int[], $6::timestamptz[], $7::text[])
	AS t(q, k, p, pr, ma, ra, uk)
` + onConflictUnique

const getByUniqueKeySQL = `SELECT ` + jobColumns + ` FROM {s}.jobs
WHERE unique_key = $1 AND status IN ('queued', 'running')`
