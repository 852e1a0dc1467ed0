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

var (
	queueRowRE = regexp.MustCompile(`(?s)<tr data-queue="([^"]*)">(.*?)</tr>`)
	postFormRE = regexp.MustCompile(`(?s)<form method="post" action="([^"]+)"[^>]*>(.*?)</form>`)
	hiddenRE   = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)
)

// queueForm finds the row of queue on the queues page body and returns its pause or
// resume form as a browser submits it: the action's path and the hidden fields, both
// unescaped from the HTML.
func queueForm(t *testing.T, body, queue string) (action string, form url.Values) {
	t.Helper()
	for _, row := range queueRowRE.FindAllStringSubmatch(body, -1) {
		if html.UnescapeString(row[1]) != queue {
			continue
		}
		m := postFormRE.FindStringSubmatch(row[2])
		require.NotNil(t, m, "no form in the row of %q: %s", queue, row[2])
		form = url.Values{}
		for _, f := range hiddenRE.FindAllStringSubmatch(m[2], -1) {
			form.Add(html.UnescapeString(f[1]), html.UnescapeString(f[2]))
		}
		return html.UnescapeString(m[1]), form
	}
	t.Fatalf("no row of queue %q on the page", queue)
	return "", nil
}

func TestQueuesPage_AHostileQueueNameActsOnlyOnItsQueue(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"", "/admin/jobs"} {
		t.Run("prefix "+prefix, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t)
			qs := &queues{paused: map[string]bool{}}
			b.serve(ui.Config{Prefix: prefix, Queues: qs})
			target := b.insert(job{queue: "default"})
			// The library refuses such queue names; the table's check allows them.
			hostile := []string{"../jobs/" + strconv.FormatInt(target, 10) + "/delete?", "..", "."}
			for _, name := range hostile {
				b.insert(job{queue: name})
			}
			for _, hostile := range hostile {
				r := b.get(prefix + "/queues")
				require.Equal(t, http.StatusOK, r.code, r.body)
				action, form := queueForm(t, r.body, hostile)
				assert.Equal(t, prefix+"/queues/pause", action, "the name is a form field, never a path segment")

				r = b.post(action, form)
				require.Equal(t, http.StatusSeeOther, r.code, r.body)
				assert.Equal(t, "queued", b.status(target), "the pause button deleted nothing")
				assert.True(t, qs.paused[hostile], "it paused the queue %q", hostile)
			}
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

// Wrong tokens and passwords from many addresses (or one proxy's) back off the guesser,
// per credential, and never refuse the right one: it gets in at once from anywhere.
func TestAuth_WrongCredentialsBackOffButNeverLockOutTheRightOne(t *testing.T) {
	t.Parallel()
	const token, user, password = "s3cret-token", "ops", "pw-of-ops"
	b := newBundle(t)
	type try func(h http.Handler, f loginForm, remote, secret string) *httptest.ResponseRecorder
	bearer := func(h http.Handler, _ loginForm, remote, secret string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/queues", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		return direct(h, req, remote)
	}
	basic := func(h http.Handler, _ loginForm, remote, secret string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/queues", nil)
		req.SetBasicAuth(user, secret)
		return direct(h, req, remote)
	}
	form := func(h http.Handler, f loginForm, remote, secret string) *httptest.ResponseRecorder {
		return f.post(h, remote, secret)
	}
	for _, tc := range []struct {
		name        string
		try         try
		right       string
		in          int // the status of the right credential
		otherTry    try // the other credential, which keeps its own count
		otherRight  string
		otherWrongs int
	}{
		{"basic auth", basic, password, http.StatusOK, bearer, token, http.StatusUnauthorized},
		{"bearer header", bearer, token, http.StatusOK, basic, password, http.StatusUnauthorized},
		{"login form", form, token, http.StatusSeeOther, basic, password, http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, err := ui.New(ui.Config{Client: b.client, Token: token, BasicAuth: &ui.BasicAuth{User: user, Password: password},
				TrustLoopback: true, Logger: quietLogger()})
			require.NoError(t, err)
			clk := &clock{t: time.Now()}
			ui.SetSessionClock(h, clk.now)
			f := newLoginForm(t, h)

			// 65 wrong ones from 13 addresses, as one proxy's clients or one guesser's.
			codes := map[int]int{}
			lastWait := 0
			for i := range 65 {
				rec := tc.try(h, f, "127.0.0."+strconv.Itoa(2+i%13)+":40000", "wrong-"+strconv.Itoa(i))
				codes[rec.Code]++
				if rec.Code == http.StatusTooManyRequests {
					wait, err := strconv.Atoi(rec.Header().Get("Retry-After"))
					require.NoError(t, err, "Retry-After is whole seconds")
					assert.GreaterOrEqual(t, wait, lastWait, "the backoff only grows while the guessing goes on")
					lastWait = wait
				}
				clk.add(100 * time.Millisecond)
			}
			assert.Equal(t, 65, codes[http.StatusUnauthorized]+codes[http.StatusTooManyRequests], codes)
			assert.LessOrEqual(t, codes[http.StatusUnauthorized], 7, "past a few, wrong ones are refused: %v", codes)
			assert.Greater(t, lastWait, 60, "and the guesser's wait grows past a minute")

			// The right one, from a fresh address and from a guessing one, gets in at once.
			assert.Equal(t, tc.in, tc.try(h, f, "127.0.0.99:40000", tc.right).Code)
			assert.Equal(t, tc.in, tc.try(h, f, "127.0.0.2:40000", tc.right).Code)
			// A wrong one still waits; the other credential has its own count.
			assert.Equal(t, http.StatusTooManyRequests, tc.try(h, f, "127.0.0.99:40000", "wrong").Code)
			assert.Equal(t, tc.otherWrongs, tc.otherTry(h, f, "127.0.0.99:40000", "wrong").Code)
			assert.Equal(t, http.StatusOK, tc.otherTry(h, f, "127.0.0.99:40000", tc.otherRight).Code)

			// After a quiet spell the wrong ones are forgotten.
			clk.add(16 * time.Minute)
			assert.Equal(t, http.StatusUnauthorized, tc.try(h, f, "127.0.0.5:40000", "wrong").Code)
		})
	}
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
			AllowedHosts: []string{"jobs.example.com"}, TrustLoopback: true, TrustedProxies: []string{"198.51.100.0/24"},
			Logger: quietLogger()})
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
		login := func(remote, proto string) *httptest.ResponseRecorder {
			req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"csrf": {f.token}, "token": {token}}.Encode()))
			req.Host = "jobs.example.com"
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if proto != "" {
				req.Header.Set("X-Forwarded-Proto", proto)
			}
			req.AddCookie(f.cookie)
			return direct(h, req, remote)
		}
		rec := login("198.51.100.4:40000", "https") // behind a trusted TLS proxy
		require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
		assert.True(t, sessionCookieOf(rec).Secure)
		for _, c := range []struct{ remote, proto string }{
			{"203.0.113.7:40000", ""},
			{"203.0.113.7:40000", "https"}, // a header only a trusted proxy is believed on
			{"198.51.100.4:40000", "http"}, // the trusted proxy says the browser is on plain HTTP
		} {
			rec = login(c.remote, c.proto)
			assert.Equal(t, http.StatusForbidden, rec.Code, c)
			assert.Contains(t, rec.Body.String(), "needs HTTPS", c)
			assert.Nil(t, sessionCookieOf(rec), "no session travels in clear")
		}
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

