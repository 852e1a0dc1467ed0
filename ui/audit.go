package ui

// This file holds the audit of actions: every action (retry, cancel, delete, requeue, bulk,
// pause, resume, sign-in and sign-out) is written as a log line and kept in the
// Handler's auditLog for the /audit page. The schema has no table for it (that would take
// a migration), so the page shows this process's recent actions only; the log lines are
// the lasting record.

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// who names the actor of r: Config.Actor's answer when set, else the credential used.
func (h *Handler) who(r *http.Request) string {
	if h.cfg.Actor != nil {
		if s := h.cfg.Actor(r); s != "" {
			return s
		}
	}
	switch {
	case h.sessionOK(r):
		c, _ := r.Cookie(sessionCookie)
		return "token session " + hashID(c.Value)[:8]
	case h.tokenOK(r):
		return "bearer token"
	case h.basicOK(r):
		u, _, _ := r.BasicAuth()
		return "basic auth user " + u
	case h.cfg.ExternalAuth:
		return "external auth"
	}
	return "local (loopback)"
}

// statusRecorder keeps the status an action answered with.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

// WriteHeader records the first status the action answers with.
func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

// Write records 200 when the action writes a body before any status.
func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// serveAudited serves the action r and records it: who, what, on what, and the outcome
// (the flash codes of its redirect, or the refusal's status).
func (h *Handler) serveAudited(w http.ResponseWriter, r *http.Request) {
	who := h.who(r) // before: sign out ends the session that names it
	rec := &statusRecorder{ResponseWriter: w}
	h.mux.ServeHTTP(rec, r)
	action, target := describeAction(r)
	result := http.StatusText(rec.status)
	if loc := rec.Header().Get("Location"); rec.status == http.StatusSeeOther && loc != "" {
		result = "done"
		if u, err := url.Parse(loc); err == nil {
			if msg := flashText(u.Query()); msg != "" {
				result = msg
			}
		}
	}
	if action == "sign in" {
		who = "—" // a sign-in names no one until it succeeds, and its session is in the answer
	}
	e := auditEntry{At: time.Now(), Who: who, From: r.RemoteAddr, Action: action, Target: target, Result: result}
	h.audits.add(e)
	h.log.Info("skiplock ui: action", "who", e.Who, "from", e.From, "action", action, "target", target, "result", result)
}

// describeAction names the action of a POST and what it acted on.
func describeAction(r *http.Request) (action, target string) {
	p := r.URL.Path
	parts := strings.Split(strings.Trim(p, "/"), "/")
	filter := func() string {
		var f []string
		for _, k := range []string{"status", "queue", "kind"} {
			if v := r.PostFormValue(k); v != "" {
				f = append(f, k+"="+v)
			}
		}
		if len(f) == 0 {
			return "all dead and failed jobs"
		}
		return strings.Join(f, " ")
	}
	switch {
	case p == "/login":
		return "sign in", ""
	case p == "/logout":
		return "sign out", ""
	case len(parts) == 3 && parts[0] == "jobs":
		return parts[2], "job " + parts[1]
	case len(parts) == 3 && parts[0] == "workflows":
		return parts[2] + " workflow", "workflow " + parts[1]
	case len(parts) == 3 && parts[0] == "queues":
		return parts[2], "queue " + r.PathValue("queue")
	case p == "/dead":
		ids := r.PostForm["id"]
		t := strings.Join(ids[:min(len(ids), 10)], ", ")
		if len(ids) > 10 {
			t += " and " + strconv.Itoa(len(ids)-10) + " more"
		}
		return r.PostFormValue("action") + " selected", "jobs " + t
	case p == "/dead/bulk":
		return r.PostFormValue("action") + " all matching", filter() + " (confirmed " + r.PostFormValue("count") + ")"
	}
	return "POST " + p, ""
}

func (h *Handler) auditPage(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, "audit", "Audit", "audit", h.audits.recent())
}
