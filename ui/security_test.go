package ui_test

import (
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/ui"
)

// hostGet fetches path from b's server with the Host header set to host.
func (b *bundle) hostGet(path, host string, hdr map[string]string) response {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.srv.URL+path, nil)
	require.NoError(b.t, err)
	req.Host = host
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return b.do(req)
}

func TestHost_RefusesUnknownHostsOnEveryServerMode(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	modes := map[string]ui.Config{
		"no auth":    {},
		"token":      {Token: token},
		"basic auth": {BasicAuth: &ui.BasicAuth{User: "ops", Password: "pw"}},
	}
	for name, cfg := range modes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, cfg)
			id := b.insert(job{payload: `{"secret":"args-of-the-job"}`})
			port := b.srv.URL[strings.LastIndex(b.srv.URL, ":"):]
			creds := map[string]string{"Authorization": "Bearer " + token}
			if cfg.BasicAuth != nil {
				req := httptest.NewRequest(http.MethodGet, "/", nil)
				req.SetBasicAuth("ops", "pw")
				creds = map[string]string{"Authorization": req.Header.Get("Authorization")}
			}
			page := "/jobs/" + strconv.FormatInt(id, 10)
			for _, host := range []string{"evil.example" + port, "evil.example", "127.0.0.1.evil.example" + port, "localhost.evil.example"} {
				r := b.hostGet(page, host, creds)
				assert.Equal(t, http.StatusMisdirectedRequest, r.code, "host %q", host)
				assert.NotContains(t, r.body, "args-of-the-job", "host %q", host)
				assert.Empty(t, r.header.Values("Set-Cookie"), "no CSRF cookie for host %q", host)
			}
			for _, host := range []string{"127.0.0.1" + port, "localhost" + port, "[::1]" + port, "LOCALHOST", "127.0.0.1"} {
				r := b.hostGet(page, host, creds)
				assert.Equal(t, http.StatusOK, r.code, "host %q: %s", host, r.body)
				assert.Contains(t, r.body, "args-of-the-job", "host %q", host)
			}
		})
	}

	t.Run("configured names are served, and a POST whose Origin is another site is refused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, ui.Config{AllowedHosts: []string{"jobs.example.com"}})
		id := b.insert(job{status: "dead"})
		port := b.srv.URL[strings.LastIndex(b.srv.URL, ":"):]
		assert.Equal(t, http.StatusOK, b.hostGet("/queues", "jobs.example.com"+port, nil).code)
		assert.Equal(t, http.StatusMisdirectedRequest, b.hostGet("/queues", "other.example.com"+port, nil).code)

		action := "/jobs/" + strconv.FormatInt(id, 10) + "/retry"
		form := url.Values{"csrf": {b.csrf("/queues")}}
		req, err := http.NewRequest(http.MethodPost, b.srv.URL+action, strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "http://evil.example"+port)
		assert.Equal(t, http.StatusForbidden, b.do(req).code)
		assert.Equal(t, "dead", b.status(id))
		req, err = http.NewRequest(http.MethodPost, b.srv.URL+action, strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", b.srv.URL)
		assert.Equal(t, http.StatusSeeOther, b.do(req).code)
		assert.Equal(t, "queued", b.status(id))
	})

	t.Run("a bad AllowedHosts entry is a config error", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		for _, bad := range []string{"jobs.example.com:8080", "http://jobs.example.com", "a/b"} {
			_, err := ui.New(ui.Config{Client: b.client, AllowedHosts: []string{bad}})
			assert.ErrorIs(t, err, ui.ErrInvalidConfig, bad)
		}
	})
}

var pauseFormRE = regexp.MustCompile(`<form method="post" action="([^"]+/pause)"`)

func TestQueuesPage_AHostileQueueNameActsOnlyOnItsQueue(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"", "/admin/jobs"} {
		t.Run("prefix "+prefix, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t)
			qs := &queues{paused: map[string]bool{}}
			b.serve(ui.Config{Prefix: prefix, Queues: qs})
			target := b.insert(job{queue: "default"})
			// The library refuses such a queue name; the table's check allows it.
			hostile := "../jobs/" + strconv.FormatInt(target, 10) + "/delete?"
			b.insert(job{queue: hostile})

			r := b.get(prefix + "/queues")
			require.Equal(t, http.StatusOK, r.code, r.body)
			row := rowOf(t, r.body, `<tr data-queue="`+html.EscapeString(hostile)+`">`)
			m := pauseFormRE.FindStringSubmatch(row)
			require.NotNil(t, m, row)
			action := html.UnescapeString(m[1])
			assert.Equal(t, prefix+"/queues/"+url.PathEscape(hostile)+"/pause", action)

			r = b.act(prefix+"/queues", action, nil)
			require.Equal(t, http.StatusSeeOther, r.code, r.body)
			assert.Equal(t, "queued", b.status(target), "the pause button deleted nothing")
			assert.True(t, qs.paused[hostile], "it paused the queue it belongs to")
		})
	}
}

