package query

// This file holds the lists that reach their rows through a partial index of the jobs
// table: a status filter of queued, running, dead or failed.

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
)

// exactStatuses are the statuses whose jobs a partial index of the jobs table holds:
// queued (jobs_claim_idx, by queue), running (jobs_running_idx), dead and failed
// (jobs_stuck_idx, by kind then queue). A list filtered by one of them reaches its rows
// through that index, however few they are among a million other jobs. The status goes
// into the statement as a literal from this fixed list (never from the request), because
// a partial index serves only a query whose WHERE implies its predicate at plan time.
var exactStatuses = []skiplock.JobStatus{skiplock.StatusQueued, skiplock.StatusRunning, skiplock.StatusDead, skiplock.StatusFailed}

// A list filtered by an indexed status takes one of two routes, both exact:
//
//   - exactWindowSQL walks the primary key backwards from the cursor $1 through at most
//     $3 rows (exactWindow) and keeps the matches ({where}: the status predicate, then
//     queue and kind as $4 and $5 when filtered; $3 and $4 in exactIndexSQL). When that fills the page, the page is
//     right: it examined every id between the cursor and its last row. It is the fast
//     route when matches are common among the newest jobs (a queue's backlog, the dead
//     of a busy afternoon).
//   - Otherwise exactIndexSQL finds the matches through the status's partial index and
//     sorts them. "ORDER BY id + 0" keeps the planner off the primary key: with a LIMIT
//     it would otherwise walk the whole table backwards hoping for matches its
//     statistics promise (a queue with no dead job among 100,000 dead took 150-200 ms
//     that way at a million jobs). Its cost grows with the matches below the cursor,
//     which is what the window did not find among the newest rows.
//
// The statements run unprepared (QueryExecModeExec), so each is planned with its values.
const exactWindowSQL = `SELECT ` + listColumns + ` FROM {s}.jobs WHERE id IN (
	SELECT id FROM (
		SELECT id, status, queue, kind FROM {s}.jobs WHERE id < $1 ORDER BY id DESC LIMIT $3
	) w
	WHERE {where}
	ORDER BY id DESC
	LIMIT $2)`

const exactIndexSQL = `SELECT ` + listColumns + ` FROM {s}.jobs
WHERE {where} AND id < $1
ORDER BY id + 0 DESC
LIMIT $2`

// exactWindow is how many of the newest rows below the cursor exactWindowSQL examines.
const exactWindow = 5000

// key picks one rendering of a statement whose {where} filters by an indexed status.
type key struct {
	status      string // a status of exactStatuses, or "stuck" for dead and failed
	queue, kind bool   // whether the queue and the kind are filtered
}

// keyOf is the key of the jobs of status ("stuck" for dead and failed) matching f.
func keyOf(status string, f Filter) key {
	return key{status: status, queue: f.Queue != "", kind: f.Kind != ""}
}

// keys are every status of exactStatuses and "stuck", with and without each filter.
func keys() []key {
	var out []key
	for _, st := range append(slices.Clone(exactStatuses), "stuck") {
		for _, q := range []bool{false, true} {
			for _, k := range []bool{false, true} {
				out = append(out, key{string(st), q, k})
			}
		}
	}
	return out
}

// where renders the {where} of k: the status predicate, then queue and kind, when
// filtered, as the parameters after $n.
func (k key) where(n int) string {
	w := "status = '" + k.status + "'" // one of exactStatuses, never the request's text
	if k.status == "stuck" {
		w = "status IN ('dead', 'failed')"
	}
	if k.queue {
		n++
		w += " AND queue = $" + strconv.Itoa(n)
	}
	if k.kind {
		n++
		w += " AND kind = $" + strconv.Itoa(n)
	}
	return w
}

// filterArgs are the values of the queue and kind parameters of f's key.
func filterArgs(f Filter) []any {
	var args []any
	if f.Queue != "" {
		args = append(args, f.Queue)
	}
	if f.Kind != "" {
		args = append(args, f.Kind)
	}
	return args
}

// exact runs exactWindowSQL and exactIndexSQL.
type exact struct {
	pool *pgxpool.Pool
	sql  map[key][2]string // by key, the two listings
}

func newExact(pool *pgxpool.Pool, x func(string) string) exact {
	e := exact{pool: pool, sql: map[key][2]string{}}
	for _, k := range keys() {
		// The filters are $4 and $5 in the window statement, $3 and $4 in the other.
		e.sql[k] = [2]string{
			strings.ReplaceAll(x(exactWindowSQL), "{where}", k.where(3)),
			strings.ReplaceAll(x(exactIndexSQL), "{where}", k.where(2)),
		}
	}
	return e
}

// list returns a page of the jobs of status (one of exactStatuses, or "stuck") matching
// f: first through exactWindowSQL, then, when that did not fill the page, through
// exactIndexSQL. Every matching row is reached, whatever its age.
func (e exact) list(ctx context.Context, status string, f Filter) ([]Row, error) {
	sql := e.sql[keyOf(status, f)]
	args := append([]any{pgx.QueryExecModeExec, cursor(f.Before), f.Limit, exactWindow}, filterArgs(f)...)
	rows, err := e.pool.Query(ctx, sql[0], args...)
	if err != nil {
		return nil, err
	}
	page, err := collectRows(rows, false)
	if err != nil || len(page) == f.Limit {
		return page, err
	}
	// The index statement has no $3: the filters move down one.
	args = append(args[:3], args[4:]...)
	rows, err = e.pool.Query(ctx, sql[1], args...)
	if err != nil {
		return nil, err
	}
	return collectRows(rows, false)
}
