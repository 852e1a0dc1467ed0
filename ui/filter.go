package ui

// This file holds the list filters of the jobs, dead and bulk pages: read from a query,
// bounded, and written back into links; and the job ids an action selects.

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/ui/internal/query"
)

// statuses are the job states in the order the pages show them.
var statuses = []skiplock.JobStatus{
	skiplock.StatusQueued, skiplock.StatusRunning, skiplock.StatusSucceeded,
	skiplock.StatusFailed, skiplock.StatusDead, skiplock.StatusCancelled,
}

var stuckStatuses = []skiplock.JobStatus{skiplock.StatusDead, skiplock.StatusFailed}

// parseFilter reads and bounds the list filters of a query; msg says what is wrong.
func parseFilter(q url.Values, allowed []skiplock.JobStatus) (f query.Filter, msg string) {
	f.Limit = DefaultPageSize
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return f, "limit is a positive number."
		}
		f.Limit = min(n, MaxPageSize)
	}
	if s := q.Get("before"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return f, "before is a job id."
		}
		f.Before = n
	}
	if s := q.Get("status"); s != "" {
		if !slices.Contains(allowed, skiplock.JobStatus(s)) {
			return f, "Unknown status."
		}
		f.Status = skiplock.JobStatus(s)
	}
	// A queue or kind is matched exactly as given: names may be any text, spaces and
	// no-break spaces included, so trimming "payment.charge\u00a0" would point its links
	// and bulk actions at the jobs of "payment.charge". Only the search text, a piece
	// looked for inside args, metadata or errors (never a bulk action's filter), is trimmed.
	f.Queue, f.Kind = q.Get("queue"), q.Get("kind")
	f.Search = strings.TrimSpace(q.Get("q"))
	if !validFilter(f.Queue) || !validFilter(f.Kind) || !validFilter(f.Search) {
		return f, "A queue, kind or search filter is at most 255 bytes of text."
	}
	return f, ""
}

func validFilter(s string) bool {
	return len(s) <= maxFilterLen && utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

func filterQuery(f query.Filter, before int64) url.Values {
	v := url.Values{}
	if f.Status != "" {
		v.Set("status", string(f.Status))
	}
	if f.Queue != "" {
		v.Set("queue", f.Queue)
	}
	if f.Kind != "" {
		v.Set("kind", f.Kind)
	}
	if f.Search != "" {
		v.Set("q", f.Search)
	}
	if f.Limit != DefaultPageSize {
		v.Set("limit", strconv.Itoa(f.Limit))
	}
	if before > 0 {
		v.Set("before", strconv.FormatInt(before, 10))
	}
	return v
}

// parseIDs reads the selected job ids of a form: 1 to MaxActionIDs positive numbers.
func parseIDs(vals []string) ([]int64, string) {
	if len(vals) == 0 {
		return nil, "Select at least one job."
	}
	if len(vals) > MaxActionIDs {
		return nil, "Select at most " + strconv.Itoa(MaxActionIDs) + " jobs at a time."
	}
	ids := make([]int64, 0, len(vals))
	for _, s := range vals {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			return nil, "A job id is a positive number."
		}
		ids = append(ids, id)
	}
	return ids, ""
}
