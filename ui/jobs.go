package ui

import (
	"html/template"
	"net/http"
	"strconv"
	"strings"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/ui/internal/query"
)

// link is a labelled URL.
type link struct{ Label, URL string }

// jobsView is the data of the jobs page.
type jobsView struct {
	Further  []link // per-status lists that look further for the jobs no index reaches
	Filter   query.Filter
	Statuses []skiplock.JobStatus
	Page     query.Page
	NextURL  string
	FirstURL string
	// Actions are the bulk actions the listed status offers (none when read-only or the
	// list is not filtered by such a status); BulkQuery is the filter, encoded, for the
	// links to the actions on every matching job (empty with a search, which they do not
	// take).
	Actions   []bulkButton
	BulkQuery template.URL
}

// bulkButton is one bulk action's button.
type bulkButton struct {
	Action, Verb string
	Danger       bool // it cannot be undone: asks to confirm, drawn red
}

func (h *Handler) jobsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if s := strings.TrimSpace(q.Get("id")); s != "" {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			h.refuse(w, r, http.StatusBadRequest, "A job id is a positive number.")
			return
		}
		h.redirect(w, r, "/jobs/"+strconv.FormatInt(id, 10), nil)
		return
	}
	f, msg := parseFilter(q, statuses)
	if msg != "" {
		h.refuse(w, r, http.StatusBadRequest, msg)
		return
	}
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	page, err := h.db.Lists.Jobs(ctx, f)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	v := &jobsView{Filter: f, Statuses: statuses, Page: page}
	if !h.cfg.ReadOnly && f.Status != "" {
		for _, a := range bulkActions[f.Status] {
			v.Actions = append(v.Actions, bulkButton{a, bulkWords[a].Verb, dangerous(a)})
		}
		if f.Search == "" {
			bq := filterQuery(f, 0)
			bq.Del("limit")
			v.BulkQuery = template.URL(bq.Encode())
		}
	}
	if page.Unindexed > 0 {
		for _, st := range page.Windowed {
			g := f
			g.Status, g.Before = st, 0
			v.Further = append(v.Further, link{string(st), h.prefix + "/jobs?" + filterQuery(g, 0).Encode()})
		}
	}
	if page.Next > 0 {
		v.NextURL = h.prefix + "/jobs?" + filterQuery(f, page.Next).Encode()
	}
	if f.Before > 0 {
		v.FirstURL = h.prefix + "/jobs?" + filterQuery(f, 0).Encode()
	}
	h.render(w, r, "jobs", "Jobs", "jobs", v)
}
