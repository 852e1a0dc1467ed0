package skiplock

import (
	"context"
)

// claimSQL claims up to $2 due jobs of queue $1 for worker $3 in one autocommit statement
// (READ COMMITTED).
//
//   - The CTE walks jobs_claim_idx (queue, priority DESC, run_at, id) WHERE status =
//     'queued': the rows come out of the index already in claim order, so there is no Sort,
//     and within one priority the due jobs come before the scheduled ones, so LIMIT stops
//     before walking jobs that are not due.
//   - FOR UPDATE SKIP LOCKED: concurrent claimers pass over each other's rows instead of
//     waiting on them, so each job goes to exactly one claimer.
//   - The UPDATE commits status 'running' with the statement. It is that committed state,
//     not a held lock or an open transaction, that protects the job while its handler runs.
//   - attempts + 1 and locked_by form the fencing token: every later statement about this
//     attempt matches (id, attempts, locked_by), so a stale worker cannot touch a newer one.
const claimSQL = `WITH picked AS (
	SELECT id FROM {s}.jobs
	WHERE status = 'queued' AND queue = $1 AND run_at <= now()
	ORDER BY priority DESC, run_at, id
	LIMIT $2
	FOR UPDATE SKIP LOCKED
)
UPDATE {s}.jobs
SET status = 'running', locked_at = now(), locked_by = $3, attempts = attempts + 1
WHERE id IN (SELECT id FROM picked)
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
