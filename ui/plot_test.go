package ui_test

import (
	"net/http"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/ui"
)

var yLabelRE = regexp.MustCompile(`<text class="ylab"[^>]*>([^<]+)</text>`)

func TestQueuesPage_PlotAxisSurvivesASpikeAndShowsFailures(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{StatsMaxAge: -1})
	// 40 jobs a minute for the last 50 minutes, and 10,000 in the minute 20 minutes ago.
	_, err := b.pool.Exec(b.ctx, b.q(`
		INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts, created_at, finished_at)
		SELECT 1000000 + row_number() OVER (ORDER BY f), 'default', 'email', '{}', 'succeeded', 0, f, 1, 3, f, f
		FROM (
			SELECT date_trunc('minute', now()) - make_interval(mins => 1 + g / 40) + interval '10 seconds' AS f
			FROM generate_series(0, 50 * 40 - 1) g
			UNION ALL
			SELECT date_trunc('minute', now()) - interval '20 minutes' + interval '5 seconds' FROM generate_series(1, 10000)
		) t ORDER BY f`))
	require.NoError(t, err)
	for range 3 {
		id := b.insert(job{status: "dead", attempts: 3, lastError: "boom"})
		_, err := b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET finished_at = now() - interval '5 minutes' WHERE id = $1`), id)
		require.NoError(t, err)
	}

	r := b.get("/queues")
	require.Equal(t, http.StatusOK, r.code, r.body)
	labels := yLabelRE.FindAllStringSubmatch(r.body, -1)
	require.Len(t, labels, 3)
	assert.Equal(t, "100", labels[2][1], "the axis is set by the ordinary minutes (40), not by the spike")
	assert.Contains(t, r.body, "▲10\u202f040", "the spike is drawn to the top and labelled with its count")
	assert.Contains(t, r.body, `<rect class="fail"`, "failures are a second series")
	assert.Contains(t, r.body, `data-total="failedhour">3<`)
	assert.Contains(t, r.body, "3 jobs failed for good")
	assert.Contains(t, r.body, "(0.0% of the jobs that ended)", "3 of 12,003")
	assert.Contains(t, r.body, ": 7.0% of the jobs that ended", "the minute of the failures: 3 of 43")
}
