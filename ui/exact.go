package ui

// This file holds the lists that reach their rows through a partial index of the jobs
// table: a status filter of queued, running, dead or failed, and the running jobs of the
// workers page.

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

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

// runningNowSQL lists the running jobs by worker with their progress, for the workers
// page. jobs_running_idx holds exactly them, so the read is as small as the fleet's
// slots; $1 bounds it anyway.
const runningNowSQL = `SELECT id, queue, kind, coalesce(locked_by, ''), locked_at,
	(progress->>'value')::float8, coalesce(progress->>'message', '')
FROM {s}.jobs WHERE status = 'running'
ORDER BY locked_by, id
LIMIT $1`

// maxRunningShown bounds the running jobs the workers page lists.
const maxRunningShown = 500

// runningJob is one running job of the workers page.
type runningJob struct {
	ID              int64
	Queue, Kind     string
	Worker          string
	Since           *time.Time // the last heartbeat
	Progress        *float64
	ProgressMessage string
}

func (h *Handler) runningNow(ctx context.Context) ([]runningJob, error) {
	rows, err := h.pool.Query(ctx, h.sql.runningNow, maxRunningShown+1)
	if err != nil {
		return nil, err
	}
	var out []runningJob
	var j runningJob
	_, err = pgx.ForEachRow(rows, []any{&j.ID, &j.Queue, &j.Kind, &j.Worker, &j.Since, &j.Progress, &j.ProgressMessage}, func() error {
		out = append(out, j)
		j = runningJob{}
		return nil
	})
	return out, err
}

// listExact returns a page of the jobs of status (one of exactStatuses, or "stuck")
// matching f: first through exactWindowSQL, then, when that did not fill the page,
// through exactIndexSQL. Every matching row is reached, whatever its age.
func (h *Handler) listExact(ctx context.Context, status string, f listFilter) ([]listRow, error) {
	sql := h.sql.exact[exactKey{status, f.Queue != "", f.Kind != ""}]
	args := []any{pgx.QueryExecModeExec, cursor(f.Before), f.Limit, exactWindow}
	if f.Queue != "" {
		args = append(args, f.Queue)
	}
	if f.Kind != "" {
		args = append(args, f.Kind)
	}
	rows, err := h.pool.Query(ctx, sql[0], args...)
	if err != nil {
		return nil, err
	}
	page, err := collectRows(rows, false)
	if err != nil || len(page) == f.Limit {
		return page, err
	}
	// The index statement has no $3: the filters move down one.
	args = append(args[:3], args[4:]...)
	rows, err = h.pool.Query(ctx, sql[1], args...)
	if err != nil {
		return nil, err
	}
	return collectRows(rows, false)
}
