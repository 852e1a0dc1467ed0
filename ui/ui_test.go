package ui_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/ui"
)

// countCell finds the count the queues table shows for queue and status.
func countCell(t *testing.T, body, queue, status string) int {
	t.Helper()
	row := regexp.MustCompile(`(?s)<tr data-queue="` + regexp.QuoteMeta(queue) + `">(.*?)</tr>`).FindStringSubmatch(body)
	require.NotNil(t, row, "no row for queue %s", queue)
	m := regexp.MustCompile(`data-status="` + status + `" data-count="(\d+)"`).FindStringSubmatch(row[1])
	require.NotNil(t, m, "no %s cell for queue %s", status, queue)
	n, _ := strconv.Atoi(m[1])
	return n
}

func TestQueuesPage_ShowsTheCountsTheDatabaseHolds(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{StatsMaxAge: -1})
	for range 3 {
		b.insert(job{queue: "emails"})
	}
	b.insert(job{queue: "emails", status: "running"})
	b.insert(job{queue: "emails", status: "dead", attempts: 20, lastError: "boom"})
	b.insert(job{queue: "reports", status: "failed", lastError: "bad input"})
	b.insert(job{queue: "reports", runIn: time.Hour}) // scheduled: queued, not due
	for i := range 5 {
		b.archive(b.insert(job{queue: "reports"}), time.Duration(i)*time.Minute)
	}

	r := b.get("/queues")
	require.Equal(t, http.StatusOK, r.code, r.body)
	db := map[[2]string]int{}
	rows, err := b.pool.Query(b.ctx, b.q(`SELECT queue, status, count(*) FROM {s}.jobs GROUP BY 1, 2`))
	require.NoError(t, err)
	for rows.Next() {
		var q, s string
		var n int
		require.NoError(t, rows.Scan(&q, &s, &n))
		db[[2]string{q, s}] = n
	}
	require.NoError(t, rows.Err())
	for _, q := range []string{"emails", "reports"} {
		for _, s := range []string{"queued", "running", "failed", "dead", "cancelled"} {
			assert.Equal(t, db[[2]string{q, s}], countCell(t, r.body, q, s), "queue %s status %s", q, s)
		}
	}
	assert.NotContains(t, r.body, `<th class="num">Succeeded</th>`, "succeeded jobs are archived: the column would always be 0")
	assert.NotContains(t, r.body, `data-status="succeeded"`)
	assert.Contains(t, r.body, `data-total="stuck">2<`)
	assert.Contains(t, r.body, `data-total="lasthour">5<`)
	assert.Contains(t, r.body, `<rect class="bar"`)
	assert.Contains(t, r.body, `data-src="/queues/live"`)

	t.Run("the live fragment has the same numbers and no page around them", func(t *testing.T) {
		b.insert(job{queue: "emails"})
		r := b.get("/queues/live")
		require.Equal(t, http.StatusOK, r.code, r.body)
		assert.NotContains(t, r.body, "<html")
		assert.Equal(t, 4, countCell(t, r.body, "emails", "queued"))
	})
	t.Run("a job finished since the last refresh is counted in the plot", func(t *testing.T) {
		b.archive(b.insert(job{queue: "reports"}), 0)
		r := b.get("/queues/live")
		assert.Contains(t, r.body, `data-total="lasthour">6<`)
	})
	t.Run("the root redirects to the queues", func(t *testing.T) {
		r := b.get("/")
		assert.Equal(t, http.StatusFound, r.code)
		assert.Equal(t, "/queues", r.location)
	})
}

func TestQueuesPage_CountsComeFromTheSharedCacheWithinStatsMaxAge(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{StatsMaxAge: time.Hour})
	b.insert(job{queue: "emails"})
	r := b.get("/queues/live")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Equal(t, 1, countCell(t, r.body, "emails", "queued"))
	b.insert(job{queue: "emails"})
	r = b.get("/queues/live")
	assert.Equal(t, 1, countCell(t, r.body, "emails", "queued"), "within StatsMaxAge the cached counts are shown")
	assert.Contains(t, r.body, "Counts as of")
	_, err := b.pool.Exec(b.ctx, b.q(`UPDATE {s}.stats_cache SET taken_at = now() - interval '2 hours'`))
	require.NoError(t, err)
	assert.Equal(t, 2, countCell(t, b.get("/queues/live").body, "emails", "queued"), "an older cache is recomputed")
}

