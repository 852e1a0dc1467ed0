package notify

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"
)

// newThrottle returns a throttle of interval whose trailing notifications are sent on
// the returned channel, and counted.
func newThrottle(interval time.Duration) (*Throttle, <-chan string, *atomic.Int64) {
	sent := make(chan string, 64)
	var n atomic.Int64
	th := &Throttle{interval: interval, last: map[string]time.Time{}, pending: map[string]bool{}, send: func(q string) {
		n.Add(1)
		sent <- q
	}}
	return th, sent, &n
}

// notifiedAt sets when queue was last notified, as a notification at t would have.
func (t *Throttle) notifiedAt(queue string, at time.Time) {
	t.mu.Lock()
	t.last[queue] = at
	t.mu.Unlock()
}

// receive waits for the next trailing notification; the throttle's interval is far
// shorter than the limit.
func receive(t *testing.T, sent <-chan string) string {
	t.Helper()
	select {
	case q := <-sent:
		return q
	case <-time.After(10 * time.Second):
		t.Fatal("no trailing notification was sent")
		return ""
	}
}

func TestThrottle_TakeNowLetsOnePerQueuePerIntervalThrough(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		interval time.Duration
		last     time.Duration // how long ago the queue was notified; 0: never, negative: later than now
		want     bool
	}{
		{"a queue never notified is notified", time.Hour, 0, true},
		{"a queue notified within the interval is held back", time.Hour, time.Minute, false},
		{"a queue notified an interval ago is notified", time.Minute, time.Minute, true},
		{"a queue notified longer ago is notified", time.Minute, time.Hour, true},
		{"a negative interval never holds back", -1, time.Nanosecond, true},
		{"a negative interval never holds back, whatever was recorded", -1, -time.Hour, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			th, _, _ := newThrottle(tt.interval)
			if tt.last != 0 {
				th.notifiedAt("q", time.Now().Add(-tt.last))
			}
			if got := th.TakeNow("q"); got != tt.want {
				t.Fatalf("TakeNow = %v, want %v", got, tt.want)
			}
		})
	}
}

// The notification TakeNow lets through is recorded: the next one within the interval
// is held back, another queue's is not.
func TestThrottle_TakeNowRecordsWhatItLetsThrough(t *testing.T) {
	t.Parallel()
	th, _, _ := newThrottle(time.Hour)
	if !th.TakeNow("a") {
		t.Fatal("the first notification of a was held back")
	}
	if th.TakeNow("a") {
		t.Fatal("a second notification of a within the interval was let through")
	}
	if !th.TakeNow("b") {
		t.Fatal("the first notification of b was held back by a's")
	}
	neg, _, _ := newThrottle(-1)
	for i := range 3 {
		if !neg.TakeNow("a") {
			t.Fatalf("notification %d held back with a negative interval", i)
		}
	}
}

// Many held-back enqueues within one interval are covered by one trailing notification,
// sent once the interval since the last notification has passed.
func TestThrottle_TrailingSendsOnceAfterTheInterval(t *testing.T) {
	t.Parallel()
	const interval = 20 * time.Millisecond
	th, sent, n := newThrottle(interval)
	last := time.Now()
	th.notifiedAt("q", last)
	for range 50 {
		th.Trailing("q")
	}
	if q := receive(t, sent); q != "q" {
		t.Fatalf("trailing notification for %q, want q", q)
	}
	if waited := time.Since(last); waited < interval {
		t.Fatalf("the trailing notification came %s after the last, before the interval of %s", waited, interval)
	}
	// One more, scheduled after the first was sent: the notifications of the first
	// burst, had there been more, were all due before it.
	th.Trailing("q")
	receive(t, sent)
	if got := n.Load(); got != 2 {
		t.Fatalf("%d trailing notifications sent for two intervals, want 2", got)
	}
}

// A queue not notified within the interval gets its trailing notification at once.
func TestThrottle_TrailingAfterAQuietIntervalSendsAtOnce(t *testing.T) {
	t.Parallel()
	th, sent, _ := newThrottle(time.Hour)
	th.Trailing("q") // never notified: the interval has long passed
	if q := receive(t, sent); q != "q" {
		t.Fatalf("trailing notification for %q, want q", q)
	}
	if th.TakeNow("q") {
		t.Fatal("the trailing notification was not recorded: a notification right after it was let through")
	}
}

func TestThrottle_QueuesAreIndependent(t *testing.T) {
	t.Parallel()
	const interval = 20 * time.Millisecond
	th, sent, n := newThrottle(interval)
	now := time.Now()
	th.notifiedAt("a", now)
	th.notifiedAt("b", now)
	for range 10 {
		th.Trailing("a")
		th.Trailing("b")
	}
	got := map[string]int{}
	got[receive(t, sent)]++
	got[receive(t, sent)]++
	if got["a"] != 1 || got["b"] != 1 {
		t.Fatalf("trailing notifications %v, want one for each queue", got)
	}
	th.Trailing("a") // a marker due after any stray notification of the burst
	if q := receive(t, sent); q != "a" || n.Load() != 3 {
		t.Fatalf("after the marker: got %q, %d sent in all; want a, 3", q, n.Load())
	}
}

func TestControlMsg_PayloadRoundTrips(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		msg  ControlMsg
		want string
	}{
		{"pause names the queue", ControlMsg{Op: ControlPause, Queue: "emails"}, `{"op":"pause","queue":"emails"}`},
		{"resume names the queue", ControlMsg{Op: ControlResume, Queue: "emails"}, `{"op":"resume","queue":"emails"}`},
		{"cancel names the job", ControlMsg{Op: ControlCancel, ID: 123}, `{"op":"cancel","id":123}`},
		{"limits names the queue", ControlMsg{Op: ControlLimits, Queue: "q"}, `{"op":"limits","queue":"q"}`},
		{"a queue name is escaped", ControlMsg{Op: ControlPause, Queue: `a"b\`}, `{"op":"pause","queue":"a\"b\\"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := tt.msg.Payload()
			if p != tt.want {
				t.Fatalf("Payload = %s, want %s", p, tt.want)
			}
			var back ControlMsg
			if err := json.Unmarshal([]byte(p), &back); err != nil || back != tt.msg {
				t.Fatalf("decoded %+v (%v), want %+v", back, err, tt.msg)
			}
		})
	}
}
