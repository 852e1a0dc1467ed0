package ui

import (
	"fmt"
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
	YTicks         []tick
	XTicks         []tick
	Empty          bool
}

type bar struct {
	X, Y, W, H float64
	Title      string
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

// barPlot lays out one bar per minute of series (oldest first, starting at first; the
// last one is the current minute) on a y axis rounded up to a readable maximum.
func barPlot(series []int64, first time.Time) plot {
	p := plot{W: plotW, H: plotH, Left: plotLeft, Top: plotTop,
		InnerW: plotW - plotLeft - plotRight, InnerH: plotH - plotTop - plotBt,
		YLabelX: plotLeft - 6, XLabelY: plotH - 6, MidX: plotW / 2, MidY: plotH / 2}
	var peak int64
	for _, n := range series {
		peak = max(peak, n)
	}
	p.Empty = peak == 0
	top := niceCeil(peak)
	slot := float64(p.InnerW) / float64(len(series))
	for i, n := range series {
		h := float64(n) / float64(top) * float64(p.InnerH)
		if n > 0 && h < 1 {
			h = 1 // a minute with any job shows
		}
		start := first.Add(time.Duration(i) * time.Minute)
		p.Bars = append(p.Bars, bar{
			X: float64(p.Left) + float64(i)*slot + slot*0.14, W: slot * 0.72,
			Y: float64(p.Top+p.InnerH) - h, H: h,
			Title: fmt.Sprintf("%s finished %s–%s UTC", plural(int(n), "job"), start.Format("15:04"), start.Add(time.Minute).Format("15:04")),
		})
	}
	for _, f := range []int64{0, top / 2, top} {
		pos := float64(p.Top+p.InnerH) - float64(f)/float64(top)*float64(p.InnerH)
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
