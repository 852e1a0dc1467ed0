package ui_test

import (
	"html"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/ui"
)

var countLinkRE = regexp.MustCompile(`data-status="([a-z]+)" data-count="(\d+)"><a href="([^"]+)"`)

// TestQueuesPage_EveryCountLinkReachesItsJobs puts a few jobs of a small queue at the
// oldest ids, below 30,000 newer ones (more than any window the list pages walk), and
// follows every count link of the queues page through its "Older" links: each lists
// exactly the jobs the database holds for its queue and status.
func TestQueuesPage_EveryCountLinkReachesItsJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{StatsMaxAge: -1})
	for range 3 {
		b.insert(job{queue: "mailers"})
	}
	b.insert(job{queue: "mailers", status: "running"})
	b.insert(job{queue: "mailers", status: "running"})
	b.insert(job{queue: "mailers", status: "dead", attempts: 3})
	b.insert(job{queue: "mailers", status: "failed", attempts: 1})
	_, err := b.pool.Exec(b.ctx, b.q(`
		INSERT INTO {s}.jobs (queue, kind, status, attempts, finished_at)
		SELECT 'default', 'bulk', CASE WHEN g % 10 = 0 THEN 'dead' ELSE 'queued' END,
			CASE WHEN g % 10 = 0 THEN 3 ELSE 0 END, CASE WHEN g % 10 = 0 THEN now() END
		FROM generate_series(1, 30000) g`))
	require.NoError(t, err)
	cancelled := b.insert(job{queue: "mailers", status: "cancelled"}) // newest: within any window
	_, err = b.pool.Exec(b.ctx, b.q(`ANALYZE {s}.jobs`))
	require.NoError(t, err)

	r := b.get("/queues")
	require.Equal(t, http.StatusOK, r.code, r.body)
	checked := 0
	for _, q := range []string{"mailers", "default"} {
		row := rowOf(t, r.body, `<tr data-queue="`+q+`">`)
		for _, m := range countLinkRE.FindAllStringSubmatch(row, -1) {
			status, link := m[1], html.UnescapeString(m[3])
			if status == "succeeded" || status == "cancelled" {
				continue // no partial index holds them; the list walks a bounded window
			}
			want := b.ids(`SELECT id FROM {s}.jobs WHERE queue = $1 AND status = $2 ORDER BY id DESC`, q, status)
			if len(want) > 500 {
				// A big status: the first page holds the newest of its jobs, in order.
				assert.Equal(t, want[:ui.DefaultPageSize], listed(b.get(link).body), link)
				continue
			}
			got, pages := b.walk(link)
			assert.Equal(t, want, got, "%s lists every %s job of %s", link, status, q)
			assert.Equal(t, 1, pages, "%s: its few jobs are on the first page, not behind pages of nothing", link)
			checked++
		}
	}
	assert.Equal(t, 6, checked, "mailers' four links and default's empty running and failed ones were walked")

	// The queue's own link (any status) lists all its jobs on the first page too.
	got := listed(b.get("/jobs?queue=mailers").body)
	want := b.ids(`SELECT id FROM {s}.jobs WHERE queue = 'mailers' ORDER BY id DESC`)
	assert.Equal(t, want, got, "every mailers job, the cancelled one included")
	assert.Contains(t, got, cancelled)
	assert.Contains(t, r.body, `href="/jobs?queue=mailers"`)
	assert.True(t, strings.Contains(r.body, `/jobs?queue=mailers&amp;status=running`))
}

// ids runs query and returns its ids.
func (b *bundle) ids(query string, args ...any) []int64 {
	b.t.Helper()
	rows, err := b.pool.Query(b.ctx, b.q(query), args...)
	require.NoError(b.t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(b.t, err)
	if len(ids) == 0 {
		return nil // as walk gives for a list of no jobs
	}
	return slices.Clip(ids)
}
