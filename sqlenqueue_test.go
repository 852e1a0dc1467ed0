package skiplock_test

// Tests of <schema>.enqueue, the SQL function of migration 11 (docs/sql-enqueue.md): its
// jobs run on Go workers, it honours the caller's transaction and wakes idle workers at
// commit, its unique keys behave as the Go client's UniqueKey, and it refuses exactly
// what the Go client refuses, with nothing written.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// sqlEnqueueDB is what sqlEnqueue runs on: a pool, a connection or a transaction.
type sqlEnqueueDB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// sqlEnqueue calls schema.enqueue(kind, args, name => value, ...) through db, with the
// named arguments in named (a nil value is SQL NULL), and returns its id (nil when the
// function returned none) and duplicate.
func sqlEnqueue(ctx context.Context, db sqlEnqueueDB, schema string, kind, args any, named map[string]any) (*int64, bool, error) {
	call := pgx.Identifier{schema, "enqueue"}.Sanitize() + "($1::text, $2::jsonb"
	params := []any{kind, args}
	names := make([]string, 0, len(named))
	for n := range named {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		params = append(params, named[n])
		call += fmt.Sprintf(", %s => $%d", pgx.Identifier{n}.Sanitize(), len(params))
	}
	var id *int64
	var dup bool
	err := db.QueryRow(ctx, `SELECT id, duplicate FROM `+call+`)`, params...).Scan(&id, &dup)
	return id, dup, err
}

// mustSQLEnqueue is sqlEnqueue that must succeed with an id.
func mustSQLEnqueue(t *testing.T, ctx context.Context, db sqlEnqueueDB, schema, kind, args string, named map[string]any) (int64, bool) {
	t.Helper()
	id, dup, err := sqlEnqueue(ctx, db, schema, kind, args, named)
	require.NoError(t, err)
	require.NotNil(t, id, "enqueue returned no id")
	return *id, dup
}

func TestSQLEnqueue_AGoWorkerRunsTheJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var version int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT `+pgx.Identifier{b.schema, "enqueue_version"}.Sanitize()+`()`).Scan(&version))
	assert.Equal(t, 2, version, "the contract's version (docs/sql-enqueue.md)")

	id, dup := mustSQLEnqueue(t, b.ctx, b.pool, b.schema, "send_email", `{"order_id": 42, "to": "a@example.com"}`, map[string]any{
		"queue": "mail", "priority": 7, "max_attempts": 3, "metadata": `{"via": "sql"}`,
		"timeout": "90 seconds", "partition_key": "tenant-1",
	})
	assert.False(t, dup)
	got, err := b.client.Get(b.ctx, id)
	require.NoError(t, err)
	assert.Equal(t, "mail", got.Queue)
	assert.Equal(t, 7, got.Priority)
	assert.Equal(t, 3, got.MaxAttempts)
	assert.Equal(t, map[string]string{"via": "sql"}, got.Metadata)
	assert.Equal(t, 90000, b.count(t, `SELECT timeout_ms FROM {s}.jobs WHERE id = $1`, id))
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND partition_key = 'tenant-1'`, id))

	ran := make(chan *skiplock.Job[emailArgs], 1)
	w := newWorker(t, b, skiplock.WorkerConfig{Queues: map[string]skiplock.QueueConfig{"mail": {MaxWorkers: 1}}, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(_ context.Context, j *skiplock.Job[emailArgs]) error {
		ran <- j
		return nil
	}))
	runWorker(t, w)
	select {
	case j := <-ran:
		assert.Equal(t, id, j.ID)
		assert.Equal(t, emailArgs{OrderID: 42, To: "a@example.com"}, j.Args)
		assert.Equal(t, "sql", j.Metadata["via"])
	case <-time.After(30 * time.Second):
		t.Fatal("the Go worker did not run the job enqueued from SQL")
	}
	waitStatus(t, b, id, skiplock.StatusSucceeded, 10*time.Second, "job %d succeeded", id)
}

// ptrEmailArgs is emailArgs for a handler that takes its args by pointer.
type ptrEmailArgs emailArgs

func (*ptrEmailArgs) Kind() string { return "send_email_ptr" }

// TestSQLEnqueue_NullArgsReachAPointerHandlerAsAZeroValue enqueues from SQL, for a handler
// of Job[*T], args of JSON null (the function takes any JSON value) and args of an
// object: the handler gets a non-nil *T each time, zero for null, and both jobs succeed.
// Before, null set job.Args to nil: a handler that read a field panicked, and the panic
// was retried on every attempt.
func TestSQLEnqueue_NullArgsReachAPointerHandlerAsAZeroValue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	nullID, _ := mustSQLEnqueue(t, b.ctx, b.pool, b.schema, "send_email_ptr", `null`, nil)
	objID, _ := mustSQLEnqueue(t, b.ctx, b.pool, b.schema, "send_email_ptr", `{"order_id": 7, "to": "a@example.com"}`, nil)
	w := newWorker(t, b, skiplock.WorkerConfig{SweepInterval: -1, Logger: testLogger()})
	var mu sync.Mutex
	got := map[int64]ptrEmailArgs{}
	require.NoError(t, skiplock.Handle(w, func(_ context.Context, j *skiplock.Job[*ptrEmailArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		got[j.ID] = *j.Args // a nil pointer panics here
		return nil
	}))
	runWorker(t, w)
	waitStatus(t, b, nullID, skiplock.StatusSucceeded, 30*time.Second, "the job with null args succeeded")
	waitStatus(t, b, objID, skiplock.StatusSucceeded, 30*time.Second, "the job with object args succeeded")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, ptrEmailArgs{}, got[nullID])
	assert.Equal(t, ptrEmailArgs{OrderID: 7, To: "a@example.com"}, got[objID])
}

