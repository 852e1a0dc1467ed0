package ui_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/ui"
)

var kindLinkRE = regexp.MustCompile(`<dt>Kind</dt><dd><a href="([^"]+)">`)

// A kind is any text: one that differs from another by a trailing no-break space is a
// kind of its own, and its link, its list and a bulk delete by it touch only its jobs.
func TestFilter_APaddedKindActsOnlyOnItsOwnJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	const padded = "payment.charge\u00a0"
	real := b.insert(job{kind: "payment.charge", status: "dead", attempts: 3})
	fake := b.insert(job{kind: padded, status: "dead", attempts: 3})
	spaced := b.insert(job{kind: " payment.charge ", status: "dead", attempts: 3})

	r := b.get("/jobs/" + strconv.FormatInt(fake, 10))
	require.Equal(t, http.StatusOK, r.code, r.body)
	m := kindLinkRE.FindStringSubmatch(r.body)
	require.NotNil(t, m, "the job page links its kind")
	link, err := url.Parse(html.UnescapeString(m[1]))
	require.NoError(t, err)
	require.Equal(t, padded, link.Query().Get("kind"))
	assert.Equal(t, []int64{fake}, listed(b.get(link.RequestURI()).body), "the kind link lists the padded kind's job only")
	assert.Equal(t, []int64{fake}, listed(b.get("/dead?kind=payment.charge%C2%A0").body))
	assert.Equal(t, []int64{spaced}, listed(b.get("/jobs?kind=+payment.charge+").body), "spaces are part of a kind")
	assert.Equal(t, []int64{real}, listed(b.get("/jobs?kind=payment.charge").body))

	r = b.get("/dead/bulk?kind=payment.charge%C2%A0&action=delete")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, `data-bulk-count="1"`, "the confirmation counts the padded kind's job only")
	r = b.act("/dead/bulk?kind=payment.charge%C2%A0&action=delete", "/dead/bulk",
		url.Values{"action": {"delete"}, "kind": {padded}, "count": {"2"}})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.Contains(t, r.location, "n_deleted=1")
	assert.Equal(t, "", b.status(fake), "the padded kind's job is deleted")
	assert.Equal(t, "dead", b.status(real), "the real kind's job is left alone")
	assert.Equal(t, "dead", b.status(spaced))
}
