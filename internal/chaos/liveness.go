// This file holds the harness's prototype of ownership by liveness (docs/ownership.md):
// with Options.LivenessReclaim set, the harness itself runs, every that long, the
// statement every worker would run with its registration in the proposed design: it takes
// back the running jobs whose owner's row in the workers table has expired, whatever
// their own lease says. The library does not run it yet: it is safe only once a worker
// cut off from the database cancels its handlers before its own row can expire, which
// today it does only before its jobs' leases end. So a run with it measures how fast the
// dead's jobs would run elsewhere, and must not black-hole workers (DefaultLeaseRecovery
// does not).

package chaos

import (
	"context"
	"time"
)

// livenessReclaimSQL takes back, like the sweeper's reclaim, running jobs whose owner is
// gone: its row in the workers table (renewed every 1.7–3 s with its election statement,
// valid for 10 s) has expired. The lost attempt counts, as in the sweeper's reclaim.
//
//   - The join finds the owner by locked_by; a job whose owner has no row (a worker of a
//     release before the workers table, or a row pruned a minute after it expired) is
//     left to the sweeper's lease-based reclaim.
//   - FOR UPDATE OF j SKIP LOCKED: any number of workers may run it at once; a row being
//     written (a success, a heartbeat, another reclaim) is left for the next run.
//   - The UPDATE reaches the rows by primary key (id = ANY (ARRAY(...))), as the sweeper's
//     statements do.
const livenessReclaimSQL = `WITH dead AS (
	SELECT j.id FROM skiplock.jobs j JOIN skiplock.workers w ON w.id = j.locked_by
	WHERE j.status = 'running' AND w.expires_at < now()
	ORDER BY j.locked_at
	LIMIT 1000
	FOR UPDATE OF j SKIP LOCKED
)
UPDATE skiplock.jobs SET
	status = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'queued' END,
	finished_at = CASE WHEN attempts >= max_attempts THEN now() END,
	last_error = 'worker ' || coalesce(locked_by, '?') || ' is gone: its worker lease ended',
	locked_at = NULL, lease_until = NULL,
	locked_by = CASE WHEN attempts >= max_attempts THEN locked_by END
WHERE id = ANY (ARRAY(SELECT id FROM dead))`

// livenessReclaim runs livenessReclaimSQL every LivenessReclaim until ctx ends.
func (r *runner) livenessReclaim(ctx context.Context) {
	t := time.NewTicker(r.opts.LivenessReclaim)
	defer t.Stop()
	total := int64(0)
	for {
		select {
		case <-ctx.Done():
			r.rec.logf("liveness reclaim (prototype): %d jobs taken back from dead workers", total)
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, r.opts.LivenessReclaim)
		tag, err := r.pool.Exec(qctx, livenessReclaimSQL)
		cancel()
		if err == nil && tag.RowsAffected() > 0 {
			total += tag.RowsAffected()
			r.rec.logf("liveness reclaim (prototype): %d jobs of dead workers taken back", tag.RowsAffected())
		}
	}
}

// leaseMarginSQL samples, among the workers of the fleet ($1), the least time left on a
// worker's row in the workers table and on a running job's lease. A negative job margin
// is a lease that ended while its worker lived: another worker may take the job.
const leaseMarginSQL = `SELECT
	(SELECT extract(epoch FROM min(expires_at - now())) FROM skiplock.workers WHERE id = ANY($1)),
	(SELECT extract(epoch FROM min(lease_until - now())) FROM skiplock.jobs
		WHERE status = 'running' AND locked_by = ANY($1))`

// margins is the least lease margins seen by sampleMargins, in seconds; NaN-free: ok
// says whether a sample came back.
type margins struct {
	worker, job float64
	ok          bool
}

// sampleMargins samples leaseMarginSQL every 100 ms until ctx ends.
func (r *runner) sampleMargins(ctx context.Context) margins {
	m := margins{worker: 1e9, job: 1e9}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		ids := make([]string, 0, r.opts.Workers)
		for id := range r.fleet.slotsByID() {
			ids = append(ids, id)
		}
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		var w, j *float64
		err := r.pool.QueryRow(qctx, leaseMarginSQL, ids).Scan(&w, &j)
		cancel()
		if err == nil {
			if w != nil {
				m.worker, m.ok = min(m.worker, *w), true
			}
			if j != nil {
				m.job, m.ok = min(m.job, *j), true
			}
		}
		select {
		case <-ctx.Done():
			return m
		case <-t.C:
		}
	}
}
