package ui_test

import (
	"bytes"
	"html"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/ui"
)

// lockedBuffer is a log sink the handler and the test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func TestAudit_RecordsWhoDidWhatAndTheOutcome(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	var logs lockedBuffer
	qs := &queues{paused: map[string]bool{}}
	b.serve(ui.Config{Queues: qs, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Actor: func(r *http.Request) string { return r.Header.Get("X-Test-User") }})
	dead := b.insert(job{status: "dead"})
	other := b.insert(job{status: "failed"})
	b.insert(job{queue: "emails"})

	r := b.act("/jobs/"+strconv.FormatInt(dead, 10), "/jobs/"+strconv.FormatInt(dead, 10)+"/retry", nil)
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	r = b.act("/queues", "/queues/emails/pause", nil)
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	r = b.act("/dead", "/dead/bulk", url.Values{"action": {"requeue"}, "status": {"failed"}, "count": {"1"}})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.Equal(t, "queued", b.status(other))
	r = b.act("/queues", "/jobs/999999/cancel", nil)
	require.Equal(t, http.StatusNotFound, r.code)

	// An Actor names the user.
	form := url.Values{"csrf": {b.csrf("/dead")}, "action": {"delete"}, "id": {"424242"}}
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+"/dead", bytes.NewBufferString(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("X-Test-User", "alice@example.com")
	require.Equal(t, http.StatusSeeOther, b.do(req).code)

	page := b.get("/audit")
	require.Equal(t, http.StatusOK, page.code, page.body)
	body := html.UnescapeString(page.body)
	want := []struct{ action, has string }{
		{"retry", "job " + strconv.FormatInt(dead, 10)},
		{"retry", "Requeued 1 job."},
		{"pause", `queue "emails"`},
		{"requeue all matching", `status="failed" (confirmed 1)`},
		{"requeue all matching", "Requeued 1 job."},
		{"cancel", "Not Found"},
		{"delete selected", "alice@example.com"},
		{"delete selected", "jobs 424242"},
	}
	for _, w := range want {
		assert.Contains(t, findRows(body, w.action), w.has, w.action)
	}
	assert.Contains(t, body, "local (loopback)", "without an Actor answer, the credential used")
	assert.Contains(t, logs.String(), `msg="skiplock ui: action"`)
	assert.Contains(t, logs.String(), `action=pause target="queue \"emails\""`)
}

