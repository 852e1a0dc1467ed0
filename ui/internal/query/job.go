package query

// This file holds what the job page and the job actions run beside the public client:
// a job's extra columns and raw error history, run now, and the deletes.

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// extrasSQL returns a job's row as JSON without the columns the job page shows by name,
// and its raw error history (whose entries may carry more than skiplock.AttemptError
// decodes, such as a stack): columns a later migration adds (metadata, progress, output)
// show up on the page without a change here.
const extrasSQL = `SELECT to_jsonb(j) - $2::text[], j.errors FROM {s}.jobs j WHERE id = $1
UNION ALL
SELECT to_jsonb(a) - $2::text[], a.errors FROM {s}.jobs_archive a WHERE id = $1
LIMIT 1`

// knownColumns are the columns the job page shows by name.
var knownColumns = []string{"id", "queue", "kind", "payload", "status", "priority", "run_at", "attempts",
	"max_attempts", "locked_at", "locked_by", "last_error", "errors", "unique_key", "created_at", "finished_at"}

// deleteHotSQL deletes jobs from the hot table, except running ones (their worker holds
// them and would write their result to a row that is gone) and the queued jobs of
// workflow tasks (their tasks would never settle: skiplock.ErrTaskPending). It returns
// the deleted ids.
const deleteHotSQL = `DELETE FROM {s}.jobs WHERE id = ANY($1) AND status <> 'running'
	AND NOT (status = 'queued' AND metadata ? 'skiplock_workflow') RETURNING id`

// deleteArchiveSQL deletes finished jobs from the archive.
const deleteArchiveSQL = `DELETE FROM {s}.jobs_archive WHERE id = ANY($1) RETURNING id`

// deleteStuckSQL is the dead page's delete: only jobs still dead or failed, so a job
// requeued by someone else since the page was rendered is left alone.
const deleteStuckSQL = `DELETE FROM {s}.jobs WHERE id = ANY($1) AND status IN ('dead', 'failed') RETURNING id`

// runningSQL says which of the ids are running (and so were not deleted).
const runningSQL = `SELECT id FROM {s}.jobs WHERE id = ANY($1) AND status = 'running'`

// Jobs runs the statements of the job page and of the job and dead-page actions.
type Jobs struct {
	pool                                          *pgxpool.Pool
	extras, deleteHot, deleteArchive, deleteStuck string
	running                                       string
}

func newJobs(pool *pgxpool.Pool, x func(string) string) *Jobs {
	return &Jobs{pool: pool, extras: x(extrasSQL), deleteHot: x(deleteHotSQL),
		deleteArchive: x(deleteArchiveSQL), deleteStuck: x(deleteStuckSQL), running: x(runningSQL)}
}

// Extras are the parts of a job's row the public JobRow does not carry.
type Extras struct {
	Other  map[string]json.RawMessage // columns the page does not know by name
	Errors []map[string]any           // the raw error history, oldest first
}

// Extras returns the extras of job id; none when it does not exist.
func (j *Jobs) Extras(ctx context.Context, id int64) (Extras, error) {
	var other, errs []byte
	err := j.pool.QueryRow(ctx, j.extras, id, knownColumns).Scan(&other, &errs)
	if errors.Is(err, pgx.ErrNoRows) {
		return Extras{}, nil
	}
	if err != nil {
		return Extras{}, err
	}
	var x Extras
	if err := json.Unmarshal(other, &x.Other); err != nil {
		return Extras{}, err
	}
	for k, v := range x.Other {
		if string(v) == "null" {
			delete(x.Other, k)
		}
	}
	if len(errs) > 0 {
		_ = json.Unmarshal(errs, &x.Errors) // a history edited by hand into another shape shows nothing
	}
	return x, nil
}

// DeleteResult is what a delete did.
type DeleteResult struct {
	Deleted []int64
	Running []int64 // refused: running
}

// Delete deletes the jobs with the given ids from the hot table (unless running) and
// from the archive.
func (j *Jobs) Delete(ctx context.Context, ids []int64) (DeleteResult, error) {
	var res DeleteResult
	hot, err := j.ids(ctx, j.deleteHot, ids)
	if err != nil {
		return res, err
	}
	res.Deleted = hot
	rest := slices.DeleteFunc(slices.Clone(ids), func(id int64) bool { return slices.Contains(hot, id) })
	if len(rest) == 0 {
		return res, nil
	}
	arch, err := j.ids(ctx, j.deleteArchive, rest)
	if err != nil {
		return res, err
	}
	res.Deleted = append(res.Deleted, arch...)
	res.Running, err = j.ids(ctx, j.running, rest)
	return res, err
}

// DeleteStuck deletes the jobs with the given ids that are dead or failed, and returns
// the ids it deleted.
func (j *Jobs) DeleteStuck(ctx context.Context, ids []int64) ([]int64, error) {
	return j.ids(ctx, j.deleteStuck, ids)
}

// ids runs sql on ids and returns the ids it answers.
func (j *Jobs) ids(ctx context.Context, sql string, ids []int64) ([]int64, error) {
	rows, err := j.pool.Query(ctx, sql, ids)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}
