package query

// This file holds the search page's statements: the whole hot table and the whole
// archive searched by args, metadata, error text or JSON containment, newest first, a
// page at a time; and the kinds its picker offers.

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

// wholeSearchSQL finds a page of jobs of table {t} below the cursor $1 matching the
// filters ($3 status, $4 queue, $5 kind, each NULL for any) and {match} (on $6), newest
// first. It walks the primary key backwards and stops at the page's $2th match: a
// common match reads a page's worth of rows, a rare one reads the whole table (no index
// serves a substring or a containment of the args; at a million rows that is about a
// second, within the request's QueryTimeout).
const wholeSearchSQL = `SELECT ` + listColumns + ` FROM {s}.{t}
WHERE id < $1
	AND ($3::text IS NULL OR status = $3)
	AND ($4::text IS NULL OR queue = $4)
	AND ($5::text IS NULL OR kind = $5)
	AND {match}
ORDER BY id DESC
LIMIT $2`

// searchMatches are the predicates of each mode, on $6.
var searchMatches = map[string]string{
	SearchArgs:     `(strpos(payload::text, $6) > 0 OR strpos(metadata::text, $6) > 0)`,
	SearchError:    `strpos(last_error, $6) > 0`,
	SearchContains: `payload @> $6::jsonb`,
}

// kindsSQL counts the jobs of the hot table by kind, the most common first, for the
// search page's kind picker. It reads the whole table (about 0.2 s at a million jobs),
// so Search keeps its answer for kindsMaxAge.
const kindsSQL = `SELECT kind, count(*) FROM {s}.jobs GROUP BY kind ORDER BY 2 DESC, 1 LIMIT $1`

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

// KindCount is a kind and how many jobs of the hot table have it.
type KindCount struct {
	Kind string
	N    int64
}

// Search runs the search page's statements.
type Search struct {
	pool         *pgxpool.Pool
	hot, archive map[string]string // by mode
	kinds        string

	lock    chan struct{}
	kindsAt time.Time
	kindsN  []KindCount
}

func newSearch(pool *pgxpool.Pool, x func(string) string) *Search {
	s := &Search{pool: pool, hot: map[string]string{}, archive: map[string]string{}, kinds: x(kindsSQL), lock: make(chan struct{}, 1)}
	for mode, match := range searchMatches {
		q := strings.ReplaceAll(x(wholeSearchSQL), "{match}", match)
		s.hot[mode] = strings.ReplaceAll(q, "{t}", "jobs")
		s.archive[mode] = strings.ReplaceAll(q, "{t}", "jobs_archive")
	}
	return s
}

// Run returns a page of the jobs of both tables matching f, newest first, and the
// cursor of the next page (0 when there are no more). Each table gives its newest
// f.Limit matches below the cursor; the page is the newest f.Limit of both, so no match
// is skipped.
func (s *Search) Run(ctx context.Context, f SearchFilter) ([]Row, int64, error) {
	if _, ok := searchMatches[f.Mode]; !ok {
		return nil, 0, ErrBadSearch
	}
	args := []any{cursor(f.Before), f.Limit, nullable(string(f.Status)), nullable(f.Queue), nullable(f.Kind), f.Search}
	var all []Row
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
			return nil, 0, err
		}
		got, err := collectRows(rows, t.archived)
		if err != nil {
			return nil, 0, err
		}
		all = append(all, got...)
		full = full || len(got) == f.Limit
	}
	slices.SortFunc(all, func(a, b Row) int { return compareDesc(a.ID, b.ID) })
	if !full {
		return all, 0, nil
	}
	all = all[:f.Limit]
	return all, all[len(all)-1].ID, nil
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
	rows, err := s.pool.Query(ctx, s.kinds, MaxPickerKinds)
	if err != nil {
		return nil, err
	}
	var k KindCount
	out := []KindCount{}
	if _, err := pgx.ForEachRow(rows, []any{&k.Kind, &k.N}, func() error { out = append(out, k); return nil }); err != nil {
		return nil, err
	}
	s.kindsN, s.kindsAt = out, time.Now()
	return out, nil
}
