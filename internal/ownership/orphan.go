// This file holds the take-back of a worker's orphans: running jobs that name this
// worker in locked_by but that it does not hold. A claim whose reply never arrived (the
// connection died after the commit: a failover, a restart, a pooler losing its server
// connection) leaves such rows. No one else takes them while the worker lives (ownership
// is by liveness: reclaim.go), and the worker never runs them, so it puts them back
// itself, at each heartbeat.

package ownership

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/internal/settle"
)

// orphanCandidatesSQL lists the running jobs of worker $1. The worker keeps those it
// has not held for longer than a claim's reply may take to be run (orphanAfter), by its
// own clock, looked up after this statement returned: a held attempt is renewed by the
// heartbeat, and a list of held attempts taken before a statement that waited out an
// outage would miss the attempts claimed meanwhile.
//
// It does not ask whether the job's lease has ended (lease_until < now(), as it did): a
// step of the server's clock past the visibility timeout made the jobs of a claim whose
// reply was on its way look like orphans, put back while the reply still started them.
// A job seen here unheld was claimed before that look; if it is still unheld orphanAfter
// later, a reply that arrives after that is stale and put back, not run
// (internal/claim, dispatch: StaleAfter). status = 'running' walks jobs_running_idx, a
// few rows per worker slot.
const orphanCandidatesSQL = `SELECT id, fence FROM {s}.jobs
WHERE status = 'running' AND locked_by = $1`

// orphanAfter is how long a running job of this worker must have been seen unheld before
// it is put back, visibility - visibility/CancelMargin: no less than the claim loops'
// StaleAfter (StaleClaimAfter: a claim's reply that comes later than that after the claim
// began is not run).
func (l *Lease) orphanAfter() time.Duration { return l.visibility - l.visibility/CancelMargin }

// orphansSQL puts the attempts ($1, $2) of worker $3 back in the queue, with their
// attempts given back (their handlers never ran here); fenced like every other write.
// A row another statement is writing is left for the next heartbeat.
const orphansSQL = `UPDATE {s}.jobs SET status = 'queued', attempts = attempts - 1, locked_at = NULL,
	locked_by = NULL, lease_until = NULL
WHERE id = ANY (ARRAY(SELECT id FROM {s}.jobs WHERE ` + FenceSQL + ` FOR UPDATE SKIP LOCKED))`

// takeBackOrphans puts back this worker's orphans once.
func (l *Lease) takeBackOrphans(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, l.Interval)
	defer cancel()
	rows, err := l.pool.Query(ctx, l.orphanCandidates, l.workerID)
	if err != nil {
		l.orphanErr(ctx, err)
		return
	}
	var running []jobtype.AttemptKey
	var k jobtype.AttemptKey
	_, err = pgx.ForEachRow(rows, []any{&k.ID, &k.Fence}, func() error {
		running = append(running, k)
		return nil
	})
	if err != nil {
		l.orphanErr(ctx, err)
		return
	}
	// Seen now, after the statement: no earlier than the claims it read began.
	now := time.Now()
	unheld := make(map[jobtype.AttemptKey]time.Time)
	var orphans []jobtype.AttemptKey
	for _, k := range running {
		if l.held.Holds(k) {
			continue
		}
		since, ok := l.unheldSince[k]
		if !ok {
			since = now
		}
		unheld[k] = since
		if now.Sub(since) > l.orphanAfter() {
			orphans = append(orphans, k)
		}
	}
	l.unheldSince = unheld
	if len(orphans) == 0 {
		return
	}
	ids, fences := sortedKeys(orphans)
	tag, err := l.pool.Exec(ctx, l.orphans, ids, fences, l.workerID)
	switch {
	case err != nil:
		l.orphanErr(ctx, err)
	case tag.RowsAffected() > 0:
		l.logger.Warn("skiplock: put back jobs claimed for this worker whose claim's reply never arrived",
			"jobs", tag.RowsAffected())
	}
}

// orphanErr logs a failed look for orphans; the next heartbeat looks again.
func (l *Lease) orphanErr(ctx context.Context, err error) {
	if err != nil && ctx.Err() == nil {
		l.logger.Warn("skiplock: looking for claimed jobs this worker never received failed; trying again at the next heartbeat", "err", err)
	}
}

// unrecordedSQL puts back in the queue the attempts ($1, $2) of worker $3 whose outcome
// could not be written (batchListeners.unrecorded): their handlers ran, but the database
// does not know what they came to, so the jobs run again. The attempt counts (it ran): a
// job with none left goes dead, as a job taken back from a dead worker does
// (TakeBackSet), and any other waits the default backoff, min(2^attempts s, 1 h) ×
// [0.5, 1), computed by the database — so an outcome that can never be written (a
// statement that always times out, a trigger that refuses it) cannot make a handler run
// again and again without end. The next claim takes a new token. Fenced like every other
// write. It returns how many jobs it put back and the workflow tasks' jobs it sent dead,
// whose tasks PutBackUnrecorded settles in the same transaction (their dependents are
// cancelled or released, as when any other write sends a task dead).
var unrecordedSQL = `WITH back AS (
	UPDATE {s}.jobs SET ` + TakeBackSet(`'its outcome could not be written; run again'`) + `,
	run_at = CASE WHEN attempts >= max_attempts THEN run_at
		ELSE now() + make_interval(secs => least(power(2, attempts), 3600) * (0.5 + random() * 0.5)) END
	WHERE ` + FenceSQL + `
	RETURNING id, status, metadata ? '` + settle.MetaWorkflow + `' AS task
)
SELECT count(*), coalesce(array_agg(id) FILTER (WHERE status = 'dead' AND task), '{}') FROM back`

// PutBackUnrecorded puts back the jobs whose outcome could not be written, and settles
// the workflow tasks of those it sent dead in the same transaction. Should that
// transaction fail for good (the settle is what the database refuses, say), the jobs are
// put back without it rather than left running: the tasks are then not settled, and are
// logged.
func (l *Lease) PutBackUnrecorded(keys []jobtype.AttemptKey) {
	l.putBack(keys, func(ctx context.Context, ids, fences []int64) (int64, error) {
		var n int64
		err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
			var dead []int64
			if err := tx.QueryRow(ctx, l.unrecorded, ids, fences, l.workerID).Scan(&n, &dead); err != nil || len(dead) == 0 || l.Flows == nil {
				return err
			}
			return l.Flows.Settle(ctx, tx, dead)
		})
		if err == nil || pgutil.Transient(err) || ctx.Err() != nil || l.Flows == nil {
			return n, err
		}
		var dead []int64
		if err2 := l.pool.QueryRow(ctx, l.unrecorded, ids, fences, l.workerID).Scan(&n, &dead); err2 != nil {
			return n, err2
		}
		if len(dead) > 0 {
			l.logger.Error("skiplock: workflow tasks whose last outcome could not be written went dead unsettled; RetryWorkflow or Requeue them",
				"jobs", dead, "err", err)
		}
		return n, nil
	})
}
