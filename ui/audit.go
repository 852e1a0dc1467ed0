package ui

// This file holds the audit of actions: every action (retry, cancel, delete, requeue, bulk,
// pause, resume, sign-in and sign-out) and every refused forgery (a bad CSRF token,
// another origin) is described here, with every name and value a client chose quoted,
// and recorded by the Handler's auditLog; and the /audit page that lists them.

import (
	"bytes"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/skiplock/skiplock/ui/internal/query"
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

// heldAnswer holds an action's answer until its audit entry is written, so that whoever
// sees the answer finds the entry.
type heldAnswer struct {
	w      http.ResponseWriter
	status int
	body   bytes.Buffer
}

// Header is the answer's header, set on the real one.
func (a *heldAnswer) Header() http.Header { return a.w.Header() }

// WriteHeader records the first status the action answers with.
func (a *heldAnswer) WriteHeader(code int) {
	if a.status == 0 {
		a.status = code
	}
}

// Write holds the body (an action answers with a redirect or a short message page).
func (a *heldAnswer) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	return a.body.Write(b)
}

// send writes the held answer.
func (a *heldAnswer) send() {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	a.w.WriteHeader(a.status)
	_, _ = a.body.WriteTo(a.w)
}

// serveAudited serves the action r and records it: who, what, on what, and the outcome
// (the flash codes of its redirect, or the refusal's status); then sends the answer.
func (h *Handler) serveAudited(w http.ResponseWriter, r *http.Request) {
	who := h.who(r) // before: sign out ends the session that names it
	rec := &heldAnswer{w: w}
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
	refused := false
	if action == "sign in" {
		who = "—" // a sign-in names no one until it succeeds, and its session is in the answer
		// Anyone may try: a failed sign-in is kept with the refusals (bounded apart, at a
		// bounded rate), so a flood of them cannot push the actions out.
		refused = rec.status != http.StatusSeeOther
	}
	h.audit.add(r.Context(), query.AuditEntry{Refused: refused, Who: who, From: h.clientAddr(r), Action: action, Target: target, Result: result})
	rec.send()
}

// refuseForgery refuses the POST r as a forgery (why says how it failed) and records it.
func (h *Handler) refuseForgery(w http.ResponseWriter, r *http.Request, why, msg string) {
	who := "—"
	if r.URL.Path != "/login" { // else the request is not authenticated
		who = h.who(r)
	}
	action, target := describeAction(r)
	h.audit.add(r.Context(), query.AuditEntry{Refused: true, Who: who, From: h.clientAddr(r), Action: action, Target: target, Result: "refused: " + why})
	h.refuse(w, r, http.StatusForbidden, msg)
}

