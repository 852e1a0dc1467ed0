package ui_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/ui"
	"github.com/skiplock/skiplock/ui/internal/query"
)

// The search page searches the whole table: a job under 30,000 newer ones (more than
// the jobs page's window) is found by its args, its error, or JSON its args contain,
// in the hot table and the archive; every value is a parameter and every output
// escaped.
func TestSearchPage_FindsJobsAnywhereInBothTables(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{StatsMaxAge: -1})
	old := b.insert(job{queue: "billing", kind: "invoice.render", payload: `{"order_id": 42, "email": "ann@example.com"}`})
	oldDead := b.insert(job{queue: "billing", kind: "invoice.render", status: "dead", lastError: "smtp: 421 <b>busy</b>'; DROP TABLE x"})
	arch := b.insert(job{queue: "mail", kind: "email.send", payload: `{"order_id": 42, "tag": "<script>alert(1)</script>"}`})
	b.archive(arch, 0)
	_, err := b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.jobs (queue, kind, payload)
		SELECT 'default', 'bulk', jsonb_build_object('n', g) FROM generate_series(1, 30000) g`))
	require.NoError(t, err)

	search := func(v url.Values) response {
		r := b.get("/search?" + v.Encode())
		require.Equal(t, http.StatusOK, r.code, r.body)
		return r
	}
	assert.Equal(t, []int64{old}, listed(search(url.Values{"q": {"ann@example.com"}}).body), "args, under 30,000 newer jobs")
	assert.Equal(t, []int64{oldDead}, listed(search(url.Values{"q": {"421 <b>busy"}, "mode": {"error"}}).body), "the last error")
	assert.Equal(t, []int64{arch, old}, listed(search(url.Values{"q": {`{"order_id": 42}`}, "mode": {"contains"}}).body), "containment, both tables")
	assert.Equal(t, []int64{old}, listed(search(url.Values{"q": {`{"order_id": 42}`}, "mode": {"contains"}, "queue": {"billing"}}).body))
	assert.Equal(t, []int64{arch}, listed(search(url.Values{"q": {`{"order_id": 42}`}, "mode": {"contains"}, "status": {"succeeded"}}).body))
	assert.Empty(t, listed(search(url.Values{"q": {`{"order_id": 42}`}, "mode": {"contains"}, "kind": {"bulk"}}).body))
	assert.Empty(t, listed(search(url.Values{"q": {"%"}}).body), "no pattern characters")

	r := search(url.Values{"q": {`<script>alert(1)</script>`}})
	assert.Equal(t, []int64{arch}, listed(r.body))
	assert.NotContains(t, r.body, "<script>alert(1)")
	r = search(url.Values{"q": {strconv.FormatInt(old, 10)}})
	assert.Contains(t, r.body, `href="/jobs/`+strconv.FormatInt(old, 10)+`" data-job-link`, "a job id links its job")

	t.Run("pickers from the database", func(t *testing.T) {
		r := search(url.Values{})
		assert.Contains(t, r.body, `<option value="billing">2 jobs</option>`)
		assert.Contains(t, r.body, `<option value="default">30`)
		assert.Contains(t, r.body, `<option value="bulk">about 20`, "no statistics yet: the newest 20,000 jobs")
		_, err := b.pool.Exec(b.ctx, b.q(`ANALYZE {s}.jobs`))
		require.NoError(t, err)
		b.serve(ui.Config{StatsMaxAge: -1}) // a new handler: the picker is kept a minute
		r = search(url.Values{})
		assert.Contains(t, r.body, `<option value="bulk">about 30`, "the planner's statistics: the whole table, read from pg_stats")
		assert.Empty(t, listed(r.body), "no text, no search")
	})
	t.Run("pages", func(t *testing.T) {
		got, pages := b.walk("/search?q=%22n%22%3A+2999&limit=4")
		assert.Equal(t, 3, pages)
		assert.Len(t, got, 11, `n 2999 and 29990-29999`)
	})
	t.Run("refused", func(t *testing.T) {
		for _, q := range []string{"q=x&mode=regex", "q=42&mode=contains", "q=%7Bbad&mode=contains", "status=lost&q=x"} {
			assert.Equal(t, http.StatusBadRequest, b.get("/search?"+q).code, q)
		}
	})
}

// A match older than a page's window of ids is not read by the first page, which says
// more results may exist and links the next window, where it is found.
func TestSearchPage_ReadsABoundedWindowPerPage(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{StatsMaxAge: -1})
	old := b.insert(job{payload: `{"needle": 1}`})
	_, err := b.pool.Exec(b.ctx, b.q(`SELECT setval(pg_get_serial_sequence('{s}.jobs', 'id'), $1)`), old+query.SearchWindow+10)
	require.NoError(t, err)
	for range 3 {
		b.insert(job{})
	}
	r := b.get("/search?q=needle")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Empty(t, listed(r.body))
	assert.Contains(t, r.body, "data-search-window")
	assert.Contains(t, r.body, "More results may exist")
	m := regexp.MustCompile(`href="([^"]+)" rel="next" data-search-older`).FindStringSubmatch(r.body)
	require.NotNil(t, m, r.body)
	r = b.get(html.UnescapeString(m[1]))
	assert.Equal(t, []int64{old}, listed(r.body))
	assert.NotContains(t, r.body, `rel="next"`, "the oldest job was in this window: the search is over")
}

// The queue picker listed every queue: 20,000 queues (a queue per tenant) made an 820 KB
// page, where the Queues and Limits pages stop at 500. It suggests the first 500 by name,
// says how many more there are, and takes any queue's name typed in: a search by a queue
// past the 500 finds its jobs and keeps the name in the form.
func TestSearchPage_BoundsTheQueuePicker(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{StatsMaxAge: -1})
	_, err := b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.jobs (queue, kind, payload, status)
		SELECT 'tenant-' || lpad(g::text, 4, '0'), 'k', jsonb_build_object('tenant', g), 'queued' FROM generate_series(1, 620) g`))
	require.NoError(t, err)

	r := b.get("/search")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Equal(t, 500, strings.Count(r.body, `<option value="tenant-`))
	assert.Contains(t, r.body, `<option value="tenant-0500">1 job</option>`)
	assert.NotContains(t, r.body, `"tenant-0501"`)
	assert.Contains(t, r.body, `data-queues-hidden="120"`)

	r = b.get("/search?" + url.Values{"q": {`"tenant"`}, "queue": {"tenant-0610"}}.Encode())
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Len(t, listed(r.body), 1, "a queue past the 500 is searched")
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.jobs WHERE id = $1 AND queue = 'tenant-0610'`, listed(r.body)[0]))
	assert.Contains(t, r.body, `name="queue" value="tenant-0610"`, "the form keeps the queue")
}
