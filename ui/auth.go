package ui

// This file holds the authentication gate every request passes (local user, token, basic
// auth, login session, with wrong credentials throttled) and the login page.

import (
	"net/http"
	"strings"
	"time"
)

// authorize reports whether r may be served, and answers it when not: with a configured
// token or basic auth, the request must present one; without, it must be local
// (Config.TrustLoopback), unless ExternalAuth is set. The right credential is always
// checked and accepted; wrong ones back off per credential (429 with Retry-After).
func (h *Handler) authorize(w http.ResponseWriter, r *http.Request) bool {
	if h.cfg.Token == "" && h.cfg.BasicAuth == nil {
		if h.cfg.ExternalAuth || h.local(r) {
			return true
		}
		h.refuse(w, r, http.StatusForbidden, "Refused: this dashboard has no authentication configured, and this request "+
			"is not from a trusted user of this machine. Set a token or basic auth (skiplock ui --token / --basic-auth), "+
			"ExternalAuth when your own middleware authenticates, or TrustLoopback (skiplock ui --trust-loopback) to let "+
			"this machine's users in without one, when no proxy on it forwards to the dashboard.")
		return false
	}
	if h.sessionOK(r) {
		return true
	}
	_, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	_, _, basic := r.BasicAuth()
	if bearer || basic {
		// Checked first, whatever the guessing: wrong credentials cost their sender,
		// never the owner of the right one.
		if h.tokenOK(r) || h.basicOK(r) {
			return true
		}
		key := credToken
		if basic {
			key = credBasic
		}
		if h.backingOff(w, r, key) {
			return false
		}
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

// backingOff counts a wrong credential of kind key and, when that credential is backing
// off from earlier wrong ones, answers 429 with Retry-After and reports true.
func (h *Handler) backingOff(w http.ResponseWriter, r *http.Request, key string) bool {
	wait := h.sess.failed(key)
	if wait <= 0 {
		return false
	}
	w.Header().Set("Retry-After", retryAfter(wait))
	h.refuse(w, r, http.StatusTooManyRequests, "Too many wrong tokens or passwords: the next wrong one is answered in "+
		retryAfter(wait)+" s (the right one is accepted at any time).")
	return true
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
	if !equal(r.PostFormValue("token"), h.cfg.Token) {
		if h.backingOff(w, r, credToken) {
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
		h.render(w, r, "login", "Sign in", "", map[string]any{"Failed": true})
		return
	}
	if r.TLS == nil && !h.local(r) && !h.forwardedHTTPS(r) {
		// The session cookie is Secure here, so a browser on plain HTTP would drop it
		// (and without Secure it would cross the network in clear).
		h.refuse(w, r, http.StatusForbidden, "Signing in needs HTTPS unless the browser is a trusted local user: "+
			"serve the dashboard behind a TLS proxy (named in TrustedProxies, skiplock ui --trusted-proxy), "+
			"set TrustLoopback (--trust-loopback) for a browser on this machine, or use basic auth or the "+
			"Authorization: Bearer header.")
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: h.sess.create(), Path: h.cookiePath(), HttpOnly: true,
		Secure: h.secureCookies(r), SameSite: http.SameSiteStrictMode,
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
		Secure: h.secureCookies(r), SameSite: http.SameSiteStrictMode, MaxAge: -1,
	})
	target := "/login"
	if h.cfg.Token == "" {
		target = "/queues"
	}
	http.Redirect(w, r, h.prefix+target, http.StatusSeeOther)
}
