// This file holds the operator calls on a Client — Get, Wait, Logs, Stats, Cancel and
// Requeue — with the statements they run. List is in list.go, Delete in delete.go.

package skiplock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/skiplock/skiplock/internal/claim"
	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/ownership"
	"github.com/skiplock/skiplock/internal/record"
	"github.com/skiplock/skiplock/internal/settle"
	"github.com/skiplock/skiplock/internal/waiting"
)

// Get returns the job with the given id, from the hot table or the archive, with the
// records its handlers logged ([JobRow].Logs, as [Client.Logs] reads them). It returns
// [ErrJobNotFound] when there is none.
func (c *Client) Get(ctx context.Context, id int64) (*JobRow, error) {
	row, err := scanJob(c.pool.QueryRow(ctx, c.db.Render(getSQL), id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: id %d", ErrJobNotFound, id)
	}
	if err != nil {
		return nil, c.wrapErr("get", err)
	}
	logs, err := record.ReadLogs(ctx, c.pool, c.schema, id)
	if err != nil {
		return nil, c.wrapErr("get", err)
	}
	if len(logs) > 0 { // nil when none, as in every other JobRow
		row.Logs = logs
	}
	return row, nil
}

// getSQL looks in the hot table first, then in the archive (which keeps no lease).
const getSQL = `SELECT ` + jobColumns + ` FROM {s}.jobs WHERE id = $1
UNION ALL
SELECT ` + archiveJobColumns + ` FROM {s}.jobs_archive WHERE id = $1
LIMIT 1`

// Wait waits until the job with the given id is final and returns it, with its output
// ([JobRow].Output, set by the handler with [SetOutput]). Final is succeeded, failed,
// dead or cancelled, in the jobs table or the archive; a job queued for a retry (or
// snoozed, or sleeping) is not final, and Wait goes on. A dead or failed job that an
// operator requeues later is not waited for again: Wait returned it already.
//
// It works from any process: it registers the job in the schema's job_waiters table and
// listens on the schema's done channel; the worker's batch that records the job's success
// or failure (or [CompleteTx], or [Client.Cancel]) notifies it in its transaction.
// Without a notification (the job ended by a take-back of a dead worker's jobs, or a
// [Client.CancelWorkflow]) it reads the job again every second. It holds one connection
// of the client's pool while it waits.
//
// It returns ctx.Err() when ctx ends first, within about half a second, even when the
// database has stopped answering: it removes its job_waiters row on the way out, and
// gives up on that after half a second, leaving the row behind (harmless: it costs one
// notification nobody receives when the job's outcome is recorded, and the sweeper
// prunes it an hour after its wait last refreshed it, which a live wait does every
// minute).
// It returns [ErrJobNotFound] when there is no such job, or when the job is deleted while
// Wait waits (by [Client.Delete], or by its success
// in the [CompletionDelete] mode, which keeps no result: wait for jobs recorded in the
// archive or keep modes).
func (c *Client) Wait(ctx context.Context, id int64) (*JobRow, error) {
	var out *JobRow
	err := c.waiter().Wait(ctx, func(ctx context.Context, conn *pgx.Conn) ([]int64, bool, error) {
		row, err := waiting.ReadJob(ctx, conn, c.schema, id)
		if errors.Is(err, pgx.ErrNoRows) {
			err = fmt.Errorf("%w: id %d (never enqueued, deleted, or succeeded in the delete completion mode)", ErrJobNotFound, id)
		}
		if err != nil {
			return nil, false, err
		}
		out = row
		return []int64{id}, waiting.Final(row.Status), nil
	})
	if err != nil {
		if errors.Is(err, ErrJobNotFound) || ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil, err
		}
		return nil, c.wrapErr("wait", err)
	}
	return out, nil
}

// waiter returns the engine of Wait and WaitWorkflow on the client's pool.
func (c *Client) waiter() *waiting.Waiter {
	return &waiting.Waiter{Pool: c.pool, Schema: c.schema, Poll: c.waitPoll, Refresh: c.waitRefresh}
}

