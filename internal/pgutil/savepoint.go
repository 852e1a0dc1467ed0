package pgutil

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Execer runs one statement: a pgx.Tx, or skiplock's adapter of a database/sql one.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// savepointCloseTimeout bounds the statements that close a savepoint once ctx has ended.
const savepointCloseTimeout = 10 * time.Second

// InSavepoint runs fn inside the savepoint name (an identifier, quoted here) of the
// caller's transaction db: when fn fails, its writes are rolled back to the savepoint
// and the transaction stays usable; when it succeeds they stay. The statements that
// close the savepoint run even once ctx has ended (bounded by savepointCloseTimeout): a
// ctx that ends between fn's statements makes fn fail without breaking the connection,
// and the rollback must still happen, or the caller, told the call failed, commits half
// of its writes. The error is fn's (joined with the rollback's, when that fails too), or
// the savepoint's own.
func InSavepoint(ctx context.Context, db Execer, name string, fn func() error) error {
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := db.Exec(ctx, "SAVEPOINT "+ident); err != nil {
		return err
	}
	err := fn()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), savepointCloseTimeout)
	defer cancel()
	if err != nil {
		if _, rerr := db.Exec(cctx, "ROLLBACK TO SAVEPOINT "+ident); rerr != nil {
			return errors.Join(err, rerr)
		}
	}
	if _, rerr := db.Exec(cctx, "RELEASE SAVEPOINT "+ident); rerr != nil && err == nil {
		return rerr
	}
	return err
}
