// This file holds how a worker judges that another worker is dead (docs/ownership.md §9):
// not by comparing the other's expires_at with the database's now(), which a step of the
// server's clock moves for every row at once, but by what this worker saw over its own
// monotonic clock. Every renewal writes a new expires_at, so a row whose expires_at has
// not changed for a whole worker lease, by this process's clock, belongs to a worker
// that has not renewed for that long: whatever the server's clock did meanwhile. A
// forward step of the server's clock (an NTP step, a VM resumed, a failover to a standby
// whose clock is ahead) no longer makes every live worker look dead at once, and a
// backward step no longer keeps a dead one alive for the length of the step.

package ownership

import (
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// sighting is what an observer last saw of another worker's row.
type sighting struct {
	value pgtype.Timestamptz // the row's expires_at, compared for equality only
	since time.Time          // when this process first saw that value (monotonic)
	ended bool               // the worker ended its own lease (expireWorkerSQL's mark)
}

// observer remembers, per other worker, the value of its row that changes with every
// renewal and when this process first saw that value. A worker is dead to it when:
//
//   - its value has not changed for workerTTL by this process's clock since this process
//     first saw it. That moment is after the renewal that wrote the value committed (it
//     was read by a statement that began later), so the worker has not renewed for at
//     least that long, and it cancelled its own handlers workerCancelAfter after its last
//     renewal began (leader.go). A worker this process has never seen (a new process, a
//     new worker) is watched for a whole lease first: a fresh observer does not fall
//     back to the timestamps, so a process started just after a clock step cannot take
//     live jobs either. Its first take-back of a dead worker's jobs waits that lease.
//   - or its row carries the mark of a lease it ended itself (a hard stop that gave up
//     on its handlers: started_at = expires_at, which no renewal writes): its jobs are
//     taken back at once.
//
// The statements that act on the judgement (reclaimDeadSQL, the pruning in the
// registration) take the values seen along with the ids and act only on rows whose value
// is still that one: a worker that renewed since it was last seen is never taken for dead.
// It is safe for concurrent use: the reclaim loop observes, the elector's loop prunes.
type observer struct {
	mu   sync.Mutex
	seen map[string]sighting
}

func newObserver() *observer { return &observer{seen: map[string]sighting{}} }

// observe records the rows of the other workers read at now: ids[i] has the value
// values[i], and ended[i] says whether it carries the mark of a lease its worker ended.
// A worker whose row is gone is forgotten.
func (o *observer) observe(now time.Time, ids []string, values []pgtype.Timestamptz, ended []bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	next := make(map[string]sighting, len(ids))
	for i, id := range ids {
		s, ok := o.seen[id]
		if !ok || !sameValue(s.value, values[i]) {
			s = sighting{value: values[i], since: now}
		}
		s.ended = i < len(ended) && ended[i]
		next[id] = s
	}
	o.seen = next
}

// dead returns the workers judged dead at now, and the value seen of each at the same
// place (the statements pair them by place). after is how long a row must have gone unchanged:
// workerTTL to take back its jobs, more to prune it.
func (o *observer) dead(now time.Time, after time.Duration) (ids []string, values []pgtype.Timestamptz) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for id, s := range o.seen {
		wait := after
		if s.ended {
			wait -= workerTTL // ended: dead at once, pruned pruneWorkersAfter later
		}
		if now.Sub(s.since) >= wait {
			ids = append(ids, id)
			values = append(values, s.value)
		}
	}
	return ids, values
}

// untilJudgement returns how long from now until the next worker not yet judged dead
// would be, if its row stays as last seen; ok is false when there is none. The reclaim
// runs then (reclaimLoop), so a dead worker's jobs are taken back when the judgement is
// due rather than at the next renewal after it. A live worker's row changes every renewal
// and pushes its judgement back, so the time keeps moving ahead of it.
func (o *observer) untilJudgement(now time.Time) (d time.Duration, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.seen {
		left := s.since.Add(workerTTL).Sub(now)
		if s.ended || left <= 0 {
			continue // judged already
		}
		if !ok || left < d {
			d, ok = left, true
		}
	}
	return d, ok
}

// sameValue reports whether two values read of expires_at are the same instant.
func sameValue(a, b pgtype.Timestamptz) bool {
	return a.Valid == b.Valid && a.InfinityModifier == b.InfinityModifier && a.Time.Equal(b.Time)
}
