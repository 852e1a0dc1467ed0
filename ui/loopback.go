package ui

// This file holds where a request came from: a user of this machine (only when
// Config.TrustLoopback says loopback connections are such users), a trusted proxy and
// the client it forwards for, or elsewhere.

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// proxyHeaders are the headers by which a proxy says it forwards someone else's request.
var proxyHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Real-Ip", "X-Forwarded-Host", "X-Forwarded-Proto"}

// parseProxies reads Config.TrustedProxies: IPs or CIDR prefixes. Its error says which
// entry is neither.
func parseProxies(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("TrustedProxies: %q is not an IP address or a CIDR prefix (such as 127.0.0.1 or 10.0.0.0/8)", s)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// remoteIP is the IP address r's connection came from.
func remoteIP(r *http.Request) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}

// trusted reports whether ip is one of TrustedProxies.
func (h *Handler) trusted(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range h.proxies {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// fromProxy reports whether r came from one of TrustedProxies.
func (h *Handler) fromProxy(r *http.Request) bool {
	ip, ok := remoteIP(r)
	return ok && h.trusted(ip)
}

// local reports whether r comes from a user of this machine: TrustLoopback is set, r's
// remote and local addresses are loopback, it is not from a trusted proxy, and no proxy
// header says it was forwarded for someone else.
func (h *Handler) local(r *http.Request) bool {
	if !h.cfg.TrustLoopback || h.fromProxy(r) {
		return false
	}
	ip, ok := remoteIP(r)
	if !ok || !ip.IsLoopback() {
		return false
	}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if host, _, err := net.SplitHostPort(la.String()); err != nil || !isLoopbackIP(host) {
			return false
		}
	}
	for _, hd := range proxyHeaders {
		if r.Header.Get(hd) != "" {
			return false
		}
	}
	return true
}

// clientAddr is the address the audit names for r: for a request from a trusted proxy,
// the nearest X-Forwarded-For address that is not a trusted proxy, "via" the proxy;
// otherwise the connection's remote address.
func (h *Handler) clientAddr(r *http.Request) string {
	if !h.fromProxy(r) {
		return r.RemoteAddr
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		hop := strings.TrimSpace(hops[i])
		ip, err := netip.ParseAddr(hop)
		if err != nil {
			if ap, err := netip.ParseAddrPort(hop); err == nil {
				ip = ap.Addr()
			} else {
				break // garbage: what lies beyond it is the client's say
			}
		}
		if !h.trusted(ip) {
			return ip.Unmap().String() + " via " + r.RemoteAddr
		}
	}
	return r.RemoteAddr
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
