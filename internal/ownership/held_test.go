package ownership

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/jobtype"
)

var errWatchdog = errors.New("lease ending")

// heldAttempt is one attempt added to a HeldJobs, with the context its cancel ends.
type heldAttempt struct {
	key jobtype.AttemptKey
	ctx context.Context
}

// cancelled reports whether the attempt's context was cancelled, and with what cause.
func (a heldAttempt) cancelled() (bool, error) {
	return a.ctx.Err() != nil, context.Cause(a.ctx)
}

// add registers the attempt (id, fence) as running, its lease written at renewed.
// Recorded marks the held attempt k as returned, as the runner does through its state
// (jobtype.State.MarkReturned); nothing when k is not held.
func (h *HeldJobs) Recorded(k jobtype.AttemptKey) {
	h.mu.Lock()
	j, ok := h.m[k]
	h.mu.Unlock()
	if ok {
		j.state.MarkReturned()
	}
}

func add(t *testing.T, h *HeldJobs, id, fence int64, renewed time.Time) heldAttempt {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	k := jobtype.AttemptKey{ID: id, Fence: fence}
	h.Add(k, jobtype.CancelFunc(cancel), renewed, nil, &jobtype.JobRow{ID: id, Kind: "email", Attempts: int(fence)})
	return heldAttempt{key: k, ctx: ctx}
}

func TestHeldJobs_CountsHandlersStillRunning(t *testing.T) {
	t.Parallel()
	h := NewHeldJobs()
	now := time.Now()
	a, b, c := add(t, h, 1, 1, now), add(t, h, 2, 1, now), add(t, h, 3, 1, now)
	if n := h.Count(); n != 3 {
		t.Fatalf("Count = %d with three running, want 3", n)
	}
	h.Recorded(b.key)
	if n := h.Count(); n != 2 {
		t.Fatalf("Count = %d after one returned, want 2", n)
	}
	if !h.Holds(b.key) {
		t.Fatal("a recorded attempt is no longer held: its lease would stop being renewed before its outcome is written")
	}
	h.Remove(a.key)
	if h.Holds(a.key) || h.Count() != 1 {
		t.Fatalf("after Remove: holds %v, Count %d; want false, 1", h.Holds(a.key), h.Count())
	}
	h.RemoveKeys([]jobtype.AttemptKey{b.key, c.key, {ID: 99, Fence: 1}})
	if h.Holds(b.key) || h.Holds(c.key) || h.Count() != 0 {
		t.Fatalf("after RemoveKeys: holds %v %v, Count %d; want false false 0", h.Holds(b.key), h.Holds(c.key), h.Count())
	}
	h.Recorded(a.key) // not held: no effect
	if h.Holds(a.key) {
		t.Fatal("Recorded brought back an attempt that was removed")
	}
}

func TestHeldJobs_HoldsOnlyTheExactAttempt(t *testing.T) {
	t.Parallel()
	h := NewHeldJobs()
	add(t, h, 5, 2, time.Now())
	tests := []struct {
		name string
		key  jobtype.AttemptKey
		want bool
	}{
		{"the attempt added", jobtype.AttemptKey{ID: 5, Fence: 2}, true},
		{"an earlier attempt of the job", jobtype.AttemptKey{ID: 5, Fence: 1}, false},
		{"a later attempt of the job", jobtype.AttemptKey{ID: 5, Fence: 3}, false},
		{"another job with the same fence", jobtype.AttemptKey{ID: 6, Fence: 2}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := h.Holds(tt.key); got != tt.want {
				t.Fatalf("holds(%v) = %v, want %v", tt.key, got, tt.want)
			}
		})
	}
}

func TestHeldJobs_CancelEndsARunningHandlerWithItsCause(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		key        jobtype.AttemptKey // what is cancelled; the held attempt is {1, 2}
		recorded   bool               // the held attempt's handler has returned
		wantCancel bool
	}{
		{"a running attempt is cancelled", jobtype.AttemptKey{ID: 1, Fence: 2}, false, true},
		{"a recorded attempt has no handler to cancel", jobtype.AttemptKey{ID: 1, Fence: 2}, true, false},
		{"another attempt of the job is not this one", jobtype.AttemptKey{ID: 1, Fence: 1}, false, false},
		{"an attempt not held is not cancelled", jobtype.AttemptKey{ID: 9, Fence: 2}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := NewHeldJobs()
			a := add(t, h, 1, 2, time.Now())
			if tt.recorded {
				h.Recorded(a.key)
			}
			if got := h.cancel(tt.key, ErrJobLost); got != tt.wantCancel {
				t.Fatalf("cancel reported %v, want %v", got, tt.wantCancel)
			}
			done, cause := a.cancelled()
			if done != tt.wantCancel {
				t.Fatalf("the handler's context cancelled: %v, want %v", done, tt.wantCancel)
			}
			if done && !errors.Is(cause, ErrJobLost) {
				t.Fatalf("cancel cause %v, want %v", cause, ErrJobLost)
			}
		})
	}
}

