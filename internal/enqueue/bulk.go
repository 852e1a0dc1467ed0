// This file holds the bulk insert: COPY, or one unnest insert when unique keys are
// involved, a constant number of statements whatever the count.

package enqueue

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/pgutil"
)

var copyColumns = []string{"queue", "kind", "payload", "priority", "max_attempts", "run_at"}

// insertMany writes jobs with at most four statements whatever their number: COPY for
// jobs due now (run_at from the column default, the database clock), COPY for scheduled
// jobs, or one unnest insert when unique keys need ON CONFLICT; then one notification
// per queue with due jobs.
func (w *writer) insertMany(ctx context.Context, db jobtype.DBTX, jobs []Job, callerTx bool) (int, error) {
	var total int64
	var err error
	if anyJob(jobs, (*Job).needsUnnest) || !canCopy(db) { // database/sql has no COPY (sqltx.go)
		total, err = w.insertManyUnique(ctx, db, jobs, callerTx)
	} else {
		total, err = w.copyJobs(ctx, db, jobs, 0, 0)
	}
	if err != nil {
		return 0, err
	}
	if err := w.notifyDue(ctx, db, jobs); err != nil {
		return 0, err
	}
	return int(total), nil
}

// copyJobs writes with COPY the jobs due now of jobs[nowFrom:], then the scheduled jobs
// of jobs[laterFrom:]; none of them needs the unnest insert. (insertMany gives it all its
// jobs; the streamed COPY of stream.go, what it left.) Metadata is copied only when some
// job has any: the column default ('{}') costs the COPY nothing.
func (w *writer) copyJobs(ctx context.Context, db jobtype.DBTX, jobs []Job, nowFrom, laterFrom int) (int64, error) {
	nowMeta := anyJob(jobs[nowFrom:], func(j *Job) bool { return j.RunAt == nil && j.hasMetadata() })
	laterMeta := anyJob(jobs[laterFrom:], func(j *Job) bool { return j.RunAt != nil && j.hasMetadata() })
	var total int64
	for _, src := range []*copyRows{
		{jobs: jobs, i: nowFrom, meta: nowMeta},
		{jobs: jobs, i: laterFrom, later: true, meta: laterMeta},
	} {
		if !src.any() {
			continue
		}
		n, err := db.CopyFrom(ctx, jobsTable(w.schema), src.columns(), src)
		if err != nil {
			return 0, wrapErr(w.schema, "enqueue many", err)
		}
		total += n
	}
	return total, nil
}

// jobsTable is the jobs table of schema, as pgx's CopyFrom names it.
func jobsTable(schema string) pgx.Identifier { return pgx.Identifier{schema, "jobs"} }

// notifyDue sends, in db's transaction, one notification per queue with a job due now.
func (w *writer) notifyDue(ctx context.Context, db jobtype.DBTX, jobs []Job) error {
	queues := map[string]bool{}
	last := "" // a bulk insert is mostly one queue: look the map up once per run of it
	for i := range jobs {
		if q := jobs[i].Queue; q != last && jobs[i].dueNow() {
			queues[q], last = true, q
		}
	}
	if len(queues) == 0 {
		return nil
	}
	if err := w.notify.Queues(ctx, db, slices.Collect(maps.Keys(queues))); err != nil {
		return wrapErr(w.schema, "enqueue many", err)
	}
	return nil
}

// needsUnnest reports whether j needs the unnest insert: a unique key needs ON CONFLICT,
// and the COPY columns carry no timeout, partition key or concurrency keys.
func (j *Job) needsUnnest() bool {
	return j.UniqueKey != nil || j.TimeoutMs != nil || j.PartitionKey != nil || j.ConcurrencyKeys != nil
}

// anyJob reports whether f holds for some job of jobs.
func anyJob(jobs []Job, f func(*Job) bool) bool {
	for i := range jobs {
		if f(&jobs[i]) {
			return true
		}
	}
	return false
}

// hasMetadata reports whether j's metadata is more than the empty object.
func (j *Job) hasMetadata() bool { return len(j.Metadata) > 2 }

// copyRows is a COPY source over jobs: from the i-th on, those due now (RunAt nil) or,
// with later, the scheduled ones, whose rows carry run_at; with meta, rows carry the
// metadata. It builds no rows ahead: one slice of values is reused, since pgx encodes a
// row before it asks for the next.
type copyRows struct {
	jobs  []Job
	i     int // the next job to look at
	later bool
	meta  bool
	row   []any
}

