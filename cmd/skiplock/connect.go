// This file holds connecting to the database, and the errors and hints about it.

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
)

const (
	// connectTimeout bounds opening the connection when the URL sets no connect_timeout, so
	// an unreachable server fails fast even with a long --timeout.
	connectTimeout = 5 * time.Second
	// maxConns is the pool size: every command runs its statements one after another.
	maxConns = 2
)

// connect opens a pool on --database-url and a client on --schema, and checks that the
// database answers. The caller closes the returned pool.
func (a *app) connect(ctx context.Context, cmdName string) (*skiplock.Client, *pgxpool.Pool, error) {
	if a.dbURL == "" {
		return nil, nil, usagef(cmdName, "no database given: set --database-url or DATABASE_URL (for example postgres://user:password@localhost:5432/app)")
	}
	cfg, err := pgxpool.ParseConfig(a.dbURL)
	if err != nil {
		return nil, nil, usagef(cmdName, "the database URL from --database-url / DATABASE_URL is invalid: %s", parseReason(err))
	}
	if hostHoldsAt(cfg) {
		// An "@" left unencoded in the password: the URL's host then begins with the
		// rest of the password, which every message naming the server would print.
		return nil, nil, usagef(cmdName, "the database URL from --database-url / DATABASE_URL has an \"@\" in its host: write an \"@\" in the user name or password as %%40")
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg) // connects lazily
	if err != nil {
		return nil, nil, fmt.Errorf("cannot set up a connection pool: %w", err)
	}
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: a.schema})
	if err != nil {
		pool.Close()
		if errors.Is(err, skiplock.ErrInvalidSchema) {
			return nil, nil, usagef(cmdName, "--schema: %v", strings.TrimPrefix(err.Error(), "skiplock: "))
		}
		return nil, nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.ConnConfig.ConnectTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		limit := fmt.Sprintf("the connect timeout of %s", cfg.ConnConfig.ConnectTimeout)
		if ctx.Err() != nil {
			limit = fmt.Sprintf("--timeout %s", a.timeout)
		}
		return nil, nil, newReachError(cfg, limit, err)
	}
	return client, pool, nil
}

// parseReason is why pgx could not parse a connection string, without the string: pgx's
// error quotes it with its passwords masked on a best effort only (a keyword/value
// "password = x", with spaces around "=", or an unterminated quote, stayed readable).
func parseReason(err error) string {
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return "it cannot be parsed"
	}
	bare := *pe
	bare.ConnString = ""
	return strings.TrimPrefix(bare.Error(), "cannot parse ``: ")
}

// hostHoldsAt reports whether a host of cfg (the first or a fallback) contains "@",
// which no host name or address does.
func hostHoldsAt(cfg *pgxpool.Config) bool {
	if strings.Contains(cfg.ConnConfig.Host, "@") {
		return true
	}
	for _, f := range cfg.ConnConfig.Fallbacks {
		if strings.Contains(f.Host, "@") {
			return true
		}
	}
	return false
}

// reachError is a failed first connection. Its message names the server but never the
// password, and says what to check.
type reachError struct {
	msg string
	err error
}

func (e *reachError) Error() string { return e.msg }
func (e *reachError) Unwrap() error { return e.err }

// newReachError explains err, the failure of the first connection to the server of cfg;
// limit names the time limit that applied.
func newReachError(cfg *pgxpool.Config, limit string, err error) error {
	where := cfg.ConnConfig.Host
	if !strings.HasPrefix(where, "/") {
		where = net.JoinHostPort(where, fmt.Sprint(cfg.ConnConfig.Port))
	}
	const hint = "(check --database-url / DATABASE_URL)"
	var msg string
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr):
		// The server answered and refused: bad password, unknown database or user.
		msg = fmt.Sprintf("the database at %s refused the connection as user %q to database %q: %v %s",
			where, cfg.ConnConfig.User, cfg.ConnConfig.Database, pgErr, hint)
	case errors.Is(err, context.DeadlineExceeded):
		msg = fmt.Sprintf("cannot reach the database at %s: no answer within %s %s", where, limit, hint)
	case errors.Is(err, context.Canceled):
		msg = fmt.Sprintf("connecting to the database at %s: interrupted", where)
	default:
		msg = fmt.Sprintf("cannot reach the database at %s: %s %s", where, oneLine(err), hint)
	}
	return &reachError{msg: msg, err: err}
}

// oneLine shortens a connection error to one line: the network error when there is one
// (pgx reports each attempt, such as TLS then plain text, on lines of their own).
func oneLine(err error) string {
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return opErr.Error()
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return dnsErr.Error()
	}
	var lines []string
	for l := range strings.Lines(err.Error()) {
		if l = strings.TrimSpace(l); l != "" && !slices.Contains(lines, l) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, " ")
}

// notMigratedHint turns the library's "not migrated" error into the command to run.
func (a *app) notMigratedHint(err error) error {
	if !errors.Is(err, skiplock.ErrNotMigrated) {
		return err
	}
	return fmt.Errorf("schema %q is not migrated: run '%s migrate up' first", a.schema, a.selfWithSchema())
}

// selfWithSchema is how to invoke this tool on the same schema, for hints.
func (a *app) selfWithSchema() string {
	if a.schema == skiplock.DefaultSchema {
		return "skiplock"
	}
	return "skiplock --schema " + a.schema
}