// A remote cancel knows the job's id only: it cancels every running attempt of that job.
func TestHeldJobs_CancelIDEndsEveryRunningAttemptOfTheJob(t *testing.T) {
	t.Parallel()
	h := NewHeldJobs()
	now := time.Now()
	first, second := add(t, h, 4, 1, now), add(t, h, 4, 2, now)
	recorded, other := add(t, h, 4, 3, now), add(t, h, 5, 1, now)
	h.Recorded(recorded.key)

	if !h.cancelID(4, ErrJobLost) {
		t.Fatal("cancelID reported no attempt of a job with two running")
	}
	for _, a := range []heldAttempt{first, second} {
		if done, cause := a.cancelled(); !done || !errors.Is(cause, ErrJobLost) {
			t.Fatalf("attempt %v: cancelled %v with %v, want cancelled with %v", a.key, done, cause, ErrJobLost)
		}
	}
	for _, a := range []heldAttempt{recorded, other} {
		if done, _ := a.cancelled(); done {
			t.Fatalf("attempt %v was cancelled, want left alone", a.key)
		}
	}
	if h.cancelID(6, ErrJobLost) {
		t.Fatal("cancelID reported an attempt of a job not held")
	}
	h2 := NewHeldJobs()
	h2.Recorded(add(t, h2, 7, 1, now).key)
	if h2.cancelID(7, ErrJobLost) {
		t.Fatal("cancelID reported a job whose only attempt has returned")
	}
}

// Every held attempt is renewed until its outcome is written, recorded ones included,
// in ascending id order (one lock order for every batched statement).
func TestHeldJobs_RenewableListsEveryHeldAttemptByAscendingID(t *testing.T) {
	t.Parallel()
	h := NewHeldJobs()
	now := time.Now()
	for _, k := range []jobtype.AttemptKey{{ID: 30, Fence: 3}, {ID: 10, Fence: 1}, {ID: 50, Fence: 5}, {ID: 20, Fence: 2}, {ID: 40, Fence: 4}} {
		add(t, h, k.ID, k.Fence, now)
	}
	h.Recorded(jobtype.AttemptKey{ID: 20, Fence: 2})
	h.Remove(jobtype.AttemptKey{ID: 40, Fence: 4})

	ids, fences := h.renewable()
	if want := []int64{10, 20, 30, 50}; !slices.Equal(ids, want) {
		t.Fatalf("renewable ids %v, want %v", ids, want)
	}
	if want := []int64{1, 2, 3, 5}; !slices.Equal(fences, want) {
		t.Fatalf("renewable fences %v, want %v (each with its id)", fences, want)
	}
	if ids, fences := NewHeldJobs().renewable(); len(ids) != 0 || len(fences) != 0 {
		t.Fatalf("an empty set renews %v %v, want nothing", ids, fences)
	}
}

// The watchdog cancels exactly the attempts whose leases were last renewed before the
// cutoff and whose handlers still run, each once.
func TestHeldJobs_ExpiringCancelsAttemptsRenewedBeforeTheCutoff(t *testing.T) {
	t.Parallel()
	h := NewHeldJobs()
	cutoff := time.Now()
	old := cutoff.Add(-time.Minute)
	stale := add(t, h, 1, 1, old)
	staleRecorded := add(t, h, 2, 1, old)
	fresh := add(t, h, 3, 1, cutoff.Add(time.Second))
	atCutoff := add(t, h, 4, 1, cutoff) // renewed at the cutoff: not before it
	staleToo := add(t, h, 5, 1, old.Add(-time.Hour))
	h.Recorded(staleRecorded.key)

	got := h.expiring(cutoff, errWatchdog)
	slices.SortFunc(got, func(a, b jobtype.AttemptKey) int { return int(a.ID - b.ID) })
	if want := []jobtype.AttemptKey{stale.key, staleToo.key}; !slices.Equal(got, want) {
		t.Fatalf("expiring returned %v, want %v", got, want)
	}
	for _, a := range []heldAttempt{stale, staleToo} {
		if done, cause := a.cancelled(); !done || !errors.Is(cause, errWatchdog) {
			t.Fatalf("attempt %v: cancelled %v with %v, want cancelled with %v", a.key, done, cause, errWatchdog)
		}
	}
	for _, a := range []heldAttempt{staleRecorded, fresh, atCutoff} {
		if done, _ := a.cancelled(); done {
			t.Fatalf("attempt %v was cancelled, want left alone", a.key)
		}
	}
	if again := h.expiring(cutoff, errWatchdog); len(again) != 0 {
		t.Fatalf("a second pass returned %v again, want each attempt once", again)
	}
	if !h.Holds(stale.key) {
		t.Fatal("an expiring attempt was dropped: it stays held until its handler returns")
	}
}

