package main

import (
	"strings"
	"testing"
)

func TestSwRotatorAfter_WalksToTheNextGenerationThatMayHoldJobs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cur   int
		dirty []int // slots not truncated since they were current, besides cur
		from  int
		want  int
	}{
		{"next dirty slot", 5, []int{1, 2}, 1, 2},
		{"on to the current one", 5, []int{1}, 1, 5},
		{"across the end of the ring", 1, []int{6}, 6, 1},
		{"from the current one back to the oldest", 2, []int{4, 7}, 2, 4},
		{"nothing else may hold jobs", 3, nil, 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := &swRotator{cur: tc.cur}
			for i := range r.clean {
				r.clean[i] = i != tc.cur
			}
			for _, d := range tc.dirty {
				r.clean[d] = false
			}
			if got := r.after(tc.from); got != tc.want {
				t.Errorf("after(%d) with current %d, dirty %v = %d, want %d", tc.from, tc.cur, tc.dirty, got, tc.want)
			}
		})
	}
}

func TestSwTable_RatiosAgainstTheStatusShape(t *testing.T) {
	t.Parallel()
	vals := map[string]map[string][]float64{}
	for i, v := range swVariants {
		vals[v.name] = map[string][]float64{}
		for _, m := range swMetrics {
			vals[v.name][m.Key] = []float64{100, float64(100 * (i + 1)), 300}
		}
	}
	var b strings.Builder
	swTable(&b, swVariants, vals)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2+len(swMetrics) {
		t.Fatalf("%d lines, want a header, a rule and %d metrics:\n%s", len(lines), len(swMetrics), b.String())
	}
	if !strings.Contains(lines[2], "| 100 (100–300) | 200 (100–300) |") || !strings.Contains(lines[2], "| 2.00× |") {
		t.Errorf("first metric row lacks the median (min–max) cells or the ratio to status: %s", lines[2])
	}
}
