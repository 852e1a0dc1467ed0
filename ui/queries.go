package ui

// This file holds the dashboard's own SQL (schema rendered in) and the windowed lists: the
// jobs page over the hot table and the archive, merged by id, a bounded walk per table.

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock"
)

// statements holds the dashboard's own SQL with the schema quoted in ({s} in each
// template stands for the identifier sanitized by pgx.Identifier). Reads the public
// [skiplock.Client] methods cover (Stats, Get, Cancel, Requeue) go through them instead.
type statements struct {
	nowMinute, finished      string
	failures                 string
	pageHot, pageArchive     string
	searchHot, searchArchive string
	endHot, endArchive       string
	rowsHot, rowsArchive     string
	extras                   string
	runNow                   string
	deleteHot, deleteArchive string
	deleteStuck              string
	running                  string
	runningNow               string
	workflowList             string
	// exact holds, by status and filter shape, the two listings of exactWindowSQL and
	// exactIndexSQL.
	exact map[exactKey][2]string
}

// exactKey picks one rendering of exactWindowSQL and exactIndexSQL.
type exactKey struct {
	status      string // a status of exactStatuses, or "stuck" for dead and failed
	queue, kind bool   // whether the queue and the kind are filtered
}

func buildStatements(schema string) statements {
	s := pgx.Identifier{schema}.Sanitize()
	x := func(t string) string { return strings.ReplaceAll(t, "{s}", s) }
	table := func(t, name string) string { return strings.ReplaceAll(x(t), "{t}", name) }
	out := statements{
		nowMinute:     nowMinuteSQL,
		finished:      x(finishedSQL),
		failures:      x(failuresSQL),
		pageHot:       table(pageSQL, "jobs"),
		pageArchive:   table(pageSQL, "jobs_archive"),
		searchHot:     table(searchSQL, "jobs"),
		searchArchive: table(searchSQL, "jobs_archive"),
		endHot:        table(windowEndSQL, "jobs"),
		endArchive:    table(windowEndSQL, "jobs_archive"),
		rowsHot:       table(rowsSQL, "jobs"),
		rowsArchive:   table(rowsSQL, "jobs_archive"),
		extras:        x(extrasSQL),
		runNow:        x(runNowSQL),
		deleteHot:     x(deleteHotSQL),
		deleteArchive: x(deleteArchiveSQL),
		deleteStuck:   x(deleteStuckSQL),
		running:       x(runningSQL),
		runningNow:    x(runningNowSQL),
		workflowList:  x(workflowListSQL),
		exact:         map[exactKey][2]string{},
	}
	for _, st := range append(slices.Clone(exactStatuses), "stuck") {
		pred := "status = '" + string(st) + "'"
		if st == "stuck" {
			pred = "status IN ('dead', 'failed')"
		}
		for _, q := range []bool{false, true} {
			for _, k := range []bool{false, true} {
				// The filters are $4 and $5 in the window statement, $3 and $4 in the other.
				where := func(n int) string {
					w := pred
					if q {
						n++
						w += " AND queue = $" + strconv.Itoa(n)
					}
					if k {
						n++
						w += " AND kind = $" + strconv.Itoa(n)
					}
					return w
				}
				out.exact[exactKey{string(st), q, k}] = [2]string{
					strings.ReplaceAll(x(exactWindowSQL), "{where}", where(3)),
					strings.ReplaceAll(x(exactIndexSQL), "{where}", where(2)),
				}
			}
		}
	}
	return out
}

// pageSQL finds the ids of one list page in table {t}. It walks the primary key
// backwards from the cursor through at most $2 rows (the inner LIMIT), and the outer
// LIMIT stops the walk as soon as the page is full: a filter that matches often reads a
// page's worth of rows, one that matches rarely reads at most $2, never the whole
// (possibly million-row) archive. The subquery's order carries through, so there is no
// Sort.
const pageSQL = `SELECT id FROM (
	SELECT id, status, queue, kind FROM {s}.{t}
	WHERE id < $1
	ORDER BY id DESC
	LIMIT $2
) w
WHERE ($3::text IS NULL OR status = $3)
	AND ($4::text IS NULL OR queue = $4)
	AND ($5::text IS NULL OR kind = $5)
ORDER BY id DESC
LIMIT $6`

