package pgutil

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is the narrow database handle the engine's parts take instead of the client: the
// pool, the schema its statements are rendered for, and the channel that wakes the
// workers of the schema's queues.
type DB struct {
	Pool    *pgxpool.Pool
	Schema  string
	Channel string // "<schema>_jobs": a notification with a queue's name wakes its workers
}

// Render returns template with "{s}" replaced by the schema, sanitized.
func (d DB) Render(template string) string { return Render(d.Schema, template) }

// ErrNotMigrated is wrapped by WrapErr when the schema's tables are missing.
var ErrNotMigrated = errors.New("skiplock: schema is not migrated")

// WrapErr wraps err from the operation op: "skiplock: op: err", saying to run Migrate
// when the schema or its tables do not exist. The message has one "skiplock: " prefix:
// err's own (a sentinel's, as ErrNotMigrated's) is left out after op.
func (d DB) WrapErr(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") {
		err = fmt.Errorf("%w: run skiplock.Migrate for schema %q (%v)", ErrNotMigrated, d.Schema, err)
	}
	return &opError{op: op, err: err}
}

// opError is an error of the operation op: it reads "skiplock: op: " and err's message
// without its own "skiplock: ", and errors.Is and errors.As see err.
type opError struct {
	op  string
	err error
}

func (e *opError) Error() string {
	return "skiplock: " + e.op + ": " + strings.TrimPrefix(e.err.Error(), "skiplock: ")
}

func (e *opError) Unwrap() error { return e.err }
