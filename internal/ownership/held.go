// This file holds the attempts a worker runs (heldJobs), keyed by the fencing token: what
// the lease (lease.go) renews, the watchdog cancels, and the outcome batches end.

package ownership

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/jobtype"
)

// heldJob is one attempt the worker runs.
type heldJob struct {
	cancel jobtype.Canceler
	// renewed is when the statement that last wrote this row's lease (the claim, then each
	// heartbeat that renewed it) started, by the worker's clock: the lease lasts at least
	// the visibility timeout from then.
	renewed time.Time
	// expiring: the watchdog cancelled the handler, its lease about to end.
	expiring bool
	// state is what the handler reported (the root's progress.go): its progress rides on
	// the heartbeat. Its Returned says the handler returned and its outcome waits in a
	// batch to be written (recording): the lease is still renewed, so that a slow batch
	// (a busy database, a pool with no free connection) does not let the lease end and
	// the job run again; there is no handler left to cancel. The batch removes the
	// attempt once written. The runner marks it on the state it holds
	// (jobtype.State.MarkReturned), not through this set: no look-up, no turn of its lock.
	state *jobtype.State
	// row and began (when its claim started) name the attempt in the log of a shutdown
	// waiting for it.
	row   *jobtype.JobRow
	began time.Time
}

// HeldJobs is the set of attempts a worker runs. It is safe for concurrent use. The
// attempts are held by value: an attempt costs no allocation of its own.
type HeldJobs struct {
	mu sync.Mutex
	m  map[jobtype.AttemptKey]heldJob
}

func NewHeldJobs() *HeldJobs { return &HeldJobs{m: map[jobtype.AttemptKey]heldJob{}} }

// Add registers the attempt k of row, whose lease was written by a statement started at
// renewed, with its state st (nil: a fresh one), and reports whether it did: false when
// the worker holds k already (nothing is changed), the one look-up of the set a claimed
// job costs.
func (h *HeldJobs) Add(k jobtype.AttemptKey, cancel jobtype.Canceler, renewed time.Time, st *jobtype.State, row *jobtype.JobRow) bool {
	if st == nil {
		st = new(jobtype.State)
	}
	// began: the claim's start (renewed), not a clock reading per job (about 0.1 µs).
	j := heldJob{cancel: cancel, renewed: renewed, state: st, row: row, began: renewed}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, held := h.m[k]; held {
		return false
	}
	h.m[k] = j
	return true
}

// runningJob names one attempt whose handler still runs, for the log of a shutdown
// waiting for it.
type runningJob struct {
	ID      int64  `json:"id"`
	Kind    string `json:"kind"`
	Attempt int    `json:"attempt"`
	For     string `json:"running_for"`
}