// direct serves one request straight through h, from remote, to a loopback Host.
func direct(h http.Handler, req *http.Request, remote string) *httptest.ResponseRecorder {
	req.RemoteAddr = remote
	if req.Host == "" || req.Host == "example.com" {
		req.Host = "127.0.0.1:8080"
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// loginForm is a login POST carrying the CSRF cookie and token of page.
type loginForm struct {
	cookie *http.Cookie
	token  string
}

func newLoginForm(t *testing.T, h http.Handler) loginForm {
	t.Helper()
	rec := direct(h, httptest.NewRequest(http.MethodGet, "/login", nil), "127.0.0.1:40000")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	m := csrfRE.FindStringSubmatch(rec.Body.String())
	require.NotNil(t, m)
	var c *http.Cookie
	for _, k := range rec.Result().Cookies() {
		if k.Name == "skiplock_ui_csrf" {
			c = k
		}
	}
	require.NotNil(t, c)
	return loginForm{cookie: c, token: m[1]}
}

func (f loginForm) post(h http.Handler, remote, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"csrf": {f.token}, "token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(f.cookie)
	return direct(h, req, remote)
}

// clock is a settable time for the session hook.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestLogin_ThrottlesWrongTokensPerClientAndInAll(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	const token = "s3cret-token"
	h, err := ui.New(ui.Config{Client: b.client, Token: token, Logger: quietLogger()})
	require.NoError(t, err)
	clk := &clock{t: time.Now()}
	ui.SetSessionClock(h, clk.now)
	f := newLoginForm(t, h)

	for i := range 5 {
		assert.Equal(t, http.StatusUnauthorized, f.post(h, "127.0.0.1:40000", "wrong").Code, "attempt %d", i)
	}
	rec := f.post(h, "127.0.0.1:40000", "wrong")
	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
	wait, err := strconv.Atoi(rec.Header().Get("Retry-After"))
	require.NoError(t, err, "Retry-After is whole seconds")
	assert.True(t, wait >= 1 && wait <= 60, "Retry-After %d", wait)
	assert.Equal(t, http.StatusTooManyRequests, f.post(h, "127.0.0.1:40000", token).Code, "even the right token waits")
	req := httptest.NewRequest(http.MethodGet, "/queues", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	assert.Equal(t, http.StatusTooManyRequests, direct(h, req, "127.0.0.1:40001").Code, "the bearer header is throttled the same way")

	clk.add(61 * time.Second)
	rec = f.post(h, "127.0.0.1:40000", token)
	assert.Equal(t, http.StatusSeeOther, rec.Code, "the window passed")

	// Many addresses guessing together hit the global limit.
	clk.add(61 * time.Second)
	limited := 0
	for i := range 100 {
		if f.post(h, "198.51.100."+strconv.Itoa(i+1)+":40000", "wrong").Code == http.StatusTooManyRequests {
			limited++
		}
	}
	assert.GreaterOrEqual(t, limited, 30, "the global limit stops guessing spread over addresses")
	assert.Equal(t, http.StatusTooManyRequests, f.post(h, "203.0.113.9:40000", token).Code)
}

func sessionCookieOf(rec *httptest.ResponseRecorder) *http.Cookie {
	for _, c := range rec.Result().Cookies() {
		if c.Name == "skiplock_ui_session" {
			return c
		}
	}
	return nil
}

func TestSession_RandomExpiresAndEndsAtLogout(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	const token = "s3cret-token"
	newHandler := func() (*ui.Handler, *clock) {
		h, err := ui.New(ui.Config{Client: b.client, Token: token, SessionIdle: time.Hour, SessionMaxAge: 3 * time.Hour,
			AllowedHosts: []string{"jobs.example.com"}, Logger: quietLogger()})
		require.NoError(t, err)
		clk := &clock{t: time.Now()}
		ui.SetSessionClock(h, clk.now)
		return h, clk
	}
	h, clk := newHandler()
	f := newLoginForm(t, h)
	login := func(h http.Handler, f loginForm) *http.Cookie {
		rec := f.post(h, "127.0.0.1:40000", token)
		require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
		c := sessionCookieOf(rec)
		require.NotNil(t, c)
		return c
	}
	page := func(c *http.Cookie) int {
		req := httptest.NewRequest(http.MethodGet, "/queues", nil)
		req.AddCookie(c)
		return direct(h, req, "127.0.0.1:40000").Code
	}

	a, c := login(h, f), login(h, f)
	assert.NotEqual(t, a.Value, c.Value, "each login gets its own random id")
	h2, _ := newHandler()
	assert.NotEqual(t, a.Value, login(h2, newLoginForm(t, h2)).Value)
	assert.True(t, a.HttpOnly)
	assert.Equal(t, http.SameSiteStrictMode, a.SameSite)
	assert.False(t, a.Secure, "plain HTTP from this machine: a Secure cookie would never come back")
	assert.Equal(t, http.StatusOK, page(a))

	t.Run("off loopback the cookie is Secure, and plain HTTP cannot sign in", func(t *testing.T) {
		login := func(proto string) *httptest.ResponseRecorder {
			req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"csrf": {f.token}, "token": {token}}.Encode()))
			req.Host = "jobs.example.com"
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if proto != "" {
				req.Header.Set("X-Forwarded-Proto", proto)
			}
			req.AddCookie(f.cookie)
			return direct(h, req, "203.0.113.7:40000")
		}
		rec := login("https") // behind a TLS proxy
		require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
		assert.True(t, sessionCookieOf(rec).Secure)
		rec = login("")
		assert.Equal(t, http.StatusForbidden, rec.Code)
		assert.Contains(t, rec.Body.String(), "needs HTTPS")
		assert.Nil(t, sessionCookieOf(rec), "no session travels in clear")
	})

	// Idle: a session unused for longer than SessionIdle ends.
	clk.add(59 * time.Minute)
	assert.Equal(t, http.StatusOK, page(a), "used within the idle time")
	clk.add(61 * time.Minute)
	assert.Equal(t, http.StatusSeeOther, page(c), "idle for 2h: back to the login page")
	assert.Equal(t, http.StatusSeeOther, page(a))

	// Absolute: a busy session still ends at SessionMaxAge.
	d := login(h, f)
	for range 5 {
		clk.add(30 * time.Minute)
		require.Equal(t, http.StatusOK, page(d))
	}
	clk.add(31 * time.Minute)
	assert.Equal(t, http.StatusSeeOther, page(d), "3h after the login")

	// Logout (a POST with the CSRF token) ends the session on the server, not just the cookie.
	e := login(h, f)
	rec := direct(h, httptest.NewRequest(http.MethodGet, "/queues", nil), "127.0.0.1:40000")
	_ = rec
	req := httptest.NewRequest(http.MethodGet, "/queues", nil)
	req.AddCookie(e)
	req.AddCookie(f.cookie)
	rec = direct(h, req, "127.0.0.1:40000")
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Contains(t, rec.Body.String(), `data-action="logout"`)
	req = httptest.NewRequest(http.MethodPost, "/logout", strings.NewReader(url.Values{"csrf": {f.token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(e)
	req.AddCookie(f.cookie)
	rec = direct(h, req, "127.0.0.1:40000")
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	assert.Equal(t, "/login", rec.Header().Get("Location"))
	assert.Equal(t, -1, sessionCookieOf(rec).MaxAge, "the cookie is cleared")
	assert.Equal(t, http.StatusSeeOther, page(e), "the old cookie replayed is refused")
}

func TestCSRF_RefusesACookieTheClientChose(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	id := b.insert(job{status: "dead"})
	action := "/jobs/" + strconv.FormatInt(id, 10) + "/retry"
	for _, chosen := range []string{strings.Repeat("0", 32), strings.Repeat("0", 32) + ".forged"} {
		cookie := "skiplock_ui_csrf=" + chosen
		req, err := http.NewRequest(http.MethodGet, b.srv.URL+"/queues", nil)
		require.NoError(t, err)
		req.Header.Set("Cookie", cookie)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body := new(strings.Builder)
		_, _ = io_Copy(body, resp)
		m := csrfRE.FindStringSubmatch(body.String())
		require.NotNil(t, m)
		set := resp.Header.Get("Set-Cookie")
		assert.Contains(t, set, "skiplock_ui_csrf=", "a chosen cookie is replaced")
		assert.NotContains(t, set, "skiplock_ui_csrf="+chosen+";")

		req, err = http.NewRequest(http.MethodPost, b.srv.URL+action, strings.NewReader(url.Values{"csrf": {m[1]}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		req.Header.Set("Cookie", cookie)
		resp, err = b.http.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, chosen)
	}
	assert.Equal(t, "dead", b.status(id))
}

func TestStatic_NoDirectoryListingAndAFavicon(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	for _, p := range []string{"/static/", "/static", "/static/../", "/static/nope.css"} {
		r := b.get(p)
		assert.NotEqual(t, http.StatusOK, r.code, p)
		assert.NotContains(t, r.body, "app.css", p)
	}
	assert.Equal(t, http.StatusOK, b.get("/static/app.css").code)
	r := b.get("/favicon.ico")
	assert.Equal(t, http.StatusOK, r.code)
	assert.Equal(t, "image/svg+xml", r.header.Get("Content-Type"))
	assert.Contains(t, r.body, "<svg")
	assert.Contains(t, b.get("/queues").body, `rel="icon"`)
}

func io_Copy(dst *strings.Builder, resp *http.Response) (int64, error) {
	defer resp.Body.Close()
	return io.Copy(dst, resp.Body)
}
