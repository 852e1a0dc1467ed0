package main

import (
	"slices"
	"testing"
)

// TestScaleCurves_QueuesProcsLatencyRegistered checks that the three curves register, say
// what they measure at both sizes, and walk the points issue 45 asks for.
func TestScaleCurves_QueuesProcsLatencyRegistered(t *testing.T) {
	for _, name := range []string{"queues", "procs", "latency"} {
		i := slices.IndexFunc(scaleCurves, func(c ScaleCurve) bool { return c.Name == name })
		if i < 0 {
			t.Fatalf("curve %q is not registered", name)
		}
		for _, quick := range []bool{false, true} {
			if d := scaleCurves[i].Desc(quick); d == "" {
				t.Errorf("curve %q (quick %v): empty description", name, quick)
			}
		}
	}
	if got := queuesSizes(false); !slices.Equal(got, []int{10, 1_000, 10_000}) {
		t.Errorf("queues sizes = %v", got)
	}
	if got := procsSizes(false); !slices.Equal(got, []int{1, 2, 4, 8, 16}) {
		t.Errorf("procs sizes = %v", got)
	}
	var fracs []float64
	for _, l := range latencyLoads(false) {
		if l.of == "skiplock" {
			fracs = append(fracs, l.frac)
		}
		if l.of == "skiplock" && l.runs("bare") {
			t.Errorf("the floor runs a load of skiplock's drain rate: %+v", l)
		}
	}
	if !slices.Contains(fracs, 0.5) || !slices.Contains(fracs, 0.9) {
		t.Errorf("latency loads of skiplock's drain rate = %v, want 50 %% and 90 %%", fracs)
	}
	if l := latencyLoads(true)[0]; l.of != "" {
		t.Errorf("the first latency load is %+v, want the light load", l)
	}
}
