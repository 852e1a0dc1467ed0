// This file holds the inserts of jobs with a unique key, one job at a time, and the
// statements that honour the key (the bulk insert's is in bulk.go).

package enqueue

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// insertUnique writes a job with a unique key, or finds the job that holds the key.
//
// The insert is ON CONFLICT DO NOTHING on the active-key index, so a duplicate is not an
// error and the caller's transaction stays usable. Under REPEATABLE READ or SERIALIZABLE,
// though, a conflict with a row committed after the transaction's snapshot raises a
// serialization failure, which would abort the caller's transaction. So inside the
// caller's transaction the insert runs only when the transaction is READ COMMITTED (the
// statement checks; no round trip is added); otherwise, once the lookup has found no
// visible holder, it runs again inside a savepoint that absorbs such a failure. Outside
// the caller's transaction the statement is a transaction of its own, at the server's
// (or the role's) default isolation: there such a failure is only a holder that
// committed after the statement began, which the lookup that follows finds.
func (w *writer) insertUnique(ctx context.Context, db jobtype.DBTX, j *Job, notify, callerTx bool) (*jobtype.JobRow, error) {
	args := []any{j.Queue, j.Kind, string(j.Payload), j.Priority, j.RunAt, j.MaxAttempts, *j.UniqueKey, j.UniqueStates, j.TimeoutMs, j.metadataText(), j.PartitionKey, j.ConcurrencyKeys, j.Delay}
	if notify {
		args = append(args, w.notify.Channel)
	}
	q := w.sql.insertUnique[b2i(callerTx)][b2i(notify)]
	// A holder that finishes between the insert and the lookup frees the key (unless its
	// final state counts): try again a few times.
	for range 3 {
		row, err := jobtype.ScanJob(db.QueryRow(ctx, q, args...))
		if err == nil {
			return w.recheckFinished(ctx, db, j, row)
		}
		if !errors.Is(err, pgx.ErrNoRows) && (callerTx || !isSerializationFailure(err)) {
			return nil, wrapErr(w.schema, "enqueue", err)
		}
		existing, err := jobtype.ScanJob(db.QueryRow(ctx, w.sql.findUnique, *j.UniqueKey, j.UniqueStates))
		if err == nil {
			if existing, err = w.editHolder(ctx, db, j, existing, callerTx); err != nil {
				return nil, err
			}
			return w.duplicate(j, existing)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, wrapErr(w.schema, "enqueue", err)
		}
		if callerTx {
			var iso string
			if err := db.QueryRow(ctx, isolationSQL).Scan(&iso); err != nil {
				return nil, wrapErr(w.schema, "enqueue", err)
			}
			if iso != "read committed" {
				return w.insertUniqueSavepoint(ctx, db, j, args, notify)
			}
		}
	}
	return nil, fmt.Errorf("%w: key %q: the job holding it keeps changing state; try again", ErrDuplicateJob, *j.UniqueKey)
}

// recheckFinished looks, once row is inserted, for a finished holder of j's key in a state
// that counts, and when there is one deletes row and answers with the holder. The insert's
// own look-up ran on the statement's snapshot, taken before the insert waited on an active
// holder whose transaction then finished it (the completer's move to the archive): the
// ON CONFLICT then found no active holder and the look-up had not seen the finished one.
// Under READ COMMITTED this statement's snapshot sees it. db is a transaction (the
// caller's, or enqueueAlone's own: insertOne), so the row was never visible to anyone
// else. It costs a round trip, only when finished states count.
func (w *writer) recheckFinished(ctx context.Context, db jobtype.DBTX, j *Job, row *jobtype.JobRow) (*jobtype.JobRow, error) {
	if j.UniqueStates == nil {
		return row, nil
	}
	existing, err := jobtype.ScanJob(db.QueryRow(ctx, w.sql.findFinished, *j.UniqueKey, j.UniqueStates))
	if errors.Is(err, pgx.ErrNoRows) {
		return row, nil
	}
	if err != nil {
		return nil, wrapErr(w.schema, "enqueue", err)
	}
	if _, err := db.Exec(ctx, w.sql.deleteInserted, row.ID); err != nil {
		return nil, wrapErr(w.schema, "enqueue", err)
	}
	return w.duplicate(j, existing)
}

