package ui

// This file holds the queue page: how long a queue's jobs waited for a worker and how
// long they ran, p50/p95/max, and how many failed, over the last 5 minutes, hour, day
// and week, per kind, with the charts of the last hour, day or week.

import (
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/ui/internal/query"
)

// timingRanges are the chart spans the queue page offers (?range=): the slots and their
// size in minutes, and the span read (the day, or the week for its view).
var timingRanges = map[string]struct{ slots, size, read int64 }{
	"1h":  {60, 1, query.TimingDayMinutes},
	"24h": {96, 15, query.TimingDayMinutes},
	"7d":  {84, 120, query.TimingWeekMinutes},
}

// timingRow is one line of the queue page's tables: a span or a kind.
type timingRow struct {
	Label                     string
	N                         int64
	WaitP50, WaitP95, WaitMax string
	RunP50, RunP95, RunMax    string
	Failed                    int64
	FailRate                  string // of the jobs that ended (succeeded or failed for good); "—" when none did
	// Other marks the row of the kinds past the rollup's bound, together: it names no
	// kind, so it links to no list of jobs.
	Other bool
}

func newTimingRow(label string, t query.Times) timingRow {
	r := timingRow{Label: label, N: t.Wait.N, Failed: t.Failed, FailRate: "—"}
	if t.Succeeded+t.Failed > 0 {
		r.FailRate = percent(t.Failed, t.Succeeded+t.Failed)
	}
	if t.Wait.N == 0 {
		r.WaitP50, r.WaitP95, r.WaitMax, r.RunP50, r.RunP95, r.RunMax = "—", "—", "—", "—", "—", "—"
		return r
	}
	r.WaitP50, r.WaitP95, r.WaitMax = timingText(t.Wait.Quantile(0.5)), timingText(t.Wait.Quantile(0.95)), timingText(t.Wait.Max())
	r.RunP50, r.RunP95, r.RunMax = timingText(t.Run.Quantile(0.5)), timingText(t.Run.Quantile(0.95)), timingText(t.Run.Max())
	return r
}

// queueView is the data of the queue page.
type queueView struct {
	Queue     string
	Range     string      // "1h", "24h" or "7d": the charts' and the kinds table's span
	Spans     []timingRow // every kind, over 5 minutes, an hour, a day (and a week in its view)
	Kinds     []timingRow // each kind over Range, the busiest first
	MoreKinds bool        // Kinds stops at query.MaxTimingKinds
	// Behind says the rollup the maintenance leader writes is missing or more than an
	// hour old (no Worker with a SweepInterval, nor a Sweeper, of this release runs): the
	// page shows the archive's last hour only. RollupAt is when it was last written.
	Behind    bool
	RollupAt  time.Time
	Wait, Run linePlot
	At        time.Time
	// The jobs of the queue that ended in the last hour (from the queue counts): how many,
	// how many failed for good (dead or failed) and were cancelled, and the failed share.
	Ended, Failed, Cancelled int64
	FailRate                 string
	// OldestDue is how long the queue's oldest due job has waited so far (the stats'):
	// the wait of the jobs not started yet, which the archive cannot show.
	OldestDue time.Duration
}

// queuePage shows the wait and run times of the queue ?name=, its charts over ?range=.
func (h *Handler) queuePage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name := q.Get("name")
	if !validFilter(name) || name == "" || utf8.RuneCountInString(name) > maxQueueName {
		h.refuse(w, r, http.StatusBadRequest, "A queue's name is 1 to 64 characters: open the queue from the queues page.")
		return
	}
	rng := q.Get("range")
	if rng == "" {
		rng = "1h"
	}
	spec, ok := timingRanges[rng]
	if !ok {
		h.refuse(w, r, http.StatusBadRequest, "Unknown range: use 1h, 24h or 7d.")
		return
	}
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	qt, err := h.db.Timing.Read(ctx, name, spec.read)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	stats, _, err := h.db.Stats.Read(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	now := time.Unix(qt.Now*60, 0).UTC()
	v := &queueView{Queue: name, Range: rng, At: now, Behind: qt.Behind}
	if qt.RollupAt > 0 {
		v.RollupAt = time.Unix(qt.RollupAt*60, 0).UTC()
	}
	for _, s := range stats {
		if s.Queue == name {
			for _, n := range s.FinishedLastHour {
				v.Ended += n
			}
			v.Failed = s.FinishedLastHour[skiplock.StatusDead] + s.FinishedLastHour[skiplock.StatusFailed]
			v.Cancelled = s.FinishedLastHour[skiplock.StatusCancelled]
			v.OldestDue = s.OldestDue
		}
	}
	v.FailRate = percent(v.Failed, v.Ended)
	for _, s := range []struct {
		label   string
		minutes int64
	}{{"Last 5 minutes", 5}, {"Last hour", 60}, {"Last 24 hours", query.TimingDayMinutes}, {"Last 7 days", query.TimingWeekMinutes}} {
		if s.minutes > qt.Minutes {
			continue // the week is read by its view only
		}
		all, _ := qt.Span(qt.Now-s.minutes+1, qt.Now)
		v.Spans = append(v.Spans, newTimingRow(s.label, all))
	}
	_, kinds := qt.Span(qt.Now-spec.slots*spec.size+1, qt.Now)
	for _, k := range kinds {
		row := newTimingRow(k.Kind, k.Times)
		row.Other = k.Kind == query.OtherKinds
		v.Kinds = append(v.Kinds, row)
	}
	v.MoreKinds = len(kinds) == query.MaxTimingKinds
	slots := qt.Slots(int(spec.slots), spec.size)
	size := time.Duration(spec.size) * time.Minute
	v.Wait = durationPlot(slots, func(t *query.Times) *query.Hist { return &t.Wait }, now, size, "waited")
	v.Run = durationPlot(slots, func(t *query.Times) *query.Hist { return &t.Run }, now, size, "ran")
	h.render(w, r, "queue", "Queue "+name, "queues", v)
}
