// This file holds the dead page's grouping of dead and failed jobs by their error: the
// first line of the last error, counted over a bounded window of the newest such jobs.

package query

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrorGroupWindow is how many of the newest dead and failed jobs the grouping reads:
// the page stays fast at any size, and says it counts a window.
const ErrorGroupWindow int64 = 20000

// maxErrorGroups bounds the groups shown.
const maxErrorGroups = 20

// errorGroupsSQL counts the newest $1 dead and failed jobs (of queue $2 and kind $3 when
// not NULL) by the first line of their last error (at most 200 characters), most common
// first, with the newest job of each group. The window walks jobs_stuck_idx's rows
// newest first.
const errorGroupsSQL = `SELECT left(split_part(coalesce(last_error, ''), E'\n', 1), 200) AS e, count(*), max(id)
FROM (SELECT last_error, id FROM {s}.jobs
	WHERE status IN ('dead', 'failed') AND ($2::text IS NULL OR queue = $2) AND ($3::text IS NULL OR kind = $3)
	ORDER BY id DESC LIMIT $1) w
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

// List returns the groups of the newest ErrorGroupWindow dead and failed jobs of queue
// and kind (empty: any), most common first.
func (g *ErrorGroups) List(ctx context.Context, queue, kind string) ([]ErrorGroup, error) {
	rows, err := g.pool.Query(ctx, g.sql, ErrorGroupWindow, nullable(queue), nullable(kind), maxErrorGroups)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ErrorGroup, error) {
		var e ErrorGroup
		return e, row.Scan(&e.Error, &e.Count, &e.Newest)
	})
}