// A renewal moves an attempt's renewed time forward, never back, and only for the
// attempts it names.
func TestHeldJobs_RenewedAtMovesLeasesForwardOnly(t *testing.T) {
	t.Parallel()
	cutoff := time.Now()
	old := cutoff.Add(-time.Minute)
	fresh := cutoff.Add(time.Second)
	tests := []struct {
		name         string
		added        time.Time // when the claim wrote the lease
		renewedAt    time.Time // when the renewal statement started
		renewsKey    bool      // the renewal names the attempt
		wantExpiring bool      // the attempt counts as renewed before the cutoff afterwards
	}{
		{"a renewal after the cutoff saves the attempt", old, fresh, true, false},
		{"a renewal older than the last does not move it back", fresh, old, true, false},
		{"a renewal of other attempts does not count", old, fresh, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := NewHeldJobs()
			a := add(t, h, 1, 1, tt.added)
			keys := []jobtype.AttemptKey{{ID: 2, Fence: 1}}
			if tt.renewsKey {
				keys = append(keys, a.key)
			}
			h.renewedAt(keys, tt.renewedAt)
			if got := len(h.expiring(cutoff, errWatchdog)) == 1; got != tt.wantExpiring {
				t.Fatalf("expiring after the renewal: %v, want %v", got, tt.wantExpiring)
			}
			if h.Holds(jobtype.AttemptKey{ID: 2, Fence: 1}) {
				t.Fatal("a renewal of an attempt not held added it")
			}
		})
	}
}

func TestHeldJobs_ProgressIsWhatEachHeldHandlerReported(t *testing.T) {
	t.Parallel()
	h := NewHeldJobs()
	reported, silent := &jobtype.State{}, &jobtype.State{}
	reported.SetProgress(`{"done":3}`)
	now := time.Now()
	h.Add(jobtype.AttemptKey{ID: 1, Fence: 1}, jobtype.CancelFunc(func(error) {}), now, reported, nil)
	h.Add(jobtype.AttemptKey{ID: 2, Fence: 1}, jobtype.CancelFunc(func(error) {}), now, silent, nil)
	h.Add(jobtype.AttemptKey{ID: 3, Fence: 1}, jobtype.CancelFunc(func(error) {}), now, nil, nil)

	got := h.progress([]int64{1, 2, 3, 1, 4}, []int64{1, 1, 1, 2, 1})
	want := []*string{ptr(`{"done":3}`), nil, nil, nil, nil} // reported; none; no state; other attempt; not held
	if len(got) != len(want) {
		t.Fatalf("progress returned %d entries, want %d (one per key)", len(got), len(want))
	}
	for i := range want {
		if (got[i] == nil) != (want[i] == nil) || got[i] != nil && *got[i] != *want[i] {
			t.Fatalf("progress[%d] = %v, want %v", i, deref(got[i]), deref(want[i]))
		}
	}
}

func TestHeldJobs_RunningListsUnreturnedHandlersByID(t *testing.T) {
	t.Parallel()
	h := NewHeldJobs()
	now := time.Now()
	add(t, h, 9, 2, now)
	add(t, h, 3, 1, now)
	h.Recorded(add(t, h, 5, 1, now).key)
	h.Add(jobtype.AttemptKey{ID: 7, Fence: 1}, jobtype.CancelFunc(func(error) {}), now, nil, nil) // no row: named by id only

	got := h.Running()
	var ids []int64
	for _, r := range got {
		ids = append(ids, r.ID)
	}
	if want := []int64{3, 7, 9}; !slices.Equal(ids, want) {
		t.Fatalf("Running lists ids %v, want %v", ids, want)
	}
	if got[0].Kind != "email" || got[0].Attempt != 1 || got[2].Attempt != 2 || got[1].Kind != "" {
		t.Fatalf("Running = %+v, want each row's kind and attempt", got)
	}
}

func ptr(s string) *string { return &s }

func deref(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

// Add registers an attempt once: a second Add of the same key (a claim that handed out
// the token again) reports false and leaves the running attempt as it was.
func TestHeldJobs_AddKeepsTheAttemptItHolds(t *testing.T) {
	t.Parallel()
	h := NewHeldJobs()
	first := add(t, h, 1, 1, time.Now())
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	if h.Add(first.key, jobtype.CancelFunc(cancel), time.Now(), nil, &jobtype.JobRow{ID: 1}) {
		t.Fatal("Add of a held key reported it added the attempt")
	}
	if !h.cancel(first.key, errWatchdog) {
		t.Fatal("the held attempt is gone")
	}
	if ok, cause := first.cancelled(); !ok || !errors.Is(cause, errWatchdog) {
		t.Fatalf("the first attempt's context: cancelled %v, cause %v; want the held attempt's cancel", ok, cause)
	}
	if ctx.Err() != nil {
		t.Fatal("the second Add's cancel replaced the held attempt's")
	}
	if !h.Add(jobtype.AttemptKey{ID: 1, Fence: 2}, jobtype.CancelFunc(cancel), time.Now(), nil, &jobtype.JobRow{ID: 1}) {
		t.Fatal("Add of a new token of the same job reported it was held")
	}
}
