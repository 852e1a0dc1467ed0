package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestScaleReport_WritesTablesAndPlots renders a two-pass report of one curve: the
// Markdown has the table and links each pass's own PNG, and the PNGs are written.
func TestScaleReport_WritesTablesAndPlots(t *testing.T) {
	res := &ScaleResult{
		Header: []string{"backlog", "skiplock jobs/s", "bare jobs/s"},
		Rows:   [][]string{{"10,000", "30,000", "100,000"}},
		Plots: []ScalePlot{{
			File: "scale-test.png", Title: "drain rate", XLabel: "backlog", YLabel: "jobs/s", LogX: true,
			Series: []ScaleSeries{
				{Name: "skiplock", Points: []ScalePoint{pointOf(1e4, []float64{3, 2, 4}), pointOf(1e5, []float64{2.5})}},
				{Name: "bare", Points: []ScalePoint{pointOf(1e4, []float64{9, 10}), pointOf(1e5, nil)}},
			},
		}},
		Notes: []string{"a note"},
	}
	rep := &scaleReport{Started: time.Now(), Runs: 3, Complete: true}
	for _, pass := range []string{"off", "on"} {
		rep.Passes = append(rep.Passes, &scalePass{Pass: pass, Curves: []*scaleCurveReport{{Name: "test", Desc: "what it measures", Result: res}}})
	}
	dir := t.TempDir()
	if err := rep.write(dir); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "scale.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| backlog | skiplock jobs/s | bare jobs/s |", "| 10,000 | 30,000 | 100,000 |",
		"](scale-test-avoff.png)", "](scale-test-avon.png)", "- a note"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("scale.md lacks %q:\n%s", want, md)
		}
	}
	for _, f := range []string{"scale-test-avoff.png", "scale-test-avon.png"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Errorf("%s is not a PNG", f)
		}
	}
	if p := pointOf(0, []float64{3, 2, 4}); p.Y != 3 || p.Min != 2 || p.Max != 4 {
		t.Errorf("pointOf = %+v, want median 3, min 2, max 4", p)
	}
	if got := cellOf(pointOf(0, []float64{1000, 2000, 3000}), "jobs/s"); got != "2,000 (1,000–3,000)" {
		t.Errorf("cellOf = %q", got)
	}
}
