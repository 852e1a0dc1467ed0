package ui_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/ui"
)

var bulkLinkRE = regexp.MustCompile(`data-action="bulk-requeue" href="([^"]+)"`)

func TestDeadPage_BulkRequeueByFilterConfirmsTheCountAndRunsInBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	// 2,500 dead jobs in mailers (three batches), others that must stay dead.
	_, err := b.pool.Exec(b.ctx, b.q(`
		INSERT INTO {s}.jobs (queue, kind, status, attempts, finished_at)
		SELECT CASE WHEN g <= 2500 THEN 'mailers' ELSE 'reports' END, 'email', 'dead', 3, now()
		FROM generate_series(1, 2600) g`))
	require.NoError(t, err)
	failed := b.insert(job{queue: "mailers", status: "failed", attempts: 1})

	r := b.get("/dead?queue=mailers&status=dead")
	require.Equal(t, http.StatusOK, r.code, r.body)
	m := bulkLinkRE.FindStringSubmatch(r.body)
	require.NotNil(t, m, "the dead page offers a requeue of every matching job")
	confirm := html.UnescapeString(m[1])
	r = b.get(confirm)
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, `data-bulk-count="2500"`, "the confirmation shows how many jobs match")
	assert.Contains(t, r.body, "in 3 batches")

	// Jobs that start matching after the confirmation are not taken.
	late := b.insert(job{queue: "mailers", status: "dead", attempts: 3})
	r = b.act(confirm, "/dead/bulk", url.Values{"action": {"requeue"}, "queue": {"mailers"}, "status": {"dead"}, "count": {"2500"}})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.Contains(t, r.location, "n_requeued=2500")
	assert.Equal(t, 2500, b.count(`SELECT count(*) FROM {s}.jobs WHERE queue = 'mailers' AND status = 'queued'`))
	assert.Equal(t, 100, b.count(`SELECT count(*) FROM {s}.jobs WHERE queue = 'reports' AND status = 'dead'`), "another queue is left alone")
	assert.Equal(t, "failed", b.status(failed), "another status is left alone")
	assert.Equal(t, "dead", b.status(late), "a job that matched only after the confirmation is left alone")
	assert.Contains(t, b.get(r.location).body, "Requeued 2500 jobs.")

	t.Run("refused without the confirmed count, an action or a CSRF token", func(t *testing.T) {
		r := b.act("/dead", "/dead/bulk", url.Values{"action": {"requeue"}, "queue": {"reports"}})
		assert.Equal(t, http.StatusBadRequest, r.code)
		r = b.act("/dead", "/dead/bulk", url.Values{"action": {"explode"}, "queue": {"reports"}, "count": {"5"}})
		assert.Equal(t, http.StatusBadRequest, r.code)
		r = b.post("/dead/bulk", url.Values{"action": {"delete"}, "queue": {"reports"}, "count": {"100"}})
		assert.Equal(t, http.StatusForbidden, r.code)
		assert.Equal(t, 100, b.count(`SELECT count(*) FROM {s}.jobs WHERE queue = 'reports' AND status = 'dead'`))
	})
	t.Run("delete by filter", func(t *testing.T) {
		r := b.act("/dead/bulk?queue=reports&action=delete", "/dead/bulk", url.Values{"action": {"delete"}, "queue": {"reports"}, "count": {"100"}})
		require.Equal(t, http.StatusSeeOther, r.code, r.body)
		assert.Equal(t, 0, b.count(`SELECT count(*) FROM {s}.jobs WHERE queue = 'reports'`))
	})
}

func TestDeadPage_BulkActionStopsAtItsTimeLimitAndSaysSo(t *testing.T) {
	t.Parallel()
	key := []byte("one key for the three handlers below")
	b := setup(t, ui.Config{CSRFKey: key})
	id := b.insert(job{status: "dead"})
	csrf, browser := b.csrf("/audit"), b.http // its cookie is the jar's for 127.0.0.1, whatever the port
	b.serve(ui.Config{CSRFKey: key, QueryTimeout: time.Nanosecond})
	b.http = browser
	r := b.post("/dead/bulk", url.Values{"csrf": {csrf}, "action": {"requeue"}, "count": {"1"}})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.Contains(t, r.location, "budget")
	b.serve(ui.Config{CSRFKey: key})
	assert.Contains(t, b.get("/audit").body, "stopped at its time limit", "the audit entry is written past the query time")
	assert.Equal(t, "dead", b.status(id))
}
