// This file holds the client's side of durable execution: sending a signal to a job,
// listing a job's steps and signals, and forking a job from one of its steps.

package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/enqueue"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// Store is the client's side of durable execution.
type Store struct {
	DB       pgutil.DB
	MaxBytes int // the client's MaxPayloadBytes, the limit of a signal's payload; 0: none
}

// StepInfo is one step a job recorded, as Client.Steps lists it.
type StepInfo struct {
	Seq  int    `json:"seq"`  // its place among the job's durable calls, from 0
	Name string `json:"name"` // the step's name; "sleep" for Sleep, the signal's name for AwaitSignal
	Kind Kind   `json:"kind"` // step, sleep or signal
	// Status is "done", "waiting" (a sleep or a signal wait not over yet) or "timed_out"
	// (a signal wait that ended without a signal).
	Status string `json:"status"`
	// Result is the recorded result: a step's value, a signal's payload; nil for a sleep
	// or a wait not over. ResultBytes is its size.
	Result      json.RawMessage `json:"result"`
	ResultBytes int             `json:"result_bytes"`
	Attempt     int             `json:"attempt"`     // the job's attempt that recorded it; 0 for a step Fork copied
	StartedAt   time.Time       `json:"started_at"`  // when its function or wait began (the database's clock)
	WakeAt      *time.Time      `json:"wake_at"`     // a sleep's end, a signal wait's timeout (year 9999: none); nil for a step
	FinishedAt  *time.Time      `json:"finished_at"` // when it was done; nil while waiting
	// Duration is FinishedAt − StartedAt: the function's run, or the wait's length; zero
	// while waiting.
	Duration time.Duration `json:"duration_ns"`
}

// SignalInfo is one signal sent to a job, as Client.Signals lists it.
type SignalInfo struct {
	ID      int64           `json:"id"`
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload"`
	SentAt  time.Time       `json:"sent_at"`
	// ConsumedSeq is the seq of the AwaitSignal step that took it; nil while no wait has.
	ConsumedSeq *int `json:"consumed_seq"`
}

// Terminal job states: a signal to a job in one of them is refused.
var finished = map[string]bool{"succeeded": true, "failed": true, "dead": true, "cancelled": true}

// signalLockSQL locks the job's row (as a wait's lockSQL does) and reads its status.
const signalLockSQL = `SELECT status FROM {s}.jobs WHERE id = $1 FOR NO KEY UPDATE`

// signalSQL stores a signal ($2 its name, $3 its payload) for job $1, whose row the
// transaction locked: a wait parked for that name is due at once, and its queue woken at
// commit ($4, the channel). A job not parked for it (running, or queued before its wait)
// finds the signal when its wait begins.
//
// Parked is queued, awaiting $2, and due no later than the end of its unfinished wait
// for $2 (its step's wake_at; the park sets run_at to it, or to the job's deadline when
// sooner). The claim of a parked job leaves awaiting set (the claim is the hot path: it
// writes no column for durable jobs), so a job claimed at its wait's timeout whose attempt
// failed or snoozed before it reached the wait again is queued, still awaiting $2, due
// after the wait's end (the retry's backoff counts from a claim at or after it): the
// signal is kept for the wait and leaves the retry to its backoff.
const signalSQL = `WITH j AS (
	SELECT queue, coalesce(status = 'queued' AND awaiting = $2 AND run_at <= (
		SELECT st.wake_at FROM {s}.job_steps st
		WHERE st.job_id = $1 AND st.kind = 'signal' AND st.name = $2 AND st.finished_at IS NULL
		ORDER BY st.seq DESC LIMIT 1), false) AS woken
	FROM {s}.jobs WHERE id = $1
), ins AS (
	INSERT INTO {s}.job_signals (job_id, name, payload) VALUES ($1, $2, $3::jsonb)
), upd AS (
	UPDATE {s}.jobs SET durable = true,
		run_at = CASE WHEN (SELECT woken FROM j) THEN now() ELSE run_at END,
		awaiting = CASE WHEN (SELECT woken FROM j) THEN NULL ELSE awaiting END
	WHERE id = $1
)
SELECT count(pg_notify($4, queue)) FROM j WHERE woken`

// archivedSQL says whether the job is in the archive.
const archivedSQL = `SELECT EXISTS (SELECT FROM {s}.jobs_archive WHERE id = $1)`

// Signal sends the signal name with payload to job: kept until a wait of that name takes
// it, and waking the job if it is parked for it. The job's row lock orders it with the
// job's waits: a wait that locks the row after it sees it.
func (s Store) Signal(ctx context.Context, job int64, name string, payload any) error {
	if err := CheckName("signal", name); err != nil {
		return err
	}
	b, err := s.encode(payload)
	if err != nil {
		return err
	}
	tx, err := s.DB.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return s.DB.WrapErr("Signal", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var status string
	err = tx.QueryRow(ctx, s.DB.Render(signalLockSQL), job).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return s.missing(ctx, tx, "Signal", job)
	}
	if err != nil {
		return s.DB.WrapErr("Signal", err)
	}
	if finished[status] {
		return fmt.Errorf("%w: job %d is %s: a signal to it would never be read", jobtype.ErrJobFinished, job, status)
	}
	if _, err := tx.Exec(ctx, s.DB.Render(signalSQL), job, name, string(b), s.DB.Channel); err != nil {
		return s.DB.WrapErr("Signal", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return s.DB.WrapErr("Signal", err)
	}
	return nil
}

// encode marshals a signal's payload, checked as a job's args are.
func (s Store) encode(payload any) ([]byte, error) {
	b, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: signal payload: %v", enqueue.ErrInvalidPayload, err)
	}
	if err := pgutil.CheckJSONB(b); err != nil {
		return nil, fmt.Errorf("%w: signal payload: %v", enqueue.PayloadErr(err), err)
	}
	if s.MaxBytes > 0 && len(b) > s.MaxBytes {
		return nil, fmt.Errorf("%w: signal payload is %d bytes, the limit is %d (Config.MaxPayloadBytes)", enqueue.ErrPayloadTooLarge, len(b), s.MaxBytes)
	}
	return b, nil
}

// missing is the error for a job not in the jobs table: finished if it is in the
// archive, not found otherwise.
func (s Store) missing(ctx context.Context, db jobtype.DBTX, op string, job int64) error {
	var archived bool
	if err := db.QueryRow(ctx, s.DB.Render(archivedSQL), job).Scan(&archived); err != nil {
		return s.DB.WrapErr(op, err)
	}
	if archived {
		return fmt.Errorf("%w: job %d is in the archive", jobtype.ErrJobFinished, job)
	}
	return fmt.Errorf("%w: job %d", jobtype.ErrJobNotFound, job)
}