func (r *copyRows) any() bool {
	return anyJob(r.jobs[r.i:], func(j *Job) bool { return (j.RunAt != nil) == r.later })
}

func (r *copyRows) columns() []string {
	cols := copyColumns[:5:5]
	if r.later {
		cols = copyColumns[:6:6]
	}
	if r.meta {
		cols = append(cols, "metadata")
	}
	return cols
}

func (r *copyRows) Next() bool {
	for ; r.i < len(r.jobs); r.i++ {
		if (r.jobs[r.i].RunAt != nil) == r.later {
			r.row = r.jobs[r.i].copyRow(r.row[:0], r.later, r.meta)
			r.i++
			return true
		}
	}
	return false
}

func (r *copyRows) Values() ([]any, error) { return r.row, nil }
func (r *copyRows) Err() error             { return nil }

// copyRow appends j's COPY row to row: queue, kind, payload, priority, max_attempts, with
// run_at when withRunAt, with metadata when withMeta.
func (j *Job) copyRow(row []any, withRunAt, withMeta bool) []any {
	row = append(row, j.Queue, j.Kind, j.Payload, j.Priority, j.MaxAttempts)
	if withRunAt {
		row = append(row, *j.RunAt)
	}
	if withMeta {
		row = append(row, j.Metadata)
	}
	return row
}

// insertManyUnique writes jobs of which some have unique keys with one unnest insert that
// skips duplicates; when some job counts finished states, a second statement undoes a
// job whose finished holder the insert could not see (insertManyRecheck). As in
// insertUnique, inside the caller's transaction the statement inserts only under READ
// COMMITTED; when it inserts nothing the isolation level is read, and under a stricter
// one the insert runs again inside a savepoint, so that a serialization failure leaves
// the caller's transaction usable.
func (w *writer) insertManyUnique(ctx context.Context, db jobtype.DBTX, jobs []Job, callerTx bool) (int64, error) {
	cols := unnestColumns(jobs)
	var n int64
	var err error
	if anyJob(jobs, func(j *Job) bool { return j.UniqueKey != nil && j.UniqueStates != nil }) {
		n, err = w.insertManyRecheck(ctx, db, jobs, cols, callerTx)
	} else {
		var tag pgconn.CommandTag
		tag, err = db.Exec(ctx, w.sql.insertUnnest[b2i(callerTx)], cols...)
		n = tag.RowsAffected()
	}
	if err != nil {
		return 0, wrapErr(w.schema, "enqueue many", err)
	}
	if n > 0 || !callerTx {
		return n, nil
	}
	var iso string
	if err := db.QueryRow(ctx, isolationSQL).Scan(&iso); err != nil {
		return 0, wrapErr(w.schema, "enqueue many", err)
	}
	if iso == "read committed" {
		return 0, nil // every job was a duplicate
	}
	var insErr error
	var tag pgconn.CommandTag
	err = pgutil.InSavepoint(ctx, db, savepointName, func() error {
		tag, insErr = db.Exec(ctx, w.sql.insertUnnest[0], cols...)
		return insErr
	})
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return tag.RowsAffected(), nil
	case err == insErr && errors.As(err, &pgErr) && pgErr.Code == "40001":
		// Rolled back to the savepoint (err is the insert's alone).
		return 0, fmt.Errorf("%w: a unique key is held by a job committed after this transaction's snapshot (%s); nothing was inserted and the transaction is still usable",
			ErrDuplicateJob, iso)
	}
	return 0, wrapErr(w.schema, "enqueue many", err)
}

