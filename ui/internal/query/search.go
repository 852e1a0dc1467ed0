package query

// This file holds the search page's statements: the hot table and the archive searched
// by args, metadata, error text or JSON containment, newest first, a page at a time, each
// page reading a window of at most SearchWindow ids per table; and the kinds its picker
// offers, from the planner's statistics.

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Search modes: what the search text is matched against.
const (
	SearchArgs     = "args"     // a substring of the args' or metadata's JSON text
	SearchError    = "error"    // a substring of the last error
	SearchContains = "contains" // a JSON value the args contain (jsonb @>)
)

// wholeSearchSQL finds a page of jobs of table {t} with ids in [$7, $1) matching the
// filters ($3 status, $4 queue, $5 kind, each NULL for any) and {match} (on $6), newest
// first. It walks the primary key backwards through that window and stops at the page's
// $2th match: no index serves a substring or a containment of the args, so the window
// bounds what one page reads (SearchWindow ids per table), however rare the match.
const wholeSearchSQL = `SELECT ` + listColumns + ` FROM {s}.{t}
WHERE id < $1 AND id >= $7
	AND ($3::text IS NULL OR status = $3)
	AND ($4::text IS NULL OR queue = $4)
	AND ($5::text IS NULL OR kind = $5)
	AND {match}
ORDER BY id DESC
LIMIT $2`

// searchRangeSQL is the newest id of both tables plus one (where a first page's window
// ends) and the oldest (where the search ends), through their primary keys.
const searchRangeSQL = `SELECT greatest((SELECT max(id) FROM {s}.jobs), (SELECT max(id) FROM {s}.jobs_archive), 0) + 1,
	coalesce(least((SELECT min(id) FROM {s}.jobs), (SELECT min(id) FROM {s}.jobs_archive)), 0)`

// SearchWindow is how many ids of each table one search page reads at most (a rare match
// is looked for window after window, each page a bounded read: about 50 ms at a
// million jobs).
const SearchWindow = 50000

// searchMatches are the predicates of each mode, on $6.
var searchMatches = map[string]string{
	SearchArgs:     `(strpos(payload::text, $6) > 0 OR strpos(metadata::text, $6) > 0)`,
	SearchError:    `strpos(last_error, $6) > 0`,
	SearchContains: `payload @> $6::jsonb`,
}

// kindsSQL is the hot table's most common kinds with their estimated counts, from the
// planner's statistics (pg_stats, kept by ANALYZE: autovacuum, or the maintenance
// leader's check for growth), the most common first: no table is read. $1 is the schema.
// A table never analyzed has none: kindsSampleSQL answers then.
const kindsSQL = `SELECT k.kind, round(k.f * greatest(c.reltuples, 0))::bigint
FROM pg_stats s, pg_class c, unnest(s.most_common_vals::text::text[], s.most_common_freqs) AS k (kind, f)
WHERE s.schemaname = $1 AND s.tablename = 'jobs' AND s.attname = 'kind'
	AND c.oid = to_regclass(quote_ident($1) || '.jobs')
ORDER BY 2 DESC, 1 LIMIT $2`

// kindsSampleSQL counts the kinds of the newest 20,000 jobs (at most $1 kinds), when the
// statistics have none.
const kindsSampleSQL = `SELECT kind, count(*) FROM (SELECT kind FROM {s}.jobs ORDER BY id DESC LIMIT 20000) t
GROUP BY kind ORDER BY 2 DESC, 1 LIMIT $1`

// Kind picker bounds.
const (
	// MaxPickerKinds bounds the kinds the picker offers.
	MaxPickerKinds = 200
	kindsMaxAge    = time.Minute
)

// ErrBadSearch is returned for a search mode this file does not know.
var ErrBadSearch = errors.New("query: unknown search mode")

// SearchFilter is one search: the text, its mode, the filters and the page.
type SearchFilter struct {
	Filter        // Search is the text
	Mode   string // SearchArgs, SearchError or SearchContains
}

// KindCount is a kind and how many jobs of the hot table have it (an estimate).
type KindCount struct {
	Kind string
	N    int64
}

