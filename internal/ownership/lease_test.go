package ownership

import (
	"testing"
	"time"
)

// A claim's jobs start only while their leases, counted from the claim's start, outlast
// the next heartbeat before the watchdog's cut; and a running job is taken for an orphan
// only once a reply to its claim could no longer start it.
func TestStaleClaimAfter_LeavesTheNextHeartbeatBeforeTheWatchdogsCut(t *testing.T) {
	for _, vt := range []time.Duration{300 * time.Millisecond, 3 * time.Second, time.Minute, 7*time.Minute + 13*time.Millisecond} {
		stale := StaleClaimAfter(vt)
		if stale <= 0 {
			t.Errorf("visibility %s: StaleClaimAfter %s, want > 0", vt, stale)
		}
		if cut := vt - vt/CancelMargin; stale+HeartbeatInterval(vt) > cut {
			t.Errorf("visibility %s: a job started at %s waits up to %s for its next heartbeat, past the watchdog's cut at %s",
				vt, stale, HeartbeatInterval(vt), cut)
		}
		if orphan := (&Lease{visibility: vt}).orphanAfter(); orphan < stale {
			t.Errorf("visibility %s: orphanAfter %s is shorter than StaleClaimAfter %s: a reply that still starts its jobs could find them put back",
				vt, orphan, stale)
		}
	}
}

// A worker stops claiming, and starting the jobs a claim returns, one watchdog look before
// the watchdog's cut (workerCancelAfter): a job started closer to the cut would be
// cancelled at the watchdog's next look, its attempt spent. The watchdog's own threshold
// stays workerCancelAfter, and a healthy worker, whose renewals land at most ~4.2 s apart
// under CPU starvation (docs/ownership.md §7), never stops claiming.
func TestOwnLeaseEnding_OneWatchdogLookBeforeTheCut(t *testing.T) {
	const slowestRenewal = 4200 * time.Millisecond
	for _, c := range []struct {
		visibility, look time.Duration // look: how often the watchdog looks at that timeout
	}{
		{300 * time.Millisecond, 25 * time.Millisecond},
		{3 * time.Second, 250 * time.Millisecond},
		{10 * time.Second, 10 * time.Second / 12},
		{time.Minute, 10 * time.Second / 12},
	} {
		var since time.Duration
		renewed := true
		l := &Lease{visibility: c.visibility, sinceRenewal: func() (time.Duration, bool) { return since, renewed }}
		for _, p := range []struct {
			since                 time.Duration
			claimsStop, cancelled bool
		}{
			{slowestRenewal, false, false},
			{workerCancelAfter - c.look - time.Millisecond, false, false},
			{workerCancelAfter - c.look, true, false},
			{workerCancelAfter - time.Millisecond, true, false},
			{workerCancelAfter + time.Millisecond, true, true},
		} {
			since = p.since
			if got := l.OwnLeaseEnding(); got != p.claimsStop {
				t.Errorf("visibility %s, %s since the last renewal: OwnLeaseEnding %v, want %v (the watchdog looks every %s and cuts at %s)",
					c.visibility, p.since, got, p.claimsStop, c.look, workerCancelAfter)
			}
			if _, got := l.sinceOwnRenewal(); got != p.cancelled {
				t.Errorf("visibility %s, %s since the last renewal: the watchdog cancels %v, want %v",
					c.visibility, p.since, got, p.cancelled)
			}
		}
		renewed, since = false, time.Hour
		if l.OwnLeaseEnding() {
			t.Errorf("visibility %s: OwnLeaseEnding before the first renewal", c.visibility)
		}
	}
}
