package skiplock

import (
	"context"
)

// claimSQL claims up to $2 due jobs of queue $1 for worker $3 in one autocommit statement
// (READ COMMITTED).
//
//   - prios walks the distinct priorities of the queue's queued jobs, highest first, one
//     index seek each (a skip scan over jobs_claim_idx). Stepping priority by priority makes
//     run_at <= now() a range bound of each scan, so jobs scheduled for later (retries in
//     backoff, jobs due tomorrow) are never walked over, whatever their priority: a million
//     future jobs cost the claim nothing. (attempts >= 0 is always true: it reads the heap
//     row, which turns the seek into a plain index scan. An index-only scan would visit the
//     heap for every entry of a job claimed since the last vacuum, and never mark those
//     entries dead, so a draining queue would cost each claim more than the last.)
//   - For each priority, the LATERAL scan reads jobs_claim_idx (queue, priority DESC, run_at,
//     id) WHERE status = 'queued': the rows come out already in claim order, so there is no
//     Sort, and the outer LIMIT stops pulling (and locking) once it has $2 jobs.
//   - FOR UPDATE SKIP LOCKED: concurrent claimers pass over each other's rows instead of
//     waiting on them, so each job goes to exactly one claimer.
//   - The UPDATE finds the locked rows by ctid (a TID scan, no second index descent per
//     row); a row locked FOR UPDATE cannot move before the statement ends.
//   - The UPDATE commits status 'running' with the statement. It is that committed state,
//     not a held lock or an open transaction, that protects the job while its handler runs.
//   - attempts + 1 and locked_by form the fencing token: every later statement about this
//     attempt matches (id, attempts, locked_by), so a stale worker cannot touch a newer one.
const claimSQL = `WITH RECURSIVE prios AS (
	(SELECT priority FROM {s}.jobs
	 WHERE status = 'queued' AND queue = $1 AND attempts >= 0
	 ORDER BY priority DESC LIMIT 1)
	UNION ALL
	SELECT (SELECT j.priority FROM {s}.jobs j
	        WHERE j.status = 'queued' AND j.queue = $1 AND j.attempts >= 0 AND j.priority < p.priority
	        ORDER BY j.priority DESC LIMIT 1)
	FROM prios p WHERE p.priority IS NOT NULL
), picked AS (
	SELECT c.ctid FROM prios p CROSS JOIN LATERAL (
		SELECT ctid FROM {s}.jobs
		WHERE status = 'queued' AND queue = $1 AND priority = p.priority AND run_at <= now()
		ORDER BY run_at, id
		LIMIT $2
		FOR UPDATE SKIP LOCKED
	) c
	LIMIT $2
)
UPDATE {s}.jobs
SET status = 'running', locked_at = now(), locked_by = $3, attempts = attempts + 1
WHERE ctid = ANY (ARRAY(SELECT ctid FROM picked))
RETURNING ` + jobColumns

// claim takes up to limit due jobs of queue for the worker id.
func (c *Client) claim(ctx context.Context, queue string, limit int, workerID string) ([]*JobRow, error) {
	rows, err := c.pool.Query(ctx, c.sql.claim, queue, limit, workerID)
	if err != nil {
		return nil, c.wrapErr("claim", err)
	}
	jobs, err := collectJobs(rows)
	if err != nil {
		return nil, c.wrapErr("claim", err)
	}
	return jobs, nil
}
