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
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/skiplock/skiplock/internal/jobtype"
)

// SQLTx returns tx as a DBTX for the enqueue statements: Exec, QueryRow (a *sql.Row
// scans like a pgx.Row) and Query (rows read with Next and Scan, as pgx.ForEachRow
// does). CopyFrom refuses before sending anything.
func SQLTx(tx *sql.Tx) jobtype.DBTX { return sqlTxDB{tx} }

// sqlTxDB gives a *sql.Tx the methods of jobtype.DBTX that the enqueue statements use: Exec,
// QueryRow (a *sql.Row scans like a pgx.Row) and Query (DependsOn's look-ups of the
// parents). The arguments reach pgx unchanged: pgx's stdlib driver accepts every value
// pgx encodes. CopyFrom has no use on this path (bulk.go sends an unnest insert instead)
// and refuses before sending anything.
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

func (d sqlTxDB) Query(ctx context.Context, q string, args ...any) (pgx.Rows, error) {
	rows, err := d.tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return &sqlRows{r: rows}, nil
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

// sqlRows gives *sql.Rows the methods of pgx.Rows that pgx.ForEachRow and a loop of
// Next and Scan use. What only pgx can say (the fields' descriptions, the raw values, the
// connection, the type map) is empty, and Values fails. The embedded interface is nil:
// it only keeps the type a pgx.Rows when pgx adds a method, which no caller here uses.
type sqlRows struct {
	pgx.Rows
	r   *sql.Rows
	err error // Close's, once closed
	n   int64 // rows read
}

func (r *sqlRows) Close() {
	if err := r.r.Close(); err != nil && r.err == nil {
		r.err = err
	}
}

func (r *sqlRows) Err() error {
	if err := r.r.Err(); err != nil {
		return err
	}
	return r.err
}

// CommandTag counts the rows read, which is all a caller of Query on this path reads.
func (r *sqlRows) CommandTag() pgconn.CommandTag {
	return pgconn.NewCommandTag(fmt.Sprintf("SELECT %d", r.n))
}

func (r *sqlRows) FieldDescriptions() []pgconn.FieldDescription { return nil }

func (r *sqlRows) Next() bool {
	if r.r.Next() {
		r.n++
		return true
	}
	r.Close()
	return false
}

func (r *sqlRows) Scan(dest ...any) error { return r.r.Scan(dest...) }

func (r *sqlRows) Values() ([]any, error) { return nil, errSQLTxUnsupported }

func (r *sqlRows) RawValues() [][]byte { return nil }

func (r *sqlRows) Conn() *pgx.Conn { return nil }

func (r *sqlRows) TypeMap() *pgtype.Map { return nil }

// canCopy says whether db can run COPY; a database/sql transaction cannot (bulk.go).
func canCopy(db jobtype.DBTX) bool {
	_, viaSQL := db.(sqlTxDB)
	return !viaSQL
}
