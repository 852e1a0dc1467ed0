package ui_test

import (
	"net/http"
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
	assert.Contains(t, r.body, `<meta http-equiv="refresh" content="5">`)
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
