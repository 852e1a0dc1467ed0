package ui

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// plot is a bar chart laid out on the server; the template draws it as SVG. Every value
// is a number computed here, so nothing from the database reaches the SVG as markup.
type plot struct {
	W, H           int
	Left, Top      int
	InnerW, InnerH int
	YLabelX        int // where the y labels end
	XLabelY        int // the baseline of the x labels
	MidX, MidY     int // the centre, for the "no data" note
	Bars           []bar
	Fails          []bar  // the failures of each minute, beside its bar
	Clipped        []mark // minutes above the axis: drawn to the top, their count written
	YTicks         []tick
	XTicks         []tick
	Empty          bool
}

type bar struct {
	X, Y, W, H float64
	Title      string
}

// mark labels a bar cut at the top of the axis with its real count.
type mark struct {
	X, Y   float64
	Label  string
	minute int
}

type tick struct {
	Pos     float64
	TextPos float64 // the label's baseline, for y ticks
	Label   string
	Anchor  string // the label's text-anchor, for x ticks
}

// Plot geometry, in SVG user units (the SVG scales to its container).
const (
	plotW, plotH                         = 760, 190
	plotLeft, plotRight, plotTop, plotBt = 48, 10, 12, 24
)

// spikeFactor is how far above the ordinary minutes (spikePercentile of them) a minute
// must be for the axis to ignore it: one 10,000-job minute must not flatten an hour of
// 200-job minutes into a line. Such a minute is drawn to the top and labelled.
const (
	spikeFactor     = 3
	spikePercentile = 0.9
)

// barPlot lays out one bar per minute of series (oldest first, starting at first; the
// last one is the current minute) and the failures of each minute (fails, same length)
// as a second series, on a y axis rounded up to a readable maximum that a lone spike
// does not set.
func barPlot(series, fails []int64, first time.Time) plot {
	p := plot{W: plotW, H: plotH, Left: plotLeft, Top: plotTop,
		InnerW: plotW - plotLeft - plotRight, InnerH: plotH - plotTop - plotBt,
		YLabelX: plotLeft - 6, XLabelY: plotH - 6, MidX: plotW / 2, MidY: plotH / 2}
	var peak int64
	all := make([]int64, 0, 2*len(series))
	for i, n := range series {
		peak = max(peak, n, fails[i])
		all = append(all, n, fails[i])
	}
	p.Empty = peak == 0
	top := niceCeil(peak)
	slices.Sort(all)
	if usual := all[int(float64(len(all)-1)*spikePercentile)]; usual > 0 && peak > spikeFactor*usual {
		top = niceCeil(usual * 2)
	}
	slot := float64(p.InnerW) / float64(len(series))
	height := func(n int64) float64 {
		h := min(float64(n)/float64(top), 1) * float64(p.InnerH)
		if n > 0 && h < 1 {
			h = 1 // a minute with any job shows
		}
		return h
	}
	base := float64(p.Top + p.InnerH)
	for i, n := range series {
		start := first.Add(time.Duration(i) * time.Minute)
		span := start.Format("15:04") + "–" + start.Add(time.Minute).Format("15:04") + " UTC"
		x := float64(p.Left) + float64(i)*slot
		h := height(n)
		// Succeeded on the left of the minute's slot, failed on the right.
		p.Bars = append(p.Bars, bar{X: x + slot*0.1, W: slot * 0.5, Y: base - h, H: h,
			Title: fmt.Sprintf("%s finished %s", plural(int(n), "job"), span)})
		for _, v := range []int64{n, fails[i]} {
			// A cut minute is labelled, unless the one before was (their labels would overlap).
			if v > top && (len(p.Clipped) == 0 || p.Clipped[len(p.Clipped)-1].minute < i-1) {
				p.Clipped = append(p.Clipped, mark{X: x + slot/2, Y: float64(p.Top) - 2, Label: "▲" + thousands(v), minute: i})
			}
		}
		if fails[i] > 0 {
			fh := height(fails[i])
			p.Fails = append(p.Fails, bar{X: x + slot*0.6, W: slot * 0.3, Y: base - fh, H: fh,
				Title: fmt.Sprintf("%s failed for good (dead or failed) %s: %s of the jobs that ended", plural(int(fails[i]), "job"), span, percent(fails[i], n+fails[i]))})
		}
	}
	for _, f := range []int64{0, top / 2, top} {
		pos := base - float64(f)/float64(top)*float64(p.InnerH)
		p.YTicks = append(p.YTicks, tick{Pos: pos, TextPos: pos + 4, Label: thousands(f)})
	}
	for _, m := range []int{60, 45, 30, 15, 0} {
		t := tick{Pos: float64(p.Left) + float64(len(series)-m)*slot, Label: fmt.Sprintf("−%dm", m), Anchor: "middle"}
		switch m {
		case 60:
			t.Anchor = "start"
		case 0:
			t.Label, t.Anchor = "now", "end"
		}
		p.XTicks = append(p.XTicks, t)
	}
	return p
}

// niceCeil rounds n up to 1, 2 or 5 times a power of ten (at least 2, so the middle tick
// is a whole number).
func niceCeil(n int64) int64 {
	if n <= 2 {
		return 2
	}
	for mag := int64(1); ; mag *= 10 {
		for _, f := range []int64{1, 2, 5} {
			if f*mag >= n {
				return f * mag
			}
		}
	}
}

// Sparkline geometry: a small line per queue row.
const sparkW, sparkH = 120, 24

// sparkline returns the points attribute of a polyline drawing series in a
// sparkW×sparkH box, scaled to its own peak.
func sparkline(series []int64) string {
	var peak int64
	for _, n := range series {
		peak = max(peak, n)
	}
	var b strings.Builder
	step := float64(sparkW) / float64(len(series)-1)
	for i, n := range series {
		y := float64(sparkH - 2)
		if peak > 0 {
			y = float64(sparkH-2) - float64(n)/float64(peak)*float64(sparkH-4)
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatFloat(float64(i)*step, 'f', 1, 64))
		b.WriteByte(',')
		b.WriteString(strconv.FormatFloat(y, 'f', 1, 64))
	}
	return b.String()
}