// insertManyRecheck is the unnest insert of jobs (cols) when some job counts finished
// states: the insert returns the new rows' ids, and a second statement deletes those whose
// key a finished job now holds in a state that counts, as recheckFinished does for one
// job. The insert's look-up of finished holders ran on its statement's snapshot, taken
// before it waited on an active holder whose transaction then finished it (the move to
// the archive); the delete's snapshot, under READ COMMITTED, sees it. db is a transaction
// (EnqueueMany's own, or the caller's), so the deleted rows were never seen by anyone
// else. It returns how many jobs remain inserted; it costs a round trip, only when
// finished states count. (Under REPEATABLE READ or SERIALIZABLE the caller's gated
// insert writes nothing here, and insertManyUnique's savepoint insert takes over.)
func (w *writer) insertManyRecheck(ctx context.Context, db jobtype.DBTX, jobs []Job, cols []any, callerTx bool) (int64, error) {
	rows, err := db.Query(ctx, w.sql.insertUnnestReturning[b2i(callerTx)], cols...)
	if err != nil {
		return 0, err
	}
	states := finishedStates(jobs)
	var n int64
	var ids []int64
	var us []string
	for rows.Next() {
		var id int64
		var key *string
		if err := rows.Scan(&id, &key); err != nil {
			rows.Close()
			return 0, err
		}
		n++
		if key != nil && len(states[*key]) > 0 {
			ids, us = append(ids, id), append(us, strings.Join(states[*key], ","))
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(ids) == 0 {
		return n, err
	}
	tag, err := db.Exec(ctx, w.sql.deleteFinishedHeld, ids, us)
	if err != nil {
		return 0, err
	}
	return n - tag.RowsAffected(), nil
}

// finishedStates maps each unique key of jobs to the states that every job of jobs with
// that key counts (UniqueStates; none when one of them counts no finished state). The
// insert writes at most one job of a key and RETURNING does not say which, so a finished
// holder undoes it only in a state each of them counts: the recheck never deletes a job
// that its own states let in.
func finishedStates(jobs []Job) map[string][]string {
	m := map[string][]string{}
	for i := range jobs {
		j := &jobs[i]
		if j.UniqueKey == nil {
			continue
		}
		s, seen := m[*j.UniqueKey]
		if !seen {
			m[*j.UniqueKey] = j.UniqueStates
			continue
		}
		m[*j.UniqueKey] = slices.DeleteFunc(slices.Clone(s), func(st string) bool { return !slices.Contains(j.UniqueStates, st) })
	}
	return m
}

func unnestColumns(jobs []Job) []any {
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
		ckeys  = make([]*string, len(jobs))
	)
	for i := range jobs {
		j := &jobs[i]
		queue[i], kind[i], pay[i], prio[i], maxA[i], runAt[i], uniq[i] = j.Queue, j.Kind, string(j.Payload), j.Priority, j.MaxAttempts, j.RunAt, j.UniqueKey
		if j.UniqueStates != nil {
			s := strings.Join(j.UniqueStates, ",")
			states[i] = &s
		}
		tmo[i] = j.TimeoutMs
		meta[i] = j.metadataText()
		part[i], ckeys[i] = j.PartitionKey, j.ConcurrencyKeys
	}
	return []any{queue, kind, pay, prio, maxA, runAt, uniq, states, tmo, meta, part, ckeys}
}

// insertUnnestSQL is the bulk insert with unique keys: as insertUniqueSQL for every row,
// the finished states that count given per row as a comma-separated list (us).
func insertUnnestSQL(gate string) string {
	return `INSERT INTO {s}.jobs (queue, kind, payload, priority, max_attempts, run_at, unique_key, timeout_ms, metadata, partition_key, concurrency_keys)
SELECT q, k, p::jsonb, pr, ma, COALESCE(ra, now()), uk, tm, md::jsonb, pk, ck::jsonb
FROM unnest($1::text[], $2::text[], $3::text[], $4::smallint[], $5::int[], $6::timestamptz[], $7::text[], $8::text[], $9::bigint[], $10::text[], $11::text[], $12::text[])
	AS t(q, k, p, pr, ma, ra, uk, us, tm, md, pk, ck)
WHERE (uk IS NULL OR us IS NULL OR NOT EXISTS (` + finishedHolderSQL("t.uk", "string_to_array(t.us, ',')") + `))` + gate + `
` + onConflictUnique
}

// deleteFinishedHeldSQL deletes the jobs of ids $1 that this transaction has just
// inserted whose key a finished job holds in a state of the matching comma-separated
// list of $2, in the hot table or the archive (insertManyRecheck).
var deleteFinishedHeldSQL = `DELETE FROM {s}.jobs j USING unnest($1::bigint[], $2::text[]) AS t(id, us)
WHERE j.id = t.id AND EXISTS (` + finishedHolderSQL("j.unique_key", "string_to_array(t.us, ',')") + `)`
