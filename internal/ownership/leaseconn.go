// This file holds the elector's own connection. The worker lease is renewed by one short
// statement every 1.7-3 s, and a renewal that waits longer than workerCancelAfter makes
// the worker cancel its handlers, and past workerTTL lets other workers take its jobs.
// Through the pool the renewal queued behind the handlers' own use of it: a worker whose
// handlers held every connection (CompleteTx in a long transaction, a small MaxConns)
// could not renew, though the database was fine. On a connection of its own it waits for
// nobody in this process.

package ownership

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// leaseConnCloseTimeout bounds the close of a connection that failed.
const leaseConnCloseTimeout = time.Second

// leaseConn is a connection outside the pool, made from the pool's settings (so it goes
// where the pool goes: straight to Postgres, or through a pooler, with the same query
// mode), connected when first used and again after any failure. It is used by one
// goroutine at a time (the elector's Run; the job heartbeats' loop, lease.go), so it needs
// no lock.
type leaseConn struct {
	cfg  *pgx.ConnConfig
	conn *pgx.Conn
}

// newLeaseConn returns a leaseConn on pool's settings, named name in pg_stat_activity.
func newLeaseConn(pool *pgxpool.Pool, name string) *leaseConn {
	cfg := pool.Config().ConnConfig.Copy()
	if len(name) > 63 {
		name = name[:63]
	}
	cfg.RuntimeParams["application_name"] = name
	return &leaseConn{cfg: cfg}
}

// queryRow runs sql with args and scans its row into dest, connecting first when there
// is no healthy connection; ctx bounds both. A failure other than a server's answer (a
// timeout, a reset, a closed connection) drops the connection, so the next call starts
// afresh rather than reuse one left mid-statement.
func (c *leaseConn) queryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	conn, err := c.get(ctx)
	if err != nil {
		return err
	}
	return c.after(conn.QueryRow(ctx, sql, args...).Scan(dest...))
}

// forEachRow runs sql with args and calls fn for each row scanned into dest, as queryRow
// does (pgx.ForEachRow: the rows are closed before it returns).
func (c *leaseConn) forEachRow(ctx context.Context, sql string, args []any, dest []any, fn func() error) error {
	conn, err := c.get(ctx)
	if err != nil {
		return err
	}
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return c.after(err)
	}
	_, err = pgx.ForEachRow(rows, dest, fn)
	return c.after(err)
}

// exec runs sql with args, as queryRow does.
func (c *leaseConn) exec(ctx context.Context, sql string, args ...any) error {
	conn, err := c.get(ctx)
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, sql, args...)
	return c.after(err)
}

// get returns the connection, connecting when there is none or it was closed.
func (c *leaseConn) get(ctx context.Context) (*pgx.Conn, error) {
	if c.conn == nil || c.conn.IsClosed() {
		conn, err := pgx.ConnectConfig(ctx, c.cfg)
		if err != nil {
			return nil, err
		}
		c.conn = conn
	}
	return c.conn, nil
}

// after drops the connection after a failure that may have left it unusable, and
// returns err.
func (c *leaseConn) after(err error) error {
	var pgErr *pgconn.PgError
	if err != nil && !errors.Is(err, pgx.ErrNoRows) && !errors.As(err, &pgErr) {
		c.close()
	}
	return err
}

// close closes the connection, if any.
func (c *leaseConn) close() {
	if c.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaseConnCloseTimeout)
	defer cancel()
	_ = c.conn.Close(ctx)
	c.conn = nil
}
