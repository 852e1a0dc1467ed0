package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// chartRow is one metric of the chart: skiplock's advantage over River in each pass.
type chartRow struct {
	label string
	adv   []float64 // per pass; NaN when the pass lacks it
}

// ChartSVG draws skiplock's advantage over River for every metric both measured,
// one bar per pass (autovacuum off / on): the ratio of medians oriented so that
// above 1× means skiplock is better (skiplock/River for rates, River/skiplock for
// latencies and sizes). Hand-written SVG, no dependency.
func (rs *Reports) ChartSVG() string {
	var rows []*chartRow
	index := map[string]*chartRow{}
	for p, r := range rs.Passes {
		type key struct{ w, m string }
		sl, rv := map[key]Result{}, map[key]Result{}
		var order []key
		for _, res := range r.Results {
			k := key{res.Workload, res.Metric}
			switch res.System {
			case "skiplock":
				sl[k] = res
				order = append(order, k)
			case "river":
				rv[k] = res
			}
		}
		for _, k := range order {
			a, b := sl[k], rv[k]
			if b.Median == 0 || a.Median == 0 || a.Unit == "x" || a.Unit == "jobs" {
				continue
			}
			adv := a.Median / b.Median
			if a.LowerBetter {
				adv = b.Median / a.Median
			}
			label := k.w + ": " + a.Label
			row := index[label]
			if row == nil {
				row = &chartRow{label: label, adv: make([]float64, len(rs.Passes))}
				for i := range row.adv {
					row.adv[i] = math.NaN()
				}
				index[label] = row
				rows = append(rows, row)
			}
			row.adv[p] = adv
		}
	}
	const (
		left, right, top = 330.0, 60.0, 50.0
		barH, gap, width = 12.0, 8.0, 980.0
	)
	colors := []string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759"}
	maxAdv := 4.0
	for _, r := range rows {
		for _, v := range r.adv {
			if !math.IsNaN(v) {
				maxAdv = math.Max(maxAdv, v)
			}
		}
	}
	maxAdv = math.Ceil(maxAdv)
	plotW := width - left - right
	x := func(v float64) float64 { return left + v/maxAdv*plotW }
	rowH := float64(len(rs.Passes))*barH + gap
	height := top + float64(len(rows))*rowH + 40

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="18" font-size="14" font-weight="bold">skiplock's advantage over River (ratio of medians, same run; above 1× is better for skiplock)</text>`+"\n")
	for i, r := range rs.Passes {
		name := "the server as it is"
		if r.Pass != "" {
			name = "autovacuum " + r.Pass
		}
		fmt.Fprintf(&b, `<rect x="%.0f" y="28" width="12" height="10" fill="%s"/><text x="%.0f" y="37">%s</text>`+"\n",
			10+float64(i)*170, colors[i%len(colors)], 26+float64(i)*170, html.EscapeString(name))
	}
	for v := 0.0; v <= maxAdv; v++ {
		dash := ""
		if v == 1 {
			dash = ` stroke-dasharray="4,3" stroke="#000"`
		} else {
			dash = ` stroke="#ddd"`
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f"%s/>`+"\n", x(v), top-4, x(v), height-30, dash)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%.0f×</text>`+"\n", x(v), height-16, v)
	}
	for i, r := range rows {
		y0 := top + float64(i)*rowH
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y0+rowH/2, html.EscapeString(r.label))
		for p, v := range r.adv {
			if math.IsNaN(v) {
				continue
			}
			y := y0 + float64(p)*barH
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", left, y, x(v)-left, barH-2, colors[p%len(colors)])
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%.2f×</text>`+"\n", x(v)+3, y+barH-3, v)
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}