// TestSQLEnqueue_TimeoutsPastADurationMeanNoLimit enqueues from SQL jobs whose timeout
// is longer than a time.Duration holds (about 292 years; the function takes any
// interval), for a worker whose own JobTimeout is 100 ms, with handlers that run 300 ms:
// each job's own limit holds and the job succeeds. A product of milliseconds that wrapped
// around once gave "1000 years" the worker's 100 ms, and 2^64 ms a few hundred
// microseconds.
func TestSQLEnqueue_TimeoutsPastADurationMeanNoLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []int64
	for _, timeout := range []string{"1 hour", "1000 years", "18446744073.71 seconds", "178000000 years"} {
		id, _ := mustSQLEnqueue(t, b.ctx, b.pool, b.schema, "send_email", `{"order_id": 1}`, map[string]any{"timeout": timeout})
		ids = append(ids, id)
	}
	w := newWorker(t, b, skiplock.WorkerConfig{JobTimeout: 100 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, _ *skiplock.Job[emailArgs]) error {
		select {
		case <-time.After(300 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}))
	runWorker(t, w)
	for _, id := range ids {
		waitStatus(t, b, id, skiplock.StatusSucceeded, 30*time.Second, "job %d, its own timeout past the worker's 100 ms, succeeded", id)
	}
}

// TestSQLEnqueue_SchemaRenamedAsTheDocsSay renames a migrated schema and runs the one
// statement docs/sql-enqueue.md gives for it: afterwards a worker on the new name
// completes a parent job whose success settles a dependent (a trigger function), the
// dependent runs, and the enqueue overloads with concurrency_keys and depends_on work.
// With only enqueue and enqueue_json_size reset (the docs' earlier advice), the
// parent's success failed with "relation "job_waits" does not exist".
func TestSQLEnqueue_SchemaRenamedAsTheDocsSay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	parent, err := b.client.Enqueue(b.ctx, emailArgs{OrderID: 1}, nil)
	require.NoError(t, err)
	child, err := b.client.Enqueue(b.ctx, emailArgs{OrderID: 2}, &skiplock.EnqueueOptions{DependsOn: []int64{parent.ID}})
	require.NoError(t, err)

	renamed := b.schema + "_r"
	t.Cleanup(func() {
		_, _ = b.pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{renamed}.Sanitize()+` CASCADE`)
	})
	_, err = b.pool.Exec(b.ctx, `ALTER SCHEMA `+pgx.Identifier{b.schema}.Sanitize()+` RENAME TO `+pgx.Identifier{renamed}.Sanitize())
	require.NoError(t, err)
	// The docs' statement, for newname = renamed.
	_, err = b.pool.Exec(b.ctx, strings.ReplaceAll(`DO $$
  DECLARE f regprocedure;
  BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = 'newname'::regnamespace AND p.proconfig IS NOT NULL LOOP
      EXECUTE format('ALTER FUNCTION %s SET search_path = newname, pg_temp', f);
    END LOOP;
  END $$;`, "newname", renamed))
	require.NoError(t, err)

	rb := &bundle{ctx: b.ctx, pool: b.pool, schema: renamed}
	rb.client, err = skiplock.NewClient(b.pool, skiplock.Config{Schema: renamed, Logger: testLogger()})
	require.NoError(t, err)
	keyed, _ := mustSQLEnqueue(t, b.ctx, b.pool, renamed, "send_email", `{"order_id": 3}`, map[string]any{"concurrency_keys": `{"tenant": "a"}`})
	dependent, _ := mustSQLEnqueue(t, b.ctx, b.pool, renamed, "send_email", `{"order_id": 4}`, map[string]any{"depends_on": []int64{parent.ID}})
	w := newWorker(t, rb, skiplock.WorkerConfig{SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(context.Context, *skiplock.Job[emailArgs]) error { return nil }))
	runWorker(t, w)
	for _, id := range []int64{parent.ID, child.ID, keyed, dependent} {
		waitStatus(t, rb, id, skiplock.StatusSucceeded, 30*time.Second, "job %d succeeded in the renamed schema", id)
	}
}