func TestQueuesPage_EmptySchema(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{RefreshInterval: -1})
	r := b.get("/queues")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, "No jobs yet")
	assert.Contains(t, r.body, "no job finished in the last hour")
	assert.NotContains(t, r.body, "data-src=", "live updates are off")
}

var jobLinkRE = regexp.MustCompile(`<tr data-job="(\d+)">`)

// listed returns the job ids of a list page, in order.
func listed(body string) []int64 {
	var ids []int64
	for _, m := range jobLinkRE.FindAllStringSubmatch(body, -1) {
		id, _ := strconv.ParseInt(m[1], 10, 64)
		ids = append(ids, id)
	}
	return ids
}

var nextRE = regexp.MustCompile(`<a href="([^"]+)" rel="next">`)

// walk follows a list from path through its "Older" links and returns every id listed.
func (b *bundle) walk(path string) (ids []int64, pages int) {
	b.t.Helper()
	for path != "" {
		r := b.get(path)
		require.Equal(b.t, http.StatusOK, r.code, r.body)
		ids = append(ids, listed(r.body)...)
		pages++
		path = ""
		if m := nextRE.FindStringSubmatch(r.body); m != nil {
			u, err := url.Parse(html.UnescapeString(m[1])) // as a browser reads the attribute (&amp;, &#43;)
			require.NoError(b.t, err)
			path = u.RequestURI()
		}
		require.Less(b.t, pages, 100, "the pager does not end")
	}
	return ids, pages
}

func TestJobsPage_KeysetPagesMergeHotTableAndArchive(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	var all, succeeded, reports []int64
	for i := range 13 {
		queue, kind := "default", "email"
		if i%3 == 0 {
			queue, kind = "reports", "report"
		}
		id := b.insert(job{queue: queue, kind: kind})
		if i%2 == 0 { // every other job is archived: ids interleave between the tables
			b.archive(id, time.Minute)
			succeeded = append([]int64{id}, succeeded...)
		}
		if queue == "reports" {
			reports = append([]int64{id}, reports...)
		}
		all = append([]int64{id}, all...)
	}

	ids, pages := b.walk("/jobs?limit=4")
	assert.Equal(t, all, ids, "newest first, every job once")
	assert.Equal(t, 4, pages)

	ids, _ = b.walk("/jobs?limit=2&status=succeeded")
	assert.Equal(t, succeeded, ids)
	ids, _ = b.walk("/jobs?limit=3&queue=reports")
	assert.Equal(t, reports, ids)
	ids, _ = b.walk("/jobs?kind=report")
	assert.Equal(t, reports, ids)
	ids, _ = b.walk("/jobs?status=dead")
	assert.Empty(t, ids)

	t.Run("lookup by id opens the job", func(t *testing.T) {
		r := b.get("/jobs?id=" + strconv.FormatInt(all[3], 10))
		assert.Equal(t, http.StatusSeeOther, r.code)
		assert.Equal(t, "/jobs/"+strconv.FormatInt(all[3], 10), r.location)
	})
}