// describeAction names the action of a POST and what it acted on. Every value the client
// chose that is not a number or a known word is quoted (strconv.Quote, cut to
// maxQuoted), so a queue name or form value cannot make a misleading audit line. A job's
// args are data, not an action's parameters, and may hold secrets: they are never
// recorded, only their size. (The sign-in's token is not recorded either.)
// It reads the path as the router does, segment by segment, each unescaped on its own:
// an escaped slash (/queues%2Fpause) stays inside its segment, names no action (the
// router finds no route either), and is described as the path it was, escaped.
func describeAction(r *http.Request) (action, target string) {
	parts := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	for i, s := range parts {
		if u, err := url.PathUnescape(s); err == nil {
			parts[i] = u
		}
	}
	is := func(segments ...string) bool { return slices.Equal(parts, segments) }
	switch {
	case is("login"):
		return "sign in", ""
	case is("logout"):
		return "sign out", ""
	case is("queues", "pause") || is("queues", "resume"):
		return parts[1], "queue " + quoted(r.PostFormValue("queue"))
	case len(parts) == 3 && parts[0] == "queues" && (parts[2] == "pause" || parts[2] == "resume"):
		return parts[2], "queue " + quoted(parts[1])
	case len(parts) == 3 && parts[0] == "jobs" && slices.Contains([]string{"retry", "cancel", "delete"}, parts[2]):
		return parts[2], "job " + number(parts[1])
	case is("limits"):
		return "set limits", "queue " + quoted(r.PostFormValue("queue")) + " concurrency=" + quoted(r.PostFormValue("concurrency")) +
			" key_concurrency=" + quoted(r.PostFormValue("key_concurrency")) + " rate=" + quoted(r.PostFormValue("rate")) +
			" rate_period=" + quoted(r.PostFormValue("rate_period")) + " key_rate=" + quoted(r.PostFormValue("key_rate")) +
			" key_rate_period=" + quoted(r.PostFormValue("key_rate_period")) + " fair=" + quoted(r.PostFormValue("fair")) +
			" concurrency_keys=" + quoted(r.PostFormValue("concurrency_keys"))
	case is("periodic", "run") || is("periodic", "enable") || is("periodic", "disable"):
		return map[string]string{"run": "run periodic now", "enable": "enable periodic", "disable": "disable periodic"}[parts[1]],
			"schedule " + quoted(r.PostFormValue("name"))
	case is("limits", "reset"):
		return "reset limits", "queue " + quoted(r.PostFormValue("queue"))
	case len(parts) == 3 && parts[0] == "jobs" && parts[2] == "retry-args":
		// The args may hold secrets: the audit says they were edited and their size, as
		// the job gets them (trimmed), never what they are.
		return "retry with edited args", "job " + number(parts[1]) + " args edited (" +
			strconv.Itoa(len(strings.TrimSpace(r.PostFormValue("args")))) + " bytes)"
	case len(parts) == 3 && parts[0] == "jobs" && parts[2] == "edit":
		return "edit", "job " + number(parts[1]) + " run_at=" + quoted(r.PostFormValue("run_at")) + " priority=" + quoted(r.PostFormValue("priority"))
	case len(parts) == 3 && parts[0] == "workflows" && (parts[2] == "cancel" || parts[2] == "retry"):
		return parts[2] + " workflow", "workflow " + number(parts[1])
	case is("dead") || is("jobs", "selected"):
		ids := r.PostForm["id"]
		shown := make([]string, 0, 10)
		for _, id := range ids[:min(len(ids), 10)] {
			shown = append(shown, number(id))
		}
		t := strings.Join(shown, ", ")
		if len(ids) > 10 {
			t += " and " + strconv.Itoa(len(ids)-10) + " more"
		}
		if st := r.PostFormValue("status"); st != "" {
			t += " (listed as " + quoted(st) + ")"
		}
		return word(r.PostFormValue("action")) + " selected", "jobs " + t
	case is("dead", "bulk") || is("jobs", "bulk"):
		return word(r.PostFormValue("action")) + " all matching", auditFilter(r) + " (confirmed " + number(r.PostFormValue("count")) + ")"
	}
	return "POST", quoted(r.URL.EscapedPath())
}

// auditFilter describes the filter of a bulk action, its values quoted.
func auditFilter(r *http.Request) string {
	var f []string
	for _, k := range []string{"status", "queue", "kind"} {
		if v := r.PostFormValue(k); v != "" {
			f = append(f, k+"="+quoted(v))
		}
	}
	if len(f) == 0 {
		return "all dead and failed jobs"
	}
	return strings.Join(f, " ")
}

// maxQuoted bounds the characters of a client's value an audit line quotes.
const maxQuoted = 100

// quoted is s as a Go string literal: in quotes, with quotes, backslashes, control and
// invisible characters (such as a right-to-left override) escaped; cut to maxQuoted.
func quoted(s string) string { return strconv.Quote(clip(s, maxQuoted)) }

// number is s as the decimal number it is (an id, a count: "0042" and "+42" are 42, as
// the handlers read them, so the job page finds its actions whatever the path's
// spelling), else quoted.
func number(s string) string {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return strconv.FormatInt(n, 10)
	}
	return quoted(s)
}

// word is an action's name when it is one of the actions (requeue, delete, cancel,
// runnow), else quoted.
func word(s string) string {
	if s == "requeue" || s == "delete" || s == "cancel" || s == "runnow" {
		return s
	}
	return quoted(s)
}

// auditView is the /audit page's data.
type auditView struct {
	Actions, Refused []query.AuditEntry
	Shown, RefShown  int64
}

func (h *Handler) auditPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	v := &auditView{Shown: auditShown, RefShown: refusedShown}
	var err error
	if v.Actions, err = h.db.Audit.Recent(ctx, false, auditShown); err == nil {
		v.Refused, err = h.db.Audit.Recent(ctx, true, refusedShown)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.render(w, r, "audit", "Audit", "audit", v)
}
