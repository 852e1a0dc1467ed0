package ui

// This file holds the answers every page and action gives: a rendered page, a refusal, a
// database error and the redirect after an action.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skiplock/skiplock"
)

// render executes page into a buffer first, so a template error becomes a clean 500
// instead of half a page.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, page, title, active string, data any) {
	h.renderTemplate(w, r, http.StatusOK, page, "layout", title, active, data)
}

// renderTemplate answers status with template tmpl of page. Every header (the CSRF
// cookie, Content-Type, Cache-Control) is set before the status is written: headers set
// after it are not sent.
func (h *Handler) renderTemplate(w http.ResponseWriter, r *http.Request, status int, page, tmpl, title, active string, data any) {
	pd := pageData{
		Title: title, Active: active, Prefix: h.prefix, CSRF: h.csrfToken(w, r),
		ReadOnly: h.cfg.ReadOnly, HasPeriodic: h.cfg.Periodic != nil, SignedIn: h.cfg.Token != "" || h.cfg.BasicAuth != nil,
		Session: h.sessionOK(r),
		Flash:   h.flashMessage(r), Data: data,
	}
	if rf, ok := data.(refresher); ok {
		pd.Refresh = rf.RefreshSeconds()
	}
	var buf bytes.Buffer
	if err := h.pages[page].ExecuteTemplate(&buf, tmpl, pd); err != nil {
		h.log.Error("skiplock ui: render", "page", page, "err", err)
		http.Error(w, "internal error: the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// refuse answers with status and a message page, with the headers of every page.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.renderTemplate(w, r, status, "message", "layout", http.StatusText(status), "", map[string]any{"Status": status, "Message": msg})
}

// fail answers a database error: what happened and what to do, without internals.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, skiplock.ErrNotMigrated) || errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000"):
		h.refuse(w, r, http.StatusInternalServerError, fmt.Sprintf(
			"Schema %q is not migrated: run 'skiplock --schema %s migrate up' (or skiplock.Migrate) first.", h.client.Schema(), h.client.Schema()))
	case errors.Is(err, context.DeadlineExceeded):
		h.refuse(w, r, http.StatusServiceUnavailable, fmt.Sprintf(
			"The database did not answer within %s. Try again, or look for a long lock on the jobs tables.", h.cfg.QueryTimeout))
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads the answer.
	default:
		h.log.Error("skiplock ui: database error", "path", r.URL.Path, "err", err)
		h.refuse(w, r, http.StatusInternalServerError, "The database returned an error: "+err.Error())
	}
}

// redirect sends the browser to path under the prefix after an action (303: the next
// request is a GET, and reloading it repeats nothing), its flash codes signed.
func (h *Handler) redirect(w http.ResponseWriter, r *http.Request, path string, q url.Values) {
	u := h.prefix + path
	if q.Get("done") != "" {
		q.Set(flashSigParam, h.flashSig(q))
	}
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	http.Redirect(w, r, u, http.StatusSeeOther)
}
