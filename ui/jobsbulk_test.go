package ui_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/ui"
)

var bulkCancelLinkRE = regexp.MustCompile(`data-action="bulk-cancel" href="([^"]+)"`)

func TestJobsPage_BulkCancelOfEveryMatchingQueuedJobConfirmsTheCountAndRunsInBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	_, err := b.pool.Exec(b.ctx, b.q(`
		INSERT INTO {s}.jobs (queue, kind, status)
		SELECT CASE WHEN g <= 2500 THEN 'mailers' ELSE 'reports' END, 'email', 'queued'
		FROM generate_series(1, 2600) g`))
	require.NoError(t, err)
	running := b.insert(job{queue: "mailers", status: "running"})
	dead := b.insert(job{queue: "mailers", status: "dead"})

	r := b.get("/jobs?queue=mailers&status=queued")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, `data-action="selected-cancel"`, "rows can be selected")
	assert.Contains(t, r.body, `name="id" value=`)
	m := bulkCancelLinkRE.FindStringSubmatch(r.body)
	require.NotNil(t, m, "the jobs page offers a cancel of every matching job")
	confirm := html.UnescapeString(m[1])
	r = b.get(confirm)
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, `data-bulk-count="2500"`, "the confirmation shows how many jobs match")
	assert.Contains(t, r.body, "in 3 batches")
	assert.Contains(t, r.body, `action="/jobs/bulk"`)

	r = b.act(confirm, "/jobs/bulk", url.Values{"action": {"cancel"}, "status": {"queued"}, "queue": {"mailers"}, "count": {"2500"}})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.Contains(t, r.location, "n_cancelledmany=2500")
	assert.Equal(t, 2500, b.count(`SELECT count(*) FROM {s}.jobs WHERE queue = 'mailers' AND status = 'cancelled' AND finished_at IS NOT NULL`))
	assert.Equal(t, 100, b.count(`SELECT count(*) FROM {s}.jobs WHERE queue = 'reports' AND status = 'queued'`), "another queue is left alone")
	assert.Equal(t, "running", b.status(running), "another status is left alone")
	assert.Equal(t, "dead", b.status(dead))
	assert.Contains(t, b.get(r.location).body, "Cancelled 2500 jobs.")
	audit := html.UnescapeString(b.get("/audit").body)
	assert.Contains(t, findRows(audit, "cancel all matching"), `status="queued" queue="mailers" (confirmed 2500)`)
	assert.Contains(t, findRows(audit, "cancel all matching"), "Cancelled 2500 jobs.")

	t.Run("refused: an action the status does not offer, no status, a search, no CSRF token", func(t *testing.T) {
		for _, q := range []string{"status=queued&action=requeue", "action=cancel&queue=reports", "status=succeeded&action=delete",
			"status=queued&action=cancel&q=x", "status=running&action=delete"} {
			assert.Equal(t, http.StatusBadRequest, b.get("/jobs/bulk?"+q).code, q)
		}
		r := b.post("/jobs/bulk", url.Values{"action": {"delete"}, "status": {"queued"}, "queue": {"reports"}, "count": {"100"}})
		assert.Equal(t, http.StatusForbidden, r.code)
		assert.Equal(t, 100, b.count(`SELECT count(*) FROM {s}.jobs WHERE queue = 'reports' AND status = 'queued'`))
	})
	t.Run("delete every matching queued job", func(t *testing.T) {
		r := b.act("/jobs/bulk?status=queued&queue=reports&action=delete", "/jobs/bulk",
			url.Values{"action": {"delete"}, "status": {"queued"}, "queue": {"reports"}, "count": {"100"}})
		require.Equal(t, http.StatusSeeOther, r.code, r.body)
		assert.Equal(t, 0, b.count(`SELECT count(*) FROM {s}.jobs WHERE queue = 'reports'`))
	})
}