// A reverse proxy on this machine that adds no client header (nginx's plain proxy_pass)
// reaches the handler from loopback like a local user. Unless TrustLoopback says the
// machine has no such proxy, nothing is served without credentials, and every cookie is
// Secure; a proxy named in TrustedProxies is never local.
func TestAuth_ASameHostProxyIsNotALocalUserUnlessTrusted(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	get := func(cfg ui.Config, remote string, hdr map[string]string) *httptest.ResponseRecorder {
		cfg.Client, cfg.Logger = b.client, quietLogger()
		h, err := ui.New(cfg)
		require.NoError(t, err)
		req := httptest.NewRequest(http.MethodGet, "/queues", nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		return direct(h, req, remote)
	}
	csrfCookie := func(rec *httptest.ResponseRecorder) *http.Cookie {
		for _, c := range rec.Result().Cookies() {
			if c.Name == "skiplock_ui_csrf" {
				return c
			}
		}
		t.Fatal("no CSRF cookie")
		return nil
	}

	// The default: the proxy's request, from 127.0.0.1 with no header, is refused.
	rec := get(ui.Config{}, "127.0.0.1:40000", nil)
	assert.Equal(t, http.StatusForbidden, rec.Code, "no credentials and no local user by default")
	assert.Contains(t, rec.Body.String(), "TrustLoopback")
	bearer := map[string]string{"Authorization": "Bearer t0ken"}
	rec = get(ui.Config{Token: "t0ken"}, "127.0.0.1:40000", bearer)
	require.Equal(t, http.StatusOK, rec.Code)
	assert.True(t, csrfCookie(rec).Secure, "not local: the cookie is Secure")
	rec = get(ui.Config{Token: "t0ken", TrustLoopback: true}, "127.0.0.1:40000", bearer)
	require.Equal(t, http.StatusOK, rec.Code)
	assert.False(t, csrfCookie(rec).Secure, "local over plain HTTP")

	// TrustLoopback: a user of this machine, with a cookie a plain-HTTP browser keeps.
	rec = get(ui.Config{TrustLoopback: true}, "127.0.0.1:40000", nil)
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.False(t, csrfCookie(rec).Secure)

	// A proxy named as such is never local, header or not.
	proxy := ui.Config{TrustLoopback: true, TrustedProxies: []string{"127.0.0.1"}}
	assert.Equal(t, http.StatusForbidden, get(proxy, "127.0.0.1:40000", nil).Code)
	assert.Equal(t, http.StatusForbidden, get(proxy, "127.0.0.1:40000", map[string]string{"X-Forwarded-For": "127.0.0.1"}).Code)
	assert.Equal(t, http.StatusOK, get(proxy, "[::1]:40000", nil).Code, "another loopback address is still local")

	_, err := ui.New(ui.Config{Client: b.client, TrustedProxies: []string{"not-an-ip"}})
	assert.ErrorIs(t, err, ui.ErrInvalidConfig)
}

// A form past the size limit gets 413 before any other check: a CSRF check would read the
// cut form, find no token, and call an honest request a forgery.
func TestActions_AnOversizedFormGets413NotACSRFRefusal(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	id := b.insert(job{status: "dead"})
	action := "/jobs/" + strconv.FormatInt(id, 10) + "/retry"
	form := url.Values{"csrf": {b.csrf("/queues")}, "pad": {strings.Repeat("x", 100<<10)}}

	r := b.post(action, form)
	assert.Equal(t, http.StatusRequestEntityTooLarge, r.code, r.body)
	// The same without a Content-Length (chunked): cut at the limit while it is read.
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+action, io.MultiReader(strings.NewReader(form.Encode())))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.ContentLength = -1
	assert.Equal(t, http.StatusRequestEntityTooLarge, b.do(req).code)
	assert.Equal(t, "dead", b.status(id))

	form.Set("pad", strings.Repeat("x", 1<<10))
	r = b.post(action, form)
	assert.Equal(t, http.StatusSeeOther, r.code, "a form within the limit acts: %s", r.body)
	assert.Equal(t, "queued", b.status(id))
}