// Running lists the held attempts whose handlers have not returned, by id.
func (h *HeldJobs) Running() []runningJob {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []runningJob
	for k, j := range h.m {
		if j.recording() {
			continue
		}
		r := runningJob{ID: k.ID, For: time.Since(j.began).Round(time.Millisecond).String()}
		if j.row != nil {
			r.Kind, r.Attempt = j.row.Kind, j.row.Attempts
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b runningJob) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// progress returns the latest progress each attempt's handler recorded, in the order of
// the keys (nil where none, or where the attempt is no longer held).
func (h *HeldJobs) progress(ids, fences []int64) []*string {
	out := make([]*string, len(ids))
	h.mu.Lock()
	states := make([]*jobtype.State, len(ids))
	for i := range ids {
		if j, ok := h.m[jobtype.AttemptKey{ID: ids[i], Fence: fences[i]}]; ok {
			states[i] = j.state
		}
	}
	h.mu.Unlock()
	for i, st := range states {
		out[i], _ = st.Reported()
	}
	return out
}

func (h *HeldJobs) Remove(k jobtype.AttemptKey) {
	h.mu.Lock()
	delete(h.m, k)
	h.mu.Unlock()
}

// RemoveKeys removes the attempts keys: their outcomes were written (or writing them
// failed, and the sweeper takes them back when their leases end).
func (h *HeldJobs) RemoveKeys(keys []jobtype.AttemptKey) {
	h.mu.Lock()
	for _, k := range keys {
		delete(h.m, k)
	}
	h.mu.Unlock()
}

// recording reports whether the attempt's handler returned, its outcome waiting in a
// batch: the runner marked its state (jobtype.State.MarkReturned).
func (j heldJob) recording() bool { return j.state.Returned() }

// cancel cancels the context of the attempt k, if held and its handler still runs, with
// cause, and reports whether it did.
func (h *HeldJobs) cancel(k jobtype.AttemptKey, cause error) bool {
	h.mu.Lock()
	j, ok := h.m[k]
	ok = ok && !j.recording()
	h.mu.Unlock()
	if ok {
		j.cancel.Cancel(cause)
	}
	return ok
}

// cancelID cancels every held attempt of job id with cause (a remote cancel knows the id
// only) and reports whether there was one.
func (h *HeldJobs) cancelID(id int64, cause error) bool {
	var cancels []jobtype.Canceler
	h.mu.Lock()
	for k, j := range h.m {
		if k.ID == id && !j.recording() {
			cancels = append(cancels, j.cancel)
		}
	}
	h.mu.Unlock()
	for _, c := range cancels {
		c.Cancel(cause)
	}
	return len(cancels) > 0
}

// CancelAll cancels the context of every held attempt with cause: the executor's base
// context ended (internal/execute), and the attempts' contexts, which do not watch it
// one by one, end with it.
func (h *HeldJobs) CancelAll(cause error) {
	h.mu.Lock()
	cancels := make([]jobtype.Canceler, 0, len(h.m))
	for _, j := range h.m {
		cancels = append(cancels, j.cancel)
	}
	h.mu.Unlock()
	for _, c := range cancels {
		c.Cancel(cause)
	}
}

// Count is how many held attempts still run their handlers.
func (h *HeldJobs) Count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, j := range h.m {
		if !j.recording() {
			n++
		}
	}
	return n
}

// Holds reports whether the worker holds attempt k.
func (h *HeldJobs) Holds(k jobtype.AttemptKey) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.m[k]
	return ok
}

// renewable lists the held attempts, whose leases are renewed, by ascending id: batched
// statements lock rows in the order given, and one order everywhere means they cannot
// deadlock. Every held attempt is renewed until its outcome is written: a handler that
// overruns its timeout, or ignores a shutdown, keeps its job while the worker lives.
func (h *HeldJobs) renewable() (ids, fences []int64) {
	h.mu.Lock()
	keys := make([]jobtype.AttemptKey, 0, len(h.m))
	for k := range h.m {
		keys = append(keys, k)
	}
	h.mu.Unlock()
	return sortedKeys(keys)
}

// sortedKeys splits keys into ids and fences, by ascending id.
func sortedKeys(keys []jobtype.AttemptKey) (ids, fences []int64) {
	slices.SortFunc(keys, func(a, b jobtype.AttemptKey) int { return cmp.Compare(a.ID, b.ID) })
	ids = make([]int64, len(keys))
	fences = make([]int64, len(keys))
	for i, k := range keys {
		ids[i], fences[i] = k.ID, k.Fence
	}
	return ids, fences
}

// renewedAt records that the leases of keys were renewed by a statement started at t.
func (h *HeldJobs) renewedAt(keys []jobtype.AttemptKey, t time.Time) {
	h.mu.Lock()
	for _, k := range keys {
		if j, ok := h.m[k]; ok && t.After(j.renewed) {
			j.renewed = t
			h.m[k] = j
		}
	}
	h.mu.Unlock()
}

// expiring cancels, with cause, every held attempt whose lease was last renewed before
// cutoff and whose handler still runs, and returns their keys; each attempt once.
func (h *HeldJobs) expiring(cutoff time.Time, cause error) []jobtype.AttemptKey {
	var out []jobtype.AttemptKey
	var cancels []jobtype.Canceler
	h.mu.Lock()
	for k, j := range h.m {
		if !j.expiring && !j.recording() && j.renewed.Before(cutoff) {
			j.expiring = true
			h.m[k] = j
			out = append(out, k)
			cancels = append(cancels, j.cancel)
		}
	}
	h.mu.Unlock()
	for _, c := range cancels {
		c.Cancel(cause)
	}
	return out
}