func TestJobsPage_ActionsOnSelectedRowsTakeOnlyJobsStillInTheListedStatus(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	q1, q2 := b.insert(job{queue: "mailers"}), b.insert(job{queue: "mailers"})
	startedMeanwhile := b.insert(job{queue: "mailers", status: "running"})
	info := b.enqueueWorkflow()
	var root int64
	for _, task := range info.Tasks {
		if task.Name == "root" {
			root = task.JobID
		}
	}
	require.NotZero(t, root)
	ids := func(ids ...int64) []string {
		var out []string
		for _, id := range ids {
			out = append(out, strconv.FormatInt(id, 10))
		}
		return out
	}

	r := b.act("/jobs?status=queued", "/jobs/selected", url.Values{"action": {"cancel"}, "status": {"queued"}, "id": ids(q1, startedMeanwhile, root)})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.Contains(t, r.location, "n_cancelledmany=2")
	assert.Contains(t, r.location, "n_skipped=1")
	assert.Equal(t, "cancelled", b.status(q1))
	assert.Equal(t, "running", b.status(startedMeanwhile), "listed as queued, it started meanwhile: left alone")
	assert.Equal(t, "cancelled", b.status(root), "a workflow task is cancelled through the client, which settles its workflow")
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.workflow_tasks WHERE job_id = $1 AND state = 'cancelled'`, root))

	r = b.act("/jobs?status=running", "/jobs/selected", url.Values{"action": {"cancel"}, "status": {"running"}, "id": ids(startedMeanwhile, q2)})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.Contains(t, r.location, "n_cancelledmany=1")
	assert.Equal(t, "cancelled", b.status(startedMeanwhile))
	assert.Equal(t, "queued", b.status(q2), "listed as running, it is queued: left alone")

	r = b.act("/jobs?status=queued", "/jobs/selected", url.Values{"action": {"delete"}, "status": {"queued"}, "id": ids(q2)})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.Equal(t, "", b.status(q2))
	assert.Contains(t, html.UnescapeString(b.get("/audit").body), "jobs "+strconv.FormatInt(q2, 10)+` (listed as "queued")`)

	for _, bad := range []url.Values{
		{"action": {"requeue"}, "status": {"queued"}, "id": ids(q1)},
		{"action": {"cancel"}, "id": ids(q1)},
		{"action": {"delete"}, "status": {"running"}, "id": ids(q1)},
		{"action": {"cancel"}, "status": {"queued"}},
	} {
		assert.Equal(t, http.StatusBadRequest, b.act("/jobs", "/jobs/selected", bad).code, bad)
	}
	assert.Equal(t, http.StatusForbidden, b.post("/jobs/selected", url.Values{"action": {"cancel"}, "status": {"queued"}, "id": ids(q1)}).code)

	t.Run("the page offers the actions of its status only", func(t *testing.T) {
		assert.NotContains(t, b.get("/jobs?status=succeeded").body, `name="id" value=`)
		assert.NotContains(t, b.get("/jobs").body, `data-action="selected-`)
		body := b.get("/jobs?status=dead").body
		assert.Contains(t, body, `data-action="selected-requeue"`)
		assert.Contains(t, body, `data-action="bulk-delete"`)
		body = b.get("/jobs?status=queued&q=x").body
		assert.Contains(t, body, `data-action="selected-cancel"`)
		assert.NotContains(t, body, `data-action="bulk-cancel"`, "a search is not a bulk filter")
		ro := setup(t, ui.Config{ReadOnly: true})
		assert.NotContains(t, ro.get("/jobs?status=queued").body, `data-action="selected-cancel"`)
	})
}

// "Run now" makes every matching scheduled job due at once, in batches, leaving a job
// that waits for the jobs it depends on.
func TestJobsPage_BulkRunNowMakesScheduledJobsDue(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	_, err := b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.jobs (queue, kind, run_at)
		SELECT 'nightly', 'report', now() + interval '3 hours' FROM generate_series(1, 1200)`))
	require.NoError(t, err)
	parent := b.insert(job{queue: "other", runIn: time.Hour})
	child, err := b.client.Enqueue(b.ctx, timed{}, &skiplock.EnqueueOptions{Queue: "nightly", DependsOn: []int64{parent}})
	require.NoError(t, err)

	r := b.get("/jobs?status=queued&queue=nightly")
	require.Equal(t, http.StatusOK, r.code)
	assert.Contains(t, r.body, `<a class="button" data-action="bulk-runnow"`, "run now is not drawn as dangerous")
	r = b.get("/jobs/bulk?status=queued&queue=nightly&action=runnow")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, `data-bulk-count="1201"`)
	r = b.act("/jobs/bulk?status=queued&queue=nightly&action=runnow", "/jobs/bulk",
		url.Values{"action": {"runnow"}, "status": {"queued"}, "queue": {"nightly"}, "count": {"1201"}})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.Contains(t, r.location, "n_runnowmany=1200")
	assert.Contains(t, r.location, "n_skipped=1")
	assert.Zero(t, b.count(`SELECT count(*) FROM {s}.jobs WHERE queue = 'nightly' AND run_at > now() AND id <> $1`, child.ID))
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.jobs WHERE id = $1 AND run_at > now() + interval '1 year'`, child.ID), "it still waits for its parent")
}
