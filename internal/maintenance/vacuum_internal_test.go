package maintenance

import "testing"

// TestVacuumDue: at least vacuumDeadTuples dead rows and a quarter of the live ones, but
// never more than vacuumDeadCap, so a big backlog's claims do not walk millions of dead
// index entries before a vacuum.
func TestVacuumDue(t *testing.T) {
	for _, c := range []struct {
		dead, live int64
		want       bool
	}{
		{4_999, 0, false},           // below the floor
		{5_000, 0, true},            // an empty queue's churn
		{5_000, 40_000, false},      // under a quarter of the live rows
		{10_000, 40_000, true},      // a quarter
		{99_999, 10_000_000, false}, // a big backlog, under the cap
		{100_000, 10_000_000, true}, // the cap, far below a quarter (2.5 million)
		{300_000, 1_000_000, true},  // the cap also below a million's quarter
	} {
		if got := vacuumDue(c.dead, c.live); got != c.want {
			t.Errorf("vacuumDue(dead %d, live %d) = %v, want %v", c.dead, c.live, got, c.want)
		}
	}
}