func TestJobsPage_BoundsWhatARequestMayAsk(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	_, err := b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.jobs (kind) SELECT 'bulk' FROM generate_series(1, 250)`))
	require.NoError(t, err)

	r := b.get("/jobs?limit=100000")
	require.Equal(t, http.StatusOK, r.code)
	assert.Len(t, listed(r.body), ui.MaxPageSize)

	for _, bad := range []string{
		"/jobs?limit=abc", "/jobs?limit=0", "/jobs?before=-1", "/jobs?status=bogus", "/jobs?id=x", "/jobs?id=-4",
		"/jobs?kind=" + strings.Repeat("k", 256), "/dead?status=queued", "/jobs/0", "/jobs/abc",
	} {
		r := b.get(bad)
		assert.Equal(t, http.StatusBadRequest, r.code, bad)
	}
	assert.Equal(t, http.StatusNotFound, b.get("/jobs/999999999").code)
}

func TestJobsPage_ARareFilterScansABoundedWindowPerPage(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	rare := b.insert(job{kind: "rare"})
	b.archive(rare, time.Hour)
	// 25,000 newer archived jobs of another kind: more than one page's scan window.
	_, err := b.pool.Exec(b.ctx, b.q(`
		INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts, created_at, finished_at)
		SELECT $1 + g, 'default', 'common', '{}', 'succeeded', 0, now(), 1, 20, now(), now()
		FROM generate_series(1, 25000) g`), rare)
	require.NoError(t, err)

	// Any status: the indexed statuses are read exactly; the archive only within the
	// window, and the page says so and links the lists that look further.
	r := b.get("/jobs?kind=rare")
	require.Equal(t, http.StatusOK, r.code)
	assert.Empty(t, listed(r.body), "the first window holds no rare job")
	assert.Contains(t, r.body, "were looked for among the newest")
	assert.Contains(t, r.body, `href="/jobs?kind=rare&amp;status=succeeded"`)

	r = b.get("/jobs?kind=rare&status=succeeded")
	require.Equal(t, http.StatusOK, r.code)
	assert.Empty(t, listed(r.body), "the first window holds no rare job")
	assert.Contains(t, r.body, "without filling the page")
	ids, pages := b.walk("/jobs?kind=rare&status=succeeded")
	assert.Equal(t, []int64{rare}, ids)
	assert.Equal(t, 2, pages)
}

func TestJobPage_ShowsArgsHistoryAndExtraColumns(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	// A column the page does not know shows up (metadata comes with migration 004; IF NOT
	// EXISTS keeps the test valid before and after it).
	_, err := b.pool.Exec(b.ctx, b.q(`ALTER TABLE {s}.jobs ADD COLUMN IF NOT EXISTS metadata jsonb`))
	require.NoError(t, err)
	id := b.insert(job{kind: "sync_inventory", status: "dead", attempts: 2, payload: `{"sku":"SKU-42"}`,
		lastError: "panic: inventory down\n\ngoroutine 7 [running]:\nmain.sync()",
		errorsJSON: `[{"attempt":1,"at":"2026-01-02T03:04:05Z","error":"timeout"},
			{"attempt":2,"at":"2026-01-02T03:05:05Z","error":"panic: inventory down","stack":"goroutine 7 [running]:\nmain.sync()"}]`})
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET metadata = '{"tenant":"acme"}' WHERE id = $1`), id)
	require.NoError(t, err)

	r := b.get("/jobs/" + strconv.FormatInt(id, 10))
	require.Equal(t, http.StatusOK, r.code, r.body)
	for _, want := range []string{
		`data-job-status>dead<`, `&#34;sku&#34;: &#34;SKU-42&#34;`, "Attempt 2", "Attempt 1", "timeout",
		"panic: inventory down", "goroutine 7 [running]:", "<code>stack</code>",
		`<dl class="facts" data-metadata><dt><code>tenant</code></dt><dd><code>acme</code></dd>`,
		"<details data-internal>", "<code>fence</code>", // skiplock's own columns, behind a toggle
		`data-action="retry"`, `data-action="delete"`, "2 of 20", `data-action="retry-args"`,
	} {
		assert.Contains(t, r.body, want)
	}
	assert.Less(t, strings.Index(r.body, "Attempt 2"), strings.Index(r.body, "Attempt 1"), "newest attempt first")
	assert.NotContains(t, r.body, `data-action="cancel"`, "a dead job cannot be cancelled")

	t.Run("an archived job shows too", func(t *testing.T) {
		id := b.insert(job{})
		b.archive(id, time.Minute)
		r := b.get("/jobs/" + strconv.FormatInt(id, 10))
		require.Equal(t, http.StatusOK, r.code, r.body)
		assert.Contains(t, r.body, `data-job-status>succeeded<`)
		assert.NotContains(t, r.body, `data-action="retry"`)
	})
}

