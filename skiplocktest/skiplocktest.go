// Package skiplocktest helps test code that enqueues and handles skiplock jobs, against
// the real database:
//
//   - [RequireEnqueued] and [RequireNotEnqueued] assert that a job of a kind with matching
//     args was (or was not) enqueued — inside a transaction that has not committed yet, or
//     on the pool;
//   - [RunOne] and [Drain] claim due jobs with the worker's own claim statement and run
//     them with the handlers registered on a [skiplock.Worker], in the test's goroutine:
//     no worker goroutines, nothing to wait for; every result is recorded before they
//     return;
//   - [Advance] moves the schema's clock forward, so scheduled jobs, retries and snoozes
//     come due without waiting.
//
// Each helper takes the [testing.TB] first and fails the test (with t.Fatalf) when the
// database cannot answer, so a test needs no error checks. Everything runs in tb.Context().
package skiplocktest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/testbridge"
)

// RequireOpts narrows what [RequireEnqueued] and [RequireNotEnqueued] match. The zero
// value (or nil) matches by kind and args only.
type RequireOpts struct {
	// Queue, when set, must be the job's queue.
	Queue string
	// Status, when set, must be the job's status. Empty matches any status.
	Status skiplock.JobStatus
	// Count, when positive, is how many matching jobs RequireEnqueued expects exactly.
	// Zero means at least one.
	Count int
	// SetFieldsOnly compares only the fields of want that are set: a field whose JSON is
	// null, "", 0, false, [] or {} (after the same pruning inside nested objects) is left
	// out, so SendEmail{OrderID: 7} matches a job for order 7 whatever its other fields.
	// Defaults to false: every field of want's JSON must be equal, zero values included
	// (a field tagged omitempty and left zero is absent from the JSON either way). With it
	// set, a want whose fields are all zero matches every job of the kind.
	SetFieldsOnly bool
}

// findSQL selects the jobs of a kind whose args contain the wanted JSON, newest first,
// and those whose args may be encrypted (EnqueueOptions.Encrypt), which find opens and
// matches itself; the third column says whether the row matched as stored. payload @> $2
// is jsonb containment: every field of the wanted JSON must be equal in the job's args,
// which may have more.
const findSQL = `SELECT id, payload::text, payload @> $2::jsonb FROM %s
WHERE kind = $1 AND (payload @> $2::jsonb OR payload ? 'skiplock_sealed')
	AND ($3::text = '' OR queue = $3) AND ($4::text = '' OR status = $4)
ORDER BY id DESC`

// RequireEnqueued fails tb unless db holds a job of want's kind whose args match want,
// and returns the newest such job with its args decoded (the row's ID, Queue, Kind,
// Payload, Status, Priority, RunAt, Attempts, MaxAttempts, Metadata and CreatedAt are
// set). db is a transaction (pgx.Tx:
// it sees the transaction's own uncommitted jobs) or a pool. Only the jobs table is
// searched, not the archive: check before the jobs run.
//
// Args match when every field of want's JSON is equal in the job's args (jsonb
// containment). A field tagged omitempty and left zero in want is absent from its JSON,
// so it matches anything: that is how to match on some fields only. Args encrypted with
// a [skiplock.Keyring] are opened with client's and matched the same way (the returned
// row's Payload stays the sealed payload); when client cannot open them, the test fails.
func RequireEnqueued[T skiplock.JobArgs](tb testing.TB, db skiplock.DBTX, client *skiplock.Client, want T, opts *RequireOpts) *skiplock.Job[T] {
	tb.Helper()
	o := optsOrZero(opts)
	ids := find(tb, db, client, want, o)
	switch {
	case len(ids) == 0:
		hint := ""
		if !o.SetFieldsOnly {
			loose := o
			loose.SetFieldsOnly = true
			if len(find(tb, db, client, want, loose)) > 0 {
				hint = "; a job matches on the fields set in want: to compare only those, pass &skiplocktest.RequireOpts{SetFieldsOnly: true}"
			}
		}
		tb.Fatalf("skiplocktest: no job of kind %q matching %s%s was enqueued%s%s", want.Kind(), mustJSON(tb, want), o.describe(), others(tb, db, client, want.Kind()), hint)
	case o.Count > 0 && len(ids) != o.Count:
		tb.Fatalf("skiplocktest: %d jobs of kind %q matching %s%s were enqueued, want %d", len(ids), want.Kind(), mustJSON(tb, want), o.describe(), o.Count)
	}
	row := get(tb, db, client, ids[0].id)
	var args T
	if err := json.Unmarshal([]byte(ids[0].payload), &args); err != nil {
		tb.Fatalf("skiplocktest: job %d's args do not decode into %T: %v", row.ID, args, err)
	}
	return &skiplock.Job[T]{JobRow: row, Args: args}
}