// Logs returns the records the job with the given id logged through [Logger], oldest
// first (by attempt, then in the order they were logged). A job that logged nothing, or
// one that does not exist, has none: Logs returns an empty slice and no error (see
// [Client.Get] to tell the two apart; Get returns them too, in [JobRow].Logs).
func (c *Client) Logs(ctx context.Context, id int64) ([]LogRecord, error) {
	out, err := record.ReadLogs(ctx, c.pool, c.schema, id)
	if err != nil {
		return nil, c.wrapErr("logs", err)
	}
	return out, nil
}

// cancelSQL cancels a queued or running job. A running job keeps its locked_by: the fence
// of its worker's writes (status running) no longer matches, so its handler's late result
// is fenced out. The worker learns of it from the control message Cancel sends, or at
// its next heartbeat, and cancels the handler's context. A running job also keeps its
// lease (lease_until): its worker renews it while the handler still runs and ends it
// when the handler returns (internal/ownership, cancelled.go), so RetryWorkflow can tell
// an attempt still running from one that has ended.
const cancelSQL = `UPDATE {s}.jobs SET status = 'cancelled', finished_at = now(), locked_at = NULL,
	lease_until = CASE WHEN status = 'running' THEN lease_until END
WHERE id = $1 AND status IN ('queued', 'running')
RETURNING ` + jobColumns

// Cancel cancels the job with the given id and returns it. A queued job will not run; a
// running job's handler is told through its context (cause: the job is no longer held)
// within about a notification's delivery time, through the schema's control channel, or
// at the worker's next heartbeat if that message is lost; its result is ignored. A
// running sequence job (EnqueueSequence) releases the next job of its key only once its
// handler has returned, or once its lease has passed if its worker is gone (see
// docs/workflows.md). A job already in a final state is returned unchanged. It returns [ErrJobNotFound] when there
// is no such job.
func (c *Client) Cancel(ctx context.Context, id int64) (*JobRow, error) {
	var row *JobRow
	// A workflow task's dependents are settled in the cancel's transaction
	// (internal/settle), as a worker settles them with an outcome — but for a sequence
	// task that was running: its handler may still run, and settling it would start the
	// key's next job beside it. It is settled when its lease ends: by its worker when the
	// handler returns, or by the sweeper once the lease has passed (internal/ownership,
	// cancelled.go).
	// The workflow's row is taken first, as CancelWorkflow takes it before the jobs it
	// cancels: in the other order, the two could each wait for the other.
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, c.db.Render(settle.LockWorkflowOfJobSQL), id); err != nil {
			return err
		}
		var err error
		if row, err = scanJob(tx.QueryRow(ctx, c.db.Render(cancelSQL), id)); err != nil {
			return err
		}
		// Its waiters (Client.Wait) are told at the commit.
		if err := waiting.NewWaking(c.schema).Notify(ctx, tx, []int64{id}); err != nil || !settle.IsTask(row) {
			return err
		}
		if _, seq := row.Metadata[settle.MetaSequence]; seq && row.LockedBy != "" {
			return nil
		}
		return c.flows.Settle(ctx, tx, []int64{id})
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return c.Get(ctx, id)
	}
	if err != nil {
		return nil, c.wrapErr("cancel", err)
	}
	if row.LockedBy != "" {
		// It was running: tell its worker now rather than at its next heartbeat.
		if err := c.notify.SendControl(ctx, c.pool, notify.ControlMsg{Op: notify.ControlCancel, ID: id}); err != nil {
			c.logger.Debug("skiplock: cancel message not sent; the worker learns at its next heartbeat", "job", id, "err", err)
		}
	}
	return row, nil
}

// RequeueFilter selects dead and failed jobs for [Client.Requeue]. Set at least one field;
// set fields must all match.
type RequeueFilter struct {
	IDs   []int64
	Kind  string
	Queue string
}