func TestPages_EscapeScriptInJobData(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	const evil = `<script>alert("pwned")</script>`
	id := b.insert(job{kind: "x" + evil, status: "dead", payload: `{"name":` + strconv.Quote(evil) + `}`,
		lastError: evil, errorsJSON: `[{"attempt":1,"at":"2026-01-02T03:04:05Z","error":` + strconv.Quote(evil) + `,"stack":` + strconv.Quote(evil) + `}]`})
	b.insert(job{kind: "x" + evil})

	for _, page := range []string{"/jobs/" + strconv.FormatInt(id, 10), "/jobs", "/dead", "/jobs?kind=" + url.QueryEscape(evil)} {
		r := b.get(page)
		require.Equal(t, http.StatusOK, r.code, page)
		assert.NotContains(t, r.body, "<script>alert", page)
		assert.Contains(t, r.body, "&lt;script&gt;alert(", page)
		assert.Equal(t, 1, strings.Count(r.body, "<script"), "%s: only the page's own script tag", page)
	}
}

func TestJobActions(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	page := func(id int64) string { return "/jobs/" + strconv.FormatInt(id, 10) }

	t.Run("retry now requeues a dead job with its attempts reset", func(t *testing.T) {
		id := b.insert(job{status: "dead", attempts: 20})
		r := b.act(page(id), page(id)+"/retry", nil)
		require.Equal(t, http.StatusSeeOther, r.code, r.body)
		assert.Equal(t, "queued", b.status(id))
		assert.Equal(t, 0, b.count(`SELECT attempts FROM {s}.jobs WHERE id = $1`, id))
		assert.Contains(t, b.get(r.location).body, "Requeued 1 job.")
	})
	t.Run("retry now makes a scheduled job due", func(t *testing.T) {
		id := b.insert(job{runIn: time.Hour})
		r := b.act(page(id), page(id)+"/retry", nil)
		require.Equal(t, http.StatusSeeOther, r.code, r.body)
		assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.jobs WHERE id = $1 AND status = 'queued' AND run_at <= now()`, id))
	})
	t.Run("cancel", func(t *testing.T) {
		id := b.insert(job{})
		r := b.act(page(id), page(id)+"/cancel", nil)
		require.Equal(t, http.StatusSeeOther, r.code, r.body)
		assert.Equal(t, "cancelled", b.status(id))
	})
	t.Run("delete a dead job", func(t *testing.T) {
		id := b.insert(job{status: "dead"})
		r := b.act(page(id), page(id)+"/delete", nil)
		require.Equal(t, http.StatusSeeOther, r.code, r.body)
		assert.Equal(t, "", b.status(id))
		assert.Equal(t, http.StatusNotFound, b.get(page(id)).code)
	})
	t.Run("delete an archived job", func(t *testing.T) {
		id := b.insert(job{})
		b.archive(id, time.Minute)
		r := b.act(page(id), page(id)+"/delete", nil)
		require.Equal(t, http.StatusSeeOther, r.code, r.body)
		assert.Equal(t, "", b.status(id))
	})
	t.Run("a running job is not deleted, and the page says why", func(t *testing.T) {
		id := b.insert(job{status: "running"})
		p := b.get(page(id))
		assert.Contains(t, p.body, "cancel it before deleting")
		assert.NotContains(t, p.body, `data-action="delete"`)
		r := b.act(page(id), page(id)+"/delete", nil)
		require.Equal(t, http.StatusSeeOther, r.code, r.body)
		assert.Equal(t, "running", b.status(id))
		assert.Contains(t, b.get(r.location).body, "Not deleted: the job is running")
	})
}

func TestDeadPage_RequeuesAndDeletesManyAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	d1 := b.insert(job{status: "dead", queue: "a"})
	d2 := b.insert(job{status: "dead", queue: "a"})
	f1 := b.insert(job{status: "failed", queue: "b"})
	d3 := b.insert(job{status: "dead", queue: "b"})
	q1 := b.insert(job{})

	r := b.get("/dead")
	require.Equal(t, http.StatusOK, r.code)
	assert.Equal(t, []int64{d3, f1, d2, d1}, listed(r.body), "dead and failed only, newest first")
	r = b.get("/dead?status=failed")
	assert.Equal(t, []int64{f1}, listed(r.body))
	r = b.get("/dead?queue=a")
	assert.Equal(t, []int64{d2, d1}, listed(r.body))

	id := func(n int64) string { return strconv.FormatInt(n, 10) }
	r = b.act("/dead", "/dead", url.Values{"action": {"requeue"}, "id": {id(d1), id(f1), id(q1)}, "queue": {"a"}})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.Equal(t, "queued", b.status(d1))
	assert.Equal(t, "queued", b.status(f1))
	assert.Equal(t, "dead", b.status(d2))
	msg := b.get(r.location).body
	assert.Contains(t, msg, "Requeued 2 jobs.")
	assert.Contains(t, msg, "1 job changed state meanwhile")
	assert.Contains(t, r.location, "queue=a", "back to the same filter")

	r = b.act("/dead", "/dead", url.Values{"action": {"delete"}, "id": {id(d2), id(d3), id(q1)}})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.Equal(t, "", b.status(d2))
	assert.Equal(t, "", b.status(d3))
	assert.Equal(t, "queued", b.status(q1), "a job no longer dead is left alone")

	for _, form := range []url.Values{
		{"action": {"requeue"}},
		{"action": {"explode"}, "id": {id(d1)}},
		{"action": {"delete"}, "id": {"x"}},
		{"action": {"delete"}, "id": strings.Split(strings.Repeat("1,", ui.MaxActionIDs+1), ",")[:ui.MaxActionIDs+1]},
	} {
		r := b.act("/dead", "/dead", form)
		assert.Equal(t, http.StatusBadRequest, r.code, form)
	}
}

func TestActions_RefusedWithoutAValidCSRFToken(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	id := b.insert(job{status: "dead"})
	action := "/jobs/" + strconv.FormatInt(id, 10) + "/retry"
	token := b.csrf("/queues")

	// No token.
	r := b.post(action, url.Values{})
	assert.Equal(t, http.StatusForbidden, r.code)
	assert.Contains(t, r.body, "CSRF token is missing or out of date")
	// A forged token.
	r = b.post(action, url.Values{"csrf": {"forged"}})
	assert.Equal(t, http.StatusForbidden, r.code)
	// A good token without the cookie it is bound to (another browser).
	other := setupClientOnly(b)
	req, _ := http.NewRequest(http.MethodPost, b.srv.URL+action, strings.NewReader(url.Values{"csrf": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := other.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	// A good token from a cross-site page.
	req, _ = http.NewRequest(http.MethodPost, b.srv.URL+action, strings.NewReader(url.Values{"csrf": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	r = b.do(req)
	assert.Equal(t, http.StatusForbidden, r.code)
	assert.Equal(t, "dead", b.status(id), "no refused request changed the job")

	// The same request with the token goes through.
	r = b.post(action, url.Values{"csrf": {token}})
	assert.Equal(t, http.StatusSeeOther, r.code)
	assert.Equal(t, "queued", b.status(id))
}

func setupClientOnly(b *bundle) *http.Client { return newHTTPClient(b.t) }

func TestReadOnly_HidesAndRefusesEveryAction(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{ReadOnly: true})
	id := b.insert(job{status: "dead"})
	page := "/jobs/" + strconv.FormatInt(id, 10)
	r := b.get(page)
	require.Equal(t, http.StatusOK, r.code)
	assert.Contains(t, r.body, "read-only")
	assert.NotContains(t, r.body, "data-action=")
	assert.NotContains(t, b.get("/dead").body, "Requeue selected")

	token := b.csrf("/queues")
	for _, action := range []string{page + "/retry", page + "/cancel", page + "/delete", "/dead"} {
		r := b.post(action, url.Values{"csrf": {token}, "action": {"requeue"}, "id": {strconv.FormatInt(id, 10)}})
		assert.Equal(t, http.StatusForbidden, r.code, action)
		assert.Contains(t, r.body, "read-only")
	}
	assert.Equal(t, "dead", b.status(id))
}

func TestAuth_RefusesOffLoopbackWithoutAuth(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	h, err := ui.New(ui.Config{Client: b.client, TrustLoopback: true, Logger: quietLogger()})
	require.NoError(t, err)

	serve := func(remote string, hdr map[string]string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/queues", nil)
		req.RemoteAddr, req.Host = remote, "127.0.0.1:8080" // a loopback name: the Host check passes
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	assert.Equal(t, http.StatusOK, serve("127.0.0.1:40000", nil).Code)
	assert.Equal(t, http.StatusOK, serve("[::1]:40000", nil).Code)
	rec := serve("203.0.113.7:40000", nil)
	assert.Equal(t, http.StatusForbidden, rec.Code)
	assert.Contains(t, rec.Body.String(), "no authentication configured")
	assert.Equal(t, http.StatusForbidden, serve("127.0.0.1:40000", map[string]string{"X-Forwarded-For": "203.0.113.7"}).Code,
		"a local proxy forwarding someone else's request")
	assert.Equal(t, http.StatusForbidden, serve("127.0.0.1:40000", map[string]string{"Forwarded": "for=203.0.113.7"}).Code)
	assert.Equal(t, http.StatusForbidden, serve("127.0.0.1:40000", map[string]string{"X-Forwarded-Proto": "https"}).Code)

	ext, err := ui.New(ui.Config{Client: b.client, ExternalAuth: true, AllowedHosts: []string{"example.com"}, Logger: quietLogger()})
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodGet, "/queues", nil)
	req.RemoteAddr = "203.0.113.7:40000"
	rec = httptest.NewRecorder()
	ext.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusOK, rec.Code, "ExternalAuth trusts the middleware in front")
}

func TestAuth_TokenAndBasicAuth(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	const token = "s3cret-token"
	h, err := ui.New(ui.Config{Client: b.client, Token: token, BasicAuth: &ui.BasicAuth{User: "ops", Password: "pw"},
		AllowedHosts: []string{"example.com"}, Logger: quietLogger()})
	require.NoError(t, err)
	serve := func(req *http.Request) *httptest.ResponseRecorder {
		req.RemoteAddr = "203.0.113.7:40000" // off loopback: auth is what lets it in
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	rec := serve(httptest.NewRequest(http.MethodGet, "/queues", nil))
	assert.Equal(t, http.StatusUnauthorized, rec.Code)
	assert.Contains(t, rec.Header().Get("WWW-Authenticate"), "Basic")

	req := httptest.NewRequest(http.MethodGet, "/queues", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	assert.Equal(t, http.StatusOK, serve(req).Code)
	req = httptest.NewRequest(http.MethodGet, "/queues", nil)
	req.Header.Set("Authorization", "Bearer wrong")
	assert.Equal(t, http.StatusUnauthorized, serve(req).Code)
	req = httptest.NewRequest(http.MethodGet, "/queues", nil)
	req.SetBasicAuth("ops", "pw")
	assert.Equal(t, http.StatusOK, serve(req).Code)
	req = httptest.NewRequest(http.MethodGet, "/queues", nil)
	req.SetBasicAuth("ops", "nope")
	assert.Equal(t, http.StatusUnauthorized, serve(req).Code)
}

func TestAuth_TokenLoginSetsASession(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	const token = "s3cret-token"
	b.serve(ui.Config{Token: token})
	r := b.get("/queues")
	require.Equal(t, http.StatusSeeOther, r.code)
	assert.Equal(t, "/login", r.location)

	csrf := b.csrf("/login")
	r = b.post("/login", url.Values{"csrf": {csrf}, "token": {"wrong"}})
	assert.Equal(t, http.StatusUnauthorized, r.code)
	assert.Contains(t, r.body, "That token is not right")
	r = b.post("/login", url.Values{"token": {token}})
	assert.Equal(t, http.StatusForbidden, r.code, "the login form needs its CSRF token too")
	assert.Equal(t, http.StatusUnauthorized, b.get("/queues/live").code, "the live fragment is not redirected to a login form")
	r = b.post("/login", url.Values{"csrf": {csrf}, "token": {token}})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.Equal(t, http.StatusOK, b.get("/queues").code)
	assert.Equal(t, http.StatusOK, b.get("/queues/live").code)
	// Anyone may try to sign in: the failures are kept with the refusals, apart from the
	// actions, so a flood of them cannot push the actions out of the audit table.
	assert.Equal(t, 2, b.count(`SELECT count(*) FROM {s}.ui_audit WHERE refused AND action = 'sign in'`),
		"the wrong token, and the form without its CSRF token")
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.ui_audit WHERE NOT refused AND action = 'sign in'`))
}

