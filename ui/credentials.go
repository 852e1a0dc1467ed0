package ui

// This file holds the checks of the credentials a request presents: a login session, the
// bearer token, basic auth.

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

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