// A page on another site can make the browser send GETs to the dashboard (an image, a
// script, a fetch, a frame): it cannot read the answers, but with TrustLoopback (or basic
// auth the browser remembers) they were served, so any web page the operator had open
// could make the dashboard search the jobs tables again and again. From another site
// (Sec-Fetch-Site cross-site or same-site) only a top-level navigation, a followed link,
// is served; the rest get 403 before anything reaches the database.
func TestFetchMetadata_AnotherSitesPageCannotMakeTheDashboardQuery(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	rc := b.countRows()
	b.serve(ui.Config{})
	b.insert(job{payload: `{"order":"needle-7"}`})
	get := func(site, mode, dest string) (response, int64) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, b.srv.URL+"/search?q=needle-7", nil)
		require.NoError(t, err)
		for k, v := range map[string]string{"Sec-Fetch-Site": site, "Sec-Fetch-Mode": mode, "Sec-Fetch-Dest": dest} {
			if v != "" {
				req.Header.Set(k, v)
			}
		}
		before := rc.statements.Load()
		r := b.do(req)
		return r, rc.statements.Load() - before
	}
	for _, c := range [][3]string{
		{"cross-site", "no-cors", "image"},
		{"cross-site", "no-cors", "script"},
		{"cross-site", "cors", "empty"},
		{"cross-site", "navigate", "iframe"},
		{"cross-site", "navigate", "object"},
		{"same-site", "no-cors", "image"}, // another port of localhost
	} {
		r, statements := get(c[0], c[1], c[2])
		assert.Equal(t, http.StatusForbidden, r.code, "%v", c)
		assert.Zero(t, statements, "%v ran statements", c)
		assert.NotContains(t, r.body, "needle-7", "%v", c)
		assert.Equal(t, "no-store", r.header.Get("Cache-Control"), "%v", c)
	}
	for _, c := range [][3]string{
		{"cross-site", "navigate", "document"}, // a link followed from another site
		{"same-site", "navigate", "document"},
		{"same-origin", "cors", "empty"}, // the queues page's live fetch
		{"none", "navigate", "document"}, // typed or bookmarked
		{"", "", ""},                     // a client that sends no fetch metadata
	} {
		r, statements := get(c[0], c[1], c[2])
		assert.Equal(t, http.StatusOK, r.code, "%v", c)
		assert.Contains(t, r.body, "needle-7", "%v", c)
		assert.Positive(t, statements, "%v", c)
	}
	assert.Equal(t, "same-origin", b.get("/queues").header.Get("Cross-Origin-Resource-Policy"))
}

