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