// windowEndSQL says, for a page that came back short, how many rows its walk examined
// and the lowest id it reached: fewer than $2 means the table has no more rows below the
// cursor. It reads only the primary key.
const windowEndSQL = `SELECT count(*), coalesce(min(id), 0) FROM (
	SELECT id FROM {s}.{t} WHERE id < $1 ORDER BY id DESC LIMIT $2
) w`

// searchSQL is pageSQL that also keeps only the jobs whose args or metadata, as JSON
// text, contain $7 (strpos: a plain substring, no pattern characters). Like every window
// walk it examines at most $2 rows per table per page, so a search of a million jobs
// costs what a rare filter does, and "Older" goes on from where it stopped. No index
// serves a substring of the args; a search that must see every job is a query to run by
// hand.
const searchSQL = `SELECT id FROM (
	SELECT id, status, queue, kind, payload, metadata FROM {s}.{t}
	WHERE id < $1
	ORDER BY id DESC
	LIMIT $2
) w
WHERE ($3::text IS NULL OR status = $3)
	AND ($4::text IS NULL OR queue = $4)
	AND ($5::text IS NULL OR kind = $5)
	AND (strpos(payload::text, $7) > 0 OR strpos(metadata::text, $7) > 0)
ORDER BY id DESC
LIMIT $6`

// listColumns is what a list row shows: short prefixes of the args and the last error,
// never a whole payload.
const listColumns = `id, queue, kind, status, attempts, max_attempts, run_at, created_at, finished_at,
	left(coalesce(last_error, ''), 300), left(payload::text, 160)`

// rowsSQL loads the list rows of the ids pageSQL found.
const rowsSQL = `SELECT ` + listColumns + ` FROM {s}.{t} WHERE id = ANY($1)`

// extrasSQL returns a job's row as JSON without the columns the job page shows by name,
// and its raw error history (whose entries may carry more than skiplock.AttemptError
// decodes, such as a stack): columns a later migration adds (metadata, progress, output)
// show up on the page without a change here.
const extrasSQL = `SELECT to_jsonb(j) - $2::text[], j.errors FROM {s}.jobs j WHERE id = $1
UNION ALL
SELECT to_jsonb(a) - $2::text[], a.errors FROM {s}.jobs_archive a WHERE id = $1
LIMIT 1`

// knownColumns are the columns the job page shows by name.
var knownColumns = []string{"id", "queue", "kind", "payload", "status", "priority", "run_at", "attempts",
	"max_attempts", "locked_at", "locked_by", "last_error", "errors", "unique_key", "created_at", "finished_at"}

// runNowSQL makes a queued job that waits for a later run_at (scheduled, or backing off
// after a failure) due now. Workers find it at their next poll.
const runNowSQL = `UPDATE {s}.jobs SET run_at = now()
WHERE id = $1 AND status = 'queued' AND run_at > now()`

// deleteHotSQL deletes jobs from the hot table, except running ones: their worker holds
// them and would write their result to a row that is gone. It returns the deleted ids.
const deleteHotSQL = `DELETE FROM {s}.jobs WHERE id = ANY($1) AND status <> 'running' RETURNING id`

// deleteArchiveSQL deletes finished jobs from the archive.
const deleteArchiveSQL = `DELETE FROM {s}.jobs_archive WHERE id = ANY($1) RETURNING id`

// deleteStuckSQL is the dead page's delete: only jobs still dead or failed, so a job
// requeued by someone else since the page was rendered is left alone.
const deleteStuckSQL = `DELETE FROM {s}.jobs WHERE id = ANY($1) AND status IN ('dead', 'failed') RETURNING id`