// The message shown after an action is chosen by a code in the redirect's query, but its
// count came from the query too, and any link could carry both: a link to
// /dead?done=deleted&n_deleted=5000 made the dashboard say "Deleted 5000 jobs." when
// nothing was deleted. The redirect now signs its message (as the CSRF cookie is
// signed); a link that did not come from an action shows none.
func TestFlash_ALinkCannotMakeThePageReportAnAction(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	dead := b.insert(job{status: "dead"})
	for _, path := range []string{"/dead?done=deleted&n_deleted=5000", "/queues?done=paused", "/dead?done=requeued&n_requeued=3&fs=forged"} {
		r := b.get(path)
		require.Equal(t, http.StatusOK, r.code, path)
		assert.False(t, strings.Contains(r.body, `class="flash"`), "%s shows a message", path)
	}
	assert.Equal(t, "dead", b.status(dead))

	r := b.act("/dead", "/dead", url.Values{"action": {"delete"}, "id": {strconv.FormatInt(dead, 10)}})
	require.Equal(t, http.StatusSeeOther, r.code)
	assert.Equal(t, "", b.status(dead))
	page := b.get(r.location)
	assert.True(t, strings.Contains(page.body, `<p class="flash" role="status">Deleted 1 job.</p>`), "the action's own redirect shows its message")
	u, err := url.Parse(r.location)
	require.NoError(t, err)
	q := u.Query()
	q.Set("n_deleted", "5000")
	page = b.get(u.Path + "?" + q.Encode())
	assert.False(t, strings.Contains(page.body, `class="flash"`), "a count changed in the link shows a message")
}
