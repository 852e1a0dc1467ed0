package ui

// This file holds authentication (loopback, token, basic auth, login sessions) and the
// CSRF cookie and tokens.

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"net"
	"net/http"
	"strings"
	"time"
)

// Cookie names. Both are HttpOnly and SameSite=Strict, and Secure unless the request came
// straight from this machine over plain HTTP.
const (
	csrfCookie    = "skiplock_ui_csrf"    // a random id, signed by the handler, the CSRF tokens are bound to
	sessionCookie = "skiplock_ui_session" // a random session id, set by /login when Token is used
	csrfField     = "csrf"                // the form field carrying the CSRF token
)

// authorize reports whether r may be served, and answers it when not: with a configured
// token or basic auth, the request must present one; without, it must come from a
// loopback address without proxy headers, unless ExternalAuth is set. Wrong credentials
// are throttled per client address and in all (429 with Retry-After).
func (h *Handler) authorize(w http.ResponseWriter, r *http.Request) bool {
	if h.cfg.Token == "" && h.cfg.BasicAuth == nil {
		if h.cfg.ExternalAuth || fromLoopback(r) {
			return true
		}
		h.refuse(w, r, http.StatusForbidden, "Refused: this dashboard has no authentication configured, so it serves "+
			"only requests from this machine (a loopback address, no proxy). Set a token or basic auth "+
			"(skiplock ui --token / --basic-auth), or ExternalAuth when your own middleware authenticates.")
		return false
	}
	if h.sessionOK(r) {
		return true
	}
	_, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	_, _, basic := r.BasicAuth()
	if bearer || basic {
		if !h.allowAttempt(w, r) {
			return false
		}
		if h.tokenOK(r) || h.basicOK(r) {
			return true
		}
		h.sess.failed(clientKey(r))
	}
	// A page asks for the token on the login page; the live fragment the queues page
	// fetches gets a plain 401 instead, so the script reports it rather than swapping a
	// login form into the table.
	if h.cfg.Token != "" && r.Method == http.MethodGet && h.cfg.BasicAuth == nil && r.URL.Path != "/queues/live" {
		http.Redirect(w, r, h.prefix+"/login", http.StatusSeeOther)
		return false
	}
	if h.cfg.BasicAuth != nil {
		w.Header().Set("WWW-Authenticate", `Basic realm="skiplock", charset="UTF-8"`)
	}
	h.refuse(w, r, http.StatusUnauthorized, "Authentication required.")
	return false
}

// allowAttempt reports whether r may try a credential now, answering 429 when its
// client (or all clients together) sent too many wrong ones lately.
func (h *Handler) allowAttempt(w http.ResponseWriter, r *http.Request) bool {
	limited, wait := h.sess.throttled(clientKey(r))
	if !limited {
		return true
	}
	w.Header().Set("Retry-After", retryAfter(wait))
	h.refuse(w, r, http.StatusTooManyRequests, "Too many wrong tokens or passwords: try again in "+retryAfter(wait)+" s.")
	return false
}

// clientKey is the address wrong credentials are counted by.
func clientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// fromLoopback reports whether r came straight from this machine: its remote and local
// addresses are loopback and no proxy header says it was forwarded for someone else.
func fromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil || !isLoopbackIP(host) {
		return false
	}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if host, _, err := net.SplitHostPort(la.String()); err != nil || !isLoopbackIP(host) {
			return false
		}
	}
	for _, hd := range []string{"Forwarded", "X-Forwarded-For", "X-Real-Ip"} {
		if r.Header.Get(hd) != "" {
			return false
		}
	}
	return true
}

func isLoopbackIP(host string) bool {
	ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return ip != nil && ip.IsLoopback()
}

// IsLoopbackListen reports whether addr, a listen address such as "127.0.0.1:8080",
// binds only to a loopback interface. An empty host (":8080") binds to all of them.
func IsLoopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	return host == "localhost" || isLoopbackIP(host)
}

// tokenOK reports whether r carries the token as a bearer header.
func (h *Handler) tokenOK(r *http.Request) bool {
	if h.cfg.Token == "" {
		return false
	}
	v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && equal(v, h.cfg.Token)
}

// sessionOK reports whether r carries the cookie of a live login session.
func (h *Handler) sessionOK(r *http.Request) bool {
	if h.cfg.Token == "" {
		return false
	}
	c, err := r.Cookie(sessionCookie)
	return err == nil && h.sess.valid(c.Value)
}

func (h *Handler) basicOK(r *http.Request) bool {
	if h.cfg.BasicAuth == nil {
		return false
	}
	u, p, ok := r.BasicAuth()
	// Both compared, whatever the first gives, so timing says nothing about which failed.
	userOK, passOK := equal(u, h.cfg.BasicAuth.User), equal(p, h.cfg.BasicAuth.Password)
	return ok && userOK && passOK
}

