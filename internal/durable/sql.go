// This file holds the statements of the waits and renders the engine's statements for
// its schema.

package durable

import "github.com/skiplock/skiplock/internal/pgutil"

// beginWaitSQL records a sleep or a signal wait when it begins: $6 is its length in µs
// (negative: no end, 9999-12-31 as a dependent's run_at). The times are the database's.
const beginWaitSQL = `INSERT INTO {s}.job_steps (job_id, seq, name, kind, attempt, started_at, wake_at)
VALUES ($1, $2, $3, $4, $5, now(),
	CASE WHEN $6::bigint < 0 THEN timestamptz '9999-12-31 00:00:00+00' ELSE now() + $6::bigint * interval '1 microsecond' END)
RETURNING wake_at`

// finishSleepSQL marks a sleep over, at its wake-up time.
const finishSleepSQL = `UPDATE {s}.job_steps SET finished_at = wake_at WHERE job_id = $1 AND seq = $2`

// parkSQL ends the attempt of the job whose row the transaction locked (lockSQL): back
// to queued at the wait's end $3, its attempt given back (as a Snooze), its lease ended,
// awaiting the signal $4 (NULL for a sleep). The fence ($2) is checked again: the row
// lock guarantees it, the clause says so.
const parkSQL = `UPDATE {s}.jobs SET status = 'queued', run_at = $3, attempts = attempts - 1,
	locked_at = NULL, locked_by = NULL, lease_until = NULL, durable = true, awaiting = $4
WHERE id = $1 AND fence = $2 AND status = 'running'`

// takeSignalSQL takes the oldest signal named $2 sent to job $1 that no wait took, for
// the wait at seq $3 ($4: the attempt): the signal is marked consumed by that step, the
// step records its payload (finishing the wait recorded when it began, or recorded
// finished at once), and the job no longer awaits. No row: no such signal.
const takeSignalSQL = `WITH sig AS (
	SELECT id, payload FROM {s}.job_signals
	WHERE job_id = $1 AND name = $2 AND consumed_seq IS NULL
	ORDER BY id LIMIT 1
), used AS (
	UPDATE {s}.job_signals SET consumed_seq = $3 WHERE id = (SELECT id FROM sig)
), step AS (
	INSERT INTO {s}.job_steps (job_id, seq, name, kind, result, attempt, started_at, finished_at)
	SELECT $1, $3, $2, 'signal', payload, $4, now(), now() FROM sig
	ON CONFLICT (job_id, seq) DO UPDATE SET result = EXCLUDED.result, finished_at = EXCLUDED.finished_at
), job AS (
	UPDATE {s}.jobs SET awaiting = NULL, durable = true WHERE id = $1 AND EXISTS (SELECT FROM sig)
)
SELECT payload FROM sig`

// timeOutSQL records that the signal wait at seq $2 timed out.
const timeOutSQL = `WITH step AS (
	UPDATE {s}.job_steps SET error = 'timeout', finished_at = now() WHERE job_id = $1 AND seq = $2
)
UPDATE {s}.jobs SET awaiting = NULL WHERE id = $1`

// engineSQL are the worker's statements, rendered for its schema.
type engineSQL struct {
	load, record, lock, beginWait, finishSleep, park, takeSignal, timeOut string
}

func renderEngineSQL(db pgutil.DB) engineSQL {
	return engineSQL{
		load: db.Render(loadSQL), record: db.Render(recordSQL), lock: db.Render(lockSQL),
		beginWait: db.Render(beginWaitSQL), finishSleep: db.Render(finishSleepSQL), park: db.Render(parkSQL),
		takeSignal: db.Render(takeSignalSQL), timeOut: db.Render(timeOutSQL),
	}
}
