// This file holds the lease a worker keeps on the jobs it runs: the attempts it holds
// (heldJobs), the one fence predicate every write about a claimed attempt matches
// (fenceSQL), the heartbeat that renews the lease and notices jobs taken away, and the
// release of unfinished jobs at shutdown.

package skiplock

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// jobKey identifies one claimed attempt of a job.
type jobKey struct {
	id       int64
	attempts int
}

// fenceSQL is the condition that picks, among the ids in $1 (ascending) with the attempts
// in $2, the rows this worker ($3) still holds: the fence of every statement about a
// worker's own jobs (heartbeat, release, success, failure). A job that was reclaimed by
// the sweeper, re-claimed by another worker, cancelled or released no longer matches, so
// a stale worker's late result changes nothing. Statements about one job pass one-element
// arrays.
//
//   - id = ANY($1) is the only index condition the planner can use: status has an empty
//     string appended before the comparison, which the planner cannot match to the
//     partial indexes' predicates. With a
//     table that had no statistics, it once preferred scanning jobs_running_idx once per
//     id — a million rows read for a batch of 500.
//   - The statements act by id, never by a ctid read earlier in the statement: a row
//     updated (by a heartbeat, say) after the statement's snapshot would be invisible at
//     its new ctid, and its success silently dropped. By id, Postgres waits for the other
//     update, rechecks this condition on the newest row version and acts on it.
const fenceSQL = `id = ANY ($1::bigint[]) AND (status || '') = 'running' AND locked_by = $3
	AND attempts = ($2::int[])[array_position($1::bigint[], id)]`

// heldJobs is the set of attempts a worker runs, each with the cancel function of its
// handler's context. It is safe for concurrent use.
type heldJobs struct {
	m sync.Map // jobKey -> context.CancelCauseFunc
}

func (h *heldJobs) add(k jobKey, cancel context.CancelCauseFunc) { h.m.Store(k, cancel) }

func (h *heldJobs) remove(k jobKey) { h.m.Delete(k) }

// cancel cancels the context of the attempt k, if held, with cause.
func (h *heldJobs) cancel(k jobKey, cause error) bool {
	v, ok := h.m.Load(k)
	if ok {
		v.(context.CancelCauseFunc)(cause)
	}
	return ok
}

func (h *heldJobs) count() int {
	n := 0
	h.m.Range(func(_, _ any) bool { n++; return true })
	return n
}

// keys lists the held attempts by ascending id: batched statements lock rows in the order
// given, and one order everywhere means they cannot deadlock.
func (h *heldJobs) keys() (ids []int64, attempts []int32) {
	var keys []jobKey
	h.m.Range(func(k, _ any) bool {
		keys = append(keys, k.(jobKey))
		return true
	})
	sort.Slice(keys, func(i, j int) bool { return keys[i].id < keys[j].id })
	for _, k := range keys {
		ids = append(ids, k.id)
		attempts = append(attempts, int32(k.attempts))
	}
	return ids, attempts
}

// releaseSQL gives jobs cut off by shutdown back to the queue, due now, and gives back the
// attempt (the job did not fail; the worker stopped). Fenced like every other update.
const releaseSQL = `UPDATE {s}.jobs SET
	status = 'queued', run_at = now(), attempts = attempts - 1, locked_at = NULL, locked_by = NULL
WHERE ` + fenceSQL

// heartbeatSQL refreshes the lease of this worker's running jobs and returns the ones it
// still holds; a job missing from the result was cancelled or reclaimed. The refresh locks
// with SKIP LOCKED: a row locked by another statement (its success being recorded, the
// sweeper) is one the heartbeat need not touch, and never waiting means the heartbeat can
// never deadlock with them. Skipped rows are still reported as held: they are, as far as
// this snapshot can tell, and the next heartbeat looks again.
const heartbeatSQL = `WITH lockable AS (
	SELECT id FROM {s}.jobs WHERE ` + fenceSQL + `
	FOR UPDATE SKIP LOCKED
), refreshed AS (
	UPDATE {s}.jobs SET locked_at = now() WHERE id IN (SELECT id FROM lockable)
)
SELECT id, attempts FROM {s}.jobs WHERE ` + fenceSQL

// lease renews and gives back the leases of one worker's held jobs.
type lease struct {
	pool      *pgxpool.Pool
	workerID  string
	logger    *slog.Logger
	interval  time.Duration // between heartbeats: a third of the visibility timeout
	held      *heldJobs
	heartbeat string // heartbeatSQL, rendered
	release   string // releaseSQL, rendered
}

func newLease(pool *pgxpool.Pool, schema, workerID string, visibility time.Duration, held *heldJobs, logger *slog.Logger) *lease {
	return &lease{
		pool: pool, workerID: workerID, logger: logger, interval: visibility / 3, held: held,
		heartbeat: renderSQL(schema, heartbeatSQL),
		release:   renderSQL(schema, releaseSQL),
	}
}

// run heartbeats every interval until ctx ends.
func (l *lease) run(ctx context.Context) {
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.beat(ctx)
		}
	}
}

// beat renews the lease of every held job and cancels, with errJobLost, the context of
// each one the worker no longer holds.
func (l *lease) beat(ctx context.Context) {
	ids, attempts := l.held.keys()
	if len(ids) == 0 {
		return
	}
	rows, err := l.pool.Query(ctx, l.heartbeat, ids, attempts, l.workerID)
	if err != nil {
		l.logger.Warn("skiplock: heartbeat failed", "jobs", len(ids), "err", err)
		return
	}
	still := map[jobKey]bool{}
	var key jobKey
	_, err = pgx.ForEachRow(rows, []any{&key.id, &key.attempts}, func() error {
		still[key] = true
		return nil
	})
	if err != nil {
		l.logger.Warn("skiplock: heartbeat failed", "jobs", len(ids), "err", err)
		return
	}
	for i := range ids {
		k := jobKey{ids[i], int(attempts[i])}
		if still[k] {
			continue
		}
		if l.held.cancel(k, errJobLost) {
			l.logger.Warn("skiplock: job no longer held by this worker; cancelling its context", "job", k.id, "attempt", k.attempts)
		}
	}
}

// releaseAll puts the held jobs (those whose handlers did not finish) back in the queue.
func (l *lease) releaseAll() {
	ids, attempts := l.held.keys()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tag, err := l.pool.Exec(ctx, l.release, ids, attempts, l.workerID)
	if err != nil {
		l.logger.Error("skiplock: putting unfinished jobs back failed; the sweeper will reclaim them after the visibility timeout",
			"jobs", len(ids), "err", err)
		return
	}
	l.logger.Info("skiplock: unfinished jobs put back in the queue", "jobs", tag.RowsAffected())
	for i := range ids {
		l.held.remove(jobKey{ids[i], int(attempts[i])})
	}
}
