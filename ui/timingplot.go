package ui

// This file holds the queue page's line charts of wait and run time: p50 and p95 per
// slot, laid out on the server like the bar plot (every value a number computed here).

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/skiplock/skiplock/ui/internal/query"
)

// linePlot is a line chart of durations over time slots; the template draws it as SVG.
type linePlot struct {
	plot
	Title, ID string // the caption, and the data-chart name tests find it by
	Lines     []line
	Dots      []dot // every slot with jobs, with its figures as a tooltip
}

// line is one series: its class, legend and the points of each run of slots with jobs.
type line struct {
	Class, Label string
	Segments     []string
}

type dot struct {
	X, Y  float64
	Title string
}

// niceDurations are the tops a duration axis rounds up to.
var niceDurations = []time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 20 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 48 * time.Hour, 7 * 24 * time.Hour,
}

func niceDuration(d time.Duration) time.Duration {
	for _, n := range niceDurations {
		if d <= n {
			return n
		}
	}
	return d
}

// durationPlot lays out the p50 and p95 of hist (the wait or run histogram of each slot)
// over slots of size each, the last ending with the current minute (now, its start).
func durationPlot(slots []query.Times, hist func(*query.Times) *query.Hist, now time.Time, size time.Duration, what string) linePlot {
	p := linePlot{Title: map[string]string{"waited": "Wait", "ran": "Run time"}[what], ID: map[string]string{"waited": "wait", "ran": "run"}[what], plot: plot{W: plotW, H: plotH, Left: plotLeft + 8, Top: plotTop,
		InnerW: plotW - plotLeft - 8 - plotRight, InnerH: plotH - plotTop - plotBt,
		YLabelX: plotLeft + 2, XLabelY: plotH - 6, MidX: plotW / 2, MidY: plotH / 2}}
	var peak time.Duration
	for i := range slots {
		peak = max(peak, hist(&slots[i]).Quantile(0.95))
	}
	p.Empty = peak == 0 && !anyJobs(slots, hist)
	top := niceDuration(max(peak, time.Millisecond))
	step := float64(p.InnerW) / float64(len(slots))
	base := float64(p.Top + p.InnerH)
	y := func(d time.Duration) float64 { return base - min(float64(d)/float64(top), 1)*float64(p.InnerH) }
	first := now.Add(size - time.Duration(len(slots))*size + time.Minute)
	for _, q := range []struct {
		class, label string
		q            float64
	}{{"p95", "p95", 0.95}, {"p50", "p50", 0.5}} {
		l := line{Class: q.class, Label: q.label}
		var seg []string
		for i := range slots {
			h := hist(&slots[i])
			if h.N == 0 {
				l.Segments, seg = appendSegment(l.Segments, seg), nil
				continue
			}
			x := float64(p.Left) + (float64(i)+0.5)*step
			seg = append(seg, strconv.FormatFloat(x, 'f', 1, 64)+","+strconv.FormatFloat(y(h.Quantile(q.q)), 'f', 1, 64))
			if q.q == 0.95 {
				start := first.Add(time.Duration(i) * size)
				p.Dots = append(p.Dots, dot{X: x, Y: y(h.Quantile(q.q)), Title: fmt.Sprintf("%s–%s UTC: %s %s, p50 %s, p95 %s, max %s",
					start.Format("15:04"), start.Add(size).Format("15:04"), plural(int(h.N), "job"), what,
					timingText(h.Quantile(0.5)), timingText(h.Quantile(0.95)), timingText(h.Max()))})
			}
		}
		l.Segments = appendSegment(l.Segments, seg)
		p.Lines = append(p.Lines, l)
	}
	for _, f := range []time.Duration{0, top / 2, top} {
		pos := y(f)
		p.YTicks = append(p.YTicks, tick{Pos: pos, TextPos: pos + 4, Label: timingText(f)})
	}
	span := time.Duration(len(slots)) * size
	for i := 0; i <= 4; i++ {
		back := span - time.Duration(i)*span/4
		label := fmt.Sprintf("−%dm", int(back.Minutes()))
		if back >= 2*time.Hour {
			label = fmt.Sprintf("−%dh", int(back.Hours()))
		}
		t := tick{Pos: float64(p.Left) + float64(i)*float64(p.InnerW)/4, Label: label, Anchor: "middle"}
		switch i {
		case 0:
			t.Anchor = "start"
		case 4:
			t.Label, t.Anchor = "now", "end"
		}
		p.XTicks = append(p.XTicks, t)
	}
	return p
}

// appendSegment adds the points of seg, when any, as one polyline's.
func appendSegment(segs, seg []string) []string {
	if len(seg) == 0 {
		return segs
	}
	if len(seg) == 1 { // a lone slot: a short flat line, so it shows
		x, y, _ := strings.Cut(seg[0], ",")
		xf, _ := strconv.ParseFloat(x, 64)
		seg = []string{strconv.FormatFloat(xf-2, 'f', 1, 64) + "," + y, strconv.FormatFloat(xf+2, 'f', 1, 64) + "," + y}
	}
	return append(segs, strings.Join(seg, " "))
}

func anyJobs(slots []query.Times, hist func(*query.Times) *query.Hist) bool {
	for i := range slots {
		if hist(&slots[i]).N > 0 {
			return true
		}
	}
	return false
}

// timingText writes a wait or run time for people: under 1 ms, 340 ms, 2.4 s, 3m 5s.
func timingText(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Millisecond:
		return "<1 ms"
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	}
	return shortDuration(d)
}
