package ui

import (
	"context"
	"errors"
	"html/template"
	"net/http"
	"net/url"
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
	// RunOrder says the page lists a queue's queued jobs in the order workers claim them;
	// OrderURLs link the two orders when the filter allows both (queued jobs of one queue).
	RunOrder          bool
	NewestURL, RunURL string
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
	runOrder := q.Get("order") == "run"
	orderable := f.Status == skiplock.StatusQueued && f.Queue != "" && f.Kind == "" && f.Search == ""
	if runOrder && !orderable {
		h.refuse(w, r, http.StatusBadRequest, "Run order lists the queued jobs of one queue: filter by status queued and a queue, without a kind or search.")
		return
	}
	var (
		page query.Page
		err  error
		next string
	)
	if runOrder {
		page, next, err = h.runOrderPage(ctx, f, q.Get("after"))
	} else {
		page, err = h.db.Lists.Jobs(ctx, f)
	}
	if err != nil {
		if errors.Is(err, errBadCursor) {
			h.refuse(w, r, http.StatusBadRequest, "Bad page cursor: open the list from its first page.")
			return
		}
		h.fail(w, r, err)
		return
	}
	v := &jobsView{Filter: f, Statuses: statuses, Page: page, RunOrder: runOrder}
	h.addJobsLinks(v, orderable, next, q.Get("after") != "")
	h.render(w, r, "jobs", "Jobs", "jobs", v)
}

// addJobsLinks fills in v's bulk actions and links: the two orders (when orderable), the
// lists that look further, and the pager's (next: the run order's next cursor; paged: the
// run order page is not the first).
func (h *Handler) addJobsLinks(v *jobsView, orderable bool, next string, paged bool) {
	f, page := v.Filter, v.Page
	if orderable {
		v.NewestURL = h.prefix + "/jobs?" + filterQuery(f, 0).Encode()
		rq := filterQuery(f, 0)
		rq.Set("order", "run")
		v.RunURL = h.prefix + "/jobs?" + rq.Encode()
	}
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
	switch {
	case v.RunOrder:
		if next != "" {
			v.NextURL = v.RunURL + "&after=" + url.QueryEscape(next)
		}
		if paged {
			v.FirstURL = v.RunURL
		}
	default:
		if page.Next > 0 {
			v.NextURL = h.prefix + "/jobs?" + filterQuery(f, page.Next).Encode()
		}
		if f.Before > 0 {
			v.FirstURL = h.prefix + "/jobs?" + filterQuery(f, 0).Encode()
		}
	}
}

var errBadCursor = errors.New("bad cursor")

// runOrderPage is a page of f's queue's queued jobs in claim order after the cursor
// after ("" for the first), and the cursor of the next ("" when none).
func (h *Handler) runOrderPage(ctx context.Context, f query.Filter, after string) (query.Page, string, error) {
	var cur *query.RunCursor
	if after != "" {
		c, ok := query.ParseRunCursor(after)
		if !ok {
			return query.Page{}, "", errBadCursor
		}
		cur = &c
	}
	rows, next, err := h.db.RunOrder.Page(ctx, f.Queue, cur, f.Limit)
	if err != nil || next == nil {
		return query.Page{Rows: rows}, "", err
	}
	return query.Page{Rows: rows}, next.String(), nil
}