// Search runs the search page's statements.
type Search struct {
	pool                       *pgxpool.Pool
	schema                     string
	hot, archive               map[string]string // by mode
	kinds, kindsSample, bounds string

	lock    chan struct{}
	kindsAt time.Time
	kindsN  []KindCount
}

func newSearch(pool *pgxpool.Pool, schema string, x func(string) string) *Search {
	s := &Search{pool: pool, schema: schema, hot: map[string]string{}, archive: map[string]string{}, kinds: kindsSQL,
		kindsSample: x(kindsSampleSQL), bounds: x(searchRangeSQL), lock: make(chan struct{}, 1)}
	for mode, match := range searchMatches {
		q := strings.ReplaceAll(x(wholeSearchSQL), "{match}", match)
		s.hot[mode] = strings.ReplaceAll(q, "{t}", "jobs")
		s.archive[mode] = strings.ReplaceAll(q, "{t}", "jobs_archive")
	}
	return s
}

// SearchPage is a page of a search: its jobs, newest first, and where the next page
// starts (0: the search is over). Window says the page ended at its window rather than at
// a full page: more matches may exist among older jobs, from Next on; From is the
// window's oldest id.
type SearchPage struct {
	Rows   []Row
	Next   int64
	Window bool
	From   int64
}

// Run returns a page of the jobs of both tables matching f, newest first, among the
// SearchWindow ids below the cursor. Each table gives its newest f.Limit matches in the
// window; the page is the newest f.Limit of both, so no match is skipped.
func (s *Search) Run(ctx context.Context, f SearchFilter) (SearchPage, error) {
	if _, ok := searchMatches[f.Mode]; !ok {
		return SearchPage{}, ErrBadSearch
	}
	var top, oldest int64
	if err := s.pool.QueryRow(ctx, s.bounds).Scan(&top, &oldest); err != nil {
		return SearchPage{}, err
	}
	top = min(cursor(f.Before), top)
	p := SearchPage{From: max(top-SearchWindow, 0)}
	args := []any{top, f.Limit, nullable(string(f.Status)), nullable(f.Queue), nullable(f.Kind), f.Search, p.From}
	full := false // a table had more matches than its page: there is a next page
	for _, t := range []struct {
		sql      string
		archived bool
	}{{s.hot[f.Mode], false}, {s.archive[f.Mode], true}} {
		if t.archived && f.Status != "" && f.Status != "succeeded" {
			continue // the archive holds succeeded jobs only
		}
		rows, err := s.pool.Query(ctx, t.sql, args...)
		if err != nil {
			return SearchPage{}, err
		}
		got, err := collectRows(rows, t.archived)
		if err != nil {
			return SearchPage{}, err
		}
		p.Rows = append(p.Rows, got...)
		full = full || len(got) == f.Limit
	}
	slices.SortFunc(p.Rows, func(a, b Row) int { return compareDesc(a.ID, b.ID) })
	switch {
	case full:
		p.Rows = p.Rows[:f.Limit]
		p.Next = p.Rows[len(p.Rows)-1].ID
	case p.From > oldest:
		p.Next, p.Window = p.From, true
	}
	return p, nil
}

// Kinds returns the hot table's kinds with their counts, the most common first, at most
// MaxPickerKinds, read at most once per kindsMaxAge.
func (s *Search) Kinds(ctx context.Context) ([]KindCount, error) {
	select {
	case s.lock <- struct{}{}:
		defer func() { <-s.lock }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if s.kindsN != nil && time.Since(s.kindsAt) < kindsMaxAge {
		return s.kindsN, nil
	}
	var out []KindCount
	for _, q := range []struct {
		sql  string
		args []any
	}{{s.kinds, []any{s.schema, MaxPickerKinds}}, {s.kindsSample, []any{MaxPickerKinds}}} {
		rows, err := s.pool.Query(ctx, q.sql, q.args...)
		if err != nil {
			return nil, err
		}
		var k KindCount
		out = []KindCount{}
		if _, err := pgx.ForEachRow(rows, []any{&k.Kind, &k.N}, func() error { out = append(out, k); return nil }); err != nil {
			return nil, err
		}
		if len(out) > 0 {
			break
		}
	}
	s.kindsN, s.kindsAt = out, time.Now()
	return out, nil
}