func TestIsLoopbackListen(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "[::1]:8080": true, "localhost:8080": true, "127.0.0.2:80": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:8080": false, "192.168.1.4:8080": false,
		"example.com:80": false, "nonsense": false,
	} {
		assert.Equal(t, want, ui.IsLoopbackListen(addr), addr)
	}
}

func TestPrefix_MountedUnderAPath(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{Prefix: "/admin/jobs"})
	id := b.insert(job{status: "dead"})
	r := b.get("/admin/jobs/queues")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, `href="/admin/jobs/static/app.css"`)
	assert.Contains(t, r.body, `href="/admin/jobs/dead"`)
	assert.Equal(t, http.StatusOK, b.get("/admin/jobs/static/app.js").code)
	page := "/admin/jobs/jobs/" + strconv.FormatInt(id, 10)
	r = b.act(page, page+"/retry", nil)
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.True(t, strings.HasPrefix(r.location, page+"?done=requeued&fs="), r.location)
	assert.True(t, strings.HasSuffix(r.location, "&n_requeued=1"), r.location)
	assert.Equal(t, "queued", b.status(id))
	assert.Equal(t, http.StatusNotFound, b.get("/queues").code)

	_, err := ui.New(ui.Config{Client: b.client, Prefix: "admin/"})
	assert.ErrorIs(t, err, ui.ErrInvalidConfig)
}

