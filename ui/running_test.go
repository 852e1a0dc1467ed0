package ui_test

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/ui"
)

// The workers page shows each running job's progress as a bar, marks a handler running
// past its timeout, and reloads itself.
func TestWorkersPage_RunningJobsShowProgressAndOverrun(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	slow := b.insert(job{status: "running"})
	stuck := b.insert(job{status: "running"})
	_, err := b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET progress = '{"value": 40, "message": "resizing"}' WHERE id = $1`), slow)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET overrun_fence = fence WHERE id = $1`), stuck)
	require.NoError(t, err)
	r := b.get("/workers")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, `<body data-reload="5">`)
	row := func(id int64) string {
		i := strings.Index(r.body, `data-running="`+strconv.FormatInt(id, 10)+`"`)
		require.GreaterOrEqual(t, i, 0)
		j := strings.Index(r.body[i:], "</tr>")
		return r.body[i : i+j]
	}
	assert.Contains(t, row(slow), `<progress max="100" value="40"></progress>`)
	assert.Contains(t, row(slow), "resizing")
	assert.NotContains(t, row(slow), "data-overrunning")
	assert.Contains(t, row(stuck), "data-overrunning")
	assert.NotContains(t, b.get("/queues").body, `http-equiv="refresh"`, "only the workers page reloads itself")
}

// The workers page's running jobs are selected and cancelled together (a POST with its
// CSRF token, audited), back to the workers page; a job that is not running any more is
// left alone.
func TestWorkersPage_CancelSelectedRunningJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	a := b.insert(job{status: "running"})
	c := b.insert(job{status: "running"})
	other := b.insert(job{status: "running"})
	done := b.insert(job{status: "dead"})
	r := b.get("/workers")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, `<input type="checkbox" name="id" value="`+strconv.FormatInt(a, 10)+`" form="bulk"`)
	assert.Contains(t, r.body, `data-action="selected-cancel"`)
	r = b.act("/workers", "/jobs/selected", url.Values{"action": {"cancel"}, "status": {"running"}, "back": {"workers"},
		"id": {strconv.FormatInt(a, 10), strconv.FormatInt(c, 10), strconv.FormatInt(done, 10)}})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.True(t, strings.HasPrefix(r.location, "/workers?"), r.location)
	assert.Contains(t, b.get(r.location).body, "Cancelled 2")
	assert.Equal(t, "cancelled", b.status(a))
	assert.Equal(t, "cancelled", b.status(c))
	assert.Equal(t, "running", b.status(other))
	assert.Equal(t, "dead", b.status(done), "not running: left alone")
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.ui_audit WHERE action = 'cancel selected' AND target LIKE '%(listed as "running")'`))

	ro := setup(t, ui.Config{ReadOnly: true})
	ro.insert(job{status: "running"})
	assert.NotContains(t, ro.get("/workers").body, `form="bulk"`, "read-only: no selection")
}
