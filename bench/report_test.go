package main

import (
	"strings"
	"testing"
	"time"
)

func TestPercentile_NearestRank(t *testing.T) {
	t.Parallel()
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{
		{0.5, 50 * time.Millisecond},
		{0.99, 99 * time.Millisecond},
		{1, 100 * time.Millisecond},
		{0.001, 1 * time.Millisecond},
	} {
		if got := percentile(d, tc.p); got != tc.want {
			t.Errorf("percentile(1..100ms, %v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile(nil) = %v, want 0", got)
	}
	if got := percentile([]time.Duration{7}, 0.99); got != 7 {
		t.Errorf("percentile of one value = %v, want 7", got)
	}
}

func TestMedian_OddAndEvenCounts(t *testing.T) {
	t.Parallel()
	if got := median([]float64{1, 2, 9}); got != 2 {
		t.Errorf("median(1,2,9) = %v, want 2", got)
	}
	if got := median([]float64{1, 3}); got != 2 {
		t.Errorf("median(1,3) = %v, want 2", got)
	}
}

func TestFormat_ByUnit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    float64
		unit string
		want string
	}{
		{24412.4, "jobs/s", "24,412"},
		{1234567, "jobs", "1,234,567"},
		{3.456, "ms", "3.46"},
		{45.25, "ms", "45.2"},
		{103.4, "ms", "103"},
		{12.345, "MB", "12.3"},
		{0.333, "x", "0.33"},
		{-1500, "jobs", "-1,500"},
	} {
		if got := format(tc.v, tc.unit); got != tc.want {
			t.Errorf("format(%v, %q) = %q, want %q", tc.v, tc.unit, got, tc.want)
		}
	}
}

func TestMarkdown_RatioColumnWhenSkiplockAndRiverRan(t *testing.T) {
	t.Parallel()
	r := &Report{Runs: 3, Systems: []SystemInfo{{Name: "skiplock"}, {Name: "river"}, {Name: "gue"}}}
	m := Metric{Key: "rate", Label: "drain", Unit: "jobs/s"}
	r.add("drain", m, "skiplock", []float64{30000, 20000, 25000})
	r.add("drain", m, "river", []float64{10000, 12000, 11000})
	r.add("drain", m, "gue", []float64{4000, 5000, 4500})
	md := r.Markdown()
	for _, want := range []string{
		"| skiplock / River |",
		"| drain | drain | jobs/s | higher | 25,000 (20,000–30,000) | 11,000 (10,000–12,000) | 4,500 (4,000–5,000) | 2.27× |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestSink_SignalsTargetAndRecordsOnlyWhenOn(t *testing.T) {
	t.Parallel()
	s := NewSink(2)
	s.Handle(NoopArgs{T: Now()})
	s.Record(true)
	s.Handle(NoopArgs{T: Now()})
	select {
	case <-s.Reached():
	default:
		t.Fatal("Reached not closed after the target count")
	}
	if got := len(s.Latencies()); got != 1 {
		t.Errorf("recorded %d latencies, want 1 (recording was off for the first job)", got)
	}
	if s.ReachedAt().IsZero() {
		t.Error("ReachedAt is zero")
	}
}

func TestChartSVG_OneBarPerPassOrientedSoAboveOneIsBetter(t *testing.T) {
	t.Parallel()
	pass := func(name string, slRate, rvRate, slLat, rvLat float64) *Report {
		return &Report{Pass: name, Results: []Result{
			{Workload: "drain", Metric: "rate", Label: "drain", Unit: "jobs/s", System: "skiplock", Median: slRate},
			{Workload: "drain", Metric: "rate", Label: "drain", Unit: "jobs/s", System: "river", Median: rvRate},
			{Workload: "latency", Metric: "p99", Label: "latency p99", Unit: "ms", LowerBetter: true, System: "skiplock", Median: slLat},
			{Workload: "latency", Metric: "p99", Label: "latency p99", Unit: "ms", LowerBetter: true, System: "river", Median: rvLat},
		}}
	}
	svg := (&Reports{Passes: []*Report{pass("off", 30, 10, 2, 5), pass("on", 25, 10, 4, 4)}}).ChartSVG()
	for _, want := range []string{"<svg", "autovacuum off", "autovacuum on", "drain: drain", "latency: latency p99",
		"3.00×", "2.50×", "2.50×", "1.00×", "</svg>"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	if n := strings.Count(svg, `fill="#4e79a7"/>`); n != 3 { // the legend and one bar per metric
		t.Errorf("%d elements in the first pass's colour, want 3", n)
	}
}