// TestSQLEnqueue_InTheCallersTransactionWakesAnIdleWorkerAtCommit enqueues inside a
// transaction of the caller's: a rollback leaves no job and wakes nothing; a commit leaves
// the job, and an idle worker whose poll is a minute away starts it at once, so it was
// the notification that woke it. A trigger enqueues the same way (the docs' example).
func TestSQLEnqueue_InTheCallersTransactionWakesAnIdleWorkerAtCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tracer := &claimTracer{}
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{ID: "sqlenq-" + b.schema, PollInterval: time.Minute, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, err)
	started := make(chan int, 10)
	require.NoError(t, skiplock.Handle(w, func(_ context.Context, j *skiplock.Job[noopArgs]) error {
		started <- j.Args.N
		return nil
	}))
	runWorker(t, w)
	eventually(t, 10*time.Second, func() bool {
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`,
			"skiplock-listen sqlenq-"+b.schema).Scan(&n))
		return n > 0
	}, "the worker's listener is connected")
	eventually(t, 10*time.Second, func() bool { return tracer.idle(0) }, "claim loops quiet")
	noStart := func(what string) {
		holdsFor(t, 300*time.Millisecond, 20*time.Millisecond, func() {
			select {
			case n := <-started:
				t.Fatalf("%s: job %d started", what, n)
			default:
			}
		})
	}
	wantStart := func(n int, what string) {
		select {
		case got := <-started:
			assert.Equal(t, n, got, what)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the job did not start within 5s with a one-minute poll: the notification did not wake the worker", what)
		}
	}

	// Rolled back: no job, nothing started.
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }() // on a failure (tx is each of the test's transactions in turn): the pool's Close waits for its connections
	mustSQLEnqueue(t, b.ctx, tx, b.schema, "noop", `{"n": 1}`, nil)
	require.NoError(t, tx.Rollback(b.ctx))
	noStart("rolled back")
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs`))

	// Committed: the job starts at once, and not before the commit.
	tx, err = b.pool.Begin(b.ctx)
	require.NoError(t, err)
	id, _ := mustSQLEnqueue(t, b.ctx, tx, b.schema, "noop", `{"n": 2}`, nil)
	noStart("before the commit")
	require.NoError(t, tx.Commit(b.ctx))
	wantStart(2, "committed")
	waitStatus(t, b, id, skiplock.StatusSucceeded, 10*time.Second, "job %d succeeded", id)

	// The trigger of docs/sql-enqueue.md: an order's insert enqueues its job.
	triggerSQL := docsSQLBlock(t, "trigger")
	triggerSQL = regexp.MustCompile(`\bskiplock\.`).ReplaceAllString(triggerSQL, pgx.Identifier{b.schema}.Sanitize()+".")
	for _, name := range []string{"orders", "orders_confirm"} { // in the test's schema, not public
		triggerSQL = regexp.MustCompile(`\b`+name+`\b`).ReplaceAllString(triggerSQL, pgx.Identifier{b.schema, name}.Sanitize())
	}
	_, err = b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.orders (id bigint PRIMARY KEY, email text NOT NULL)`))
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, triggerSQL)
	require.NoError(t, err, "the trigger of docs/sql-enqueue.md")
	before := tracer.ended.Load()
	eventually(t, 10*time.Second, func() bool { return tracer.idle(before) }, "claim loops quiet")
	tx, err = b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, b.q(`INSERT INTO {s}.orders VALUES (7, 'x@example.com')`))
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(b.ctx))
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE kind = 'send_confirmation'`), "rolled-back order, no job")
	_, err = b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.orders VALUES (8, 'y@example.com')`))
	require.NoError(t, err)
	var payload string
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT payload::text FROM {s}.jobs WHERE kind = 'send_confirmation'`)).Scan(&payload))
	assert.JSONEq(t, `{"order_id": 8, "email": "y@example.com"}`, payload)
}

// docsSQLBlock returns the ```sql block of docs/sql-enqueue.md that follows the marker
// <!-- sql:name -->, so that the tests run what the page shows.
func docsSQLBlock(t *testing.T, name string) string {
	t.Helper()
	page, err := os.ReadFile("docs/sql-enqueue.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)<!-- sql:" + regexp.QuoteMeta(name) + " -->\\s*```sql\\n(.*?)```").FindSubmatch(page)
	require.NotNil(t, m, "docs/sql-enqueue.md has no ```sql block after <!-- sql:%s -->", name)
	return string(m[1])
}

