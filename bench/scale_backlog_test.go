package main

import (
	"slices"
	"testing"
)

// TestParseSizes_AcceptsPowersOfTenAndRefusesFractions reads -scale-backlog and
// -scale-archive lists.
func TestParseSizes_AcceptsPowersOfTenAndRefusesFractions(t *testing.T) {
	got, err := parseSizes("1e4, 100000,1e8")
	if err != nil || !slices.Equal(got, []int{10_000, 100_000, 100_000_000}) {
		t.Fatalf("parseSizes = %v, %v", got, err)
	}
	for _, bad := range []string{"", "1.5", "0", "ten", "1e11"} {
		if _, err := parseSizes(bad); err == nil {
			t.Errorf("parseSizes(%q) accepted", bad)
		}
	}
}

// TestPlanSummary_PicksTimeAndTopBuffers reads the execution time and the first (top
// node's) buffer line of an EXPLAIN (ANALYZE, BUFFERS).
func TestPlanSummary_PicksTimeAndTopBuffers(t *testing.T) {
	plan := "Update on jobs  (actual time=1.9..2.2 rows=57 loops=1)\n  Buffers: shared hit=2021 read=1\n  ->  Index Scan\n        Buffers: shared hit=674\nPlanning Time: 0.3 ms\nExecution Time: 2.362 ms"
	if got, want := planSummary(plan), "execution 2.362 ms, buffers shared hit=2021 read=1"; got != want {
		t.Errorf("planSummary = %q, want %q", got, want)
	}
}

// TestBacklogChunk_HalfTheBacklogAtMost keeps the queue within a factor two of its size
// while a sample is timed, and the sample the same at every size.
func TestBacklogChunk_HalfTheBacklogAtMost(t *testing.T) {
	for _, c := range []struct{ n, want int }{{10_000, 5_000}, {100_000, 50_000}, {10_000_000, 100_000}} {
		if got := backlogChunk(false, c.n); got != c.want {
			t.Errorf("backlogChunk(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}
