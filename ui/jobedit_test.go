package ui_test

import (
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/ui"
)

// The job page reschedules a job and changes its priority (Client.Update), audited; a
// running job is left as it is, and bad input is refused with nothing changed.
func TestJobPage_EditReschedulesAndChangesPriority(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	id := b.insert(job{runIn: time.Hour})
	page := "/jobs/" + strconv.FormatInt(id, 10)
	r := b.get(page)
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, `action="/jobs/`+strconv.FormatInt(id, 10)+`/edit"`)

	r = b.act(page, page+"/edit", url.Values{"run_at": {"2031-05-06T07:08"}, "priority": {"9"}})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.Contains(t, b.get(r.location).body, "Updated the job.")
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.jobs WHERE id = $1 AND priority = 9
		AND run_at = '2031-05-06 07:08:00+00'`, id))
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.ui_audit WHERE action = 'edit' AND target LIKE 'job '||$1||' run_at="2031-05-06T07:08" priority="9"%'`,
		strconv.FormatInt(id, 10)))

	for name, form := range map[string]url.Values{
		"bad time":     {"run_at": {"tomorrow"}},
		"bad priority": {"priority": {"99999"}},
		"nothing":      {},
	} {
		r = b.act(page, page+"/edit", form)
		assert.Equal(t, http.StatusBadRequest, r.code, name)
	}
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.jobs WHERE id = $1 AND priority = 9`, id), "a refused edit changed the job")

	running := b.insert(job{status: "running"})
	rp := "/jobs/" + strconv.FormatInt(running, 10)
	r = b.get(rp)
	assert.NotContains(t, r.body, rp+`/edit"`, "no edit form for a running job")
	r = b.act(rp, rp+"/edit", url.Values{"priority": {"3"}})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.Contains(t, b.get(r.location).body, "Not changed: a worker started the job first.")
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.jobs WHERE id = $1 AND priority = 0`, running))
}