// runningSQL says which of the ids are running (and so were not deleted).
const runningSQL = `SELECT id FROM {s}.jobs WHERE id = ANY($1) AND status = 'running'`

// listFilter selects the jobs of a list page. Empty fields match everything.
type listFilter struct {
	Status skiplock.JobStatus
	Queue  string
	Kind   string
	Search string // a substring of the args or metadata JSON; searched in a bounded window
	Before int64  // the keyset cursor: only ids below it; 0 means from the newest
	Limit  int
}

// listRow is one job of a list.
type listRow struct {
	ID          int64
	Queue       string
	Kind        string
	Status      string
	Attempts    int
	MaxAttempts int
	RunAt       time.Time
	CreatedAt   time.Time
	FinishedAt  *time.Time
	LastError   string
	Args        string
	Archived    bool
}

// listPage is a page of jobs and where the next one starts.
type listPage struct {
	Rows []listRow
	// Next is the cursor of the next page; 0 when there are no more jobs.
	Next int64
	// Partial says the page is short because the scan window ran out, not the jobs:
	// following Next looks further.
	Partial bool
	// Unindexed, on a list of a queue or kind of any status, is the id below which its
	// jobs of the Windowed statuses (which no index reaches for this filter: succeeded,
	// cancelled, archived, and queued by kind alone) were not looked for on this page; 0
	// when the page missed none of them.
	Unindexed int64
	Windowed  []skiplock.JobStatus // the statuses so looked for
}

// statusInArchive says whether jobs of status can be in the archive: workers archive
// succeeded jobs only; every other state lives in the hot table. Skipping the archive
// for them spares a filtered page a window walk that could find nothing.
func statusInArchive(s skiplock.JobStatus) bool {
	return s == "" || s == skiplock.StatusSucceeded
}