// RequeueResult says what [Client.Requeue] did.
type RequeueResult struct {
	// Requeued counts the jobs put back in the queue.
	Requeued int64
	// Skipped counts the matching jobs left dead or failed because their unique key is
	// held: by an active job, or by a newer matching job requeued instead.
	Skipped int64
}

// Requeue puts the dead and failed jobs that match f back in the queue with their attempts
// reset, and says how many it moved and how many it skipped. A job whose unique key an
// active job holds is skipped, as are all but the newest of matching jobs that share a
// key; finished jobs do not block a requeue, whatever the key's [UniqueOpts].States.
// Cancelled and succeeded jobs are not touched. It runs as one statement.
//
// A requeued job keeps its [EnqueueOptions].Deadline: once that has passed, the job fails
// again at its next claim without running (the deadline cannot be changed: enqueue a
// new job with its args to run it then).
//
// A requeued workflow task (or batch or sequence job) is running again for its
// workflow: its task goes back to released, [Client.WaitWorkflow] waits for it, and its
// job's new outcome settles it: under [RunDependents] (a batch) its dependents still
// waiting wait for it again and count its new outcome instead of its old one. Dependents
// it cancelled when it failed stay cancelled:
// [Client.RetryWorkflow] reopens them (once the task has succeeded, they run at once;
// before, they wait for it).
func (c *Client) Requeue(ctx context.Context, f RequeueFilter) (RequeueResult, error) {
	if len(f.IDs) == 0 && f.Kind == "" && f.Queue == "" {
		return RequeueResult{}, &optionsError{what: "RequeueFilter", msg: "Requeue needs IDs, Kind or Queue"}
	}
	if !validText(f.Kind) {
		return RequeueResult{}, &optionsError{what: "RequeueFilter", msg: fmt.Sprintf("kind %q: not UTF-8 text without NUL", truncate(f.Kind, 40))}
	}
	if f.Queue != "" {
		if err := validQueue(f.Queue); err != nil {
			return RequeueResult{}, err
		}
	}
	var ids []int64
	if len(f.IDs) > 0 {
		ids = f.IDs
	}
	var (
		matched int64
		res     RequeueResult
		queues  []string
		err     error
	)
	for range 5 {
		err = c.pool.QueryRow(ctx, c.db.Render(settle.RequeueSQL), ids, nullString(f.Kind), nullString(f.Queue)).Scan(&matched, &res.Requeued, &queues)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
			break // a key taken after the snapshot (unique_violation) is worth another try
		}
	}
	if err != nil {
		return RequeueResult{}, c.wrapErr("requeue", err)
	}
	res.Skipped = matched - res.Requeued
	if len(queues) > 0 {
		if err := c.notify.Queues(ctx, c.pool, queues); err != nil {
			c.logger.Debug("skiplock: wake-up after requeue failed", "err", err)
		}
	}
	return res, nil
}

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// QueueStats counts the jobs of one queue: those in the jobs table by status, and those
// that finished recently, from the jobs table and the archive.
type QueueStats struct {
	Queue string
	// Counts are the jobs in the jobs table by status (finished jobs moved to the archive
	// are not counted here; see FinishedLastHour).
	Counts map[JobStatus]int64
	// Scheduled counts the queued jobs whose run_at is still ahead (scheduled, waiting
	// for a retry or after a snooze, or waiting for their dependencies: DependsOn,
	// workflow tasks); they are in Counts[StatusQueued] too.
	Scheduled int64
	// Overrunning counts the running jobs whose handler has run past its job timeout
	// without returning (it ignores its cancelled context): the job stays with its
	// worker, its lease renewed, until the handler returns, and is then recorded as a
	// timed-out failure. A worker marks such an attempt one heartbeat interval after
	// its timeout, when it also logs it and calls the error handlers' HandleStuck
	// ([Worker.HandleErrors]); they are in Counts[StatusRunning] too.
	Overrunning int64
	// OldestDue is how long the oldest due, queued job has been waiting; 0 when none.
	OldestDue time.Duration
	// Paused says the queue is paused ([Client.PauseQueue]) since PausedAt.
	Paused   bool
	PausedAt time.Time // zero unless Paused
	// FinishedLastMinute and FinishedLastHour count the jobs that reached a final state
	// (succeeded, failed, dead, cancelled) in the last minute and the last hour, by
	// status, in the jobs table and the archive: divide by 60 or 3600 for a throughput per
	// second. Jobs deleted on success ([CompletionDelete]) leave nothing to count.
	FinishedLastMinute map[JobStatus]int64
	FinishedLastHour   map[JobStatus]int64
}

