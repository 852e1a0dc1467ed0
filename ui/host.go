package ui

// This file holds the Host and Origin checks: the handler answers only to the host names
// it knows, so a web page on a domain that re-points to this machine (DNS rebinding)
// can neither read the dashboard nor act through it.

import (
	"net"
	"net/http"
	"net/url"
	"strings"
)

// anyHost in [Config].AllowedHosts turns the Host check off.
const anyHost = "*"

// hostAllowed reports whether host (a Host header or an Origin's host, with or without a
// port) names this handler: a loopback name (localhost, 127.0.0.0/8, ::1), the IP
// address the request reached (an IP literal cannot be re-pointed by DNS), or one of
// AllowedHosts.
func (h *Handler) hostAllowed(r *http.Request, host string) bool {
	if h.anyHost {
		return true
	}
	name := hostName(host)
	if name == "" {
		return false
	}
	if name == "localhost" || isLoopbackIP(name) {
		return true
	}
	if _, ok := h.hosts[name]; ok {
		return true
	}
	if ip := net.ParseIP(name); ip != nil {
		if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			if lh, _, err := net.SplitHostPort(la.String()); err == nil {
				if lip := net.ParseIP(lh); lip != nil && lip.Equal(ip) && !lip.IsUnspecified() {
					return true
				}
			}
		}
	}
	return false
}

// hostName returns host without its port and brackets, lower-cased and without a
// trailing dot; "" when it is malformed.
func hostName(host string) string {
	host = strings.TrimSpace(host)
	if host == "" {
		return ""
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	} else if strings.Count(host, ":") == 1 {
		return "" // a colon that is not a port separator SplitHostPort accepts
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if strings.ContainsAny(host, "/\\@ ") {
		return ""
	}
	return host
}

// checkHost answers a request whose Host header names a host the handler does not serve
// with 421 Misdirected Request, and reports whether r may go on.
func (h *Handler) checkHost(w http.ResponseWriter, r *http.Request) bool {
	if h.hostAllowed(r, r.Host) {
		return true
	}
	// No page, no cookie: nothing the handler writes may reach the other site's page.
	http.Error(w, "421 misdirected request: this dashboard does not answer to host "+
		sanitizeHeaderText(r.Host)+"; add it to AllowedHosts (skiplock ui --allowed-host) if it is yours",
		http.StatusMisdirectedRequest)
	return false
}

// originAllowed reports whether the Origin header of r, when it has one, names an
// allowed host over the scheme r came by. A request without Origin is judged by the
// CSRF token and Sec-Fetch-Site alone.
func (h *Handler) originAllowed(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false // includes "null": a sandboxed frame or a redirect chain
	}
	return h.hostAllowed(r, u.Host)
}

// sanitizeHeaderText keeps a client's header printable and short for a plain-text answer.
func sanitizeHeaderText(s string) string {
	if len(s) > 100 {
		s = s[:100]
	}
	return strings.Map(func(c rune) rune {
		if c < 0x20 || c > 0x7e {
			return '?'
		}
		return c
	}, s)
}
