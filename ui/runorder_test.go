package ui_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/ui"
)

// A queue's queued jobs list in the order workers claim them (highest priority, then
// earliest due, then oldest), page after page, through the claim index.
func TestJobsPage_QueuedJobsInRunOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	var want []int64
	ins := func(priority int, runIn string) int64 {
		var id int64
		require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`INSERT INTO {s}.jobs (queue, kind, priority, run_at)
			VALUES ('work', 'k', $1, date_trunc('second', now()) + $2::interval) RETURNING id`), priority, runIn).Scan(&id))
		return id
	}
	late0, early0a, early0b := ins(0, "1 hour"), ins(0, "-1 hour"), ins(0, "-1 hour")
	high := ins(5, "2 hours")
	neg := ins(-3, "-5 hours")
	mid0 := ins(0, "0 seconds")
	high2 := ins(5, "-1 minute")
	want = []int64{high2, high, early0a, early0b, mid0, late0, neg}
	b.insert(job{queue: "other"})
	b.insert(job{queue: "work", status: "dead"})

	r := b.get("/jobs?status=queued&queue=work")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, `data-run-order`)
	got, pages := b.walk("/jobs?status=queued&queue=work&order=run&limit=2")
	assert.Equal(t, want, got, "claim order across pages and priorities")
	assert.Equal(t, 4, pages)
	r = b.get("/jobs?status=queued&queue=work&order=run")
	assert.Contains(t, r.body, `data-order="run"`)
	assert.Contains(t, r.body, `data-priority="5"`)

	for _, bad := range []string{"/jobs?status=queued&order=run", "/jobs?queue=work&order=run", "/jobs?status=queued&queue=work&kind=k&order=run",
		"/jobs?status=queued&queue=work&order=run&after=x", "/jobs?status=queued&queue=work&order=run&after=99999.1.0"} {
		assert.Equal(t, http.StatusBadRequest, b.get(bad).code, bad)
	}
}
