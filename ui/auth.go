package ui

// This file holds the authentication gate every request passes (loopback, token, basic
// auth, login session, with wrong credentials throttled) and the login page.

import (
	"net/http"
	"strings"
	"time"
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