// statsSQL counts by queue and status. The jobs table is small while jobs flow and is
// read whole. The archive is read only for the last hour, which its BRIN index on
// finished_at finds without reading the rest; the cost grows with the jobs finished in
// that hour. Rows come out by queue, then status.
const statsSQL = `SELECT queue, status, sum(n)::bigint AS n, sum(scheduled)::bigint AS scheduled,
	max(oldest) AS oldest, sum(m1)::bigint AS m1, sum(h1)::bigint AS h1, sum(overrun)::bigint AS overrun
FROM (
	SELECT queue, status, count(*) AS n,
		count(*) FILTER (WHERE status = 'queued' AND run_at > now()) AS scheduled,
		coalesce(extract(epoch FROM now() - min(run_at) FILTER (WHERE status = 'queued' AND run_at <= now())), 0)::float8 AS oldest,
		count(*) FILTER (WHERE finished_at > now() - interval '1 minute') AS m1,
		count(*) FILTER (WHERE finished_at > now() - interval '1 hour') AS h1,
		count(*) FILTER (WHERE status = 'running' AND overrun_fence = fence) AS overrun
	FROM {s}.jobs GROUP BY queue, status
	UNION ALL
	SELECT queue, status, 0, 0, 0,
		count(*) FILTER (WHERE finished_at > now() - interval '1 minute'),
		count(*), 0
	FROM {s}.jobs_archive WHERE finished_at > now() - interval '1 hour' GROUP BY queue, status
) t
GROUP BY queue, status ORDER BY queue, status`

// statsRow is one row of statsSQL; its JSON names are the columns', for the cache.
type statsRow struct {
	Queue     string  `json:"queue"`
	Status    string  `json:"status"`
	N         int64   `json:"n"`
	Scheduled int64   `json:"scheduled"`
	Oldest    float64 `json:"oldest"`
	M1        int64   `json:"m1"`
	H1        int64   `json:"h1"`
	Overrun   int64   `json:"overrun"`
}

// Stats returns, by queue and ordered by queue: job counts by status, the age of the
// oldest due job, the jobs finished in the last minute and hour, and which queues are
// paused (a paused queue without jobs is listed too). It reads the jobs table whole and
// the archive's last hour, then the paused queues. Many processes asking often (metrics)
// should use [Client.CachedStats].
func (c *Client) Stats(ctx context.Context) ([]QueueStats, error) {
	rows, err := c.pool.Query(ctx, c.db.Render(statsSQL))
	if err != nil {
		return nil, c.wrapErr("stats", err)
	}
	var r statsRow
	var all []statsRow
	_, err = pgx.ForEachRow(rows, []any{&r.Queue, &r.Status, &r.N, &r.Scheduled, &r.Oldest, &r.M1, &r.H1, &r.Overrun}, func() error {
		all = append(all, r)
		return nil
	})
	if err != nil {
		return nil, c.wrapErr("stats", err)
	}
	out, err := c.withPaused(ctx, gatherStats(all))
	if err != nil {
		return nil, c.wrapErr("stats", err)
	}
	return out, nil
}

