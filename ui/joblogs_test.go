package ui_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/ui"
)

// The job page's Logs section shows the records per attempt, newest attempt first, with
// every message and attribute escaped.
func TestJobPage_ShowsLogsEscaped(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	id := b.insert(job{status: "failed", attempts: 2})
	quiet := b.insert(job{status: "queued"})
	_, err := b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.job_logs (job_id, fence, seq, attempt, at, level, message, attrs) VALUES
		($1, 3, 1, 1, now() - interval '1 minute', 4, 'first <script>alert(1)</script>', NULL),
		($1, 9, 1, 2, now(), 8, 'second try', '{"html": "<b>x</b>"}')`), id)
	require.NoError(t, err)

	r := b.get("/jobs/" + strconv.FormatInt(id, 10))
	require.Equal(t, 200, r.code, r.body)
	assert.Contains(t, r.body, `id="logs"`)
	assert.NotContains(t, r.body, "<script>alert(1)")
	assert.Contains(t, r.body, "first &lt;script&gt;alert(1)&lt;/script&gt;")
	assert.NotContains(t, r.body, "<b>x</b>")
	assert.Contains(t, r.body, "ERROR")
	assert.Less(t, strings.Index(r.body, "Attempt 2 <span"), strings.Index(r.body, "Attempt 1 <span"), "newest attempt first")

	r = b.get("/jobs/" + strconv.FormatInt(quiet, 10))
	require.Equal(t, 200, r.code, r.body)
	assert.Contains(t, r.body, "No records.")
}
