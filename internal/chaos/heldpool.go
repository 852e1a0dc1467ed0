// This file holds the held-pool fault (issue 41, point 2): a healthy worker whose pool is
// held full by its own handlers. The fault starts a worker of its own (the worker
// program's -held mode, outside the slots: no kill or deploy reaches it; at the
// library's default lease settings) that serves only
// audit.HeldQueue with HeldPoolSlots slots on a pool of HeldPoolConns connections; each
// handler begins a transaction on that pool, holds it for HeldPoolHold, then commits its
// job's success in it (CompleteTx). The fault enqueues HeldPoolJobs jobs there and waits
// until they are final, then stops that worker. The database is fine all along: the
// worker only starts its jobs late, and must keep its lease (its renewals do not wait
// for the pool), so that none of its handlers is cancelled, no job runs elsewhere or
// twice, and every job succeeds in its first attempt.

package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/chaos/audit"
)

// FaultHeldPool keeps one healthy worker's pool held full by slow CompleteTx handlers.
const FaultHeldPool FaultKind = "pool held by CompleteTx handlers"

// The held-pool worker's shape, as in the reproduction: more slots than
// connections, each handler holding one for about 2 s.
const (
	HeldPoolSlots = 16
	HeldPoolConns = 4
	HeldPoolHold  = 2 * time.Second
)

// heldPoolWait bounds the wait for the fault's jobs, past the time they need at
// HeldPoolConns at a time.
const heldPoolWait = time.Minute

// HeldPoolReport is what the held-pool fault found. Every count but Jobs must be zero.
type HeldPoolReport struct {
	Jobs         int           // jobs enqueued on the held queue
	NotSucceeded int           // of them, not succeeded when the fault ended (lost, failed or stuck)
	EndedEarly   int           // executions that did not commit: cancelled by their worker, or failed
	Reruns       int           // executions beyond one per job: a job ran again, here or elsewhere
	MostWaited   time.Duration // the longest a handler's Begin waited for a connection
	Examples     []string      // a few of the executions that ended early
}

// broken lists the promises the fault broke; a nil report broke none.
func (h *HeldPoolReport) broken() []string {
	if h == nil {
		return nil
	}
	var out []string
	if h.NotSucceeded > 0 {
		out = append(out, fmt.Sprintf("%d held-pool jobs not succeeded", h.NotSucceeded))
	}
	if h.EndedEarly > 0 {
		out = append(out, fmt.Sprintf("%d held-pool handlers cancelled or failed on a healthy worker", h.EndedEarly))
	}
	if h.Reruns > 0 {
		out = append(out, fmt.Sprintf("%d held-pool executions beyond one per job", h.Reruns))
	}
	return out
}

// print adds the fault's rows to the report's table.
func (h *HeldPoolReport) print(row func(name string, value any, promise string)) {
	if h == nil {
		return
	}
	ok := func(n int) string {
		if n == 0 {
			return "ok"
		}
		return "BROKEN"
	}
	row(fmt.Sprintf("held pool (%d slots, %d connections, %s per transaction): jobs", HeldPoolSlots, HeldPoolConns, HeldPoolHold), h.Jobs, "")
	row("  not succeeded / handlers cancelled or failed / re-runs",
		fmt.Sprintf("%d / %d / %d", h.NotSucceeded, h.EndedEarly, h.Reruns), ok(h.NotSucceeded+h.EndedEarly+h.Reruns))
	row("  longest wait for a connection", fmtDur(h.MostWaited), "")
}

// heldPool runs the held-pool fault.
func (r *runner) heldPool(ctx context.Context, f *Fault) error {
	f.At = time.Now().Round(0)
	if err := retryDB(ctx, func(ctx context.Context) error {
		_, err := r.pool.Exec(ctx, audit.CreateHeldSQL)
		return err
	}); err != nil {
		return fmt.Errorf("chaos: creating the held-pool table: %w", err)
	}
	u, err := url.Parse(r.url)
	if err != nil {
		return err
	}
	q := u.Query()
	q.Set("connect_timeout", "2")
	u.RawQuery = q.Encode()
	p, err := r.fleet.startExtra(fmt.Sprintf("held-%d", len(r.faults)), u.String(), []string{
		"-held", HeldPoolHold.String(),
		"-concurrency", strconv.Itoa(HeldPoolSlots),
		"-max-conns", strconv.Itoa(HeldPoolConns),
		// No sweeping, so no leadership: the fault is about the handlers' pool, and the
		// fleet's maintenance stays with the slots' workers.
		"-sweep-interval", "-1s",
		// The library's default visibility timeout (zero passes it on): at the run's short
		// one (3 s), the jobs' own heartbeats, which still go through the pool the
		// handlers hold, wait past the job-lease watchdog's 2 s and it cancels handlers
		// (docs/ownership.md §9, not yet done). The worker lease's renewals, on their own
		// connection, are what this fault checks.
		"-visibility-timeout", "0s",
	})
	if err != nil {
		return err
	}
	f.worker = p.id
	ids, err := r.enqueueHeld(ctx)
	if err != nil {
		r.fleet.stopExtra(p, stopGrace)
		return err
	}
	// Jobs still not final when the wait ends are a finding (NotSucceeded), not a failure
	// of the run.
	err = r.waitHeld(ctx, ids)
	r.fleet.stopExtra(p, stopGrace)
	f.End = time.Now().Round(0)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	rep, cerr := r.checkHeld(ctx, ids)
	if cerr != nil {
		return cerr
	}
	r.held = rep
	f.Detail = fmt.Sprintf("worker %s: %d jobs on %d slots over %d connections, each holding one %s; %d not succeeded, %d handlers cancelled or failed, %d re-runs; longest wait for a connection %s",
		p.id, rep.Jobs, HeldPoolSlots, HeldPoolConns, HeldPoolHold, rep.NotSucceeded, rep.EndedEarly, rep.Reruns, fmtDur(rep.MostWaited))
	if err != nil {
		f.Detail += "; " + err.Error()
	}
	return nil
}

