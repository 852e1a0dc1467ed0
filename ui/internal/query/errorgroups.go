// This file holds the dead page's grouping of dead and failed jobs by their error: the
// first line of the last error, counted over a bounded window of the newest such jobs.

package query

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrorGroupWindow is how many dead and failed jobs the grouping reads at most:
// the page stays fast at any size, and says it counts a window.
const ErrorGroupWindow int64 = 20000

// maxErrorGroups bounds the groups shown.
const maxErrorGroups = 20

// errorGroupsSQL counts at most $1 dead and failed jobs (of queue $2 and kind $3 when not
// NULL) by the first line of their last error (at most 200 characters), most common
// first, with the newest job of each group. The window is taken in no order, so that it
// is read through jobs_stuck_idx (the partial index of exactly those rows) whatever the
// size of the table: an ORDER BY id would let the planner walk the primary key backwards
// through every live job to find the few dead ones. It runs unprepared
// (QueryExecModeExec): a generic plan of "$2 IS NULL OR queue = $2" cannot pick the
// index's rows of one queue or kind, and read every dead job (85-97 ms instead of 30 at
// 120,000 dead jobs).
const errorGroupsSQL = `SELECT left(split_part(coalesce(last_error, ''), E'\n', 1), 200) AS e, count(*), max(id)
FROM (SELECT last_error, id FROM {s}.jobs
	WHERE status IN ('dead', 'failed') AND ($2::text IS NULL OR queue = $2) AND ($3::text IS NULL OR kind = $3)
	LIMIT $1) w
GROUP BY e ORDER BY count(*) DESC, e LIMIT $4`

// ErrorGroup is one error of the dead page's grouping.
type ErrorGroup struct {
	Error  string // the first line of the last error; empty when none was recorded
	Count  int64
	Newest int64 // the newest job with it
}

// ErrorGroups counts dead and failed jobs by error.
type ErrorGroups struct {
	pool *pgxpool.Pool
	sql  string
}

func newErrorGroups(pool *pgxpool.Pool, x func(string) string) *ErrorGroups {
	return &ErrorGroups{pool: pool, sql: x(errorGroupsSQL)}
}

// List returns the groups of at most ErrorGroupWindow dead and failed jobs of queue
// and kind (empty: any), most common first.
func (g *ErrorGroups) List(ctx context.Context, queue, kind string) ([]ErrorGroup, error) {
	rows, err := g.pool.Query(ctx, g.sql, pgx.QueryExecModeExec, ErrorGroupWindow, nullable(queue), nullable(kind), maxErrorGroups)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ErrorGroup, error) {
		var e ErrorGroup
		return e, row.Scan(&e.Error, &e.Count, &e.Newest)
	})
}