func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	r := b.get("/queues")
	csp := r.header.Get("Content-Security-Policy")
	assert.Contains(t, csp, "script-src 'self'")
	assert.NotContains(t, csp, "unsafe-inline")
	assert.Equal(t, "DENY", r.header.Get("X-Frame-Options"))
	assert.Equal(t, "nosniff", r.header.Get("X-Content-Type-Options"))
	assert.Contains(t, r.header.Get("Set-Cookie"), "HttpOnly")
	assert.Contains(t, r.header.Get("Set-Cookie"), "SameSite=Strict")
}

func TestNotMigratedSchema_SaysWhatToRun(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	client, err := skiplock.NewClient(b.pool, skiplock.Config{Schema: "no_such_schema_here", Logger: quietLogger()})
	require.NoError(t, err)
	b.client = client
	b.serve(ui.Config{})
	r := b.get("/queues")
	assert.Equal(t, http.StatusInternalServerError, r.code)
	assert.Contains(t, r.body, "is not migrated")
	assert.Contains(t, r.body, "migrate up")
}

// queues is a QueueSource and QueueController kept in memory, standing in for the queue
// settings later migrations add to the database.
type queues struct {
	mu     sync.Mutex
	paused map[string]bool
}

func (q *queues) QueueInfo(context.Context) (map[string]ui.QueueInfo, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := map[string]ui.QueueInfo{"emails": {Limit: 5}, "idle": {}}
	for name, p := range q.paused {
		info := out[name]
		info.Paused = p
		out[name] = info
	}
	return out, nil
}