func TestSQLEnqueue_UniqueKeysBehaveAsGos(t *testing.T) {
	t.Parallel()
	b := setup(t)
	keyed := func(k string) map[string]any { return map[string]any{"unique_key": k} }

	// A key SQL took is held against Go, and the other way round, with the holder's id.
	id1, dup := mustSQLEnqueue(t, b.ctx, b.pool, b.schema, "noop", `{}`, keyed("order-1"))
	assert.False(t, dup)
	row, err := b.client.Enqueue(b.ctx, noopArgs{}, &skiplock.EnqueueOptions{UniqueKey: "order-1"})
	require.ErrorIs(t, err, skiplock.ErrDuplicateJob)
	assert.Equal(t, id1, row.ID)
	again, dup := mustSQLEnqueue(t, b.ctx, b.pool, b.schema, "noop", `{}`, keyed("order-1"))
	assert.True(t, dup)
	assert.Equal(t, id1, again)
	goRow, err := b.client.Enqueue(b.ctx, noopArgs{}, &skiplock.EnqueueOptions{UniqueKey: "order-2"})
	require.NoError(t, err)
	held, dup := mustSQLEnqueue(t, b.ctx, b.pool, b.schema, "noop", `{}`, keyed("order-2"))
	assert.True(t, dup)
	assert.Equal(t, goRow.ID, held)

	// A finished holder frees the key, as for Go's UniqueKey (only queued and running count).
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET status = 'succeeded', finished_at = now() WHERE id = $1`), id1)
	require.NoError(t, err)
	id3, dup := mustSQLEnqueue(t, b.ctx, b.pool, b.schema, "noop", `{}`, keyed("order-1"))
	assert.False(t, dup)
	assert.NotEqual(t, id1, id3)

	// Concurrent enqueues of one key from their own transactions leave one row.
	const racers = 16
	ids := make([]int64, racers)
	dups := make([]bool, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, dup, err := sqlEnqueue(b.ctx, b.pool, b.schema, "noop", `{}`, keyed("race"))
			if assert.NoError(t, err) && assert.NotNil(t, id) {
				ids[i], dups[i] = *id, dup
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE unique_key = 'race'`))
	for i := range racers {
		assert.Equal(t, ids[0], ids[i], "every caller gets the one job")
	}
	assert.Equal(t, 1, countFalse(dups), "exactly one caller inserted")

	// Under REPEATABLE READ and SERIALIZABLE, a key held by a job committed after the
	// snapshot is a duplicate without an id, and the transaction stays usable.
	for _, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		key := "strict-" + string(iso)
		tx, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: iso})
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.Background()) }()
		var one int
		require.NoError(t, tx.QueryRow(b.ctx, `SELECT 1`).Scan(&one)) // takes the snapshot
		mustSQLEnqueue(t, b.ctx, b.pool, b.schema, "noop", `{}`, keyed(key))
		id, dup, err := sqlEnqueue(b.ctx, tx, b.schema, "noop", `{}`, keyed(key))
		require.NoError(t, err, "%s", iso)
		assert.Nil(t, id, "%s: the holder is not visible to the snapshot", iso)
		assert.True(t, dup, "%s", iso)
		require.NoError(t, tx.QueryRow(b.ctx, `SELECT 1`).Scan(&one), "%s: the transaction is usable", iso)
		require.NoError(t, tx.Commit(b.ctx), "%s", iso)
		assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE unique_key = $1`, key), "%s", iso)
	}
}

func countFalse(bs []bool) (n int) {
	for _, b := range bs {
		if !b {
			n++
		}
	}
	return n
}

// anyKindArgs are args whose kind is a field, for kinds Go's types would not spell.
type anyKindArgs struct {
	kind string
	S    string `json:"s,omitempty"`
}

func (a anyKindArgs) Kind() string { return a.kind }

// sqlCase is one input given to both Client.Enqueue and <schema>.enqueue. The SQL call
// gets the same kind, the args as Go marshals them and the options field by field, the
// zero values included (the function reads them as Go does).
type sqlCase struct {
	name string
	args skiplock.JobArgs
	opts skiplock.EnqueueOptions
	// Refused inputs: the Go error, and the SQLSTATE and argument of the SQL error.
	goErr  error
	code   string
	column string
}

// sqlNamed returns c's options as the SQL function's named arguments.
func (c sqlCase) sqlNamed(t *testing.T) map[string]any {
	t.Helper()
	o := c.opts
	named := map[string]any{"queue": o.Queue, "priority": o.Priority, "max_attempts": o.MaxAttempts,
		"unique_key": o.UniqueKey, "timeout": o.Timeout, "partition_key": o.PartitionKey, "run_at": nil, "metadata": nil}
	if !o.RunAt.IsZero() {
		named["run_at"] = o.RunAt
	}
	if o.Metadata != nil {
		m, err := json.Marshal(o.Metadata)
		require.NoError(t, err)
		named["metadata"] = string(m)
	}
	if o.ConcurrencyKeys != nil { // the overload of migration 17
		k, err := json.Marshal(o.ConcurrencyKeys)
		require.NoError(t, err)
		named["concurrency_keys"] = string(k)
	}
	return named
}

// sqlKindArgs returns c's kind and args as the SQL function takes them (nil for nil args).
func (c sqlCase) sqlKindArgs(t *testing.T) (any, any) {
	t.Helper()
	if c.args == nil {
		return "noop", nil
	}
	b, err := json.Marshal(c.args)
	require.NoError(t, err)
	return c.args.Kind(), string(b)
}

// Limits of the Go client, spelled out: a case on each side of each.
const (
	sqlPayloadLimit  = skiplock.DefaultMaxPayloadBytes // the SQL function's limit
	sqlMetadataLimit = 16 << 10                        // EnqueueOptions.Metadata: 16 KiB as JSON
)

func sqlCases() (bad, ok []sqlCase) {
	kind := func(k string) skiplock.JobArgs { return anyKindArgs{kind: k} }
	blob := func(n int) skiplock.JobArgs { return anyKindArgs{kind: "blob", S: strings.Repeat("x", n)} } // {"s":"…"}: n+8 bytes
	meta := func(n int) map[string]string { return map[string]string{"k": strings.Repeat("v", n)} }      // {"k":"…"}: n+8 bytes
	// Characters Go's encoding/json escapes in 6 bytes: \u003c, \u0026, \u2028.
	ltBlob := func(n int) skiplock.JobArgs { return anyKindArgs{kind: "blob", S: strings.Repeat("<", n)} }     // 6n+8 bytes
	escMeta := func(c string, n int) map[string]string { return map[string]string{"k": strings.Repeat(c, n)} } // 6n+8 bytes
	noop := noopArgs{}
	dims := func(n int, key string) map[string]string { // n dimensions d0..dn-1, each of key
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("d%d", i)] = key
		}
		return m
	}
	invalid := func(name string, args skiplock.JobArgs, o skiplock.EnqueueOptions, goErr error, column string) sqlCase {
		return sqlCase{name: name, args: args, opts: o, goErr: goErr, code: "22023", column: column}
	}
	bad = []sqlCase{
		{name: "nil args", args: nil, goErr: skiplock.ErrNilArgs, code: "22004", column: "args"},
		invalid("empty kind", kind(""), skiplock.EnqueueOptions{}, skiplock.ErrInvalidKind, "kind"),
		invalid("kind of 256 bytes", kind(strings.Repeat("k", 256)), skiplock.EnqueueOptions{}, skiplock.ErrInvalidKind, "kind"),
		invalid("kind of 128 two-byte characters", kind(strings.Repeat("é", 128)), skiplock.EnqueueOptions{}, skiplock.ErrInvalidKind, "kind"),
		invalid("queue with a capital", noop, skiplock.EnqueueOptions{Queue: "Email"}, skiplock.ErrInvalidQueue, "queue"),
		invalid("queue with a space", noop, skiplock.EnqueueOptions{Queue: "a b"}, skiplock.ErrInvalidQueue, "queue"),
		invalid("queue of 65 characters", noop, skiplock.EnqueueOptions{Queue: strings.Repeat("q", 65)}, skiplock.ErrInvalidQueue, "queue"),
		invalid("priority above smallint", noop, skiplock.EnqueueOptions{Priority: 32768}, skiplock.ErrInvalidOptions, "priority"),
		invalid("priority below smallint", noop, skiplock.EnqueueOptions{Priority: -32769}, skiplock.ErrInvalidOptions, "priority"),
		invalid("negative max_attempts", noop, skiplock.EnqueueOptions{MaxAttempts: -1}, skiplock.ErrInvalidOptions, "max_attempts"),
		invalid("max_attempts above a million", noop, skiplock.EnqueueOptions{MaxAttempts: 1_000_001}, skiplock.ErrInvalidOptions, "max_attempts"),
		invalid("unique key of 256 bytes", noop, skiplock.EnqueueOptions{UniqueKey: strings.Repeat("u", 256)}, skiplock.ErrInvalidOptions, "unique_key"),
		invalid("partition key of 256 bytes", noop, skiplock.EnqueueOptions{PartitionKey: strings.Repeat("p", 256)}, skiplock.ErrInvalidOptions, "partition_key"),
		invalid("9 concurrency key dimensions", noop, skiplock.EnqueueOptions{ConcurrencyKeys: dims(9, "k")}, skiplock.ErrInvalidOptions, "concurrency_keys"),
		invalid("concurrency key dimension with a capital", noop, skiplock.EnqueueOptions{ConcurrencyKeys: map[string]string{"Region": "eu"}}, skiplock.ErrInvalidOptions, "concurrency_keys"),
		invalid("concurrency key of 256 bytes", noop, skiplock.EnqueueOptions{ConcurrencyKeys: dims(1, strings.Repeat("k", 256))}, skiplock.ErrInvalidOptions, "concurrency_keys"),
		invalid("empty concurrency key", noop, skiplock.EnqueueOptions{ConcurrencyKeys: dims(1, "")}, skiplock.ErrInvalidOptions, "concurrency_keys"),
		invalid("run_at in year 10000", noop, skiplock.EnqueueOptions{RunAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, skiplock.ErrInvalidOptions, "run_at"),
		invalid("run_at in year 0", noop, skiplock.EnqueueOptions{RunAt: time.Date(0, 6, 1, 0, 0, 0, 0, time.UTC)}, skiplock.ErrInvalidOptions, "run_at"),
		invalid("reserved metadata key", noop, skiplock.EnqueueOptions{Metadata: map[string]string{"skiplock_workflow": "1"}}, skiplock.ErrInvalidOptions, "metadata"),
		invalid("empty metadata key", noop, skiplock.EnqueueOptions{Metadata: map[string]string{"": "x"}}, skiplock.ErrInvalidOptions, "metadata"),
		invalid("metadata over 16 KiB", noop, skiplock.EnqueueOptions{Metadata: meta(sqlMetadataLimit - 8 + 1)}, skiplock.ErrInvalidOptions, "metadata"),
		invalid("negative timeout", noop, skiplock.EnqueueOptions{Timeout: -time.Second}, skiplock.ErrInvalidOptions, "timeout"),
		invalid("timeout under a millisecond", noop, skiplock.EnqueueOptions{Timeout: 500 * time.Microsecond}, skiplock.ErrInvalidOptions, "timeout"),
		{name: "payload over the limit", args: blob(sqlPayloadLimit - 8 + 1), goErr: skiplock.ErrPayloadTooLarge, code: "54000", column: "args"},
		{name: "payload over the limit as Go escapes it", args: ltBlob((sqlPayloadLimit-8)/6 + 1), goErr: skiplock.ErrPayloadTooLarge, code: "54000", column: "args"},
		invalid("metadata over 16 KiB as Go escapes &", noop, skiplock.EnqueueOptions{Metadata: escMeta("&", (sqlMetadataLimit-8)/6+1)}, skiplock.ErrInvalidOptions, "metadata"),
		invalid("metadata over 16 KiB as Go escapes U+2028", noop, skiplock.EnqueueOptions{Metadata: escMeta("\u2028", (sqlMetadataLimit-8)/6+1)}, skiplock.ErrInvalidOptions, "metadata"),
	}
	ok = []sqlCase{
		{name: "defaults", args: noop},
		{name: "kind of 255 bytes", args: kind(strings.Repeat("é", 127) + "k")},
		{name: "queue of 64 characters", args: noop, opts: skiplock.EnqueueOptions{Queue: "a-z_0-9" + strings.Repeat("q", 57)}},
		{name: "priority bounds", args: noop, opts: skiplock.EnqueueOptions{Priority: 32767}},
		{name: "lowest priority", args: noop, opts: skiplock.EnqueueOptions{Priority: -32768}},
		{name: "a million attempts", args: noop, opts: skiplock.EnqueueOptions{MaxAttempts: 1_000_000}},
		{name: "unique key of 255 bytes", args: noop, opts: skiplock.EnqueueOptions{UniqueKey: strings.Repeat("u", 255)}},
		{name: "partition key of 255 bytes", args: noop, opts: skiplock.EnqueueOptions{PartitionKey: strings.Repeat("p", 255)}},
		{name: "8 concurrency keys of 255 bytes", args: noop, opts: skiplock.EnqueueOptions{ConcurrencyKeys: dims(8, strings.Repeat("é", 127)+"k")}},
		{name: "run_at in year 9999", args: noop, opts: skiplock.EnqueueOptions{RunAt: time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)}},
		{name: "metadata of 16 KiB", args: noop, opts: skiplock.EnqueueOptions{Metadata: meta(sqlMetadataLimit - 8)}},
		{name: "timeout of a millisecond", args: noop, opts: skiplock.EnqueueOptions{Timeout: time.Millisecond + 700*time.Microsecond}},
		{name: "payload at the limit", args: blob(sqlPayloadLimit - 8)},
		{name: "payload under the limit as Go escapes it", args: ltBlob((sqlPayloadLimit - 8) / 6)},
		{name: "metadata under 16 KiB as Go escapes &", args: noop, opts: skiplock.EnqueueOptions{Metadata: escMeta("&", (sqlMetadataLimit-8)/6)}},
		{name: "metadata under 16 KiB as Go escapes U+2028", args: noop, opts: skiplock.EnqueueOptions{Metadata: escMeta("\u2028", (sqlMetadataLimit-8)/6)}},
		{name: "payload that is not an object", args: stringArgs("hello")},
	}
	return bad, ok
}

// stringArgs are args that marshal to a JSON string: Go accepts them, so SQL does too.
type stringArgs string

func (stringArgs) Kind() string { return "text" }

// TestSQLEnqueue_RefusesWhatGoRefuses gives one table of inputs to Client.Enqueue and to
// <schema>.enqueue: each input on the wrong side of a limit is refused by both (a typed
// error in Go; in SQL an error with its SQLSTATE, naming the argument in the message and
// the COLUMN field) with nothing written, and each on the right side is accepted by both
// and stored alike. The limits cannot drift apart without this failing.
func TestSQLEnqueue_RefusesWhatGoRefuses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bad, ok := sqlCases()
	for _, c := range bad {
		_, err := b.client.Enqueue(b.ctx, c.args, &c.opts)
		assert.ErrorIs(t, err, c.goErr, "%s: Go", c.name)

		kind, args := c.sqlKindArgs(t)
		_, _, err = sqlEnqueue(b.ctx, b.pool, b.schema, kind, args, c.sqlNamed(t))
		var pgErr *pgconn.PgError
		if assert.True(t, errors.As(err, &pgErr), "%s: SQL: want a Postgres error, got %v", c.name, err) {
			assert.Equal(t, c.code, pgErr.Code, "%s: SQL: %s", c.name, pgErr.Message)
			assert.Equal(t, c.column, pgErr.ColumnName, "%s: SQL: %s", c.name, pgErr.Message)
			assert.Contains(t, pgErr.Message, c.column, "%s: the message names the argument", c.name)
			assert.True(t, strings.HasPrefix(pgErr.Message, "skiplock: enqueue: "), "%s: %s", c.name, pgErr.Message)
		}
	}
	// What only SQL can be given.
	for _, c := range []struct {
		name       string
		kind, args any
		named      map[string]any
		code, col  string
	}{
		{"null kind", nil, `{}`, nil, "22004", "kind"},
		{"metadata value not a string", "noop", `{}`, map[string]any{"metadata": `{"n": 1}`}, "22023", "metadata"},
		{"metadata not an object", "noop", `{}`, map[string]any{"metadata": `["a"]`}, "22023", "metadata"},
		{"infinite run_at", "noop", `{}`, map[string]any{"run_at": pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}}, "22023", "run_at"},
	} {
		_, _, err := sqlEnqueue(b.ctx, b.pool, b.schema, c.kind, c.args, c.named)
		var pgErr *pgconn.PgError
		if assert.True(t, errors.As(err, &pgErr), "%s: want a Postgres error, got %v", c.name, err) {
			assert.Equal(t, c.code, pgErr.Code, "%s: %s", c.name, pgErr.Message)
			assert.Equal(t, c.col, pgErr.ColumnName, "%s: %s", c.name, pgErr.Message)
		}
	}
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs`), "refused input wrote nothing")

	// Accepted by both, and stored alike (the row Go wrote, then the row SQL wrote).
	read := func(id int64, withRunAt bool) storedJob { return takeJob(t, b.pool, b.schema, id, withRunAt) }
	for _, c := range ok {
		row, err := b.client.Enqueue(b.ctx, c.args, &c.opts)
		if !assert.NoError(t, err, "%s: Go", c.name) {
			continue
		}
		fromGo := read(row.ID, !c.opts.RunAt.IsZero())
		kind, args := c.sqlKindArgs(t)
		id, dup, err := sqlEnqueue(b.ctx, b.pool, b.schema, kind, args, c.sqlNamed(t))
		if !assert.NoError(t, err, "%s: SQL", c.name) || !assert.NotNil(t, id, c.name) {
			continue
		}
		assert.False(t, dup, c.name)
		assert.Equal(t, fromGo, read(*id, !c.opts.RunAt.IsZero()), "%s: the row SQL wrote is the row Go wrote", c.name)
	}
}

