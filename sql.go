// This file holds the rendering of statement templates: every statement is a named
// constant beside the code that runs it, written with {s} where the schema goes, and
// rendered once, by its owner, at construction.

package skiplock

import (
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// renderSQL puts the sanitized schema identifier where a statement template says {s}.
// Every owner of statements calls it once, at construction.
func renderSQL(schema, template string) string {
	return strings.ReplaceAll(template, "{s}", pgx.Identifier{schema}.Sanitize())
}

// replanEvery is how often a replanned statement gets a new text, and so a new plan.
const replanEvery = 3 * time.Second

// replanned is a statement on the jobs table that picks its rows by id or ctid (a claim,
// a batch of outcomes), sent with a text that changes every replanEvery: a comment with
// a generation number at its end. With pgx's default mode a statement is prepared once
// per connection and text, and after five runs Postgres caches a generic plan for it. A
// worker that starts on an empty queue makes that plan while the table is tiny, where a
// sequential scan is cheaper than following ids. The plan stayed while the table filled,
// until an ANALYZE (autovacuum's, up to a minute or more later; never with autovacuum
// off), and every claim read the whole table: a worker started before a burst of
// 100,000 jobs drained it at half the rate of one started after it. A new text is
// prepared and planned anew, for the table as it is then. Planning at every run instead
// (an unnamed statement) cost the drain 30 % when the plan was right.
type replanned struct {
	base string
	cur  atomic.Pointer[replanText]
}

// replanText is the text of one generation.
type replanText struct {
	gen int64
	sql string
}

func newReplanned(sql string) *replanned { return &replanned{base: sql} }

// text returns the statement's text for now.
func (r *replanned) text() string {
	gen := time.Now().UnixNano() / int64(replanEvery)
	if p := r.cur.Load(); p != nil && p.gen == gen {
		return p.sql
	}
	p := &replanText{gen: gen, sql: r.base + "\n-- plan " + strconv.FormatInt(gen, 10)}
	r.cur.Store(p)
	return p.sql
}
