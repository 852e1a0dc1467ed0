// This file holds the limits page: every queue's flow-control limits as set at run time
// (Client.SetQueueLimits, which every worker applies within seconds), a form to change
// them and a button to drop them (back to what the workers declare), audited.

package ui

import (
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/skiplock/skiplock"
)

// limitsRow is one queue on the limits page.
type limitsRow struct {
	Queue  string
	Set    bool // limits set at run time; false: the workers' declared ones apply
	Limits skiplock.QueueLimits
	Paused bool
	// RatePeriodSeconds and KeyRatePeriodSeconds are Limits.RatePeriod and KeyRatePeriod in
	// whole seconds for the form (1 when unset).
	RatePeriodSeconds, KeyRatePeriodSeconds int64
	// KeyLimits is Limits.ConcurrencyKeys as the form writes it: "region=50, tenant=2".
	KeyLimits string
}

// limitsView is the limits page's data.
type limitsView struct {
	Rows []limitsRow
	// Hidden counts the queues past the first maxQueuesShown by name, not shown; Queue is
	// the one queue the page was asked for (?queue=), "" for all.
	Hidden int
	Queue  string
}

// limitsPage lists every queue with jobs or limits (the first maxQueuesShown by name, or
// the one ?queue= names), its run-time limits and whether it is paused.
func (h *Handler) limitsPage(w http.ResponseWriter, r *http.Request) {
	only := r.URL.Query().Get("queue")
	if !validFilter(only) || utf8.RuneCountInString(only) > maxQueueName {
		h.refuse(w, r, http.StatusBadRequest, "A queue's name is 1 to 64 characters.")
		return
	}
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	set, err := h.client.QueueLimitsSet(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	stats, _, err := h.db.Stats.Read(ctx) // the shared cache (StatsMaxAge): the page lists the queues and their pause
	if err != nil {
		h.fail(w, r, err)
		return
	}
	paused := map[string]bool{}
	names := []string{}
	for _, s := range stats {
		paused[s.Queue] = s.Paused
		names = append(names, s.Queue)
	}
	for q := range set {
		if !slices.Contains(names, q) {
			names = append(names, q)
		}
	}
	slices.Sort(names)
	v := limitsView{Queue: only}
	switch {
	case only != "":
		names = []string{only} // its limits can be set before it has jobs
	case len(names) > maxQueuesShown:
		// One form per queue: tens of thousands of queues would make a page of megabytes.
		v.Hidden, names = len(names)-maxQueuesShown, names[:maxQueuesShown]
	}
	for _, q := range names {
		l, ok := set[q]
		row := limitsRow{Queue: q, Set: ok, Limits: l, Paused: paused[q], RatePeriodSeconds: 1, KeyRatePeriodSeconds: 1,
			KeyLimits: keyLimitsText(l.ConcurrencyKeys)}
		if l.RatePeriod >= time.Second {
			row.RatePeriodSeconds = int64(l.RatePeriod / time.Second)
		}
		if l.KeyRatePeriod >= time.Second {
			row.KeyRatePeriodSeconds = int64(l.KeyRatePeriod / time.Second)
		}
		v.Rows = append(v.Rows, row)
	}
	h.render(w, r, "limits", "Limits", "limits", v)
}

// setLimits sets a queue's limits from the form: queue, concurrency, key_concurrency, rate,
// rate_period (seconds), key_rate, key_rate_period (seconds), fair and concurrency_keys
// ("region=50, tenant=2"); an empty number means none.
func (h *Handler) setLimits(w http.ResponseWriter, r *http.Request) {
	queue := r.PostFormValue("queue")
	var l skiplock.QueueLimits
	var bad []string
	num := func(field string) int {
		s := strings.TrimSpace(r.PostFormValue(field))
		if s == "" {
			return 0
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 1_000_000 {
			bad = append(bad, field)
		}
		return n
	}
	l.Concurrency, l.KeyConcurrency, l.Rate = num("concurrency"), num("key_concurrency"), num("rate")
	if p := num("rate_period"); p > 0 && l.Rate > 0 {
		l.RatePeriod = time.Duration(p) * time.Second
	}
	l.KeyRate = num("key_rate")
	if p := num("key_rate_period"); p > 0 && l.KeyRate > 0 {
		l.KeyRatePeriod = time.Duration(p) * time.Second
	}
	l.Fair = r.PostFormValue("fair") == "on"
	var ok bool
	if l.ConcurrencyKeys, ok = parseKeyLimits(r.PostFormValue("concurrency_keys")); !ok {
		bad = append(bad, "concurrency_keys (DIM=N, ...)")
	}
	if len(bad) > 0 {
		h.refuse(w, r, http.StatusBadRequest, "Limits are whole numbers from 0 (none) to 1000000: "+strings.Join(bad, ", ")+".")
		return
	}
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	err := h.client.SetQueueLimits(ctx, queue, l)
	if errors.Is(err, skiplock.ErrInvalidQueue) || errors.Is(err, skiplock.ErrInvalidOptions) || errors.Is(err, skiplock.ErrInvalidLimits) {
		h.refuse(w, r, http.StatusBadRequest, "The limits were refused: "+strings.TrimPrefix(err.Error(), "skiplock: ")+".")
		return
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.redirect(w, r, "/limits", url.Values{"done": {"limitsset"}})
}

// resetLimits drops the run-time limits of the form's queue.
func (h *Handler) resetLimits(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	err := h.client.ResetQueueLimits(ctx, r.PostFormValue("queue"))
	if errors.Is(err, skiplock.ErrInvalidQueue) {
		h.refuse(w, r, http.StatusBadRequest, "Bad queue name.")
		return
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.redirect(w, r, "/limits", url.Values{"done": {"limitsreset"}})
}

// parseKeyLimits reads the form's per-dimension limits, "region=50, tenant=2" (commas or
// spaces between them); ok is false when a pair is not DIM=N with N from 1 to 1000000.
// SetQueueLimits checks the dimensions' names.
func parseKeyLimits(text string) (dims map[string]int, ok bool) {
	for _, pair := range strings.FieldsFunc(text, func(r rune) bool { return r == ',' || r == ' ' }) {
		dim, v, found := strings.Cut(pair, "=")
		n, err := strconv.Atoi(v)
		if !found || err != nil || n < 1 || n > 1_000_000 {
			return nil, false
		}
		if dims == nil {
			dims = map[string]int{}
		}
		dims[dim] = n
	}
	return dims, true
}

// keyLimitsText is QueueLimits.ConcurrencyKeys as the form writes it.
func keyLimitsText(dims map[string]int) string {
	parts := make([]string, 0, len(dims))
	for _, d := range slices.Sorted(maps.Keys(dims)) {
		parts = append(parts, d+"="+strconv.Itoa(dims[d]))
	}
	return strings.Join(parts, ", ")
}
