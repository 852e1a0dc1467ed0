// This file holds the durable waits, Sleep and AwaitSignal: each records its step when the
// wait begins and, until the wait is over, ends the attempt by parking the job (queued
// again at the wait's end, its attempt given back) in one transaction fenced on the
// attempt, which holds the job's row lock as Signal does.

package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Sleep ends the attempt until d has passed since the handler's first call of this Sleep,
// or returns nil once it has (see the root's Sleep).
func Sleep(ctx context.Context, d time.Duration) error {
	r, err := runOf(ctx)
	if err != nil {
		return err
	}
	seq, rec, err := r.enter(ctx, KindSleep, sleepName)
	if err != nil || (rec != nil && rec.finished) {
		return err
	}
	d = max(d, 0) // a negative sleep is none (a negative length means no end to beginWait)
	var wake time.Time
	suspended := false
	err = r.inLock(ctx, sleepName, func(tx pgx.Tx, now time.Time) error {
		var err error
		if wake, err = r.beginWait(ctx, tx, seq, rec, KindSleep, sleepName, d); err != nil {
			return err
		}
		if wake.After(now) {
			suspended = true
			return r.park(ctx, tx, wake, nil)
		}
		_, err = tx.Exec(ctx, r.e.sql.finishSleep, r.row.ID, seq)
		return err
	})
	switch {
	case err != nil:
		r.release(seq)
		return err
	case suspended:
		r.suspend()
		return fmt.Errorf("%w: job %d sleeps until %s", ErrSuspended, r.row.ID, wake.UTC().Format(time.RFC3339Nano))
	}
	r.store(seq, recorded{name: sleepName, kind: KindSleep, wakeAt: &wake, finished: true})
	return nil
}

// AwaitSignal returns the payload of the oldest signal named name sent to the job and
// not yet taken by another wait, or parks the job until one comes or timeout passes (see
// the root's AwaitSignal).
func AwaitSignal(ctx context.Context, name string, timeout time.Duration) (json.RawMessage, error) {
	if err := CheckName("signal", name); err != nil {
		return nil, err
	}
	r, err := runOf(ctx)
	if err != nil {
		return nil, err
	}
	seq, rec, err := r.enter(ctx, KindSignal, name)
	if err != nil {
		return nil, err
	}
	if rec != nil && rec.finished {
		if rec.errMsg == timeoutMsg {
			return nil, fmt.Errorf("%w: signal %q, job %d (recorded)", ErrSignalTimeout, name, r.row.ID)
		}
		return rec.result, nil
	}
	var out waitOutcome
	err = r.inLock(ctx, waitWhat(name), func(tx pgx.Tx, now time.Time) error {
		var err error
		out, err = r.awaitLocked(ctx, tx, now, seq, rec, name, timeout)
		return err
	})
	if err != nil {
		r.release(seq)
		return nil, err
	}
	return r.settleWait(seq, name, out)
}

// waitOutcome is what a signal wait came to under the job's row lock.
type waitOutcome struct {
	payload  json.RawMessage // the signal taken; nil: none
	timedOut bool
	wake     time.Time // the wait's timeout
}

// timeoutMsg is the error recorded for a signal wait that timed out.
const timeoutMsg = "timeout"

// awaitLocked takes the signal the job waits for, or records its timeout, or parks the
// job; tx holds the job's row lock, taken after any Signal that held it committed, so it
// sees every signal sent before.
func (r *run) awaitLocked(ctx context.Context, tx pgx.Tx, now time.Time, seq int, rec *recorded, name string, timeout time.Duration) (waitOutcome, error) {
	var out waitOutcome
	err := tx.QueryRow(ctx, r.e.sql.takeSignal, r.row.ID, name, seq, r.row.Attempts).Scan(&out.payload)
	if err == nil {
		return out, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return out, r.e.db.WrapErr(fmt.Sprintf("AwaitSignal %q", name), err)
	}
	if timeout <= 0 {
		timeout = noEnd
	}
	if out.wake, err = r.beginWait(ctx, tx, seq, rec, KindSignal, name, timeout); err != nil {
		return out, err
	}
	if out.wake.After(now) {
		return out, r.park(ctx, tx, out.wake, &name)
	}
	out.timedOut = true
	_, err = tx.Exec(ctx, r.e.sql.timeOut, r.row.ID, seq)
	return out, err
}

