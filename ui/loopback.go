package ui

// This file holds where a request came from: this machine (a loopback address, no proxy)
// or elsewhere.

import (
	"net"
	"net/http"
	"strings"
)

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
