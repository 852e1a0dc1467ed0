package skiplock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

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

// JobArgs is the payload of a job. Its Kind names the handler that runs it; the value
// itself is stored as JSON, so it must marshal with encoding/json.
type JobArgs interface {
	Kind() string
}

// JobArgsWithOptions is implemented by args types that carry their own default
// [EnqueueOptions] (for example a queue or max attempts for every job of the kind).
// Options passed to an enqueue call override these field by field.
type JobArgsWithOptions interface {
	JobArgs
	EnqueueOptions() EnqueueOptions
}

// JobStatus is the state of a job. See the package documentation for the state machine.
type JobStatus string

// The job states.
const (
	StatusQueued    JobStatus = "queued"    // waiting for run_at and a free worker
	StatusRunning   JobStatus = "running"   // claimed by a worker
	StatusSucceeded JobStatus = "succeeded" // finished without error
	StatusFailed    JobStatus = "failed"    // a permanent error: never retried
	StatusDead      JobStatus = "dead"      // attempts exhausted
	StatusCancelled JobStatus = "cancelled" // cancelled by an operator or its handler
)

// EnqueueOptions are per-job settings. The zero value of each field means its default.
type EnqueueOptions struct {
	// Queue is the queue name ([a-z0-9_-], 1-64 characters). Defaults to "default".
	Queue string
	// Priority orders due jobs of a queue: higher runs first. Defaults to 0.
	Priority int
	// RunAt is the earliest time the job may start. Zero means now, by the database clock.
	RunAt time.Time
	// MaxAttempts is how many times the job may run before it is dead. Defaults to 20.
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

// AttemptError is one entry of a job's error history.
type AttemptError struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
}

// JobRow is a job as stored in the database.
type JobRow struct {
	ID          int64
	Queue       string
	Kind        string
	Payload     []byte // the args as JSON
	Status      JobStatus
	Priority    int
	RunAt       time.Time
	Attempts    int // attempts started so far, including a running one
	MaxAttempts int
	LockedAt    time.Time // zero unless running
	LockedBy    string    // the worker holding the job, empty unless running
	LastError   string
	Errors      []AttemptError // the latest errors, oldest first, at most 10
	UniqueKey   string
	CreatedAt   time.Time
	FinishedAt  time.Time // zero until the job reaches a final state
}

// Config configures a [Client]. The zero value is valid.
type Config struct {
	// Schema is the Postgres schema holding skiplock's tables, as created by [Migrate].
	// Defaults to "skiplock".
	Schema string
	// MaxPayloadBytes limits the JSON size of a job's args. Defaults to 1 MiB; negative
	// means no limit.
	MaxPayloadBytes int
	// NotifyInterval throttles the wake-up notifications that [Client.Enqueue] sends: at
	// most one per queue per interval is sent with an insert, and enqueues inside the
	// interval are covered by one trailing notification at its end. Postgres serializes
	// the commits of notifying transactions, so a notification per insert would cap insert
	// throughput. [Client.EnqueueTx] and [Client.EnqueueMany] always notify once per call
	// and queue, inside the transaction. Defaults to 5ms; negative means notify on every
	// call.
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
	channel  string // pg_notify channel of this schema
	maxBytes int
	logger   *slog.Logger
	sql      statements
	throttle *notifyThrottle
}

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

