package ui

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
)

// Cookie names. Both are HttpOnly and SameSite=Strict.
const (
	csrfCookie    = "skiplock_ui_csrf"    // a random id the CSRF tokens are bound to
	sessionCookie = "skiplock_ui_session" // set by /login when Token is used
	csrfField     = "csrf"                // the form field carrying the CSRF token
)

// authorize reports whether r may be served, and answers it when not: with a configured
// token or basic auth, the request must present one; without, it must come from a
// loopback address without proxy headers, unless ExternalAuth is set.
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
	if h.tokenOK(r) || h.basicOK(r) {
		return true
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

// tokenOK reports whether r carries the token as a bearer header or the login cookie.
func (h *Handler) tokenOK(r *http.Request) bool {
	if h.cfg.Token == "" {
		return false
	}
	if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return equal(v, h.cfg.Token)
	}
	c, err := r.Cookie(sessionCookie)
	return err == nil && equal(c.Value, string(h.sessKey))
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

// csrfToken returns the CSRF token for r's forms, setting the cookie it is bound to when
// r has none. The token is an HMAC of the cookie's random id under the handler's key: a
// page on another site can neither read it nor compute it.
func (h *Handler) csrfToken(w http.ResponseWriter, r *http.Request) string {
	id := ""
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 32 {
		id = c.Value
	} else {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		id = hex.EncodeToString(b)
		http.SetCookie(w, &http.Cookie{
			Name: csrfCookie, Value: id, Path: h.cookiePath(), HttpOnly: true,
			Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
		})
	}
	return mac(h.csrfKey, id)
}

// checkCSRF reports whether the POST r carries the token of its CSRF cookie.
func (h *Handler) checkCSRF(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil || len(c.Value) != 32 {
		return false
	}
	got := r.PostFormValue(csrfField)
	return got != "" && hmac.Equal([]byte(got), []byte(mac(h.csrfKey, c.Value)))
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

// login checks the typed token and sets the session cookie.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Token == "" || !equal(r.PostFormValue("token"), h.cfg.Token) {
		w.WriteHeader(http.StatusUnauthorized)
		h.render(w, r, "login", "Sign in", "", map[string]any{"Failed": h.cfg.Token != ""})
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: string(h.sessKey), Path: h.cookiePath(), HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, h.prefix+"/queues", http.StatusSeeOther)
}
