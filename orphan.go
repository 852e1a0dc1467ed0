// This file holds the take-back of a worker's orphans: running jobs that name this
// worker in locked_by but that it does not hold. A claim whose reply never arrived (the
// connection died after the commit: a failover, a restart, a pooler losing its server
// connection) leaves such rows. No one else takes them while the worker lives (ownership
// is by liveness: reclaim.go), and the worker never runs them, so it puts them back
// itself, at each heartbeat.

package skiplock

import (
	"context"
)

// orphansSQL puts back in the queue, with their attempts given back (their handlers never
// ran here), the running jobs of worker $1 whose lease has ended and that are none of the
// attempts ($2, $3) it holds.
//
//   - lease_until < now(): a claim this worker is still reading (its reply on the way) has
//     a lease from its own now() on, so it is never taken; every held attempt is renewed
//     by the heartbeat, and is in the pairs anyway.
//   - The pairs are matched as in fenceSQL (a hashed subplan).
//   - FOR UPDATE SKIP LOCKED: a row another statement is writing is left for the next
//     heartbeat.
const orphansSQL = `WITH orphan AS (
	SELECT id FROM {s}.jobs
	WHERE status = 'running' AND locked_by = $1 AND lease_until < now()
		AND NOT ((id, fence) IN (SELECT * FROM unnest($2::bigint[], $3::bigint[])) OR false)
	FOR UPDATE SKIP LOCKED
)
UPDATE {s}.jobs SET status = 'queued', attempts = attempts - 1, locked_at = NULL, locked_by = NULL,
	lease_until = NULL
WHERE id = ANY (ARRAY(SELECT id FROM orphan))`

// takeBackOrphans runs orphansSQL for this worker once.
func (l *lease) takeBackOrphans(ctx context.Context) {
	ids, fences := l.held.renewable()
	ctx, cancel := context.WithTimeout(ctx, l.interval)
	defer cancel()
	tag, err := l.pool.Exec(ctx, l.orphans, l.workerID, ids, fences)
	switch {
	case err != nil && ctx.Err() == nil:
		l.logger.Warn("skiplock: looking for claimed jobs this worker never received failed; trying again at the next heartbeat", "err", err)
	case err == nil && tag.RowsAffected() > 0:
		l.logger.Warn("skiplock: put back jobs claimed for this worker whose claim's reply never arrived",
			"jobs", tag.RowsAffected())
	}
}