// listJobs returns one page of jobs, newest first, from the hot table and the archive
// merged by id. Each table is walked by pageSQL; the page holds only ids down to the
// higher of the two tables' scan bounds, so it never skips a job of either table.
func (h *Handler) listJobs(ctx context.Context, f listFilter) (listPage, error) {
	if f.Search == "" && slices.Contains(exactStatuses, f.Status) && indexServes(string(f.Status), f) {
		rows, err := h.listExact(ctx, string(f.Status), f)
		if err != nil {
			return listPage{}, err
		}
		p := listPage{Rows: rows}
		if len(rows) == f.Limit {
			p.Next = rows[len(rows)-1].ID
		}
		return p, nil
	}
	type part struct {
		rows   []listRow
		bound  int64              // every match of the table with an id in [bound, Before) is in rows
		window bool               // a window walk next to exact parts: its bound does not cut them
		status skiplock.JobStatus // of a window part
	}
	scan := func(status skiplock.JobStatus, pageSQL, endSQL, rowsSQL string, archived bool) (part, error) {
		n := f.Limit
		if status != "" || f.Queue != "" || f.Kind != "" || f.Search != "" {
			n = scanWindow
		}
		args := []any{cursor(f.Before), n, nullable(string(status)), nullable(f.Queue), nullable(f.Kind), f.Limit}
		if f.Search != "" {
			pageSQL = map[bool]string{false: h.sql.searchHot, true: h.sql.searchArchive}[archived]
			args = append(args, f.Search)
		}
		rows, err := h.pool.Query(ctx, pageSQL, args...)
		if err != nil {
			return part{}, err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return part{}, err
		}
		p := part{}
		if len(ids) == f.Limit {
			p.bound = ids[len(ids)-1]
		} else if n > f.Limit {
			var examined, low int64
			if err := h.pool.QueryRow(ctx, endSQL, cursor(f.Before), n).Scan(&examined, &low); err != nil {
				return part{}, err
			}
			if examined == int64(n) {
				p.bound = low
			}
		}
		if len(ids) > 0 {
			rows, err := h.pool.Query(ctx, rowsSQL, ids)
			if err != nil {
				return part{}, err
			}
			p.rows, err = collectRows(rows, archived)
			if err != nil {
				return part{}, err
			}
		}
		return p, nil
	}
	parts := []part{}
	mixed := false // exact parts beside window parts
	if f.Status == "" && f.Search == "" && (f.Queue != "" || f.Kind != "") {
		// A queue or kind of any status: the indexed statuses exactly, so a small queue's
		// jobs are on the first page however many newer jobs other queues have; succeeded
		// and cancelled jobs of the hot table (no index holds them) through a window, and
		// only when the stats count some (those of the last StatsMaxAge may be missed).
		for _, st := range []string{string(skiplock.StatusQueued), string(skiplock.StatusRunning), "stuck"} {
			if !indexServes(st, f) {
				p, err := scan(skiplock.JobStatus(st), h.sql.pageHot, h.sql.endHot, h.sql.rowsHot, false)
				if err != nil {
					return listPage{}, err
				}
				p.window, p.status = true, skiplock.JobStatus(st)
				parts = append(parts, p)
				continue
			}
			rows, err := h.listExact(ctx, st, f)
			if err != nil {
				return listPage{}, err
			}
			p := part{rows: rows}
			if len(rows) == f.Limit {
				p.bound = rows[len(rows)-1].ID
			}
			parts = append(parts, p)
		}
		finished, err := h.hotFinished(ctx, f.Queue)
		if err != nil {
			return listPage{}, err
		}
		for _, st := range []skiplock.JobStatus{skiplock.StatusSucceeded, skiplock.StatusCancelled} {
			if finished[st] == 0 {
				continue
			}
			p, err := scan(st, h.sql.pageHot, h.sql.endHot, h.sql.rowsHot, false)
			if err != nil {
				return listPage{}, err
			}
			p.window, p.status = true, st
			parts = append(parts, p)
		}
		mixed = true
	} else {
		hot, err := scan(f.Status, h.sql.pageHot, h.sql.endHot, h.sql.rowsHot, false)
		if err != nil {
			return listPage{}, err
		}
		parts = append(parts, hot)
	}
	if statusInArchive(f.Status) {
		arch, err := scan(f.Status, h.sql.pageArchive, h.sql.endArchive, h.sql.rowsArchive, true)
		if err != nil {
			return listPage{}, err
		}
		arch.window, arch.status = mixed, skiplock.StatusSucceeded
		parts = append(parts, arch)
	}
	// The page holds the rows down to the highest bound: below it some part may have a
	// match it did not return. Window parts beside exact ones do not set it (their jobs
	// are looked for among the newest rows only, and the page says so).
	var bound, windowBound int64
	var all []listRow
	var windowed []skiplock.JobStatus
	for _, p := range parts {
		if p.window {
			windowBound = max(windowBound, p.bound)
			if p.bound > 0 && !slices.Contains(windowed, p.status) {
				windowed = append(windowed, p.status)
			}
		} else {
			bound = max(bound, p.bound)
		}
		all = append(all, p.rows...)
	}
	slices.SortFunc(all, func(a, b listRow) int { return compareDesc(a.ID, b.ID) })
	all = slices.DeleteFunc(all, func(r listRow) bool { return r.ID < bound })
	page := listPage{Rows: all[:min(len(all), f.Limit)]}
	switch {
	case len(page.Rows) == f.Limit:
		page.Next = page.Rows[len(page.Rows)-1].ID
	case bound > 0:
		page.Next, page.Partial = bound, true
	}
	if windowBound > 0 && (page.Next == 0 || page.Next < windowBound) {
		page.Unindexed, page.Windowed = windowBound, windowed
	}
	return page, nil
}

// indexServes says whether the partial index of status (one of exactStatuses, or
// "stuck") reaches the jobs of filter f without reading a large part of it: running jobs
// are few, jobs_stuck_idx is keyed by kind then queue, and jobs_claim_idx by queue only,
// so a kind filter on queued jobs (or none, when few are queued) would read every queued
// job. Those lists walk a bounded window instead.
func indexServes(status string, f listFilter) bool {
	if status == string(skiplock.StatusQueued) {
		return f.Kind == ""
	}
	return true
}