// RequireNotEnqueued fails tb if db holds a job of want's kind whose args match want (as
// [RequireEnqueued] matches them; opts.Count is ignored).
func RequireNotEnqueued(tb testing.TB, db skiplock.DBTX, client *skiplock.Client, want skiplock.JobArgs, opts *RequireOpts) {
	tb.Helper()
	o := optsOrZero(opts)
	if ids := find(tb, db, client, want, o); len(ids) > 0 {
		tb.Fatalf("skiplocktest: job %d of kind %q matching %s%s was enqueued, want none: %s", ids[0].id, want.Kind(), mustJSON(tb, want), o.describe(), ids[0].payload)
	}
}

type found struct {
	id      int64
	payload string // the args, opened when they are encrypted
}

func find(tb testing.TB, db skiplock.DBTX, client *skiplock.Client, want skiplock.JobArgs, o RequireOpts) []found {
	tb.Helper()
	if want == nil {
		tb.Fatalf("skiplocktest: want is nil")
	}
	q := fmt.Sprintf(findSQL, pgx.Identifier{client.Schema(), "jobs"}.Sanitize())
	wantJSON := mustJSON(tb, want)
	if o.SetFieldsOnly {
		wantJSON = setFields(tb, wantJSON)
	}
	rows, err := db.Query(tb.Context(), q, want.Kind(), wantJSON, o.Queue, string(o.Status))
	if err != nil {
		tb.Fatalf("skiplocktest: looking for jobs of kind %q: %v", want.Kind(), err)
	}
	var all []found
	var matched []bool
	var f found
	var m bool
	if _, err := pgx.ForEachRow(rows, []any{&f.id, &f.payload, &m}, func() error {
		all, matched = append(all, f), append(matched, m)
		return nil
	}); err != nil {
		tb.Fatalf("skiplocktest: looking for jobs of kind %q: %v", want.Kind(), err)
	}
	var out []found
	for i, f := range all {
		if !matched[i] {
			if _, sealed := skiplock.SealedKey([]byte(f.payload)); !sealed {
				continue
			}
			f.payload = open(tb, client, f.id, want.Kind(), f.payload)
			// Containment as the database decides it, on the opened args.
			if err := db.QueryRow(tb.Context(), `SELECT $1::jsonb @> $2::jsonb`, f.payload, wantJSON).Scan(&m); err != nil {
				tb.Fatalf("skiplocktest: matching job %d's args: %v", f.id, err)
			}
			if !m {
				continue
			}
		}
		out = append(out, f)
	}
	return out
}

// open returns the args of job id, of kind, from their stored JSON, opened with client's
// Keyring when they are encrypted; it fails tb when they cannot be opened.
func open(tb testing.TB, client *skiplock.Client, id int64, kind, payload string) string {
	tb.Helper()
	key, sealed := skiplock.SealedKey([]byte(payload))
	if !sealed {
		return payload
	}
	openArgs, ok := testbridge.Open[*skiplock.Client]()
	if !ok {
		tb.Fatalf("skiplocktest: this skiplock build does not offer the opening of encrypted args")
	}
	plain, err := openArgs(client, kind, []byte(payload))
	if err != nil {
		tb.Fatalf("skiplocktest: job %d's args are encrypted with key %q and client cannot open them (pass a client whose Config.Keyring holds the key): %v", id, key, err)
	}
	return string(plain)
}

// others describes a few jobs of the kind that did not match, for the failure message.
func others(tb testing.TB, db skiplock.DBTX, client *skiplock.Client, kind string) string {
	q := `SELECT payload::text FROM ` + pgx.Identifier{client.Schema(), "jobs"}.Sanitize() + ` WHERE kind = $1 ORDER BY id DESC LIMIT 5`
	rows, err := db.Query(tb.Context(), q, kind)
	if err != nil {
		return ""
	}
	var payloads []string
	var p string
	if _, err := pgx.ForEachRow(rows, []any{&p}, func() error { payloads = append(payloads, p); return nil }); err != nil || len(payloads) == 0 {
		return "; there is no job of that kind"
	}
	for i, p := range payloads {
		if key, sealed := skiplock.SealedKey([]byte(p)); sealed {
			if openArgs, ok := testbridge.Open[*skiplock.Client](); ok {
				if plain, err := openArgs(client, kind, []byte(p)); err == nil {
					payloads[i] = string(plain)
					continue
				}
			}
			payloads[i] = fmt.Sprintf("(encrypted with key %q)", key)
		}
	}
	return "; jobs of that kind (newest first, at most 5): " + strings.Join(payloads, ", ")
}

