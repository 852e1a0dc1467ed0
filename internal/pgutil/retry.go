package pgutil

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Retry retries fn while its error is transient (see [transient]), with backoff, until
// ctx ends. A statement whose reply was lost may have committed, so Retry runs only
// statements whose replay is harmless: each is fenced on (id, fence, locked_by) and takes
// the row out of that fence when it commits (success, failure, snooze, release), so a
// replay after a commit matches nothing — not even a later claim of the same job by the
// same worker, which took a new fence token.
func Retry(ctx context.Context, fn func() error) error {
	delay := 20 * time.Millisecond
	for {
		err := fn()
		if err == nil || !Transient(err) || ctx.Err() != nil {
			return err
		}
		Sleep(ctx, delay)
		if ctx.Err() != nil {
			return err
		}
		delay = min(delay*2, 2*time.Second)
	}
}

// transient reports whether err may go away on retry: a lost or refused connection, a
// server shutting down or restarting, a deadlock or serialization failure. A Postgres
// verdict on the statement itself (a constraint, a syntax error) is not transient.
func Transient(err error) bool {
	if err == nil || errors.Is(err, pgx.ErrNoRows) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return true // network errors, closed connections, pool exhaustion
	}
	switch {
	case strings.HasPrefix(pgErr.Code, "08"): // connection exception
		return true
	case strings.HasPrefix(pgErr.Code, "57P"): // admin shutdown, crash shutdown, cannot connect now
		return true
	case pgErr.Code == "40P01", pgErr.Code == "40001", pgErr.Code == "55P03": // deadlock, serialization, lock not available
		return true
	}
	return false
}

// Sleep sleeps for d or until ctx ends, whichever comes first.
func Sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// StartTimeout bounds each of a worker's start-up statements, retries included.
const StartTimeout = 30 * time.Second

// RetryAtStart runs fn, a start-up statement, retrying what may pass (a pooled connection
// the server closed, a server restarting; see transient) for up to StartTimeout, and
// failing at once on the rest (a schema not migrated). It gives up when ctx ends: a
// worker stopped while its database is out of reach at start returns at once, not when
// StartTimeout has passed (its caller tells that from a failure by ctx.Err()).
func RetryAtStart(ctx context.Context, fn func(ctx context.Context) error) error {
	sctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	return Retry(sctx, func() error { return fn(sctx) })
}
