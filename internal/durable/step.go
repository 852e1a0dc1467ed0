// This file holds Step and StepTx: a function's result recorded for its job, fenced on
// the attempt, so that a later attempt of the job returns it without running it again.

package durable

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// Step runs fn as the step name of the handler whose context is ctx, or returns its
// recorded result (see the root's Step).
func Step[T any](ctx context.Context, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	r, seq, rec, err := enterStep(ctx, name)
	if err != nil || rec != nil {
		return decode[T](r, seq, rec, err)
	}
	began := time.Now()
	defer r.releaseOnPanic(seq)
	v, err := runFn(r, name, func() (T, error) { return fn(ctx) })
	if err != nil {
		r.release(seq)
		return v, err
	}
	b, err := r.encode(name, v)
	if err == nil {
		err = r.record(ctx, r.e.db.Pool, seq, name, b, time.Since(began))
	}
	if err != nil {
		r.release(seq)
		return zero, err
	}
	r.store(seq, recorded{name: name, kind: KindStep, result: b, finished: true})
	return v, nil
}

// StepTx runs fn in a transaction of its own whose commit records the step: fn's writes
// and the step's record commit together, fenced on the attempt (see the root's StepTx).
func StepTx[T any](ctx context.Context, name string, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (T, error) {
	var zero T
	r, seq, rec, err := enterStep(ctx, name)
	if err != nil || rec != nil {
		return decode[T](r, seq, rec, err)
	}
	var v T
	defer r.releaseOnPanic(seq)
	err = r.runTx(ctx, seq, name, func(ctx context.Context, tx pgx.Tx) (json.RawMessage, error) {
		var err error
		if v, err = runFn(r, name, func() (T, error) { return fn(ctx, tx) }); err != nil {
			return nil, err
		}
		return r.encode(name, v)
	})
	if err != nil {
		r.release(seq)
		return zero, err
	}
	return v, nil
}

// enterStep checks name and takes the handler's next place for a step.
func enterStep(ctx context.Context, name string) (*run, int, *recorded, error) {
	if err := CheckName("step", name); err != nil {
		return nil, 0, nil, err
	}
	r, err := runOf(ctx)
	if err != nil {
		return nil, 0, nil, err
	}
	seq, rec, err := r.enter(ctx, KindStep, name)
	return r, seq, rec, err
}

// decode returns the result recorded for the step at seq, or err.
func decode[T any](r *run, seq int, rec *recorded, err error) (T, error) {
	var v T
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(rec.result, &v); err != nil {
		return v, jobtype.Permanent(fmt.Errorf("skiplock: step %d %q of job %d: its recorded result does not decode into %T: %w (its type changed: Fork the job from this step)",
			seq, rec.name, r.row.ID, v, err))
	}
	return v, nil
}

// encode marshals a step's result to the JSON it is recorded as.
func (r *run) encode(name string, v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err == nil {
		err = pgutil.CheckJSONB(b)
	}
	if err != nil {
		return nil, jobtype.Permanent(fmt.Errorf("skiplock: step %q: its result cannot be recorded as JSON: %w", name, err))
	}
	if r.maxBytes > 0 && len(b) > r.maxBytes {
		return nil, jobtype.Permanent(fmt.Errorf("skiplock: step %q: its result is %d bytes, the limit is %d (Config.MaxPayloadBytes): record a smaller result (an id, not the data)",
			name, len(b), r.maxBytes))
	}
	return b, nil
}

// runTx runs fn in a transaction and records the step at seq with the result fn
// returns, in the same transaction, fenced on the attempt. A stale attempt commits
// nothing and gets ErrAttemptLost. The run keeps the record only once the commit
// succeeded: a failed commit leaves the place free for the next call.
func (r *run) runTx(ctx context.Context, seq int, name string, fn func(context.Context, pgx.Tx) (json.RawMessage, error)) error {
	tx, err := r.e.db.Pool.Begin(ctx)
	if err != nil {
		return r.e.db.WrapErr(fmt.Sprintf("StepTx %q: begin", name), err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	began := time.Now()
	b, err := fn(ctx, tx)
	if err != nil {
		return err
	}
	if err := r.record(ctx, tx, seq, name, b, time.Since(began)); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return r.e.db.WrapErr(fmt.Sprintf("StepTx %q: commit", name), err)
	}
	r.store(seq, recorded{name: name, kind: KindStep, result: b, finished: true})
	return nil
}

// recordSQL records a step's result, fenced on the attempt: $1 the job, $2 its token, $3
// the worker. The job's row is locked (FOR NO KEY UPDATE) until the transaction ends,
// so that the job cannot be taken back between the check and the commit; a stale
// attempt matches no row and inserts nothing. The first record of a job marks it
// durable (its records then go away with it, migration 15). The duration ($7, µs) is
// measured by the worker; the times are the database's.
const recordSQL = `WITH j AS (
	SELECT attempts, durable FROM {s}.jobs
	WHERE id = $1 AND fence = $2 AND (status || '') = 'running' AND locked_by = $3
	FOR NO KEY UPDATE
), mark AS (
	UPDATE {s}.jobs SET durable = true WHERE id = $1 AND (SELECT durable IS NOT TRUE FROM j)
)
INSERT INTO {s}.job_steps (job_id, seq, name, kind, result, attempt, started_at, finished_at)
SELECT $1, $4, $5, 'step', $6::jsonb, attempts, clock_timestamp() - $7::bigint * interval '1 microsecond', clock_timestamp()
FROM j`

// record writes the step at seq with result b on db (the pool, or StepTx's transaction),
// fenced on the attempt. The caller keeps it in the run (store) once it committed.
func (r *run) record(ctx context.Context, db jobtype.DBTX, seq int, name string, b json.RawMessage, took time.Duration) error {
	// As text: the simple and exec protocols (PgBouncer setups) would send []byte as bytea.
	tag, err := db.Exec(ctx, r.e.sql.record, r.row.ID, r.row.Fence, r.e.workerID, seq, name, string(b), took.Microseconds())
	if err != nil {
		return r.e.db.WrapErr(fmt.Sprintf("recording step %q", name), err)
	}
	if tag.RowsAffected() == 0 {
		return lost(r.row, fmt.Sprintf("step %q", name))
	}
	return nil
}

// lost is the error of a durable call (what: `step "charge"`, "sleep", `wait for signal
// "approve"`) whose attempt no longer holds its job.
func lost(row *jobtype.JobRow, what string) error {
	return fmt.Errorf("%w: job %d, attempt %d: the %s was not recorded (the job was cancelled or finished, or taken back to run again elsewhere): return the error",
		jobtype.ErrAttemptLost, row.ID, row.Attempts, what)
}
