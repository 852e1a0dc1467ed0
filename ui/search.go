package ui

// This file holds the search page: the jobs table and archive searched by args,
// metadata, error text or JSON containment, newest first, a bounded window of ids per
// page, with queue and kind pickers read from the stats and the planner's statistics
// (each a text field with suggestions, so any queue or kind can be searched).

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/ui/internal/query"
)

// searchModes are the search page's modes, in the order its picker shows them.
var searchModes = []struct{ Mode, Label string }{
	{query.SearchArgs, "args or metadata contain the text"},
	{query.SearchError, "the last error contains the text"},
	{query.SearchContains, "args contain the JSON (@>)"},
}

// queueCount is a queue of the picker and its jobs in the hot table.
type queueCount struct {
	Name string
	N    int64
}

// searchView is the data of the search page.
type searchView struct {
	Filter   query.SearchFilter
	Modes    []struct{ Mode, Label string }
	Statuses []skiplock.JobStatus
	// Queues are the queue picker's suggestions: the first maxQueuesShown by name;
	// QueuesHidden counts the rest, which the picker takes typed in.
	Queues       []queueCount
	QueuesHidden int
	Kinds        []query.KindCount
	Searched     bool
	Rows         []query.Row
	JobID        int64 // the text is a job id: link to it
	// Window says the page stopped at its window of ids (From on), not at a full page:
	// more results may exist among older jobs (NextURL), or a narrower search finds them.
	Window   bool
	From     int64
	NextURL  string
	FirstURL string
}

// searchPage shows the search form and, for a text, a page of the jobs it matches.
func (h *Handler) searchPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, msg := parseFilter(q, statuses)
	sf := query.SearchFilter{Filter: f, Mode: q.Get("mode")}
	if sf.Mode == "" {
		sf.Mode = query.SearchArgs
	}
	if msg == "" {
		msg = checkSearch(sf)
	}
	if msg != "" {
		h.refuse(w, r, http.StatusBadRequest, msg)
		return
	}
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	v := &searchView{Filter: sf, Modes: searchModes, Statuses: statuses}
	stats, _, err := h.db.Stats.Read(ctx)
	if err == nil {
		v.Kinds, err = h.db.Search.Kinds(ctx)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	for _, s := range stats {
		var n int64
		for _, c := range s.Counts {
			n += c
		}
		v.Queues = append(v.Queues, queueCount{s.Queue, n})
	}
	slices.SortFunc(v.Queues, func(a, b queueCount) int { return strings.Compare(a.Name, b.Name) })
	if len(v.Queues) > maxQueuesShown { // as the Queues and Limits pages: any other queue is typed in
		v.QueuesHidden, v.Queues = len(v.Queues)-maxQueuesShown, v.Queues[:maxQueuesShown]
	}
	if sf.Search != "" {
		v.Searched = true
		if id, err := strconv.ParseInt(sf.Search, 10, 64); err == nil && id > 0 {
			v.JobID = id
		}
		page, err := h.db.Search.Run(ctx, sf)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		v.Rows, v.Window, v.From = page.Rows, page.Window, page.From
		if page.Next > 0 {
			v.NextURL = h.prefix + "/search?" + searchQuery(sf, page.Next)
		}
		if sf.Before > 0 {
			v.FirstURL = h.prefix + "/search?" + searchQuery(sf, 0)
		}
	}
	h.render(w, r, "search", "Search", "search", v)
}

// checkSearch says what is wrong with a search's mode or text.
func checkSearch(f query.SearchFilter) string {
	if !slices.ContainsFunc(searchModes, func(m struct{ Mode, Label string }) bool { return m.Mode == f.Mode }) {
		return "Unknown search mode: use args, error or contains."
	}
	if f.Mode == query.SearchContains && f.Search != "" {
		s := strings.TrimSpace(f.Search)
		if !json.Valid([]byte(s)) || (s[0] != '{' && s[0] != '[') {
			return `A containment search takes a JSON object or array, such as {"order_id": 42}.`
		}
	}
	return ""
}

// searchQuery is the query of the search f from the cursor before (0: the newest).
func searchQuery(f query.SearchFilter, before int64) string {
	v := filterQuery(f.Filter, before)
	v.Set("mode", f.Mode)
	return v.Encode()
}