// enqueueHeld enqueues the fault's HeldPoolJobs jobs on the held queue and returns their
// ids.
func (r *runner) enqueueHeld(ctx context.Context) ([]int64, error) {
	params := make([]skiplock.EnqueueParams, r.opts.HeldPoolJobs)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: audit.HeldArgs{N: i}, Options: &skiplock.EnqueueOptions{Queue: audit.HeldQueue}}
	}
	var ids []int64
	err := retryDB(ctx, func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
			if _, err := r.client.EnqueueManyTx(ctx, tx, params); err != nil {
				return err
			}
			// Before the commit no worker sees them, and no earlier held-pool job is still
			// queued (checkHeld cancelled those left): the queued ones are these.
			rows, err := tx.Query(ctx, `SELECT id FROM skiplock.jobs WHERE kind = $1 AND status = 'queued' ORDER BY id`, audit.HeldKind)
			if err != nil {
				return err
			}
			ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
			if err == nil && len(ids) != len(params) {
				err = fmt.Errorf("chaos: %d held-pool jobs enqueued, %d found", len(params), len(ids))
			}
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: enqueueing the held-pool jobs: %w", err)
	}
	return ids, nil
}

// waitHeld waits until none of ids is queued or running, for at most the time the jobs
// need at HeldPoolConns at a time plus heldPoolWait.
func (r *runner) waitHeld(ctx context.Context, ids []int64) error {
	need := time.Duration((len(ids)+HeldPoolConns-1)/HeldPoolConns) * HeldPoolHold
	deadline := time.Now().Add(need + heldPoolWait)
	for {
		var active int
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := r.pool.QueryRow(qctx, `SELECT count(*) FROM skiplock.jobs WHERE id = ANY($1) AND status IN ('queued', 'running')`, ids).Scan(&active)
		cancel()
		switch {
		case err == nil && active == 0:
			return nil
		case time.Now().After(deadline):
			return errors.Join(fmt.Errorf("chaos: %d held-pool jobs still queued or running after %s", active, fmtDur(need+heldPoolWait)), err)
		}
		if err := sleepUntil(ctx, time.Now().Add(200*time.Millisecond)); err != nil {
			return err
		}
	}
}

// heldCheckSQL reads, for the fault's jobs ($1), how many did not succeed, the executions
// beyond one per job, the longest wait for a connection, and the executions that ended
// early, with why.
const heldCheckSQL = `SELECT
	(SELECT count(*) FROM unnest($1::bigint[]) AS j(id)
		WHERE NOT EXISTS (SELECT 1 FROM skiplock.jobs_archive a WHERE a.id = j.id AND a.status = 'succeeded')),
	(SELECT count(*) FROM chaos.executions WHERE job_id = ANY($1)) - cardinality($1),
	(SELECT coalesce(max(waited_ms), 0) FROM chaos.held WHERE job_id = ANY($1)),
	coalesce((SELECT array_agg(job_id || '/' || attempt || ' on ' || worker_id || ': ' || ended_early ORDER BY exec_id)
		FROM chaos.held WHERE job_id = ANY($1) AND ended_early IS NOT NULL), '{}')`

// checkHeld reads what became of the fault's jobs. The fault's worker has stopped: if
// some were not done, they are cancelled, so that the run's drain does not wait for jobs
// of a queue no worker serves any more.
func (r *runner) checkHeld(ctx context.Context, ids []int64) (*HeldPoolReport, error) {
	rep := &HeldPoolReport{Jobs: len(ids)}
	var (
		notSucceeded, reruns, waitedMs int64
		early                          []string
	)
	err := retryDB(ctx, func(ctx context.Context) error {
		return r.pool.QueryRow(ctx, heldCheckSQL, ids).Scan(&notSucceeded, &reruns, &waitedMs, &early)
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: reading the held-pool jobs: %w", err)
	}
	rep.NotSucceeded, rep.Reruns, rep.EndedEarly = int(notSucceeded), int(max(reruns, 0)), len(early)
	rep.MostWaited = time.Duration(waitedMs) * time.Millisecond
	rep.Examples = early[:min(len(early), maxExamples)]
	for _, id := range ids {
		if rep.NotSucceeded == 0 {
			break
		}
		if _, err := r.client.Cancel(ctx, id); err != nil && !errors.Is(err, skiplock.ErrJobNotFound) {
			return nil, fmt.Errorf("chaos: cancelling held-pool job %d: %w", id, err)
		}
	}
	return rep, nil
}