// The audit is a table: it outlives the handler (a restart, another instance), keeps the
// newest actions and, apart, the newest refused forgeries (a missing CSRF token, a page
// of another origin), so refusals cannot push actions out.
func TestAudit_OutlivesARestartKeepsBoundsAndRecordsRefusedForgeries(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	ids := make([]int64, 5)
	for i := range ids {
		ids[i] = b.insert(job{status: "dead"})
	}
	ui.SetAuditLimits(b.h, 3, 2)
	for _, id := range ids {
		page := "/jobs/" + strconv.FormatInt(id, 10)
		require.Equal(t, http.StatusSeeOther, b.act(page, page+"/retry", nil).code)
	}
	forged := "/jobs/" + strconv.FormatInt(ids[0], 10) + "/delete"
	for range 3 {
		assert.Equal(t, http.StatusForbidden, b.post(forged, url.Values{"csrf": {"forged"}}).code)
	}
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+forged, strings.NewReader(url.Values{"csrf": {b.csrf("/queues")}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://evil.example")
	assert.Equal(t, http.StatusForbidden, b.do(req).code)
	assert.Equal(t, "queued", b.status(ids[0]), "nothing refused acted")

	assert.Equal(t, 3, b.count(`SELECT count(*) FROM {s}.ui_audit WHERE NOT refused`), "the newest 3 actions")
	assert.Equal(t, 2, b.count(`SELECT count(*) FROM {s}.ui_audit WHERE refused`), "the newest 2 refusals, apart")

	// A new handler (a restart, or another instance) lists them.
	b.serve(ui.Config{})
	body := html.UnescapeString(b.get("/audit").body)
	for _, id := range ids[2:] {
		assert.Contains(t, findRows(body, "retry"), "job "+strconv.FormatInt(id, 10))
	}
	assert.NotContains(t, findRows(body, "retry"), "job "+strconv.FormatInt(ids[0], 10)+"<", "beyond the bound")
	refused := findRows(body, "delete")
	assert.Contains(t, refused, "refused: cross-origin request")
	assert.Contains(t, refused, "refused: CSRF token missing or out of date")
	assert.Contains(t, refused, "job "+strconv.FormatInt(ids[0], 10))
}

// findRows returns every audit row of action, for a match among several.
func findRows(body, action string) string {
	out := ""
	for rest := body; ; {
		i := bytes.Index([]byte(rest), []byte(`<tr data-audit="`+action+`"`))
		if i < 0 {
			return out
		}
		j := bytes.Index([]byte(rest[i:]), []byte("</tr>"))
		out += rest[i : i+j]
		rest = rest[i+j:]
	}
}

// Behind a trusted proxy the audit names the client the proxy forwards for (the nearest
// X-Forwarded-For address that is not a trusted proxy); what a client writes further left
// in the header is not believed.
func TestAudit_NamesTheClientATrustedProxyForwardsFor(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	id := b.insert(job{status: "dead"})
	h, err := ui.New(ui.Config{Client: b.client, ExternalAuth: true, TrustedProxies: []string{"127.0.0.0/8", "10.0.0.0/8"},
		Logger: quietLogger()})
	require.NoError(t, err)
	page := direct(h, httptest.NewRequest(http.MethodGet, "/queues", nil), "127.0.0.1:40000")
	require.Equal(t, http.StatusOK, page.Code)
	m := csrfRE.FindStringSubmatch(page.Body.String())
	require.NotNil(t, m)
	f := loginForm{token: m[1], cookie: page.Result().Cookies()[0]}
	action := func(xff string) int {
		req := httptest.NewRequest(http.MethodPost, "/jobs/"+strconv.FormatInt(id, 10)+"/retry",
			strings.NewReader(url.Values{"csrf": {f.token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-For", xff)
		req.AddCookie(f.cookie)
		return direct(h, req, "127.0.0.1:40000").Code
	}
	require.Equal(t, http.StatusSeeOther, action("198.51.100.66, 203.0.113.9, 10.1.2.3"))
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.ui_audit WHERE client = '203.0.113.9 via 127.0.0.1:40000'`))
}

// An escaped slash in an action's path (/queues%2Fpause, /periodic%2Frun) names no route:
// a forgery of it is refused and audited as every refused forgery is, and with a valid
// token it gets 404 and is audited as the path it was. Nothing acts.
func TestAudit_AnEscapedSlashIsRefusedAndAudited(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	qs := &queues{paused: map[string]bool{}}
	b.serve(ui.Config{Queues: qs, Periodic: ui.NewClientControl(b.client)})
	for _, path := range []string{"/queues%2Fpause", "/periodic%2Frun", "/queues%2Femails%2Fpause", "/dead%2Fbulk"} {
		t.Run(path, func(t *testing.T) {
			form := url.Values{"queue": {"emails"}, "name": {"nightly"}, "action": {"delete"}, "count": {"1"}}
			r := b.post(path, form)
			assert.Equal(t, http.StatusForbidden, r.code, "a forgery is refused, not a panic")
			assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.ui_audit WHERE refused AND action = 'POST'
				AND target = $1 AND result = 'refused: CSRF token missing or out of date'`, strconv.Quote(path)),
				"the refused forgery is audited, with the path as it was sent")

			r = b.act("/queues", path, form)
			assert.Equal(t, http.StatusNotFound, r.code, "no route has an escaped slash")
			assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.ui_audit WHERE NOT refused AND action = 'POST'
				AND target = $1 AND result = 'Not Found'`, strconv.Quote(path)))
		})
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()
	assert.Empty(t, qs.paused, "nothing was paused")
}

// The router reads a job's id as a number, so /jobs/0042/cancel and /jobs/+42/edit act on
// job 42; the audit named the job as the path spelled it ("job 0042"), which the job
// page's list of its dashboard changes (and anyone searching the table for "job 42") did
// not find: an action could hide from that list by its spelling. Ids are written as the
// numbers they are.
func TestAudit_NamesAJobByItsNumberHoweverThePathSpellsIt(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	id := b.insert(job{runIn: time.Hour})
	n := strconv.FormatInt(id, 10)
	r := b.act("/jobs/"+n, "/jobs/+"+n+"/edit", url.Values{"priority": {"7"}})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	r = b.act("/jobs/"+n, "/jobs/00"+n+"/cancel", nil)
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	require.Equal(t, "cancelled", b.status(id))

	assert.Equal(t, 2, b.count(`SELECT count(*) FROM {s}.ui_audit WHERE NOT refused AND (target = $1 OR target LIKE $1 || ' %')`, "job "+n))
	page := b.get("/jobs/" + n)
	require.Equal(t, http.StatusOK, page.code)
	assert.Contains(t, page.body, "data-changes", "the job page lists the edit and the cancel")
	assert.Contains(t, page.body, `title="job `+n+` run_at=`, "the edit, named by its id")
	assert.Contains(t, page.body, `title="job `+n+`"`, "the cancel, named by its id")
}

// Retry with edited args recorded the first 100 characters of the new args in the audit
// (log line and ui_audit), where args may hold secrets: the audit records that the args
// were edited and their size, never their content, whatever the outcome (done, a bad
// request, a refused forgery).
func TestAudit_RetryWithEditedArgsRecordsTheirSizeNotTheirContent(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	var logs lockedBuffer
	b.serve(ui.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	id := b.insert(job{status: "dead", payload: `{"sku":"SKU-42"}`})
	n := strconv.FormatInt(id, 10)
	page := "/jobs/" + n
	const secret = "hunter2-api-key"
	args := `{"sku": "SKU-43", "token": "` + secret + `"}`

	r := b.act(page, page+"/retry-args", url.Values{"args": {"  " + args + "\n"}})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.jobs WHERE id = $1 AND payload->>'token' = $2`, id, secret), "the job got the args")
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.ui_audit WHERE NOT refused AND action = 'retry with edited args'
		AND target = $1`, "job "+n+" args edited ("+strconv.Itoa(len(args))+" bytes)"))

	r = b.act(page, page+"/retry-args", url.Values{"args": {`{"token": "` + secret + `"`}})
	require.Equal(t, http.StatusBadRequest, r.code, "not JSON")
	r = b.post(page+"/retry-args", url.Values{"csrf": {"forged"}, "args": {args}})
	require.Equal(t, http.StatusForbidden, r.code)
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.ui_audit WHERE refused AND action = 'retry with edited args'`), "the forgery is audited")
	assert.Equal(t, 3, b.count(`SELECT count(*) FROM {s}.ui_audit WHERE action = 'retry with edited args'`))

	assert.Zero(t, b.count(`SELECT count(*) FROM {s}.ui_audit WHERE concat_ws(' ', who, client, action, target, result) LIKE '%hunter2%'`),
		"no audit row holds the args")
	assert.Contains(t, logs.String(), `action="retry with edited args"`)
	assert.NotContains(t, logs.String(), "hunter2", "no log line holds the args")
	assert.NotContains(t, html.UnescapeString(b.get("/audit").body), "hunter2")
}
