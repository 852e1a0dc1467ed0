// This file holds enqueueing inside a database/sql transaction (*sql.Tx on pgx's stdlib
// driver): the same statements as EnqueueTx and EnqueueManyTx, sent through an adapter
// that gives a *sql.Tx the shape of DBTX.

package skiplock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

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
	return c.EnqueueTx(ctx, sqlTxDB{tx}, args, opts)
}

// EnqueueManySQLTx is [Client.EnqueueManyTx] for a database/sql transaction (see
// [Client.EnqueueSQLTx]). database/sql has no COPY, so the jobs go in one unnest insert,
// as EnqueueManyTx sends jobs with unique keys: one statement for the jobs and one for
// the wake-ups, whatever their number.
func (c *Client) EnqueueManySQLTx(ctx context.Context, tx *sql.Tx, params []EnqueueParams) (int, error) {
	if tx == nil {
		return 0, errors.New("skiplock: EnqueueManySQLTx: tx is nil")
	}
	return c.EnqueueManyTx(ctx, sqlTxDB{tx}, params)
}

// sqlTxDB gives a *sql.Tx the methods of DBTX that the enqueue statements use: Exec and
// QueryRow (a *sql.Row scans like a pgx.Row). The arguments reach pgx unchanged: pgx's
// stdlib driver accepts every value pgx encodes. Query and CopyFrom have no use on this
// path and refuse before sending anything.
type sqlTxDB struct{ tx *sql.Tx }

var errSQLTxUnsupported = errors.New("skiplock: not supported on a database/sql transaction")

func (d sqlTxDB) Exec(ctx context.Context, q string, args ...any) (pgconn.CommandTag, error) {
	res, err := d.tx.ExecContext(ctx, q, args...)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	// RowsAffected is all a caller of Exec on this path reads from the tag.
	return pgconn.NewCommandTag(fmt.Sprintf("INSERT 0 %d", n)), nil
}

func (d sqlTxDB) QueryRow(ctx context.Context, q string, args ...any) pgx.Row {
	return sqlRow{d.tx.QueryRowContext(ctx, q, args...)}
}

func (d sqlTxDB) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errSQLTxUnsupported
}

func (d sqlTxDB) CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error) {
	return 0, errSQLTxUnsupported
}

// sqlRow turns database/sql's "no rows" into pgx's, which the enqueue code tests for.
type sqlRow struct{ r *sql.Row }

func (r sqlRow) Scan(dest ...any) error {
	err := r.r.Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return pgx.ErrNoRows
	}
	return err
}

// canCopy says whether db can run COPY; a database/sql transaction cannot (bulk.go).
func canCopy(db DBTX) bool {
	_, viaSQL := db.(sqlTxDB)
	return !viaSQL
}
