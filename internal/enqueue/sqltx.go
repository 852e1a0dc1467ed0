// This file holds the adapter that gives a database/sql transaction (*sql.Tx on pgx's
// stdlib driver) the shape of DBTX, so the same enqueue statements run through it.

package enqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/skiplock/skiplock/internal/jobtype"
)

// SQLTx returns tx as a DBTX for the enqueue statements: Exec and QueryRow (a *sql.Row
// scans like a pgx.Row). Query and CopyFrom refuse before sending anything.
func SQLTx(tx *sql.Tx) jobtype.DBTX { return sqlTxDB{tx} }

// sqlTxDB gives a *sql.Tx the methods of jobtype.DBTX that the enqueue statements use: Exec and
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
func canCopy(db jobtype.DBTX) bool {
	_, viaSQL := db.(sqlTxDB)
	return !viaSQL
}