// settleWait turns what a signal wait came to into AwaitSignal's return.
func (r *run) settleWait(seq int, name string, out waitOutcome) (json.RawMessage, error) {
	switch {
	case out.payload != nil:
		r.store(seq, recorded{name: name, kind: KindSignal, result: out.payload, finished: true})
		return out.payload, nil
	case out.timedOut:
		r.store(seq, recorded{name: name, kind: KindSignal, errMsg: timeoutMsg, finished: true})
		return nil, fmt.Errorf("%w: signal %q, job %d", ErrSignalTimeout, name, r.row.ID)
	}
	r.suspend()
	until := "a signal comes"
	if out.wake.Year() < 9999 {
		until += " or " + out.wake.UTC().Format(time.RFC3339Nano)
	}
	return nil, fmt.Errorf("%w: job %d waits for signal %q until %s", ErrSuspended, r.row.ID, name, until)
}

// lockSQL checks that the attempt still holds its job and locks the job's row until the
// transaction ends, in the order Signal takes it: a Signal that held it has committed
// when this returns, and one that comes later waits for this transaction. It returns the
// transaction's time, which decides whether a wait is over.
const lockSQL = `SELECT now() FROM {s}.jobs
WHERE id = $1 AND fence = $2 AND (status || '') = 'running' AND locked_by = $3
FOR NO KEY UPDATE`

// inLock runs fn in a READ COMMITTED transaction holding the job's row lock, and commits.
// Under READ COMMITTED every statement after the lock sees what committed before it. An
// attempt that no longer holds its job gets ErrAttemptLost naming what (the sleep, the
// signal wait), and nothing is written.
func (r *run) inLock(ctx context.Context, what string, fn func(tx pgx.Tx, now time.Time) error) error {
	tx, err := r.e.db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return r.e.db.WrapErr("durable wait: begin", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var now time.Time
	if err := tx.QueryRow(ctx, r.e.sql.lock, r.row.ID, r.row.Fence, r.e.workerID).Scan(&now); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return lost(r.row, what)
		}
		return r.e.db.WrapErr("durable wait: locking the job", err)
	}
	if err := fn(tx, now); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return r.e.db.WrapErr("durable wait: commit", err)
	}
	return nil
}

// waitWhat names a wait for the signal name in errors.
func waitWhat(name string) string { return fmt.Sprintf("wait for signal %q", name) }

// noEnd is the length of a wait without end.
const noEnd = -time.Second

// beginWait records the wait at seq, ending d from now (d < 0: never), unless rec says an
// earlier attempt recorded it; it returns the wait's end.
func (r *run) beginWait(ctx context.Context, tx pgx.Tx, seq int, rec *recorded, kind Kind, name string, d time.Duration) (time.Time, error) {
	if rec != nil && rec.wakeAt != nil {
		return *rec.wakeAt, nil
	}
	var wake time.Time
	err := tx.QueryRow(ctx, r.e.sql.beginWait, r.row.ID, seq, name, string(kind), r.row.Attempts, d.Microseconds()).Scan(&wake)
	if err != nil {
		return wake, r.e.db.WrapErr(fmt.Sprintf("recording the %s %q", kind, name), err)
	}
	return wake, nil
}

// park ends the attempt: the job is queued again at wake, its attempt given back,
// waiting for the signal awaiting (nil: none). tx holds the job's row lock. A job with a
// deadline before wake is due at the deadline instead: no attempt may start after it, so
// the worker that claims it then ends it failed, rather than leaving it queued until a
// wake-up when it can no longer run (a signal before the deadline still wakes it).
func (r *run) park(ctx context.Context, tx pgx.Tx, wake time.Time, awaiting *string) error {
	if d := r.row.Deadline; !d.IsZero() && d.Before(wake) {
		wake = d
	}
	tag, err := tx.Exec(ctx, r.e.sql.park, r.row.ID, r.row.Fence, wake, awaiting)
	if err != nil {
		return r.e.db.WrapErr("parking the job", err)
	}
	if tag.RowsAffected() == 0 {
		if awaiting != nil {
			return lost(r.row, waitWhat(*awaiting))
		}
		return lost(r.row, sleepName)
	}
	return nil
}
