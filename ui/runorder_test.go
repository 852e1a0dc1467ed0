package ui_test

import (
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"
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

// Jobs due far from now — the year 3000, 100000, 1500, beyond what UnixNano holds — page
// through in run order without a repeat: the cursor holds any run_at Postgres does.
func TestJobsPage_RunOrderPagesThroughFarDates(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	_, err := b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.jobs (queue, kind, priority, run_at)
		SELECT 'far', 'k', CASE WHEN g % 5 = 0 THEN 3 ELSE 10 END, CASE g % 4
			WHEN 0 THEN '3000-01-01 00:00:00.000001+00'::timestamptz + make_interval(secs => g / 3)
			WHEN 1 THEN '3000-06-01 12:00:00+00'::timestamptz
			WHEN 2 THEN '100000-01-01 00:00:00+00'::timestamptz + make_interval(secs => g)
			ELSE '1500-01-01 00:00:00.5+00'::timestamptz END
		FROM generate_series(1, 60) g`))
	require.NoError(t, err)
	b.insert(job{queue: "far"})
	rows, err := b.pool.Query(b.ctx, b.q(`SELECT id FROM {s}.jobs WHERE queue = 'far' AND status = 'queued' ORDER BY priority DESC, run_at, id`))
	require.NoError(t, err)
	want, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, want, 61)

	got, pages := b.walk("/jobs?status=queued&queue=far&order=run&limit=7")
	assert.Equal(t, want, got, "every job once, in claim order")
	assert.Equal(t, 9, pages)

	for _, bad := range []string{"10_9223371331200000000_1", "10_-211813488000000001_1", "10.31536000000000000.1", "10_1_0", "40000_1_1"} {
		assert.Equal(t, http.StatusBadRequest, b.get("/jobs?status=queued&queue=far&order=run&after="+bad).code, bad)
	}
}