// hotFinished counts, from the stats, the succeeded and cancelled jobs in the hot table
// of queue ("" for every queue).
func (h *Handler) hotFinished(ctx context.Context, queue string) (map[skiplock.JobStatus]int64, error) {
	stats, _, err := h.stats(ctx)
	if err != nil {
		return nil, err
	}
	out := map[skiplock.JobStatus]int64{}
	for _, s := range stats {
		if queue == "" || s.Queue == queue {
			out[skiplock.StatusSucceeded] += s.Counts[skiplock.StatusSucceeded]
			out[skiplock.StatusCancelled] += s.Counts[skiplock.StatusCancelled]
		}
	}
	return out, nil
}

func compareDesc(a, b int64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// listStuck returns a page of dead and failed jobs (f.Status, when set, is one of them).
func (h *Handler) listStuck(ctx context.Context, f listFilter) ([]listRow, error) {
	if f.Status != "" {
		return h.listExact(ctx, string(f.Status), f)
	}
	return h.listExact(ctx, "stuck", f)
}

// cursor turns "from the newest" into an id above every job.
func cursor(before int64) int64 {
	if before <= 0 {
		return 1<<63 - 1
	}
	return before
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func collectRows(rows pgx.Rows, archived bool) ([]listRow, error) {
	var out []listRow
	var r listRow
	_, err := pgx.ForEachRow(rows, []any{&r.ID, &r.Queue, &r.Kind, &r.Status, &r.Attempts, &r.MaxAttempts,
		&r.RunAt, &r.CreatedAt, &r.FinishedAt, &r.LastError, &r.Args}, func() error {
		r.Archived = archived
		out = append(out, r)
		r = listRow{}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b listRow) int { return compareDesc(a.ID, b.ID) })
	return out, nil
}

// jobExtras are the parts of a job's row the public JobRow does not carry.
type jobExtras struct {
	Other  map[string]json.RawMessage // columns the page does not know by name
	Errors []map[string]any           // the raw error history, oldest first
}

func (h *Handler) jobExtras(ctx context.Context, id int64) (jobExtras, error) {
	var other, errs []byte
	err := h.pool.QueryRow(ctx, h.sql.extras, id, knownColumns).Scan(&other, &errs)
	if errors.Is(err, pgx.ErrNoRows) {
		return jobExtras{}, nil
	}
	if err != nil {
		return jobExtras{}, err
	}
	var x jobExtras
	if err := json.Unmarshal(other, &x.Other); err != nil {
		return jobExtras{}, err
	}
	for k, v := range x.Other {
		if string(v) == "null" {
			delete(x.Other, k)
		}
	}
	if len(errs) > 0 {
		_ = json.Unmarshal(errs, &x.Errors) // a history edited by hand into another shape shows nothing
	}
	return x, nil
}

// deleteResult is what a delete did.
type deleteResult struct {
	Deleted []int64
	Running []int64 // refused: running
}

// deleteJobs deletes the jobs with the given ids from the hot table (unless running) and
// from the archive.
func (h *Handler) deleteJobs(ctx context.Context, ids []int64) (deleteResult, error) {
	var res deleteResult
	rows, err := h.pool.Query(ctx, h.sql.deleteHot, ids)
	if err != nil {
		return res, err
	}
	hot, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return res, err
	}
	res.Deleted = hot
	rest := slices.DeleteFunc(slices.Clone(ids), func(id int64) bool { return slices.Contains(hot, id) })
	if len(rest) == 0 {
		return res, nil
	}
	rows, err = h.pool.Query(ctx, h.sql.deleteArchive, rest)
	if err != nil {
		return res, err
	}
	arch, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return res, err
	}
	res.Deleted = append(res.Deleted, arch...)
	rows, err = h.pool.Query(ctx, h.sql.running, rest)
	if err != nil {
		return res, err
	}
	res.Running, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	return res, err
}