// withPaused marks the paused queues of out, adds those without jobs, and sorts by queue.
func (c *Client) withPaused(ctx context.Context, out []QueueStats) ([]QueueStats, error) {
	paused, err := claim.PausedQueues(ctx, c.pool, c.db.Render(claim.PausedQueuesSQL))
	if err != nil {
		return nil, err
	}
	for i := range out {
		if at, ok := paused[out[i].Queue]; ok {
			out[i].Paused, out[i].PausedAt = true, at
			delete(paused, out[i].Queue)
		}
	}
	for q, at := range paused {
		out = append(out, QueueStats{Queue: q, Counts: map[JobStatus]int64{}, Paused: true, PausedAt: at,
			FinishedLastMinute: map[JobStatus]int64{}, FinishedLastHour: map[JobStatus]int64{}})
	}
	slices.SortFunc(out, func(a, b QueueStats) int { return strings.Compare(a.Queue, b.Queue) })
	return out, nil
}

// gatherStats folds rows ordered by queue into one QueueStats per queue.
func gatherStats(rows []statsRow) []QueueStats {
	var out []QueueStats
	for _, r := range rows {
		if len(out) == 0 || out[len(out)-1].Queue != r.Queue {
			out = append(out, QueueStats{Queue: r.Queue, Counts: map[JobStatus]int64{},
				FinishedLastMinute: map[JobStatus]int64{}, FinishedLastHour: map[JobStatus]int64{}})
		}
		s := &out[len(out)-1]
		st := JobStatus(r.Status)
		if r.N > 0 {
			s.Counts[st] = r.N
		}
		if r.M1 > 0 {
			s.FinishedLastMinute[st] = r.M1
		}
		if r.H1 > 0 {
			s.FinishedLastHour[st] = r.H1
		}
		s.Scheduled += r.Scheduled
		s.Overrunning += r.Overrun
		if d := time.Duration(r.Oldest * float64(time.Second)); d > s.OldestDue {
			s.OldestDue = d
		}
	}
	return out
}

// cachedStatsReadSQL reads the cached stats and whether they are older than $1. A fresh
// cache is answered by it alone: cachedStatsSQL holds the whole stats query, whose
// estimated cost makes Postgres JIT-compile it (about 40 ms with jit on, the default)
// even when the cache is fresh and the recompute never runs.
const cachedStatsReadSQL = `SELECT taken_at, data, taken_at <= now() - $1::interval FROM {s}.stats_cache WHERE id = 1`

// cachedStatsSQL returns the cached stats, first recomputing them with statsSQL when
// they are older than $1 — in one process only: the row lock is taken with SKIP LOCKED,
// so while one process recomputes, the others read the previous value without waiting.
// Their union's second branch reads the row as it was when the statement began.
const cachedStatsSQL = `WITH lead AS (
	SELECT id FROM {s}.stats_cache WHERE id = 1 AND taken_at <= now() - $1::interval
	FOR UPDATE SKIP LOCKED
), fresh AS (
	UPDATE {s}.stats_cache c SET taken_at = now(),
		data = (SELECT coalesce(jsonb_agg(to_jsonb(t)), '[]') FROM (` + statsSQL + `) t)
	FROM lead WHERE c.id = lead.id
	RETURNING c.taken_at, c.data
)
SELECT taken_at, data FROM fresh
UNION ALL
SELECT taken_at, data FROM {s}.stats_cache WHERE id = 1 AND NOT EXISTS (SELECT 1 FROM fresh)`

// CachedStats returns [Client.Stats] as computed by whichever process last refreshed a
// cache table, and when they were computed (by the database clock). When the cache is
// older than maxAge, this call refreshes it — unless another process is refreshing it
// at that moment, in which case it returns the previous value at once. So any number of
// processes calling it every maxAge cost one stats query per maxAge in all: it is what
// metrics exporters should call. Which queues are paused is read afresh at each call (a
// second, small statement). maxAge <= 0 always refreshes.
func (c *Client) CachedStats(ctx context.Context, maxAge time.Duration) ([]QueueStats, time.Time, error) {
	var (
		at    time.Time
		data  []byte
		stale bool
	)
	err := c.pool.QueryRow(ctx, c.db.Render(cachedStatsReadSQL), max(maxAge, 0)).Scan(&at, &data, &stale)
	if err == nil && stale {
		err = c.pool.QueryRow(ctx, c.db.Render(cachedStatsSQL), max(maxAge, 0)).Scan(&at, &data)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, time.Time{}, fmt.Errorf("skiplock: cached stats: the stats_cache row is missing: run skiplock.Migrate for schema %q", c.schema)
	}
	if err != nil {
		return nil, time.Time{}, c.wrapErr("cached stats", err)
	}
	var rows []statsRow
	if err := json.Unmarshal(data, &rows); err != nil {
		return nil, time.Time{}, fmt.Errorf("skiplock: cached stats: %w", err)
	}
	out, err := c.withPaused(ctx, gatherStats(rows))
	if err != nil {
		return nil, time.Time{}, c.wrapErr("cached stats", err)
	}
	return out, at, nil
}

