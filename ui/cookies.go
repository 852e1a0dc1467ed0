package ui

// This file holds the dashboard's cookies (their names, path and Secure attribute) and
// the CSRF cookie and the form tokens bound to it.

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strings"
)

// Cookie names. Both are HttpOnly and SameSite=Strict, and Secure unless the request is
// local (Config.TrustLoopback) over plain HTTP.
const (
	csrfCookie    = "skiplock_ui_csrf"    // a random id, signed by the handler, the CSRF tokens are bound to
	sessionCookie = "skiplock_ui_session" // a random session id, set by /login when Token is used
	csrfField     = "csrf"                // the form field carrying the CSRF token
)

func (h *Handler) cookiePath() string {
	if h.prefix == "" {
		return "/"
	}
	return h.prefix + "/"
}

// secureCookies says whether r's cookies must be Secure: over TLS, or when the request is
// not local (Config.TrustLoopback): a browser elsewhere, or a proxy that terminates TLS,
// so a session never travels in clear over a network.
func (h *Handler) secureCookies(r *http.Request) bool {
	return r.TLS != nil || !h.local(r)
}

// forwardedHTTPS reports whether a trusted proxy in front (Config.TrustedProxies) says
// the browser's connection is HTTPS (X-Forwarded-Proto or Forwarded proto=https). The
// headers of any other client are ignored.
func (h *Handler) forwardedHTTPS(r *http.Request) bool {
	if !h.fromProxy(r) {
		return false
	}
	if strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		return true
	}
	return strings.Contains(strings.ToLower(r.Header.Get("Forwarded")), "proto=https")
}

// mac returns the base64 HMAC-SHA256 of msg under key.
func mac(key []byte, msg string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
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
			Secure: h.secureCookies(r), SameSite: http.SameSiteStrictMode,
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
