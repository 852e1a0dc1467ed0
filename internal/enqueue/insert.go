// This file holds the writer of enqueue statements and the single insert: one job in a
// statement of its own, or in the caller's transaction, with its wake-up notification.

package enqueue

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// writer runs the enqueue statements (the single, unique and bulk inserts) on one schema.
type writer struct {
	pool   *pgxpool.Pool
	schema string
	notify *notify.Notifier // the wake-ups' channel and Enqueue's throttle
	sql    statements       // rendered for schema by newWriter
}

func newWriter(pool *pgxpool.Pool, schema string, n *notify.Notifier) *writer {
	return &writer{pool: pool, schema: schema, notify: n, sql: newStatements(schema)}
}

// enqueueAlone writes one job in a statement of its own (and so a transaction of its own).
func (w *writer) enqueueAlone(ctx context.Context, j *Job) (*jobtype.JobRow, error) {
	notify := j.dueNow() && w.notify.Throttle.TakeNow(j.Queue)
	row, err := w.insertOne(ctx, w.pool, j, notify, false)
	if err == nil && j.dueNow() && !notify {
		w.notify.Throttle.Trailing(j.Queue)
	}
	return row, err
}

// insertOne writes one prepared job through db. callerTx says db is the caller's
// transaction, whose isolation level this cannot know (see insertUnique).
func (w *writer) insertOne(ctx context.Context, db jobtype.DBTX, j *Job, notify, callerTx bool) (*jobtype.JobRow, error) {
	if j.UniqueKey != nil && !callerTx && j.UniqueStates != nil {
		// Finished states count: the insert and the look-up after it (insertUnique) share
		// a transaction, so a job the look-up finds a holder for is never seen.
		var row *jobtype.JobRow
		var insErr error // insertUnique's, wrapped already
		err := pgx.BeginTxFunc(ctx, w.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			row, insErr = w.insertUnique(ctx, tx, j, notify, false)
			return insErr
		})
		switch {
		case insErr != nil:
			return nil, insErr
		case err != nil: // begin or commit
			return nil, wrapErr(w.schema, "enqueue", err)
		}
		return row, nil
	}
	if j.UniqueKey != nil {
		return w.insertUnique(ctx, db, j, notify, callerTx)
	}
	// The payload goes as text: as []byte, the simple and exec protocols (PgBouncer
	// setups) would send it as bytea.
	args := []any{j.Queue, j.Kind, string(j.Payload), j.Priority, j.RunAt, j.MaxAttempts, nil, j.TimeoutMs, j.metadataText(), j.PartitionKey, j.ConcurrencyKeys}
	q := w.sql.insert
	if notify {
		q = w.sql.insertNotify
		args = append(args, w.notify.Channel)
	}
	row, err := jobtype.ScanJob(db.QueryRow(ctx, q, args...))
	if err != nil {
		return nil, wrapErr(w.schema, "enqueue", err)
	}
	return row, nil
}

// statements holds the enqueue statements, rendered for a schema.
type statements struct {
	insert, insertNotify string
	// insertUnique[gated][notify]: gated inserts only under READ COMMITTED (insertUnique).
	insertUnique [2][2]string
	// insertUnnest[gated]: the bulk insert with unique keys; insertUnnestReturning, the
	// same returning the new rows' ids and keys, and deleteFinishedHeld, what undoes those
	// whose key a finished job holds (insertManyRecheck).
	insertUnnest, insertUnnestReturning [2]string
	deleteFinishedHeld                  string
	findUnique                          string
	// findFinished and deleteInserted undo an insert whose key a finished job holds
	// (recheckFinished).
	findFinished, deleteInserted string
}

func newStatements(schema string) statements {
	r := func(q string) string { return pgutil.Render(schema, q) }
	return statements{
		insert:       r(insertSQL(false)),
		insertNotify: r(insertSQL(true)),
		insertUnique: [2][2]string{
			{r(insertUniqueSQL(false, false)), r(insertUniqueSQL(false, true))},
			{r(insertUniqueSQL(true, false)), r(insertUniqueSQL(true, true))},
		},
		insertUnnest: [2]string{r(insertUnnestSQL("")), r(insertUnnestSQL(readCommittedGate))},
		insertUnnestReturning: [2]string{
			r(insertUnnestSQL("") + "\nRETURNING id, unique_key"),
			r(insertUnnestSQL(readCommittedGate) + "\nRETURNING id, unique_key"),
		},
		deleteFinishedHeld: r(deleteFinishedHeldSQL),
		findUnique:         r(findUniqueSQL),
		findFinished:       r(findFinishedSQL),
		deleteInserted:     r(deleteInsertedSQL),
	}
}

// What the unique insert under REPEATABLE READ and SERIALIZABLE runs around it: the
// isolation level's check, and the savepoint (pgutil.InSavepoint) the insert runs in.
const (
	isolationSQL  = `SELECT current_setting('transaction_isolation')`
	savepointName = "skiplock_enqueue"
)

// insertSQL is the single-job insert. run_at defaults to the database clock. With notify,
// pg_notify runs in the same statement (one round trip) and so in the same transaction:
// Postgres delivers it only at commit.
func insertSQL(notify bool) string {
	ins := `INSERT INTO {s}.jobs (queue, kind, payload, priority, run_at, max_attempts, unique_key, timeout_ms, metadata, partition_key, concurrency_keys)
VALUES ($1, $2, $3, $4, COALESCE($5::timestamptz, now()), $6, $7, $8, $9, $10, $11::jsonb)
RETURNING ` + jobColumns
	if !notify {
		return ins
	}
	return `WITH ins AS (` + ins + `)
SELECT ins.* FROM ins CROSS JOIN pg_notify($12, $1::text) AS n`
}
