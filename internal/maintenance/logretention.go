// This file holds the retention of per-job log records (skiplock.Logger): they go with
// their job. Delete removes a job's records itself; the jobs that leave both tables by
// other ways (the archive's and dead jobs' retention, the delete completion mode) leave
// records behind, which this purge deletes.

package maintenance

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/pgutil"
)

// purgeOrphanLogsSQL deletes the records of up to $1 jobs that are in neither the jobs
// table nor the archive, and returns how many jobs those were. It walks job_logs (empty
// when no handler logs: no pages) and probes both primary keys per job.
const purgeOrphanLogsSQL = `WITH gone AS (
	SELECT DISTINCT l.job_id FROM {s}.job_logs l
	WHERE NOT EXISTS (SELECT 1 FROM {s}.jobs j WHERE j.id = l.job_id)
		AND NOT EXISTS (SELECT 1 FROM {s}.jobs_archive a WHERE a.id = l.job_id)
	LIMIT $1
), d AS (
	DELETE FROM {s}.job_logs WHERE job_id IN (SELECT job_id FROM gone)
)
SELECT count(*) FROM gone`

// logPurgeEvery is how often the purge of orphaned records runs: it walks job_logs,
// so not at every sweep.
const logPurgeEvery = time.Minute

// purgeOrphanLogs deletes the records of jobs gone from both tables through db, at most
// once per logPurgeEvery (last: when it last ran, Unix ns, 0: never), in batches of batch
// jobs until one is not full, at most maxPurgeBatches of them: as many as the other
// purges, which orphan the records (and the delete completion mode). With 10 batches a
// minute, more than 10 × batch jobs gone a minute left records behind for ever longer.
func purgeOrphanLogs(ctx context.Context, db pgutil.DB, batch int, last *atomic.Int64) error {
	now := time.Now()
	if l := last.Load(); l != 0 && now.Sub(time.Unix(0, l)) < logPurgeEvery {
		return nil
	}
	last.Store(now.UnixNano())
	sql := db.Render(purgeOrphanLogsSQL)
	for range maxPurgeBatches {
		var n int64
		if err := db.Pool.QueryRow(ctx, sql, batch).Scan(&n); err != nil {
			return db.WrapErr("sweep: purge log records", err)
		}
		if n < int64(batch) {
			break
		}
	}
	return nil
}
