package query

// This file holds the window walks: a list page over one table, the hot one or the
// archive, that examines a bounded number of its newest rows below the cursor.

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
)

// ScanWindow is the most rows of one table a filtered list page examines: a filter that
// matches little cannot make a page walk a million-row archive.
const ScanWindow = 20_000

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

// rowsSQL loads the list rows of the ids pageSQL found.
const rowsSQL = `SELECT ` + listColumns + ` FROM {s}.{t} WHERE id = ANY($1)`

// window walks one table: jobs or jobs_archive.
type window struct {
	pool                   *pgxpool.Pool
	archived               bool // the table is the archive
	page, search, end, row string
}

func newWindow(pool *pgxpool.Pool, x func(string) string, table string, archived bool) window {
	t := func(s string) string { return strings.ReplaceAll(x(s), "{t}", table) }
	return window{pool: pool, archived: archived,
		page: t(pageSQL), search: t(searchSQL), end: t(windowEndSQL), row: t(rowsSQL)}
}

// part is what one walk or one exact list found for a page.
type part struct {
	rows   []Row
	bound  int64              // every match of the table with an id in [bound, Before) is in rows
	window bool               // a window walk next to exact parts: its bound does not cut them
	status skiplock.JobStatus // of a window part
}

// scan walks the table for the jobs of status matching f: a page's worth of rows when
// nothing is filtered, else at most ScanWindow.
func (w window) scan(ctx context.Context, f Filter, status skiplock.JobStatus) (part, error) {
	n := f.Limit
	if status != "" || f.Queue != "" || f.Kind != "" || f.Search != "" {
		n = ScanWindow
	}
	sql := w.page
	args := []any{cursor(f.Before), n, nullable(string(status)), nullable(f.Queue), nullable(f.Kind), f.Limit}
	if f.Search != "" {
		sql = w.search
		args = append(args, f.Search)
	}
	rows, err := w.pool.Query(ctx, sql, args...)
	if err != nil {
		return part{}, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return part{}, err
	}
	p := part{}
	if p.bound, err = w.bound(ctx, f, ids, n); err != nil {
		return part{}, err
	}
	if len(ids) > 0 {
		rows, err := w.pool.Query(ctx, w.row, ids)
		if err != nil {
			return part{}, err
		}
		if p.rows, err = collectRows(rows, w.archived); err != nil {
			return part{}, err
		}
	}
	return p, nil
}

// bound is the lowest id below which a walk of n rows that found ids may have missed a
// match: its last id when the page is full, the end of the window when the window ran
// out first, 0 when the walk reached the end of the table.
func (w window) bound(ctx context.Context, f Filter, ids []int64, n int) (int64, error) {
	if len(ids) == f.Limit {
		return ids[len(ids)-1], nil
	}
	if n <= f.Limit {
		return 0, nil
	}
	var examined, low int64
	if err := w.pool.QueryRow(ctx, w.end, cursor(f.Before), n).Scan(&examined, &low); err != nil {
		return 0, err
	}
	if examined == int64(n) {
		return low, nil
	}
	return 0, nil
}