func (q *queues) PauseQueue(_ context.Context, name string) error  { return q.set(name, true) }
func (q *queues) ResumeQueue(_ context.Context, name string) error { return q.set(name, false) }

func (q *queues) set(name string, paused bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if name == "missing" {
		return fmt.Errorf("no queue %q", name)
	}
	q.paused[name] = paused
	return nil
}

type schedules []ui.Schedule

func (s schedules) Schedules(context.Context) ([]ui.Schedule, error) { return s, nil }

func TestExtensionPoints_QueueSettingsAndPeriodic(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	plain := setup(t, ui.Config{})
	r := plain.get("/queues")
	assert.NotContains(t, r.body, "<th>State</th>", "no queue source: no state column")
	assert.NotContains(t, r.body, "/periodic")
	assert.Equal(t, http.StatusNotFound, plain.get("/periodic").code)

	qs := &queues{paused: map[string]bool{}}
	b.serve(ui.Config{Queues: qs, Periodic: schedules{{Name: "nightly", Kind: "report", Queue: "reports", Spec: "0 3 * * *",
		LastRun: time.Now().Add(-time.Hour), NextRun: time.Now().Add(20 * time.Hour)}}})
	b.insert(job{queue: "emails", status: "running"})
	r = b.get("/queues")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, "<th>State</th>")
	assert.Contains(t, r.body, "1 / 5", "running versus limit")
	assert.Contains(t, r.body, `<tr data-queue="idle">`, "a queue known only to the source is listed")

	r = b.act("/queues", "/queues/emails/pause", nil)
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.True(t, qs.paused["emails"])
	r = b.get("/queues")
	assert.Contains(t, r.body, ">paused<")
	action, form := queueForm(t, r.body, "emails")
	assert.Equal(t, "/queues/resume", action)
	r = b.post(action, form)
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.False(t, qs.paused["emails"])

	r = b.get("/periodic")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, "nightly")
	assert.Contains(t, r.body, "0 3 * * *")
}

