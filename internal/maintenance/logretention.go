// This file holds the retention of per-job log records (skiplock.Logger): they go with
// their job. Delete removes a job's records itself; the jobs that leave both tables by
// other ways (the archive's and dead jobs' retention, the delete completion mode) leave
// records behind, which this purge deletes.

package maintenance

import (
	"context"
	"time"
)

// purgeOrphanLogsSQL deletes the records of up to $1 jobs that are in neither the jobs
// table nor the archive. It walks job_logs (empty when no handler logs: no pages) and
// probes both primary keys per job.
const purgeOrphanLogsSQL = `WITH gone AS (
	SELECT DISTINCT l.job_id FROM {s}.job_logs l
	WHERE NOT EXISTS (SELECT 1 FROM {s}.jobs j WHERE j.id = l.job_id)
		AND NOT EXISTS (SELECT 1 FROM {s}.jobs_archive a WHERE a.id = l.job_id)
	LIMIT $1
), d AS (
	DELETE FROM {s}.job_logs WHERE job_id IN (SELECT job_id FROM gone)
	RETURNING 1
)
SELECT count(*) FROM d`

// logPurgeEvery is how often the purge of orphaned records runs: it walks job_logs,
// so not at every sweep.
const logPurgeEvery = time.Minute

// purgeOrphanLogs deletes the records of jobs gone from both tables, at most once per
// logPurgeEvery, in batches of BatchSize jobs, at most maxPurgeBatches of them.
func (s *Sweeper) purgeOrphanLogs(ctx context.Context) error {
	now := time.Now()
	if last := s.logsPurged.Load(); last != 0 && now.Sub(time.Unix(0, last)) < logPurgeEvery {
		return nil
	}
	s.logsPurged.Store(now.UnixNano())
	sql := s.db.Render(purgeOrphanLogsSQL)
	for range maxPurgeBatches {
		var n int64
		if err := s.db.Pool.QueryRow(ctx, sql, s.cfg.BatchSize).Scan(&n); err != nil {
			return s.db.WrapErr("sweep: purge log records", err)
		}
		if n == 0 {
			break
		}
	}
	return nil
}