func TestSQLEnqueue_AppRoleWithTheREADMEGrantsAndAnEnqueueOnlyRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, ownerPool, appPool := setupPrivileges(t)
	require.NoError(t, skiplock.Migrate(ctx, ownerPool, skiplock.MigrateConfig{Schema: r.schema}))
	fn := pgx.Identifier{r.schema, "enqueue"}.Sanitize()
	sig := fn + `(text, jsonb, text, integer, timestamptz, integer, text, jsonb, interval, text)`

	// The app role, with the README's grants, even where PUBLIC may not execute.
	_, err := ownerPool.Exec(ctx, `REVOKE EXECUTE ON FUNCTION `+sig+` FROM PUBLIC`)
	require.NoError(t, err)
	id, dup := mustSQLEnqueue(t, ctx, appPool, r.schema, "priv_ok", `{}`, map[string]any{"unique_key": "k"})
	assert.False(t, dup)
	again, dup := mustSQLEnqueue(t, ctx, appPool, r.schema, "priv_ok", `{}`, map[string]any{"unique_key": "k"})
	assert.True(t, dup)
	assert.Equal(t, id, again)

	// A role that may only enqueue from SQL, with docs/sql-enqueue.md's grants, where
	// PUBLIC may execute none of the schema's functions.
	_, err = ownerPool.Exec(ctx, `REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA `+pgx.Identifier{r.schema}.Sanitize()+` FROM PUBLIC`)
	require.NoError(t, err)
	admin := newPool(t, 2)
	narrow := r.app + "_sql"
	t.Cleanup(func() {
		for _, q := range []string{`DROP OWNED BY ` + pgx.Identifier{narrow}.Sanitize(), `DROP ROLE IF EXISTS ` + pgx.Identifier{narrow}.Sanitize()} {
			if _, err := admin.Exec(context.Background(), q); err != nil && !strings.Contains(err.Error(), "does not exist") {
				t.Errorf("cleanup %q: %v", q, err)
			}
		}
	})
	_, err = admin.Exec(ctx, `CREATE ROLE `+pgx.Identifier{narrow}.Sanitize()+` LOGIN PASSWORD '`+r.password+`'`)
	require.NoError(t, err)
	narrowPool := rolePool(t, narrow, r.password)
	_, _, err = sqlEnqueue(ctx, narrowPool, r.schema, "priv_ok", `{}`, nil)
	requirePermissionDenied(t, err, "a role without USAGE")
	s, role := pgx.Identifier{r.schema}.Sanitize(), pgx.Identifier{narrow}.Sanitize()
	for _, q := range []string{
		`GRANT USAGE ON SCHEMA ` + s + ` TO ` + role,
		`GRANT EXECUTE ON FUNCTION ` + sig + `, ` + s + `.enqueue_json_size(jsonb, bigint), ` + s + `.enqueue_version() TO ` + role,
	} {
		_, err = ownerPool.Exec(ctx, q)
		require.NoError(t, err)
	}
	_, _, err = sqlEnqueue(ctx, narrowPool, r.schema, "priv_ok", `{}`, nil)
	requirePermissionDenied(t, err, "a role without INSERT on jobs: the function runs with the caller's rights")
	_, err = ownerPool.Exec(ctx, `GRANT SELECT (id, unique_key, status),
		INSERT (queue, kind, payload, priority, run_at, max_attempts, unique_key, timeout_ms, metadata, partition_key)
		ON `+s+`.jobs TO `+role)
	require.NoError(t, err)
	var version int
	require.NoError(t, narrowPool.QueryRow(ctx, `SELECT `+s+`.enqueue_version()`).Scan(&version), "the start-up check")
	assert.Equal(t, 2, version)
	mustSQLEnqueue(t, ctx, narrowPool, r.schema, "priv_ok", `{"card": "4111"}`, map[string]any{"queue": "billing", "timeout": "1 minute", "partition_key": "p"})
	_, dup = mustSQLEnqueue(t, ctx, narrowPool, r.schema, "priv_ok", `{}`, map[string]any{"unique_key": "k"})
	assert.True(t, dup, "the enqueue-only role sees the held key")
	_, err = narrowPool.Exec(ctx, `SELECT payload FROM `+s+`.jobs`)
	requirePermissionDenied(t, err, "the enqueue-only role reads no job's args")
	_, err = narrowPool.Exec(ctx, `INSERT INTO `+s+`.jobs (queue, kind, status, locked_by, lease_until) VALUES ('q', 'k', 'running', 'w', now() + interval '100 years')`)
	requirePermissionDenied(t, err, "the enqueue-only role writes no lease")
}