func TestWorkersPage_ListsTheFleetAndItsLeader(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.serve(ui.Config{})
	r := b.get("/workers")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, "No workers registered")
	assert.Contains(t, b.get("/queues").body, `/workers"`, "the nav links the page")

	_, err := b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.workers (id, queues, started_at, expires_at) VALUES
		('host-a', '{default,emails}', now() - interval '1 hour', now() + interval '10 seconds'),
		('host-b', '{default}', now() - interval '2 hours', now() - interval '30 seconds');
		INSERT INTO {s}.leader (name, leader_id, elected_at, expires_at)
		VALUES ('maintenance', 'host-a', now(), now() + interval '5 seconds')`))
	require.NoError(t, err)
	r = b.get("/workers")
	require.Equal(t, http.StatusOK, r.code, r.body)
	a := rowOf(t, r.body, `<tr data-worker="host-a">`)
	assert.Contains(t, a, ">alive<")
	assert.Contains(t, a, ">leader<")
	assert.Contains(t, a, "default, emails")
	gone := rowOf(t, r.body, `<tr data-worker="host-b">`)
	assert.Contains(t, gone, ">gone<")
	assert.NotContains(t, gone, ">leader<")

	assert.Contains(t, r.body, "No job is running")
	id := b.insert(job{queue: "emails", kind: "export", status: "running"})
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET locked_by = 'host-a', progress = '{"value": 42.5, "message": "rows 425/1000"}' WHERE id = $1`), id)
	require.NoError(t, err)
	run := rowOf(t, b.get("/workers").body, `<tr data-running="`+strconv.FormatInt(id, 10)+`">`)
	assert.Contains(t, run, "<code>host-a</code>")
	assert.Contains(t, run, "<strong>42.5</strong> rows 425/1000", "the progress its handler reported")
}

// rowOf returns the table row of body that starts with open.
func rowOf(t *testing.T, body, open string) string {
	t.Helper()
	i := strings.Index(body, open)
	require.GreaterOrEqual(t, i, 0, "no %s in the page", open)
	j := strings.Index(body[i:], "</tr>")
	require.Greater(t, j, 0)
	return body[i : i+j]
}

// A running job whose worker marked it overrunning (its handler runs past its timeout) is
// counted on the queues page, in the totals and in its queue's row; one whose mark is an
// earlier attempt's is not.
func TestQueuesPage_ShowsOverrunningJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{StatsMaxAge: -1})
	stuck := b.insert(job{queue: "emails", status: "running"})
	old := b.insert(job{queue: "emails", status: "running"})
	b.insert(job{queue: "reports", status: "running"})
	_, err := b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET overrun_fence = fence WHERE id = $1`), stuck)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET overrun_fence = fence - 1 WHERE id = $1`), old)
	require.NoError(t, err)

	r := b.get("/queues")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, `data-total="overrunning">1<`)
	assert.Contains(t, r.body, `data-overrunning="emails" title="handlers past their timeout">1 overrunning<`)
	assert.NotContains(t, r.body, `data-overrunning="reports"`)
}