// NewClient returns a Client on pool. The pool is not closed by skiplock.
func NewClient(pool *pgxpool.Pool, cfg Config) (*Client, error) {
	if pool == nil {
		return nil, errors.New("skiplock: NewClient: pool is nil")
	}
	if cfg.Schema == "" {
		cfg.Schema = DefaultSchema
	}
	if err := validSchema(cfg.Schema); err != nil {
		return nil, err
	}
	if cfg.MaxPayloadBytes == 0 {
		cfg.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if cfg.NotifyInterval == 0 {
		cfg.NotifyInterval = 5 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Client{
		pool:     pool,
		schema:   cfg.Schema,
		channel:  cfg.Schema + "_jobs",
		maxBytes: cfg.MaxPayloadBytes,
		logger:   cfg.Logger,
		sql:      buildStatements(cfg.Schema),
	}
	c.throttle = &notifyThrottle{interval: cfg.NotifyInterval, last: map[string]time.Time{}, pending: map[string]bool{}, send: c.sendNotify}
	return c, nil
}

// Pool returns the pool the client was created with.
func (c *Client) Pool() *pgxpool.Pool { return c.pool }

// Schema returns the schema the client works in.
func (c *Client) Schema() string { return c.schema }

// newJob is a validated job ready to insert.
type newJob struct {
	queue       string
	kind        string
	payload     []byte
	priority    int16
	runAt       *time.Time // nil: now() by the database clock
	maxAttempts int32
	uniqueKey   *string
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
		j.uniqueKey = &k
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
	return base
}

// checkJSONB rejects valid JSON that Postgres's jsonb would still refuse, so that the
// error comes before anything is sent (a refused statement would abort the caller's
// transaction): invalid UTF-8, the escape \u0000, and numbers beyond numeric's range
// (which only custom marshalers and json.RawMessage can produce). One pass, no allocation.
func checkJSONB(b []byte) error {
	if !utf8.Valid(b) {
		return errors.New("not valid UTF-8")
	}
	inString := false
	digits, expDigits, exp := 0, 0, 0
	inExp := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				if i+5 < len(b) && b[i+1] == 'u' && string(b[i+2:i+6]) == "0000" {
					return errors.New(`contains \u0000, which Postgres cannot store in jsonb`)
				}
				i++ // skip the escaped character
			case '"':
				inString = false
			}
			continue
		}
		switch {
		case c == '"':
			inString = true
			digits, inExp = 0, false
		case c >= '0' && c <= '9':
			if inExp {
				expDigits++
				if exp = exp*10 + int(c-'0'); expDigits > 6 || exp > 100_000 {
					return errors.New("a number's exponent is beyond what Postgres's numeric stores")
				}
			} else if digits++; digits > 100_000 {
				return errors.New("a number has more digits than Postgres's numeric stores")
			}
		case c == 'e' || c == 'E':
			inExp, expDigits, exp = true, 0, 0
		case c == '.' || c == '-' || c == '+':
		default:
			digits, inExp = 0, false
		}
	}
	return nil
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
	notify := j.dueNow() && c.throttle.takeNow(j.queue)
	row, err := c.insertOne(ctx, c.pool, &j, notify)
	if err == nil && j.dueNow() && !notify {
		c.throttle.trailing(j.queue)
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
		args = append(args, c.channel)
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
		if _, err := db.Exec(ctx, c.sql.notifyQueues, c.channel, names); err != nil {
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

// Get returns the job with the given id, from the hot table or the archive.
// It returns [ErrJobNotFound] when there is none.
func (c *Client) Get(ctx context.Context, id int64) (*JobRow, error) {
	row, err := scanJob(c.pool.QueryRow(ctx, c.sql.get, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: id %d", ErrJobNotFound, id)
	}
	if err != nil {
		return nil, c.wrapErr("get", err)
	}
	return row, nil
}

// wrapErr adds the operation and turns an undefined table into ErrNotMigrated.
func (c *Client) wrapErr(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") {
		return fmt.Errorf("skiplock: %s: %w: run skiplock.Migrate for schema %q (%v)", op, ErrNotMigrated, c.schema, err)
	}
	return fmt.Errorf("skiplock: %s: %w", op, err)
}

// sendNotify sends a wake-up for queue outside any transaction.
func (c *Client) sendNotify(queue string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.pool.Exec(ctx, c.sql.notifyOne, c.channel, queue); err != nil {
		c.logger.Debug("skiplock: trailing notify failed", "queue", queue, "err", err)
	}
}

// notifyThrottle lets one notification per queue through per interval; the enqueues it
// holds back are covered by a trailing notification at the end of the interval.
type notifyThrottle struct {
	interval time.Duration
	send     func(queue string)

	mu      sync.Mutex
	last    map[string]time.Time
	pending map[string]bool
}

// takeNow reports whether the caller should notify with its insert, and if so records it.
func (t *notifyThrottle) takeNow(queue string) bool {
	if t.interval < 0 {
		return true
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Sub(t.last[queue]) >= t.interval {
		t.last[queue] = now
		return true
	}
	return false
}

// trailing schedules one notification at the end of the current interval, once.
func (t *notifyThrottle) trailing(queue string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending[queue] {
		return
	}
	t.pending[queue] = true
	wait := t.interval - time.Since(t.last[queue])
	time.AfterFunc(max(wait, 0), func() {
		t.mu.Lock()
		t.pending[queue] = false
		t.last[queue] = time.Now()
		t.mu.Unlock()
		t.send(queue)
	})
}

// jobColumns is the column list every statement returning a JobRow selects, in scanJob's order.
const jobColumns = `id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
	locked_at, locked_by, last_error, errors, unique_key, created_at, finished_at`

// scanJob reads one row of jobColumns.
func scanJob(row pgx.Row) (*JobRow, error) {
	var (
		j                            JobRow
		status                       string
		lockedAt, finishedAt         *time.Time
		lockedBy, lastErr, uniqueKey *string
		errs                         []byte
	)
	err := row.Scan(&j.ID, &j.Queue, &j.Kind, &j.Payload, &status, &j.Priority, &j.RunAt, &j.Attempts,
		&j.MaxAttempts, &lockedAt, &lockedBy, &lastErr, &errs, &uniqueKey, &j.CreatedAt, &finishedAt)
	if err != nil {
		return nil, err
	}
	j.Status = JobStatus(status)
	if lockedAt != nil {
		j.LockedAt = *lockedAt
	}
	if finishedAt != nil {
		j.FinishedAt = *finishedAt
	}
	if lockedBy != nil {
		j.LockedBy = *lockedBy
	}
	if lastErr != nil {
		j.LastError = *lastErr
	}
	if uniqueKey != nil {
		j.UniqueKey = *uniqueKey
	}
	if len(errs) > 0 {
		// A history that does not decode (edited by hand) is dropped from the row rather
		// than failing it: a claimed job must always reach its handler.
		if json.Unmarshal(errs, &j.Errors) != nil {
			j.Errors = nil
		}
	}
	return &j, nil
}

// collectJobs reads all rows of a jobColumns query.
func collectJobs(rows pgx.Rows) ([]*JobRow, error) {
	defer rows.Close()
	var out []*JobRow
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// statements holds every SQL statement with the schema already quoted in. Each template
// lives next to the code that runs it; {s} stands for the sanitized schema identifier.
type statements struct {
	insert, insertNotify, insertUnique, insertUniqueNotify     string
	insertUnnest, getByUniqueKey, get, notifyOne, notifyQueues string
	claim                                                      string
	complete                                                   map[Completion]string
	retry, fail, snooze, release, heartbeat                    string
	reclaim, purgeArchive, sweepLock                           string
	cancel, requeue, stats, list, checkSchema                  string
}

func buildStatements(schema string) statements {
	s := pgx.Identifier{schema}.Sanitize()
	x := func(t string) string { return strings.ReplaceAll(t, "{s}", s) }
	st := statements{
		insert:             x(insertSQL("", false)),
		insertNotify:       x(insertSQL("", true)),
		insertUnique:       x(insertSQL(onConflictUnique, false)),
		insertUniqueNotify: x(insertSQL(onConflictUnique, true)),
		insertUnnest:       x(insertUnnestSQL),
		getByUniqueKey:     x(getByUniqueKeySQL),
		get:                x(getSQL),
		notifyOne:          `SELECT pg_notify($1, $2)`,
		notifyQueues:       `SELECT pg_notify($1, q) FROM unnest($2::text[]) AS q`,
		claim:              x(claimSQL),
		complete:           map[Completion]string{},
		retry:              x(retrySQL),
		fail:               x(failSQL),
		snooze:             x(snoozeSQL),
		release:            x(releaseSQL),
		heartbeat:          x(heartbeatSQL),
		reclaim:            x(reclaimSQL),
		purgeArchive:       x(purgeArchiveSQL),
		sweepLock:          sweepLockSQL,
		cancel:             x(cancelSQL),
		requeue:            x(requeueSQL),
		stats:              x(statsSQL),
		list:               x(listSQL),
		checkSchema:        x(checkSchemaSQL),
	}
	for mode, t := range completeSQL {
		st.complete[mode] = x(t)
	}
	return st
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

// getSQL looks in the hot table first, then in the archive (which keeps no lease).
const getSQL = `SELECT ` + jobColumns + ` FROM {s}.jobs WHERE id = $1
UNION ALL
SELECT id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
	NULL::timestamptz, locked_by, last_error, errors, unique_key, created_at, finished_at
FROM {s}.jobs_archive WHERE id = $1
LIMIT 1`

// checkSchemaSQL fails with undefined_table when the schema is not migrated.
const checkSchemaSQL = `SELECT 1 FROM {s}.jobs LIMIT 0`

// cancelSQL cancels a queued or running job. A running job keeps its locked_by: its
// worker's heartbeat stops matching (status is no longer running), so the worker cancels
// the handler's context, and the handler's late result is fenced out.
const cancelSQL = `UPDATE {s}.jobs SET status = 'cancelled', finished_at = now(), locked_at = NULL
WHERE id = $1 AND status IN ('queued', 'running')
RETURNING ` + jobColumns

// Cancel cancels the job with the given id and returns it. A queued job will not run; a
// running job's handler is told through its context at the worker's next heartbeat, and
// its result is ignored. A job already in a final state is returned unchanged. It returns
// [ErrJobNotFound] when there is no such job.
func (c *Client) Cancel(ctx context.Context, id int64) (*JobRow, error) {
	row, err := scanJob(c.pool.QueryRow(ctx, c.sql.cancel, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return c.Get(ctx, id)
	}
	if err != nil {
		return nil, c.wrapErr("cancel", err)
	}
	return row, nil
}

// RequeueFilter selects dead and failed jobs for [Client.Requeue]. Set at least one field;
// set fields must all match.
type RequeueFilter struct {
	IDs   []int64
	Kind  string
	Queue string
}

// requeueSQL is the operator's "try again": dead or failed jobs back to queued, due now,
// with their attempts reset. Their error history stays.
const requeueSQL = `WITH r AS (
	UPDATE {s}.jobs SET status = 'queued', attempts = 0, run_at = now(), finished_at = NULL,
		locked_at = NULL, locked_by = NULL
	WHERE status IN ('dead', 'failed')
		AND ($1::bigint[] IS NULL OR id = ANY($1))
		AND ($2::text IS NULL OR kind = $2)
		AND ($3::text IS NULL OR queue = $3)
	RETURNING queue
)
SELECT count(*), coalesce(array_agg(DISTINCT queue), '{}') FROM r`

// Requeue puts the dead and failed jobs that match f back in the queue with their attempts
// reset, and returns how many it moved. Cancelled and succeeded jobs are not touched.
func (c *Client) Requeue(ctx context.Context, f RequeueFilter) (int64, error) {
	if len(f.IDs) == 0 && f.Kind == "" && f.Queue == "" {
		return 0, fmt.Errorf("%w: Requeue needs IDs, Kind or Queue", ErrInvalidOptions)
	}
	if f.Queue != "" {
		if err := validQueue(f.Queue); err != nil {
			return 0, err
		}
	}
	var ids []int64
	if len(f.IDs) > 0 {
		ids = f.IDs
	}
	var n int64
	var queues []string
	err := c.pool.QueryRow(ctx, c.sql.requeue, ids, nullString(f.Kind), nullString(f.Queue)).Scan(&n, &queues)
	if err != nil {
		return 0, c.wrapErr("requeue", err)
	}
	if len(queues) > 0 {
		if _, err := c.pool.Exec(ctx, c.sql.notifyQueues, c.channel, queues); err != nil {
			c.logger.Debug("skiplock: wake-up after requeue failed", "err", err)
		}
	}
	return n, nil
}

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// QueueStats counts the jobs of one queue in the jobs table (finished jobs moved to the
// archive are not counted).
type QueueStats struct {
	Queue  string
	Counts map[JobStatus]int64
	// OldestDue is how long the oldest due, queued job has been waiting; 0 when none.
	OldestDue time.Duration
}

const statsSQL = `SELECT queue, status, count(*),
	coalesce(extract(epoch FROM now() - min(run_at) FILTER (WHERE status = 'queued' AND run_at <= now())), 0)::float8
FROM {s}.jobs GROUP BY queue, status ORDER BY queue, status`

// Stats returns job counts by queue and status, and the age of each queue's oldest due
// job. It scans the jobs table, which stays small while jobs flow.
func (c *Client) Stats(ctx context.Context) ([]QueueStats, error) {
	rows, err := c.pool.Query(ctx, c.sql.stats)
	if err != nil {
		return nil, c.wrapErr("stats", err)
	}
	var (
		out           []QueueStats
		queue, status string
		n             int64
		age           float64
	)
	_, err = pgx.ForEachRow(rows, []any{&queue, &status, &n, &age}, func() error {
		if len(out) == 0 || out[len(out)-1].Queue != queue {
			out = append(out, QueueStats{Queue: queue, Counts: map[JobStatus]int64{}})
		}
		s := &out[len(out)-1]
		s.Counts[JobStatus(status)] = n
		if d := time.Duration(age * float64(time.Second)); d > s.OldestDue {
			s.OldestDue = d
		}
		return nil
	})
	if err != nil {
		return nil, c.wrapErr("stats", err)
	}
	return out, nil
}

// ListParams selects jobs for [Client.List]. Empty fields match everything.
type ListParams struct {
	Status JobStatus
	Queue  string
	Kind   string
	// Limit is the most jobs returned. Defaults to 100.
	Limit int
}

const listSQL = `SELECT ` + jobColumns + ` FROM {s}.jobs
WHERE ($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR queue = $2) AND ($3::text IS NULL OR kind = $3)
ORDER BY id LIMIT $4`

// List returns jobs from the jobs table that match p, oldest first.
func (c *Client) List(ctx context.Context, p ListParams) ([]*JobRow, error) {
	if p.Limit <= 0 {
		p.Limit = 100
	}
	rows, err := c.pool.Query(ctx, c.sql.list, nullString(string(p.Status)), nullString(p.Queue), nullString(p.Kind), p.Limit)
	if err != nil {
		return nil, c.wrapErr("list", err)
	}
	jobs, err := collectJobs(rows)
	if err != nil {
		return nil, c.wrapErr("list", err)
	}
	return jobs, nil
}
