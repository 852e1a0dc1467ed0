// This file holds the pruning of job_waiters rows left behind by waits (Client.Wait,
// WaitWorkflow) that were cut off before their cleanup could remove them: a wait whose
// path to the database went silent gives its cleanup half a second (internal/waiting).
// A live wait refreshes its rows every waiting.RefreshEvery; a row that has gone
// waiting.StaleAfter without one is a leftover.

package maintenance

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/internal/waiting"
)

// pruneWaitersSQL deletes up to $2 job_waiters rows whose since is older than $1. It
// walks job_waiters (empty when nobody waits: no pages; a row per waiting call and job
// otherwise). A row a wait refreshes meanwhile is read again after the refresh's lock,
// and kept.
const pruneWaitersSQL = `WITH stale AS (
	SELECT job_id, waiter FROM {s}.job_waiters
	WHERE since < now() - $1::interval
	LIMIT $2
), d AS (
	DELETE FROM {s}.job_waiters w USING stale
	WHERE w.job_id = stale.job_id AND w.waiter = stale.waiter AND w.since < now() - $1::interval
	RETURNING 1
)
SELECT count(*) FROM d`

// waiterPruneEvery is how often the pruning of leftover waiter rows runs: it walks
// job_waiters, so not at every sweep.
const waiterPruneEvery = time.Minute

// maxWaiterPruneBatches bounds the batches of one pruning.
const maxWaiterPruneBatches = 10

// pruneStaleWaiters deletes the job_waiters rows older than waiting.StaleAfter through
// db, at most once per waiterPruneEvery (last: when it last ran, Unix ns, 0: never), in
// batches of batch rows, at most maxWaiterPruneBatches of them.
func pruneStaleWaiters(ctx context.Context, db pgutil.DB, batch int, last *atomic.Int64) error {
	now := time.Now()
	if l := last.Load(); l != 0 && now.Sub(time.Unix(0, l)) < waiterPruneEvery {
		return nil
	}
	last.Store(now.UnixNano())
	sql := db.Render(pruneWaitersSQL)
	for range maxWaiterPruneBatches {
		var n int64
		if err := db.Pool.QueryRow(ctx, sql, waiting.StaleAfter, batch).Scan(&n); err != nil {
			return db.WrapErr("sweep: prune waiter rows", err)
		}
		if n < int64(batch) {
			break
		}
	}
	return nil
}