// get reads one job through db, so that a transaction's own job is found.
func get(tb testing.TB, db skiplock.DBTX, client *skiplock.Client, id int64) *skiplock.JobRow {
	tb.Helper()
	q := `SELECT id, queue, kind, payload, status, priority, run_at, attempts, max_attempts, metadata::text, created_at
FROM ` + pgx.Identifier{client.Schema(), "jobs"}.Sanitize() + ` WHERE id = $1`
	var (
		j      skiplock.JobRow
		status string
		meta   string
	)
	err := db.QueryRow(tb.Context(), q, id).Scan(&j.ID, &j.Queue, &j.Kind, &j.Payload, &status, &j.Priority, &j.RunAt, &j.Attempts, &j.MaxAttempts, &meta, &j.CreatedAt)
	if err != nil {
		tb.Fatalf("skiplocktest: reading job %d: %v", id, err)
	}
	j.Status = skiplock.JobStatus(status)
	if meta != "{}" {
		_ = json.Unmarshal([]byte(meta), &j.Metadata)
	}
	return &j
}

func optsOrZero(o *RequireOpts) RequireOpts {
	if o == nil {
		return RequireOpts{}
	}
	return *o
}

func (o RequireOpts) describe() string {
	var s []string
	if o.Queue != "" {
		s = append(s, "queue "+o.Queue)
	}
	if o.Status != "" {
		s = append(s, "status "+string(o.Status))
	}
	if len(s) == 0 {
		return ""
	}
	return " (" + strings.Join(s, ", ") + ")"
}

// setFields returns the JSON object want without its zero fields (see
// RequireOpts.SetFieldsOnly); a want that is not an object is returned as it is.
func setFields(tb testing.TB, want string) string {
	tb.Helper()
	d := json.NewDecoder(strings.NewReader(want))
	d.UseNumber() // so that 0.0, 0 and 1e-400 are told apart from what they print as
	var v any
	if err := d.Decode(&v); err != nil {
		tb.Fatalf("skiplocktest: want's JSON does not decode: %v", err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return want
	}
	return mustJSON(tb, pruneZero(obj))
}

// pruneZero drops the zero fields of obj, nested objects pruned first.
func pruneZero(obj map[string]any) map[string]any {
	for k, v := range obj {
		if m, ok := v.(map[string]any); ok {
			v = pruneZero(m)
			obj[k] = v
		}
		if isZeroJSON(v) {
			delete(obj, k)
		}
	}
	return obj
}

func isZeroJSON(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case bool:
		return !x
	case json.Number:
		f, err := x.Float64()
		return err == nil && f == 0
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}

func mustJSON(tb testing.TB, v any) string {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatalf("skiplocktest: %T does not marshal to JSON: %v", v, err)
	}
	return string(b)
}

// Ran is a job that [RunOne] or [Drain] ran: the row as claimed (Attempts is the attempt
// that ran) and the result, as hooks saw it.
type Ran struct {
	Job    *skiplock.JobRow
	Result skiplock.JobResult
}

// RunOne claims one due job of queue with the worker's claim statement, runs it in the
// calling goroutine with the handlers (and hooks) registered on w, records the outcome
// exactly as a running worker would, and returns it; nil when no job of queue is due.
// queue must be one of w's queues ([skiplock.WorkerConfig].Queues, "default" when it is
// empty): another name fails tb with a message that names w's queues, so that a typo is
// not taken for an empty queue. w must not be running: create it with
// [skiplock.NewWorker], register handlers with [skiplock.Handle], and never call Run.
// Jobs claimed this way are locked by w.ID().
func RunOne(tb testing.TB, w *skiplock.Worker, queue string) *Ran {
	tb.Helper()
	return runOne(tb, w, queue, "RunOne")
}

// runOne is RunOne, its failures named after the helper the test called (op).
func runOne(tb testing.TB, w *skiplock.Worker, queue, op string) *Ran {
	tb.Helper()
	workOne, ok := testbridge.Sync[*skiplock.Worker, *skiplock.JobRow, skiplock.JobResult]()
	if !ok {
		tb.Fatalf("skiplocktest: this skiplock build does not offer synchronous runs")
	}
	row, res, err := workOne(tb.Context(), w, queue)
	if err != nil {
		tb.Fatalf("skiplocktest: %s(%q): %v", op, queue, err)
	}
	if row == nil {
		return nil
	}
	return &Ran{Job: row, Result: res}
}

