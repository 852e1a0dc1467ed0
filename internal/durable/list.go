// This file holds the operator's views of a job's durable records, Steps and Signals,
// and Fork, which starts a job again from one of its steps.

package durable

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/jobtype"
)

// stepsSQL lists a job's recorded steps in their order, with their status.
const stepsSQL = `SELECT seq, name, kind,
	CASE WHEN error = 'timeout' THEN 'timed_out' WHEN finished_at IS NOT NULL THEN 'done' ELSE 'waiting' END,
	result, coalesce(octet_length(result::text), 0), attempt, started_at, wake_at, finished_at
FROM {s}.job_steps WHERE job_id = $1 ORDER BY seq`

// signalsSQL lists the signals sent to a job, oldest first.
const signalsSQL = `SELECT id, name, payload, sent_at, consumed_seq
FROM {s}.job_signals WHERE job_id = $1 ORDER BY id`

// existsSQL says whether a job is in the jobs table or the archive.
const existsSQL = `SELECT EXISTS (SELECT FROM {s}.jobs WHERE id = $1) OR EXISTS (SELECT FROM {s}.jobs_archive WHERE id = $1)`

// Steps returns the steps job recorded, in their order. A job without any is an empty
// list; an unknown job is ErrJobNotFound.
func (s Store) Steps(ctx context.Context, job int64) ([]StepInfo, error) {
	rows, err := s.DB.Pool.Query(ctx, s.DB.Render(stepsSQL), job)
	if err != nil {
		return nil, s.DB.WrapErr("Steps", err)
	}
	steps := []StepInfo{}
	var st StepInfo
	_, err = pgx.ForEachRow(rows, []any{&st.Seq, &st.Name, &st.Kind, &st.Status, &st.Result, &st.ResultBytes,
		&st.Attempt, &st.StartedAt, &st.WakeAt, &st.FinishedAt}, func() error {
		if st.FinishedAt != nil {
			st.Duration = st.FinishedAt.Sub(st.StartedAt)
		}
		steps = append(steps, st)
		st = StepInfo{}
		return nil
	})
	if err != nil {
		return nil, s.DB.WrapErr("Steps", err)
	}
	if len(steps) == 0 {
		return steps, s.mustExist(ctx, "Steps", job)
	}
	return steps, nil
}

// Signals returns the signals sent to job, oldest first, consumed or not. A job without
// any is an empty list; an unknown job is ErrJobNotFound.
func (s Store) Signals(ctx context.Context, job int64) ([]SignalInfo, error) {
	rows, err := s.DB.Pool.Query(ctx, s.DB.Render(signalsSQL), job)
	if err != nil {
		return nil, s.DB.WrapErr("Signals", err)
	}
	sigs := []SignalInfo{}
	var sg SignalInfo
	_, err = pgx.ForEachRow(rows, []any{&sg.ID, &sg.Name, &sg.Payload, &sg.SentAt, &sg.ConsumedSeq}, func() error {
		sigs = append(sigs, sg)
		sg = SignalInfo{}
		return nil
	})
	if err != nil {
		return nil, s.DB.WrapErr("Signals", err)
	}
	if len(sigs) == 0 {
		return sigs, s.mustExist(ctx, "Signals", job)
	}
	return sigs, nil
}

// mustExist returns ErrJobNotFound when job is in neither the jobs table nor the archive.
func (s Store) mustExist(ctx context.Context, op string, job int64) error {
	var ok bool
	if err := s.DB.Pool.QueryRow(ctx, s.DB.Render(existsSQL), job).Scan(&ok); err != nil {
		return s.DB.WrapErr(op, err)
	}
	if !ok {
		return fmt.Errorf("%w: job %d", jobtype.ErrJobNotFound, job)
	}
	return nil
}

// forkSeqSQL finds the first step named $2 of job $1.
const forkSeqSQL = `SELECT min(seq) FROM {s}.job_steps WHERE job_id = $1 AND name = $2`

// forkSQL inserts a new job with the args, queue, kind, priority and attempts limit of
// job $1 (from the jobs table or the archive; from the jobs table also its timeout,
// partition key and concurrency keys, which the archive does not keep) and copies its steps before seq $2, so the
// new job's handler replays them and runs from step $2 on. Its metadata is the job's
// without skiplock's own keys (a workflow task's fork is a job of its own), plus
// skiplock_forked_from. Its queue is woken at commit ($3, the channel).
const forkSQL = `WITH src AS (
	SELECT queue, kind, payload, priority, max_attempts, metadata, timeout_ms, partition_key, concurrency_keys FROM {s}.jobs WHERE id = $1
	UNION ALL
	SELECT queue, kind, payload, priority, max_attempts, metadata, NULL, NULL, NULL FROM {s}.jobs_archive WHERE id = $1
	LIMIT 1
), ins AS (
	INSERT INTO {s}.jobs (queue, kind, payload, priority, max_attempts, metadata, timeout_ms, partition_key, concurrency_keys, durable)
	SELECT queue, kind, payload, priority, max_attempts,
		(SELECT coalesce(jsonb_object_agg(k, v), '{}') FROM jsonb_each(metadata) AS m (k, v) WHERE k NOT LIKE 'skiplock\_%')
			|| jsonb_build_object('skiplock_forked_from', $1::bigint::text),
		timeout_ms, partition_key, concurrency_keys, true
	FROM src
	RETURNING ` + jobtype.Columns + `
), steps AS (
	INSERT INTO {s}.job_steps (job_id, seq, name, kind, result, error, attempt, started_at, wake_at, finished_at)
	SELECT ins.id, st.seq, st.name, st.kind, st.result, st.error, 0, st.started_at, st.wake_at, st.finished_at
	FROM ins CROSS JOIN {s}.job_steps st WHERE st.job_id = $1 AND st.seq < $2
)
SELECT ins.* FROM ins CROSS JOIN LATERAL pg_notify($3, ins.queue) AS n`

// Fork enqueues a new job with job's args whose recorded steps before the first step
// named fromStep are copied: its handler gets their recorded results, and runs fromStep
// and the steps after it again. The job itself is left as it is.
func (s Store) Fork(ctx context.Context, job int64, fromStep string) (*jobtype.JobRow, error) {
	if err := CheckName("step", fromStep); err != nil {
		return nil, err
	}
	var seq *int
	if err := s.DB.Pool.QueryRow(ctx, s.DB.Render(forkSeqSQL), job, fromStep).Scan(&seq); err != nil {
		return nil, s.DB.WrapErr("Fork", err)
	}
	if seq == nil {
		if err := s.mustExist(ctx, "Fork", job); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: job %d recorded no step %q (Client.Steps lists its steps)", ErrStepNotFound, job, fromStep)
	}
	row, err := jobtype.ScanJob(s.DB.Pool.QueryRow(ctx, s.DB.Render(forkSQL), job, *seq, s.DB.Channel))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: job %d (deleted while it was forked)", jobtype.ErrJobNotFound, job)
	}
	if err != nil {
		return nil, s.DB.WrapErr("Fork", err)
	}
	return row, nil
}
