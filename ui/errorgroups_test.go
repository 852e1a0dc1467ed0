package ui_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/ui"
)

// The dead page groups dead and failed jobs by the first line of their last error, most
// common first, within the filter; hostile error text is shown as text.
func TestDeadPage_GroupsJobsByError(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	for range 3 {
		b.insert(job{status: "dead", queue: "mail", lastError: "smtp: 421 try later\nstack 1"})
	}
	b.insert(job{status: "failed", queue: "mail", lastError: "<script>alert(1)</script>"})
	b.insert(job{status: "dead", queue: "other", lastError: "smtp: 421 try later"})
	r := b.get("/dead")
	require.Equal(t, http.StatusOK, r.code, r.body)
	i := strings.Index(r.body, "data-error-groups")
	require.GreaterOrEqual(t, i, 0, "no error groups on the page")
	groups := r.body[i : i+strings.Index(r.body[i:], "</details>")]
	assert.Contains(t, groups, "smtp: 421 try later")
	assert.NotContains(t, groups, "stack 1", "only the first line")
	assert.Less(t, strings.Index(groups, ">4<"), strings.Index(groups, "&lt;script&gt;"), "most common first: 4 jobs, then 1")
	assert.NotContains(t, r.body, "<script>alert(1)</script>")

	r = b.get("/dead?queue=other")
	require.Equal(t, http.StatusOK, r.code, r.body)
	i = strings.Index(r.body, "data-error-groups")
	groups = r.body[i : i+strings.Index(r.body[i:], "</details>")]
	assert.Contains(t, groups, ">1<")
	assert.NotContains(t, groups, "&lt;script&gt;", "the filter's queue only")
}
