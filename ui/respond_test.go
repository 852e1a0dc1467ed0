package ui_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/ui"
)

// A refusal page (404, and the 500 and 503 of a database error) carries every header a
// page does: no-store, its content type, the security headers, and the CSRF cookie its
// forms are bound to.
func TestRefuse_APageOfRefusalCarriesEveryHeaderOfAPage(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	page := b.get("/queues")
	require.Equal(t, http.StatusOK, page.code)
	want := map[string]string{}
	for _, k := range []string{"Cache-Control", "Content-Type", "Content-Security-Policy", "X-Content-Type-Options",
		"X-Frame-Options", "Referrer-Policy"} {
		want[k] = page.header.Get(k)
		require.NotEmpty(t, want[k], k)
	}
	require.Equal(t, "no-store", want["Cache-Control"])

	check := func(name string, b *bundle, path string, status int) {
		t.Helper()
		b.http = newHTTPClient(t) // no CSRF cookie yet: the refusal page sets one
		r := b.get(path)
		require.Equal(t, status, r.code, name)
		for k, v := range want {
			assert.Equal(t, v, r.header.Get(k), "%s: %s", name, k)
		}
		assert.Contains(t, r.header.Get("Set-Cookie"), "skiplock_ui_csrf=", name)
	}
	check("no such job", b, "/jobs/987654321", http.StatusNotFound)
	check("no such workflow", b, "/workflows/987654321", http.StatusNotFound)
	check("a bad filter", b, "/jobs?limit=x", http.StatusBadRequest)

	slow := setup(t, ui.Config{QueryTimeout: time.Nanosecond})
	check("the database did not answer in time", slow, "/jobs", http.StatusServiceUnavailable)

	broken := newBundle(t)
	var err error
	broken.client, err = skiplock.NewClient(broken.pool, skiplock.Config{Schema: "skiplock_ui_not_migrated", Logger: quietLogger()})
	require.NoError(t, err)
	broken.serve(ui.Config{})
	check("a database error", broken, "/jobs", http.StatusInternalServerError)

	// An answer net/http writes itself (a path no route has) is kept out of caches too.
	r := b.get("/no/such/page")
	assert.Equal(t, http.StatusNotFound, r.code)
	assert.Equal(t, "no-store", r.header.Get("Cache-Control"))
	assert.Equal(t, "public, max-age=300", b.get("/static/app.css").header.Get("Cache-Control"), "the static files are cached")
}
