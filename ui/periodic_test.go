package ui_test

import (
	"html"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/ui"
)

// The periodic page runs a schedule now, disables and enables it, through ClientControl
// (the library's RunPeriodicNow and SetPeriodicEnabled), audited; it says "inactive" for
// a schedule no running worker declares and links the last occurrence's job.
func TestPeriodicPage_RunNowDisableEnable(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctl := ui.NewClientControl(b.client)
	b.serve(ui.Config{Queues: ctl, Periodic: ctl})
	_, err := b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.periodic (name, kind, queue, schedule, misfire, next_run_at, last_run_at, last_job_id, declared_at) VALUES
		('nightly', 'report', 'reports', '0 3 * * *', 'run_once', now() + interval '1 day', now() - interval '1 hour', 7, now()),
		('gone <b>x</b>', 'report', 'reports', 'every 1h0m0s', 'run_once', now() + interval '1 hour', NULL, NULL, now() - interval '2 minutes')`))
	require.NoError(t, err)
	row := func(body, name string) string { return rowOf(t, body, `<tr data-schedule="`+name+`">`) }

	r := b.get("/periodic")
	require.Equal(t, http.StatusOK, r.code, r.body)
	nightly := row(r.body, "nightly")
	assert.Contains(t, nightly, `href="/jobs/7" data-last-job`, "the last occurrence's job is linked")
	assert.Contains(t, nightly, ">active<")
	assert.Contains(t, nightly, `data-action="periodic-run"`)
	gone := row(r.body, "gone &lt;b&gt;x&lt;/b&gt;")
	assert.Contains(t, gone, ">inactive<", "not paused: no worker declares it")
	assert.Contains(t, gone, `data-action="periodic-run" disabled`)

	r = b.act("/periodic", "/periodic/disable", url.Values{"name": {"nightly"}})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.periodic WHERE name = 'nightly' AND disabled`))
	page := b.get(r.location).body
	assert.Contains(t, page, "Disabled the schedule")
	assert.Contains(t, row(page, "nightly"), ">disabled<")
	assert.Contains(t, row(page, "nightly"), `data-action="periodic-enable"`)
	r = b.act("/periodic", "/periodic/run", url.Values{"name": {"nightly"}})
	assert.Equal(t, http.StatusNotFound, r.code, "a disabled schedule does not run now")
	assert.Contains(t, r.body, "enable it first")

	r = b.act("/periodic", "/periodic/enable", url.Values{"name": {"nightly"}})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	r = b.act("/periodic", "/periodic/run", url.Values{"name": {"nightly"}})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.periodic WHERE name = 'nightly' AND NOT disabled AND next_run_at <= now()`),
		"its next occurrence is due now")

	assert.Equal(t, http.StatusNotFound, b.act("/periodic", "/periodic/run", url.Values{"name": {"nope"}}).code)
	assert.Equal(t, http.StatusBadRequest, b.act("/periodic", "/periodic/disable", url.Values{}).code)
	assert.Equal(t, http.StatusForbidden, b.post("/periodic/disable", url.Values{"name": {"nightly"}}).code, "no CSRF token")
	assert.Equal(t, 0, b.count(`SELECT count(*) FROM {s}.periodic WHERE disabled`))

	audit := html.UnescapeString(b.get("/audit").body)
	assert.Contains(t, findRows(audit, "disable periodic"), `schedule "nightly"`)
	assert.Contains(t, findRows(audit, "run periodic now"), "due now")
	assert.Contains(t, findRows(audit, "enable periodic"), `schedule "nightly"`)

	ro := newBundle(t)
	ro.serve(ui.Config{Periodic: ui.NewClientControl(ro.client), ReadOnly: true})
	assert.NotContains(t, ro.get("/periodic").body, "data-action=\"periodic-")
}