// equal compares secrets in constant time (their hashes, so lengths leak nothing).
func equal(a, b string) bool {
	x, y := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(x[:], y[:]) == 1
}

// mac returns the base64 HMAC-SHA256 of msg under key.
func mac(key []byte, msg string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// secureCookies says whether r's cookies must be Secure: over TLS, or when the request
// did not come straight from this machine (a browser elsewhere, or a proxy that
// terminates TLS), so a session never travels in clear over a network.
func secureCookies(r *http.Request) bool {
	return r.TLS != nil || !fromLoopback(r)
}

// forwardedHTTPS reports whether a proxy in front says the browser's connection is
// HTTPS (X-Forwarded-Proto or Forwarded proto=https).
func forwardedHTTPS(r *http.Request) bool {
	if strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		return true
	}
	return strings.Contains(strings.ToLower(r.Header.Get("Forwarded")), "proto=https")
}

// csrfID returns the random id a valid CSRF cookie of r carries: the cookie is the id
// and its HMAC under the handler's key, so a value the client chose is refused.
func (h *Handler) csrfID(r *http.Request) (string, bool) {
	c, err := r.Cookie(csrfCookie)
	if err != nil {
		return "", false
	}
	id, sig, ok := strings.Cut(c.Value, ".")
	if !ok || len(id) != 32 || !hmac.Equal([]byte(sig), []byte(mac(h.csrfKey, "csrf-cookie|"+id))) {
		return "", false
	}
	return id, true
}

// csrfToken returns the CSRF token for r's forms, setting a new signed cookie when r has
// no valid one. The token is an HMAC of the cookie's random id under the handler's key:
// a page on another site can neither read it nor compute it.
func (h *Handler) csrfToken(w http.ResponseWriter, r *http.Request) string {
	id, ok := h.csrfID(r)
	if !ok {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		id = hex.EncodeToString(b)
		http.SetCookie(w, &http.Cookie{
			Name: csrfCookie, Value: id + "." + mac(h.csrfKey, "csrf-cookie|"+id), Path: h.cookiePath(), HttpOnly: true,
			Secure: secureCookies(r), SameSite: http.SameSiteStrictMode,
		})
	}
	return mac(h.csrfKey, "csrf-form|"+id)
}

// checkCSRF reports whether the POST r carries the token of its (server-signed) CSRF
// cookie.
func (h *Handler) checkCSRF(r *http.Request) bool {
	id, ok := h.csrfID(r)
	if !ok {
		return false
	}
	got := r.PostFormValue(csrfField)
	return got != "" && hmac.Equal([]byte(got), []byte(mac(h.csrfKey, "csrf-form|"+id)))
}

func (h *Handler) cookiePath() string {
	if h.prefix == "" {
		return "/"
	}
	return h.prefix + "/"
}

// loginPage asks for the token (only used when Token is set).
func (h *Handler) loginPage(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Token == "" {
		http.Redirect(w, r, h.prefix+"/queues", http.StatusFound)
		return
	}
	h.render(w, r, "login", "Sign in", "", nil)
}

// login checks the typed token (throttled) and starts a session.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Token == "" {
		h.refuse(w, r, http.StatusNotFound, "This dashboard has no token to sign in with.")
		return
	}
	if !h.allowAttempt(w, r) {
		return
	}
	if !equal(r.PostFormValue("token"), h.cfg.Token) {
		h.sess.failed(clientKey(r))
		w.WriteHeader(http.StatusUnauthorized)
		h.render(w, r, "login", "Sign in", "", map[string]any{"Failed": true})
		return
	}
	if r.TLS == nil && !fromLoopback(r) && !forwardedHTTPS(r) {
		// The session cookie is Secure here, so a browser on plain HTTP would drop it
		// (and without Secure it would cross the network in clear).
		h.refuse(w, r, http.StatusForbidden, "Signing in needs HTTPS when the browser is on another machine: "+
			"serve the dashboard behind a TLS proxy, or use basic auth or the Authorization: Bearer header.")
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: h.sess.create(), Path: h.cookiePath(), HttpOnly: true,
		Secure: secureCookies(r), SameSite: http.SameSiteStrictMode,
		MaxAge: int(h.cfg.SessionMaxAge / time.Second),
	})
	http.Redirect(w, r, h.prefix+"/queues", http.StatusSeeOther)
}

// logout ends the request's session and clears its cookie.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		h.sess.revoke(c.Value)
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: "", Path: h.cookiePath(), HttpOnly: true,
		Secure: secureCookies(r), SameSite: http.SameSiteStrictMode, MaxAge: -1,
	})
	target := "/login"
	if h.cfg.Token == "" {
		target = "/queues"
	}
	http.Redirect(w, r, h.prefix+target, http.StatusSeeOther)
}