// The rest of this file holds what a worker does differently when it is one of many processes on
// the same queues: it learns how many processes serve them (the workers table, renewed
// with the election statement, see internal/ownership, leader.go), and bounds the statements it keeps in
// flight on the queues' rows by that count, so that the fleet as a whole keeps about
// WorkerConfig.FleetStatements of them in flight whatever its size. (Measured on two
// cores: 16 processes with one statement each in flight drained at 0.9–1.2 of one
// process; with two each, at 0.35–0.4.)
//
// Why: a claim walks the head of its queue's claim index, and an entry of a job claimed
// moments ago leaves it only once no statement's snapshot can still see the queued row.
// With a few statements in flight that is at once; with dozens (16 processes, each with
// two claim loops and two batching loops, on a server whose cores they share) the oldest
// snapshot is that of the slowest statement, every claim walks the entries of the jobs
// the others just claimed, and gets slower still: the drain settles at a third of one
// process's rate (bench/README, "Many worker processes"). A lone process keeps its full
// pipeline: the bound applies only from a second process on.

// WorkerInfo is one worker of the fleet as the workers table knows it (see
// [Client.Workers]).
type WorkerInfo struct {
	ID     string   // WorkerConfig.ID
	Queues []string // the queues it serves, sorted
	// StartedAt is its first registration; ExpiresAt is when it stops counting unless it
	// registers again (every 1.7–3 s while it runs). A worker that gave up on its
	// handlers at a hard stop ([Worker.StopAndCancel]) sets both to that moment.
	StartedAt, ExpiresAt time.Time
	// Alive: ExpiresAt is still ahead, by the database's clock (which a step of the
	// server's clock moves: the workers themselves judge each other by their own clocks,
	// see docs/ownership.md). A worker that stopped deletes its row; one that died stays
	// listed, not alive, until about a minute after the other workers judged it dead.
	Alive bool
	// Leader: it holds the fleet's maintenance (the sweep, the archive purge, the vacuum
	// check) now.
	Leader bool
}

// workersSQL lists the workers table with who leads the maintenance.
const workersSQL = `SELECT w.id, w.queues, w.started_at, w.expires_at, w.expires_at > now(),
	coalesce(l.leader_id = w.id AND l.expires_at > now(), false)
FROM {s}.workers w LEFT JOIN {s}.leader l ON l.name = $1
ORDER BY w.id`

// Workers lists the workers registered in the schema: each running worker keeps a row,
// renewed every few seconds (with its election statement, or, with a negative
// SweepInterval, a registration of its own), and deletes it when it stops. It tells how
// many processes serve which queues, and which of them leads the maintenance.
func (c *Client) Workers(ctx context.Context) ([]WorkerInfo, error) {
	rows, err := c.pool.Query(ctx, c.db.Render(workersSQL), ownership.MaintenanceRole)
	if err != nil {
		return nil, c.wrapErr("workers", err)
	}
	var w WorkerInfo
	out := []WorkerInfo{}
	_, err = pgx.ForEachRow(rows, []any{&w.ID, &w.Queues, &w.StartedAt, &w.ExpiresAt, &w.Alive, &w.Leader}, func() error {
		out = append(out, w)
		w.Queues = nil
		return nil
	})
	if err != nil {
		return nil, c.wrapErr("workers", err)
	}
	return out, nil
}