// storedJob is what an enqueue writes into a job's row.
type storedJob struct {
	Queue, Kind, Payload, Metadata string
	Priority, MaxAttempts          int
	UniqueKey, PartitionKey        *string
	ConcurrencyKeys                *string // as jsonb writes it
	TimeoutMs                      *int64
	RunAt                          *time.Time // only when the caller chose it
}

// takeJob reads job id's row, then deletes it.
func takeJob(t *testing.T, pool *pgxpool.Pool, schema string, id int64, withRunAt bool) storedJob {
	t.Helper()
	var s storedJob
	var runAt time.Time
	jobs := pgx.Identifier{schema, "jobs"}.Sanitize()
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT queue, kind, payload::text, metadata::text, priority, max_attempts,
		unique_key, partition_key, concurrency_keys::text, timeout_ms, run_at FROM `+jobs+` WHERE id = $1`, id).Scan(
		&s.Queue, &s.Kind, &s.Payload, &s.Metadata, &s.Priority, &s.MaxAttempts, &s.UniqueKey, &s.PartitionKey, &s.ConcurrencyKeys, &s.TimeoutMs, &runAt))
	if withRunAt {
		s.RunAt = &runAt
	}
	_, err := pool.Exec(context.Background(), `DELETE FROM `+jobs+` WHERE id = $1`, id)
	require.NoError(t, err)
	return s
}

// goOutcome names what Client.Enqueue did with an input, for comparison with sqlOutcome.
func goOutcome(err error) string {
	switch {
	case err == nil:
		return "inserted"
	case errors.Is(err, skiplock.ErrNilArgs):
		return "null"
	case errors.Is(err, skiplock.ErrPayloadTooLarge):
		return "too large"
	case errors.Is(err, skiplock.ErrInvalidKind), errors.Is(err, skiplock.ErrInvalidQueue),
		errors.Is(err, skiplock.ErrInvalidOptions), errors.Is(err, skiplock.ErrInvalidPayload):
		return "invalid"
	}
	return "error: " + err.Error()
}

// sqlOutcome names what <schema>.enqueue did with an input, as goOutcome does.
func sqlOutcome(err error) string {
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return "inserted"
	case errors.As(err, &pgErr) && pgErr.Code == "22004":
		return "null"
	case errors.As(err, &pgErr) && pgErr.Code == "54000":
		return "too large"
	case errors.As(err, &pgErr) && pgErr.Code == "22023":
		return "invalid"
	}
	return "error: " + err.Error()
}

// FuzzSQLEnqueueAgreesWithGo gives each input to Client.Enqueue and to <schema>.enqueue,
// as TestSQLEnqueue_RefusesWhatGoRefuses does with its table: both insert the same row,
// or both refuse it for the same reason. Text SQL cannot carry (invalid UTF-8, NUL) and
// numbers outside SQL's integer types are Go's alone to refuse. Its seeds run in every
// test run; go test -run '^$' -fuzz FuzzSQLEnqueueAgreesWithGo . looks further.
func FuzzSQLEnqueueAgreesWithGo(f *testing.F) {
	schema := pgtest.Schema(f)
	pool := pgtest.Pool(f)
	if err := skiplock.Migrate(context.Background(), pool, skiplock.MigrateConfig{Schema: schema}); err != nil {
		f.Fatal(err)
	}
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Logger: testLogger()})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("send_email", "", "", "", int64(0), int64(0), int64(0), int64(0), "", "", "hello")
	f.Add("k", "mail-1_x", "key-1", "tenant", int64(-32768), int64(1000000), int64(1700000000), int64(1000), "trace", "<&>", "\u2028")
	f.Add("", "Bad Queue", "", "", int64(32768), int64(-1), int64(253402300800), int64(999), "skiplock_x", "1", "")
	f.Add("k", "q", strings.Repeat("u", 256), "", int64(0), int64(1000001), int64(-62135596801), int64(-1), "", "v", "x")
	f.Fuzz(func(t *testing.T, kind, queue, uniqueKey, partitionKey string, priority, maxAttempts, runAtSec, timeoutUs int64,
		metaKey, metaValue, payload string) {
		ctx := context.Background()
		args := anyKindArgs{kind: kind, S: payload}
		opts := skiplock.EnqueueOptions{Queue: queue, Priority: int(priority), MaxAttempts: int(maxAttempts),
			UniqueKey: uniqueKey, PartitionKey: partitionKey}
		var runAt time.Time
		if runAtSec != 0 {
			runAt = time.Unix(runAtSec, 0).UTC()
			opts.RunAt = runAt
		}
		if timeoutUs > -1<<40 && timeoutUs < 1<<40 { // whole microseconds: what an interval holds
			opts.Timeout = time.Duration(timeoutUs) * time.Microsecond
		}
		if metaKey != "" || metaValue != "" {
			opts.Metadata = map[string]string{metaKey: metaValue}
		}
		c := sqlCase{name: "fuzz", args: args, opts: opts}

		row, goErr := client.Enqueue(ctx, args, &opts)
		var fromGo storedJob
		if goErr == nil {
			fromGo = takeJob(t, pool, schema, row.ID, !runAt.IsZero())
		}
		// What only Go can be given: the SQL call could not carry it (jsonb refuses \u0000
		// before the function runs).
		sqlCarries := priority == int64(int32(priority)) && maxAttempts == int64(int32(maxAttempts)) &&
			(runAt.IsZero() || runAt.Year() > -4000 && runAt.Year() < 200000) && !strings.ContainsRune(payload, 0)
		for _, s := range []string{kind, queue, uniqueKey, partitionKey, metaKey, metaValue} {
			sqlCarries = sqlCarries && utf8.ValidString(s) && !strings.ContainsRune(s, 0)
		}
		if !sqlCarries {
			require.Error(t, goErr, "Go accepted what SQL cannot be given")
			return
		}
		kindArg, payloadArg := c.sqlKindArgs(t)
		id, _, sqlErr := sqlEnqueue(ctx, pool, schema, kindArg, payloadArg, c.sqlNamed(t))
		require.Equal(t, goOutcome(goErr), sqlOutcome(sqlErr), "Go: %v; SQL: %v", goErr, sqlErr)
		if sqlErr == nil {
			require.NotNil(t, id)
			require.Equal(t, fromGo, takeJob(t, pool, schema, *id, !runAt.IsZero()), "the row SQL wrote is the row Go wrote")
		}
	})
}
