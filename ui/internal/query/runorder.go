package query

// This file holds the list of a queue's queued jobs in the order workers claim them:
// highest priority first, then earliest due, then oldest; read through jobs_claim_idx.

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// runOrderSameSQL and runOrderLowerSQL read a page of queue $1's queued jobs in claim
// order after the cursor (priority $2, run_at $3, id $4): first the rest of the cursor's
// priority, then the lower priorities. Each is one range of jobs_claim_idx (queue,
// priority DESC, run_at, id), read in its order, so a page deep in a backlog of a
// million costs what the first does. runOrderFirstSQL is the first page.
const (
	runOrderFirstSQL = `SELECT ` + listColumns + ` FROM {s}.jobs
WHERE status = 'queued' AND queue = $1
ORDER BY priority DESC, run_at, id
LIMIT $2`
	runOrderSameSQL = `SELECT ` + listColumns + ` FROM {s}.jobs
WHERE status = 'queued' AND queue = $1 AND priority = $2 AND (run_at, id) > ($3, $4)
ORDER BY priority DESC, run_at, id
LIMIT $5`
	runOrderLowerSQL = `SELECT ` + listColumns + ` FROM {s}.jobs
WHERE status = 'queued' AND queue = $1 AND priority < $2
ORDER BY priority DESC, run_at, id
LIMIT $3`
)

// RunCursor is where a page in run order ends: the last job's priority, run_at and id.
type RunCursor struct {
	Priority int
	RunAt    time.Time
	ID       int64
}

// A run_at is written in a cursor as Postgres stores a timestamptz: microseconds since
// 2000-01-01 UTC, an int64 that holds every finite value it takes, 4714 BC to 294276 AD
// (UnixNano holds 1678 to 2262 only: a job due in the year 3000 made a cursor that
// restarted the list).
const (
	pgEpochUnix   = 946684800           // 2000-01-01 00:00:00 UTC in Unix seconds
	minPGMicros   = -211813488000000000 // 4714-11-24 00:00:00 UTC BC, Postgres's MIN_TIMESTAMP
	endPGMicros   = 9223371331200000000 // 294277-01-01 00:00:00 UTC, Postgres's END_TIMESTAMP (excluded)
	cursorSep     = "_"                 // not the "." of earlier releases' cursors, which are refused
	microsPerSec  = 1_000_000
	nanosPerMicro = 1_000
)

// String encodes the cursor for a link: priority_microseconds_id, the microseconds since
// 2000-01-01 UTC.
func (c RunCursor) String() string {
	us := (c.RunAt.Unix()-pgEpochUnix)*microsPerSec + int64(c.RunAt.Nanosecond()/nanosPerMicro)
	return strconv.Itoa(c.Priority) + cursorSep + strconv.FormatInt(us, 10) + cursorSep + strconv.FormatInt(c.ID, 10)
}

// ParseRunCursor reads a cursor String wrote: a smallint priority, a run_at in
// Postgres's range, a positive id.
func ParseRunCursor(s string) (RunCursor, bool) {
	parts := strings.Split(s, cursorSep)
	if len(parts) != 3 {
		return RunCursor{}, false
	}
	p, err1 := strconv.Atoi(parts[0])
	us, err2 := strconv.ParseInt(parts[1], 10, 64)
	id, err3 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || p < -32768 || p > 32767 || id <= 0 ||
		us < minPGMicros || us >= endPGMicros {
		return RunCursor{}, false
	}
	sec, frac := us/microsPerSec, us%microsPerSec
	if frac < 0 {
		sec, frac = sec-1, frac+microsPerSec
	}
	return RunCursor{Priority: p, RunAt: time.Unix(sec+pgEpochUnix, frac*nanosPerMicro).UTC(), ID: id}, true
}

// RunOrder reads the queued jobs of a queue in claim order.
type RunOrder struct {
	pool               *pgxpool.Pool
	first, same, lower string
}

func newRunOrder(pool *pgxpool.Pool, x func(string) string) *RunOrder {
	return &RunOrder{pool: pool, first: x(runOrderFirstSQL), same: x(runOrderSameSQL), lower: x(runOrderLowerSQL)}
}

// Page returns at most limit queued jobs of queue after the cursor (nil: from the
// first), in claim order, and the cursor of the next page (nil when there is none).
func (o *RunOrder) Page(ctx context.Context, queue string, after *RunCursor, limit int) ([]Row, *RunCursor, error) {
	var rows []Row
	read := func(sql string, args ...any) error {
		r, err := o.pool.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		got, err := collectOrdered(r, false)
		rows = append(rows, got...)
		return err
	}
	switch {
	case after == nil:
		if err := read(o.first, queue, limit+1); err != nil {
			return nil, nil, err
		}
	default:
		if err := read(o.same, queue, after.Priority, after.RunAt, after.ID, limit+1); err != nil {
			return nil, nil, err
		}
		if len(rows) <= limit {
			if err := read(o.lower, queue, after.Priority, limit+1-len(rows)); err != nil {
				return nil, nil, err
			}
		}
	}
	if len(rows) <= limit {
		return rows, nil, nil
	}
	rows = rows[:limit]
	last := rows[limit-1]
	return rows, &RunCursor{Priority: last.Priority, RunAt: last.RunAt, ID: last.ID}, nil
}