// DrainLimit is the most jobs one [Drain] runs before it fails the test: a handler that
// snoozes for zero time, or enqueues a job like itself, would otherwise never let the
// queue empty.
const DrainLimit = 10_000

// Drain runs due jobs of queue one at a time, as [RunOne] does, until none is due, and
// returns them in the order they ran. A failed job that is retried later (or snoozed) is
// not due, so Drain does not wait for it: [Advance] the clock and drain again. It fails
// the test after [DrainLimit] jobs, and, as RunOne does, when queue is not one of w's
// queues.
func Drain(tb testing.TB, w *skiplock.Worker, queue string) []Ran {
	tb.Helper()
	var out []Ran
	for {
		r := runOne(tb, w, queue, "Drain")
		if r == nil {
			return out
		}
		out = append(out, *r)
		if len(out) >= DrainLimit {
			tb.Fatalf("skiplocktest: Drain of queue %q ran %d jobs and the queue still has due jobs", queue, len(out))
		}
	}
}

// timeColumnsSQL lists the timestamptz columns of the schema's tables (the migrations'
// bookkeeping aside).
const timeColumnsSQL = `SELECT c.table_name, c.column_name
FROM information_schema.columns c
JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
WHERE c.table_schema = $1 AND t.table_type = 'BASE TABLE'
	AND c.data_type = 'timestamp with time zone' AND c.table_name <> 'schema_migrations'
ORDER BY c.table_name, c.ordinal_position`

// Advance moves the clock of client's schema forward by d, as far as skiplock can tell:
// skiplock takes every time from the database's now() and compares it with times stored
// in its tables, so Advance moves every stored time d into the past — every timestamptz
// column of every table in the schema (the jobs' run_at, created_at, locked_at and
// finished_at, the archive's, periodic schedules' next run, the stats cache) — while
// now() stays.
//
// The effect is exactly that of d passing, for everything the database decides:
//   - a job scheduled with RunAt, a failed job waiting for its retry, and a snoozed job
//     come due once the total advanced reaches the time they had left to wait;
//   - a periodic schedule's next occurrence comes due the same way;
//   - running jobs' leases age by d (a Sweeper then takes back those past their
//     visibility timeout whose worker has no row in the workers table: a worker's
//     liveness is judged by the other workers over their own clocks, which Advance does
//     not move), and finished jobs age toward the archive retention.
//
// Not moved: times inside JSON — a job's deadline (EnqueueOptions.Deadline and
// Workflow.Deadline, kept in its metadata under "skiplock_deadline", so Advance never
// brings a deadline nearer: a job advanced past its deadline still runs), the
// metadata's "skiplock_replaced_at" and "skiplock_debounced_at", the error history's
// "at" — and anything held in memory: a running Worker's timers, a running handler's
// context deadline. Jobs enqueued after a call are not affected by it, as in real time. db is a pool or a transaction; d must
// not be negative.
func Advance(tb testing.TB, db skiplock.DBTX, client *skiplock.Client, d time.Duration) {
	tb.Helper()
	if d < 0 {
		tb.Fatalf("skiplocktest: Advance(%s): the clock only moves forward", d)
	}
	ctx := tb.Context()
	rows, err := db.Query(ctx, timeColumnsSQL, client.Schema())
	if err != nil {
		tb.Fatalf("skiplocktest: Advance: %v", err)
	}
	cols := map[string][]string{}
	var tables []string
	var table, col string
	_, err = pgx.ForEachRow(rows, []any{&table, &col}, func() error {
		if cols[table] == nil {
			tables = append(tables, table)
		}
		cols[table] = append(cols[table], col)
		return nil
	})
	if err != nil {
		tb.Fatalf("skiplocktest: Advance: %v", err)
	}
	if len(tables) == 0 {
		tb.Fatalf("skiplocktest: Advance: schema %q has no skiplock tables: run skiplock.Migrate", client.Schema())
	}
	for _, t := range tables {
		set := make([]string, len(cols[t]))
		for i, c := range cols[t] {
			id := pgx.Identifier{c}.Sanitize()
			set[i] = id + " = " + id + " - $1::interval"
		}
		q := `UPDATE ` + pgx.Identifier{client.Schema(), t}.Sanitize() + ` SET ` + strings.Join(set, ", ")
		if _, err := db.Exec(ctx, q, d); err != nil {
			tb.Fatalf("skiplocktest: Advance: moving the times of %s: %v", t, err)
		}
	}
}