// insertUniqueSavepoint is the unique insert in a transaction that is not READ COMMITTED:
// inside a savepoint, so that a serialization failure (the key is held by a job this
// transaction's snapshot cannot see) is rolled back to the savepoint and reported as a
// duplicate, leaving the caller's transaction usable. It costs three round trips.
func (w *writer) insertUniqueSavepoint(ctx context.Context, db jobtype.DBTX, j *Job, args []any, notify bool) (*jobtype.JobRow, error) {
	var row *jobtype.JobRow
	var insErr error
	err := pgutil.InSavepoint(ctx, db, savepointName, func() error {
		row, insErr = jobtype.ScanJob(db.QueryRow(ctx, w.sql.insertUnique[0][b2i(notify)], args...))
		return insErr
	})
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return row, nil
	case err == insErr && (errors.Is(err, pgx.ErrNoRows) || errors.As(err, &pgErr) && pgErr.Code == "40001"):
		// Rolled back to the savepoint (err is the insert's alone).
		return nil, fmt.Errorf("%w: key %q is held by a job committed after this transaction's snapshot (%s); the transaction is still usable",
			ErrDuplicateJob, *j.UniqueKey, "REPEATABLE READ or SERIALIZABLE")
	}
	return nil, wrapErr(w.schema, "enqueue", err)
}

// isSerializationFailure reports whether err is Postgres's serialization_failure (40001).
func isSerializationFailure(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40001"
}

// duplicate returns the job that holds a key as the answer to a duplicate enqueue. A
// caller-chosen UniqueKey also reports ErrDuplicateJob, as it did before UniqueOpts.
func (w *writer) duplicate(j *Job, existing *jobtype.JobRow) (*jobtype.JobRow, error) {
	existing.Duplicate = true
	if j.KeyIsCallers {
		return existing, fmt.Errorf("%w: key %q is held by job %d", ErrDuplicateJob, *j.UniqueKey, existing.ID)
	}
	return existing, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// onConflictUnique names the partial unique index on unique_key, so an active job with the
// same key makes the insert a no-op instead of an error that would abort the caller's
// transaction.
const onConflictUnique = `ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('queued', 'running') DO NOTHING`

// readCommittedGate makes an insert insert nothing outside READ COMMITTED, where an ON
// CONFLICT with an invisible row would raise instead of doing nothing (insertUnique).
const readCommittedGate = `
	AND current_setting('transaction_isolation') = 'read committed'`

// finishedHolderSQL is the query of a finished job that holds the unique key key in one
// of the finished states states that count (SQL expressions of the enclosing statement: a
// text, a text[]), in the hot table (jobs_unique_key_done_idx) and the archive
// (jobs_archive_unique_key_idx). Active holders are the ON CONFLICT's business. The
// single insert, the bulk insert and the bulk recheck share it.
func finishedHolderSQL(key, states string) string {
	return `SELECT 1 FROM {s}.jobs d
		WHERE d.unique_key = ` + key + ` AND d.status NOT IN ('queued', 'running') AND d.status = ANY (` + states + `)
		UNION ALL
		SELECT 1 FROM {s}.jobs_archive a WHERE a.unique_key = ` + key + ` AND a.status = ANY (` + states + `)`
}

// insertUniqueSQL is the single-job insert with a unique key $7: nothing is inserted when
// a finished job holds the key in a state of $8 (NULL: no finished state counts, and the
// lookup is never run), nor when an active job holds it (ON CONFLICT DO NOTHING, which
// also settles concurrent inserts of one key: the later waits for the earlier to commit).
// gated adds readCommittedGate. $9 is the job's timeout_ms, $10 its metadata, $11 its
// partition_key, $12 its concurrency_keys, $13 its Delay (a debounced new job without a
// RunAt is due then after now(), by the database clock); the channel of notify is $14.
func insertUniqueSQL(gated, notify bool) string {
	gate := ""
	if gated {
		gate = readCommittedGate
	}
	ins := `INSERT INTO {s}.jobs (queue, kind, payload, priority, run_at, max_attempts, unique_key, timeout_ms, metadata, partition_key, concurrency_keys)
SELECT $1::text, $2::text, $3::jsonb, $4::smallint, COALESCE($5::timestamptz, now() + $13::interval), $6::integer, $7::text, $9::bigint, $10::jsonb, $11::text, $12::jsonb
WHERE ($8::text[] IS NULL OR NOT EXISTS (` + finishedHolderSQL("$7", "$8::text[]") + `))` + gate + `
` + onConflictUnique + `
RETURNING ` + jobColumns
	if !notify {
		return ins
	}
	return `WITH ins AS (` + ins + `)
SELECT ins.* FROM ins CROSS JOIN pg_notify($14, $1::text) AS n`
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

// findFinishedSQL returns a finished job holding key $1 in a state of $2 that counts,
// from the hot table or the archive (recheckFinished).
const findFinishedSQL = `(SELECT ` + jobColumns + ` FROM {s}.jobs
	WHERE unique_key = $1 AND status NOT IN ('queued', 'running') AND status = ANY ($2::text[])
	ORDER BY id DESC LIMIT 1)
UNION ALL
(SELECT ` + archiveJobColumns + ` FROM {s}.jobs_archive
	WHERE unique_key = $1 AND status = ANY ($2::text[]) ORDER BY id DESC LIMIT 1)
LIMIT 1`

// deleteInsertedSQL removes a job this transaction has just inserted (recheckFinished).
const deleteInsertedSQL = `DELETE FROM {s}.jobs WHERE id = $1`
