package query

// This file holds the jobs page's list: the hot table and the archive merged by id, each
// reached by the exact lists where a partial index serves the filter and by a bounded
// window walk elsewhere.

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
)

// Page is a page of jobs and where the next one starts.
type Page struct {
	Rows []Row
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

// Lists reads the list pages of jobs.
type Lists struct {
	hot, archive window
	exact        exact
	stats        Stats
}

func newLists(pool *pgxpool.Pool, x func(string) string, stats Stats) *Lists {
	return &Lists{
		hot:     newWindow(pool, x, "jobs", false),
		archive: newWindow(pool, x, "jobs_archive", true),
		exact:   newExact(pool, x),
		stats:   stats,
	}
}

// Jobs returns one page of jobs, newest first, from the hot table and the archive
// merged by id. Each table is walked by pageSQL; the page holds only ids down to the
// higher of the two tables' scan bounds, so it never skips a job of either table.
func (l *Lists) Jobs(ctx context.Context, f Filter) (Page, error) {
	if f.Search == "" && slices.Contains(exactStatuses, f.Status) && indexServes(string(f.Status), f) {
		return l.exactPage(ctx, string(f.Status), f)
	}
	var parts []part
	mixed := f.Status == "" && f.Search == "" && (f.Queue != "" || f.Kind != "") // exact parts beside window parts
	if mixed {
		p, err := l.queueOrKindParts(ctx, f)
		if err != nil {
			return Page{}, err
		}
		parts = p
	} else {
		hot, err := l.hot.scan(ctx, f, f.Status)
		if err != nil {
			return Page{}, err
		}
		parts = append(parts, hot)
	}
	if statusInArchive(f.Status) {
		arch, err := l.archive.scan(ctx, f, f.Status)
		if err != nil {
			return Page{}, err
		}
		arch.window, arch.status = mixed, skiplock.StatusSucceeded
		parts = append(parts, arch)
	}
	return merge(parts, f.Limit), nil
}

// exactPage is the page of an indexed status, from its exact list alone.
func (l *Lists) exactPage(ctx context.Context, status string, f Filter) (Page, error) {
	p, err := l.exactPart(ctx, status, f)
	if err != nil {
		return Page{}, err
	}
	return Page{Rows: p.rows, Next: p.bound}, nil
}

// exactPart is the exact list of status as a part: bounded by its last row when full.
func (l *Lists) exactPart(ctx context.Context, status string, f Filter) (part, error) {
	rows, err := l.exact.list(ctx, status, f)
	if err != nil {
		return part{}, err
	}
	p := part{rows: rows}
	if len(rows) == f.Limit {
		p.bound = rows[len(rows)-1].ID
	}
	return p, nil
}

// queueOrKindParts are the hot table's parts of a list of a queue or kind of any
// status: the indexed statuses exactly, so a small queue's jobs are on the first page
// however many newer jobs other queues have; succeeded and cancelled jobs of the hot
// table (no index holds them) through a window, and only when the stats count some
// (those of the last StatsMaxAge may be missed).
func (l *Lists) queueOrKindParts(ctx context.Context, f Filter) ([]part, error) {
	var parts []part
	for _, st := range []string{string(skiplock.StatusQueued), string(skiplock.StatusRunning), "stuck"} {
		if indexServes(st, f) {
			p, err := l.exactPart(ctx, st, f)
			if err != nil {
				return nil, err
			}
			parts = append(parts, p)
			continue
		}
		p, err := l.hot.scan(ctx, f, skiplock.JobStatus(st))
		if err != nil {
			return nil, err
		}
		p.window, p.status = true, skiplock.JobStatus(st)
		parts = append(parts, p)
	}
	finished, err := l.hotFinished(ctx, f.Queue)
	if err != nil {
		return nil, err
	}
	for _, st := range []skiplock.JobStatus{skiplock.StatusSucceeded, skiplock.StatusCancelled} {
		if finished[st] == 0 {
			continue
		}
		p, err := l.hot.scan(ctx, f, st)
		if err != nil {
			return nil, err
		}
		p.window, p.status = true, st
		parts = append(parts, p)
	}
	return parts, nil
}

// merge makes a page of at most limit rows of parts. The page holds the rows down to
// the highest bound: below it some part may have a match it did not return. Window
// parts beside exact ones do not set it (their jobs are looked for among the newest
// rows only, and the page says so).
func merge(parts []part, limit int) Page {
	var bound, windowBound int64
	var all []Row
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
	slices.SortFunc(all, func(a, b Row) int { return compareDesc(a.ID, b.ID) })
	all = slices.DeleteFunc(all, func(r Row) bool { return r.ID < bound })
	page := Page{Rows: all[:min(len(all), limit)]}
	switch {
	case len(page.Rows) == limit:
		page.Next = page.Rows[len(page.Rows)-1].ID
	case bound > 0:
		page.Next, page.Partial = bound, true
	}
	if windowBound > 0 && (page.Next == 0 || page.Next < windowBound) {
		page.Unindexed, page.Windowed = windowBound, windowed
	}
	return page
}

// Stuck returns a page of dead and failed jobs (f.Status, when set, is one of them).
func (l *Lists) Stuck(ctx context.Context, f Filter) ([]Row, error) {
	if f.Status != "" {
		return l.exact.list(ctx, string(f.Status), f)
	}
	return l.exact.list(ctx, "stuck", f)
}

// statusInArchive says whether jobs of status can be in the archive: workers archive
// succeeded jobs only; every other state lives in the hot table. Skipping the archive
// for them spares a filtered page a window walk that could find nothing.
func statusInArchive(s skiplock.JobStatus) bool {
	return s == "" || s == skiplock.StatusSucceeded
}

// indexServes says whether the partial index of status (one of exactStatuses, or
// "stuck") reaches the jobs of filter f without reading a large part of it: running jobs
// are few, jobs_stuck_idx is keyed by kind then queue, and jobs_claim_idx by queue only,
// so a kind filter on queued jobs (or none, when few are queued) would read every queued
// job. Those lists walk a bounded window instead.
func indexServes(status string, f Filter) bool {
	if status == string(skiplock.StatusQueued) {
		return f.Kind == ""
	}
	return true
}

// hotFinished counts, from the stats, the succeeded and cancelled jobs in the hot table
// of queue ("" for every queue).
func (l *Lists) hotFinished(ctx context.Context, queue string) (map[skiplock.JobStatus]int64, error) {
	stats, _, err := l.stats.Read(ctx)
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
