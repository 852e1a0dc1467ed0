// This file holds the enqueue of a job that depends on jobs that already exist (the
// root's EnqueueOptions.DependsOn): the parents' rows are locked and judged, and the new
// job waits for those not finished yet. Migration 13's triggers release or cancel it in
// the transaction that writes the last parent's outcome.

package enqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// MaxDependsOn bounds the parents of one job.
const MaxDependsOn = 1000

// MetaDependents marks a job that has dependents waiting for it: the triggers of
// migration 13 fire only for rows that carry it.
const MetaDependents = "skiplock_dependents"

// ErrDependencyNotFound is returned when a job id in DependsOn is in neither the jobs
// table nor the archive; nothing is written.
var ErrDependencyNotFound = errors.New("skiplock: a job the new job depends on does not exist")

// Statements of Attach, run in this order in the enqueue's transaction.
const (
	// depLockSQL locks the parents' rows, in id order (two enqueues that share parents
	// cannot deadlock), until the transaction ends: a parent's outcome, which updates or
	// deletes its row, either commits before (and is read here, the lock following the
	// row to its newest version) or waits for this transaction and then finds the mark
	// and the dependency rows it wrote (the trigger reads them in a snapshot of its own).
	// A success batch passes over locked rows and writes them with a later batch.
	depLockSQL = `SELECT id, status FROM {s}.jobs WHERE id = ANY ($1::bigint[]) ORDER BY id FOR UPDATE`
	// depArchiveSQL finds the parents that were not in jobs: archived successes. A
	// statement of its own, so its snapshot is taken after depLockSQL's waits: a parent
	// archived while the lock waited for its outcome is found here.
	depArchiveSQL = `SELECT id, status FROM {s}.jobs_archive WHERE id = ANY ($1::bigint[])`
	// depWaitSQL makes job $1 wait for the parents $4: its run_at (9999-12-31 while it
	// waits: no claim reads it) is kept in job_waits with the count $2 and the policy $3,
	// one dependency row per parent, and the parents get the mark that fires the trigger.
	depWaitSQL = `WITH w AS (
	INSERT INTO {s}.job_waits (job_id, waiting, on_failure, run_at)
	SELECT id, $2::int, $3::text, run_at FROM {s}.jobs WHERE id = $1
),
d AS (
	INSERT INTO {s}.job_dependencies (parent_id, job_id) SELECT p, $1 FROM unnest($4::bigint[]) AS p
),
m AS (
	UPDATE {s}.jobs SET metadata = metadata || jsonb_build_object('` + MetaDependents + `', '1')
	WHERE id = ANY ($4::bigint[]) AND NOT metadata ? '` + MetaDependents + `'
)
UPDATE {s}.jobs SET run_at = '9999-12-31 00:00:00+00' WHERE id = $1`
	// depCancelSQL cancels job $1 at once: a parent had already ended without success.
	depCancelSQL = `UPDATE {s}.jobs SET status = 'cancelled', finished_at = now(), last_error = $2
WHERE id = $1 RETURNING finished_at`
)

// Dependencies attaches new jobs to existing ones, on one schema.
type Dependencies struct {
	lock, archive, wait, cancel string
}

// NewDependencies renders the statements of Attach for schema.
func NewDependencies(schema string) *Dependencies {
	return &Dependencies{lock: pgutil.Render(schema, depLockSQL), archive: pgutil.Render(schema, depArchiveSQL),
		wait: pgutil.Render(schema, depWaitSQL), cancel: pgutil.Render(schema, depCancelSQL)}
}

// CheckDependsOn refuses ids that cannot be jobs and returns them without repeats.
func CheckDependsOn(ids []int64) ([]int64, error) {
	if len(ids) > MaxDependsOn {
		return nil, fmt.Errorf("%w: DependsOn has %d ids: at most %d", ErrInvalidOptions, len(ids), MaxDependsOn)
	}
	out := slices.Clone(ids)
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > 0 && out[0] <= 0 {
		return nil, fmt.Errorf("%w: DependsOn id %d: job ids are positive", ErrInvalidOptions, out[0])
	}
	return out, nil
}

// Attach makes row, just inserted through db (a transaction), depend on parents (sorted,
// without repeats: CheckDependsOn). Parents that succeeded (in jobs or the archive) are
// satisfied; one that ended otherwise cancels row at once under CancelDependents (row's
// status and finish are updated) or is satisfied under RunDependents; row waits for the
// others. An id found nowhere returns [ErrDependencyNotFound]: the caller rolls back; so
// does row's own id (a job that did not exist before this enqueue, which would wait for
// itself for ever).
func (d *Dependencies) Attach(ctx context.Context, db jobtype.DBTX, row *jobtype.JobRow, parents []int64, policy OnFailure) error {
	if slices.Contains(parents, row.ID) {
		return fmt.Errorf("%w: job %d would depend on itself (DependsOn names jobs that existed before the enqueue)", ErrDependencyNotFound, row.ID)
	}
	status, err := d.statuses(ctx, db, parents)
	if err != nil {
		return err
	}
	var pending []int64
	var failed int64
	for _, p := range parents {
		switch status[p] {
		case jobtype.StatusSucceeded:
		case jobtype.StatusQueued, jobtype.StatusRunning:
			pending = append(pending, p)
		default:
			if failed == 0 {
				failed = p
			}
		}
	}
	if failed != 0 && policy == CancelDependents {
		msg := fmt.Sprintf("skiplock: dependency %d did not succeed", failed)
		if err := db.QueryRow(ctx, d.cancel, row.ID, msg).Scan(&row.FinishedAt); err != nil {
			return err
		}
		row.Status, row.LastError = jobtype.StatusCancelled, msg
		return nil
	}
	if len(pending) == 0 {
		return nil
	}
	_, err = db.Exec(ctx, d.wait, row.ID, len(pending), policy.sql(), pending)
	return err
}

// statuses locks the parents' rows and returns each parent's status, or
// ErrDependencyNotFound naming those found nowhere.
func (d *Dependencies) statuses(ctx context.Context, db jobtype.DBTX, parents []int64) (map[int64]jobtype.JobStatus, error) {
	status := make(map[int64]jobtype.JobStatus, len(parents))
	read := func(sql string, ids []int64) error {
		rows, err := db.Query(ctx, sql, ids)
		if err != nil {
			return err
		}
		var id int64
		var s string
		_, err = pgx.ForEachRow(rows, []any{&id, &s}, func() error {
			status[id] = jobtype.JobStatus(s)
			return nil
		})
		return err
	}
	if err := read(d.lock, parents); err != nil {
		return nil, err
	}
	missing := func() []int64 {
		var m []int64
		for _, p := range parents {
			if _, ok := status[p]; !ok {
				m = append(m, p)
			}
		}
		return m
	}
	if m := missing(); len(m) > 0 {
		if err := read(d.archive, m); err != nil {
			return nil, err
		}
	}
	if m := missing(); len(m) > 0 {
		return nil, fmt.Errorf("%w: job ids %v are in neither the jobs table nor the archive", ErrDependencyNotFound, m)
	}
	return status, nil
}
