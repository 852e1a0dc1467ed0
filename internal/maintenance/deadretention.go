// This file holds the retention of the jobs that ended without success: dead (attempts
// used up) and failed (a permanent error) jobs stay in the hot table, where an operator
// can requeue them, until DeadRetention passes; by default they stay until deleted.

package maintenance

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// purgeDeadSQL deletes one batch ($2) of dead and failed jobs that finished before
// now() - $1. The inner scan walks jobs_stuck_idx, the partial index of exactly those
// rows, so a sweep reads none of the queue's live rows. The outer DELETE checks the
// status and the end again on the row it deletes: a job requeued after this statement's
// snapshot (a Requeue committing while the DELETE waits on its row lock) is queued by
// then, and stays. A workflow task's job may go:
// its task was settled when the job ended (its dependents cancelled or released), and
// the workflow's own retention counts a purged job as past retention.
const purgeDeadSQL = `WITH d AS (
	DELETE FROM {s}.jobs WHERE id = ANY (ARRAY(
		SELECT id FROM {s}.jobs
		WHERE status IN ('dead', 'failed') AND finished_at < now() - $1::interval
		LIMIT $2))
		AND status IN ('dead', 'failed') AND finished_at < now() - $1::interval
	RETURNING 1
)
SELECT count(*) FROM d`

// purgeDead deletes the dead and failed jobs past DeadRetention (none when it is zero) in
// batches of BatchSize, each in a transaction of its own holding the sweep lock, at most
// maxPurgeBatches of them per sweep. It returns how many jobs it deleted.
func (s *Sweeper) purgeDead(ctx context.Context) (int64, error) {
	if s.cfg.DeadRetention <= 0 {
		return 0, nil
	}
	var total int64
	for range maxPurgeBatches {
		var n int64
		got, err := s.underSweepLock(ctx, func(ctx context.Context, tx pgx.Tx) error {
			return tx.QueryRow(ctx, s.sql.purgeDead, s.cfg.DeadRetention, s.cfg.BatchSize).Scan(&n)
		})
		if err != nil {
			return total, s.db.WrapErr("sweep: purge dead jobs", err)
		}
		total += n
		if !got || n < int64(s.cfg.BatchSize) {
			break
		}
	}
	return total, nil
}
