// This file holds the statements of the root's ListPeriodic, SetPeriodicEnabled and
// RunPeriodicNow: reading the periodic table and an operator's changes to a schedule.

package periodic

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/pgutil"
)

// ErrNotFound is the root's ErrPeriodicNotFound: no worker declared a schedule of that
// name (or, for RunNow, it is disabled, or inactive: no running worker declares it).
var ErrNotFound = errors.New("skiplock: periodic schedule not found")

// listSQL lists every schedule. A schedule whose declarations stopped is shown inactive
// even before a worker marks it so (none may be running).
const listSQL = `SELECT name, kind, queue, schedule, misfire, next_run_at, last_run_at, last_job_id,
	active AND declared_at >= now() - make_interval(secs => $1), declared_at, updated_at, disabled
FROM {s}.periodic ORDER BY name`

// enableSQL turns schedule $1 on or off ($2: disabled).
const enableSQL = `UPDATE {s}.periodic SET disabled = $2, updated_at = now() WHERE name = $1 RETURNING name`

// runNowSQL makes schedule $1's next occurrence due now, unless it is disabled or
// inactive (no running worker declared it for $2 seconds: none would enqueue it; the
// same test as listSQL's). It returns the row's state, whether or not it moved it: no
// row is an unknown name.
// The update tests the row itself, not s, so that a concurrent disable (on the row's
// latest version) is seen; s only says why nothing moved.
const runNowSQL = `WITH s AS (
	SELECT disabled, active AND declared_at >= now() - make_interval(secs => $2) AS live
	FROM {s}.periodic WHERE name = $1
), moved AS (
	UPDATE {s}.periodic SET next_run_at = least(next_run_at, now()), updated_at = now()
	WHERE name = $1 AND NOT disabled AND active AND declared_at >= now() - make_interval(secs => $2)
	RETURNING name
)
SELECT disabled, live, EXISTS (SELECT 1 FROM moved) FROM s`

// Info is a periodic schedule as stored (the root's PeriodicInfo is an alias of it).
type Info struct {
	Name        string    // the PeriodicJob's Name
	Kind, Queue string    // of the job it enqueues
	Schedule    string    // the schedule's description
	Misfire     string    // run_once, skip or backfill:N
	NextRunAt   time.Time // the next occurrence to enqueue
	LastRunAt   time.Time // the last occurrence enqueued; zero if none yet
	LastJobID   int64     // its job; 0 if none yet
	// Active is false once no running worker has declared the schedule for a minute (it
	// was removed from the code, or every worker declaring it stopped); inactive schedules
	// are not enqueued until a worker declares them again.
	Active     bool
	DeclaredAt time.Time // the last declaration by a running worker
	UpdatedAt  time.Time
	// Disabled says an operator turned the schedule off (Client.SetPeriodicEnabled):
	// nothing is enqueued until it is enabled again.
	Disabled bool
}

// List returns every periodic schedule ever declared in db's schema, by name.
func List(ctx context.Context, db pgutil.DB) ([]Info, error) {
	rows, err := db.Pool.Query(ctx, db.Render(listSQL), staleAfter.Seconds())
	if err != nil {
		return nil, db.WrapErr("list periodic", err)
	}
	var (
		out     []Info
		p       Info
		lastRun *time.Time
		lastID  *int64
	)
	_, err = pgx.ForEachRow(rows, []any{&p.Name, &p.Kind, &p.Queue, &p.Schedule, &p.Misfire, &p.NextRunAt, &lastRun, &lastID,
		&p.Active, &p.DeclaredAt, &p.UpdatedAt, &p.Disabled}, func() error {
		q := p
		if lastRun != nil {
			q.LastRunAt = *lastRun
		}
		if lastID != nil {
			q.LastJobID = *lastID
		}
		out = append(out, q)
		return nil
	})
	if err != nil {
		return nil, db.WrapErr("list periodic", err)
	}
	return out, nil
}

// SetEnabled turns the schedule name off or on; ErrNotFound when there is none.
func SetEnabled(ctx context.Context, db pgutil.DB, name string, enabled bool) error {
	var got string
	err := db.Pool.QueryRow(ctx, db.Render(enableSQL), name, !enabled).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %q (see ListPeriodic)", ErrNotFound, name)
	}
	if err != nil {
		return db.WrapErr("set periodic enabled", err)
	}
	return nil
}

// RunNow makes the next occurrence of the schedule name due now; ErrNotFound when no
// enabled schedule that a running worker declares has that name.
func RunNow(ctx context.Context, db pgutil.DB, name string) error {
	var disabled, live, moved bool
	err := db.Pool.QueryRow(ctx, db.Render(runNowSQL), name, staleAfter.Seconds()).Scan(&disabled, &live, &moved)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %q is unknown (see ListPeriodic)", ErrNotFound, name)
	case err != nil:
		return db.WrapErr("run periodic now", err)
	case moved:
		return nil
	case disabled:
		return fmt.Errorf("%w: %q is disabled: enable it first", ErrNotFound, name)
	case !live:
		return fmt.Errorf("%w: %q is inactive: no running worker declares it, so none would enqueue it (see ListPeriodic)", ErrNotFound, name)
	default: // changed meanwhile by another call
		return fmt.Errorf("%w: %q was disabled or became inactive meanwhile (see ListPeriodic)", ErrNotFound, name)
	}
}
