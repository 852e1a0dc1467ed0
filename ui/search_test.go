package ui_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/ui"
)

func TestJobsPage_SearchesArgsAndMetadataInABoundedWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	hit := b.insert(job{payload: `{"order_id": 42, "email": "ann@example.com"}`})
	b.insert(job{payload: `{"order_id": 421}`})
	dead := b.insert(job{status: "dead", payload: `{"note": "100%_done"}`})
	tagged := b.insert(job{})
	_, err := b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET metadata = '{"tenant": "acme-eu"}' WHERE id = $1`), tagged)
	require.NoError(t, err)
	archived := b.insert(job{payload: `{"email": "ann@example.com"}`})
	b.archive(archived, 0)

	search := func(q string, extra ...string) []int64 {
		v := url.Values{"q": {q}}
		for i := 0; i+1 < len(extra); i += 2 {
			v.Set(extra[i], extra[i+1])
		}
		r := b.get("/jobs?" + v.Encode())
		require.Equal(t, http.StatusOK, r.code, r.body)
		return listed(r.body)
	}
	assert.Equal(t, []int64{archived, hit}, search(`ann@example.com`), "args of the hot table and the archive")
	assert.Equal(t, []int64{hit}, search(`"order_id": 42}`), "a piece of the JSON text, as jsonb prints it")
	assert.Equal(t, []int64{tagged}, search(`acme-eu`), "metadata")
	assert.Equal(t, []int64{dead}, search(`100%_done`), "% and _ are plain characters")
	assert.Empty(t, search(`50%`), "not a pattern")
	assert.Equal(t, []int64{dead}, search(`done`, "status", "dead"), "with a status filter")
	assert.Empty(t, search(`ann@example.com`, "status", "dead"))
	assert.Contains(t, b.get("/jobs?q=x").body, `data-search`)

	r := b.get("/dead/bulk?action=requeue&q=done")
	assert.Equal(t, http.StatusBadRequest, r.code, "a bulk action never runs on a search it would not apply")
}
