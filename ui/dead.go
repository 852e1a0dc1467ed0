package ui

// This file holds the dead and failed page and its actions on the selected jobs.

import (
	"html/template"
	"net/http"
	"strconv"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/ui/internal/query"
)

// deadView is the data of the dead and failed page.
type deadView struct {
	Filter    query.Filter
	BulkQuery template.URL // the filter, encoded, for the links to the bulk actions
	Statuses  []skiplock.JobStatus
	Rows      []query.Row
	NextURL   string
	FirstURL  string
	// Errors groups the newest dead and failed jobs of the filter by their error.
	Errors      []query.ErrorGroup
	ErrorWindow int64
}

func (h *Handler) deadPage(w http.ResponseWriter, r *http.Request) {
	f, msg := parseFilter(r.URL.Query(), stuckStatuses)
	if msg != "" {
		h.refuse(w, r, http.StatusBadRequest, msg)
		return
	}
	f.Search = "" // the dead page lists by status, queue and kind (its bulk actions take those)
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	rows, err := h.db.Lists.Stuck(ctx, f)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	bq := filterQuery(f, 0)
	bq.Del("limit")
	v := &deadView{Filter: f, Statuses: stuckStatuses, Rows: rows, BulkQuery: template.URL(bq.Encode()), ErrorWindow: query.ErrorGroupWindow}
	if v.Errors, err = h.db.Errors.List(ctx, f.Queue, f.Kind); err != nil {
		h.fail(w, r, err)
		return
	}
	if len(rows) == f.Limit {
		v.NextURL = h.prefix + "/dead?" + filterQuery(f, rows[len(rows)-1].ID).Encode()
	}
	if f.Before > 0 {
		v.FirstURL = h.prefix + "/dead?" + filterQuery(f, 0).Encode()
	}
	h.render(w, r, "dead", "Dead and failed", "dead", v)
}

// deadAction requeues or deletes the selected dead and failed jobs.
func (h *Handler) deadAction(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		h.refuse(w, r, http.StatusBadRequest, "Bad form.")
		return
	}
	ids, msg := parseIDs(r.PostForm["id"])
	if msg != "" {
		h.refuse(w, r, http.StatusBadRequest, msg)
		return
	}
	back, _ := parseFilter(r.PostForm, stuckStatuses)
	ret := filterQuery(back, 0)
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	switch r.PostFormValue("action") {
	case "requeue":
		res, err := h.client.Requeue(ctx, skiplock.RequeueFilter{IDs: ids})
		if err != nil {
			h.fail(w, r, err)
			return
		}
		ret.Set("done", "requeued")
		ret.Set("n_requeued", strconv.FormatInt(res.Requeued, 10))
		// Skipped: not dead or failed any more, or their unique key is held.
		if skipped := len(ids) - int(res.Requeued); skipped > 0 {
			ret.Set("done", "requeued,skipped")
			ret.Set("n_skipped", strconv.Itoa(skipped))
		}
	case "delete":
		deleted, err := h.db.Jobs.DeleteStuck(ctx, ids)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		n := len(deleted)
		ret.Set("done", "deleted")
		ret.Set("n_deleted", strconv.Itoa(n))
		if skipped := len(ids) - n; skipped > 0 {
			ret.Set("done", "deleted,skipped")
			ret.Set("n_skipped", strconv.Itoa(skipped))
		}
	default:
		h.refuse(w, r, http.StatusBadRequest, "Unknown action: use requeue or delete.")
		return
	}
	h.redirect(w, r, "/dead", ret)
}
