// This file holds what a unique enqueue does to the queued job that holds its key when
// UniqueOpts asks for it: replace its args (Replace), push its run_at (Debounce, bounded
// by MaxDelay).

package enqueue

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// editHolderSQL edits holder $1 while it is queued: payload $3 when $2; run_at pushed to
// now() + $4 ms (never earlier than it was), bounded by created_at + $5 ms, when $4 is
// not NULL. A claim that locked the row first makes the UPDATE wait and re-check status:
// a holder that started meanwhile is left as it is. The holder's metadata keeps when it
// was last replaced (MetaReplaced) or debounced (MetaDebounced), RFC 3339 in UTC, so the
// dashboard can say so (JobRow.Replaced is the enqueue's answer only).
const editHolderSQL = `UPDATE {s}.jobs SET
	payload = CASE WHEN $2 THEN $3::jsonb ELSE payload END,
	metadata = coalesce(metadata, '{}') || jsonb_build_object(CASE WHEN $2 THEN '` + MetaReplaced + `' ELSE '` + MetaDebounced + `' END,
		to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
	run_at = CASE WHEN $4::bigint IS NULL THEN run_at
		ELSE greatest(run_at, least(now() + $4::bigint * interval '1 millisecond',
			coalesce(created_at + $5::bigint * interval '1 millisecond', 'infinity'))) END
WHERE id = $1 AND status = 'queued'
RETURNING ` + jobColumns

// Reserved metadata keys a unique enqueue writes on the queued job holding its key: when
// it last gave it its args (UniqueOpts.Replace) or pushed its run_at (Debounce alone).
const (
	MetaReplaced  = "skiplock_replaced_at"
	MetaDebounced = "skiplock_debounced_at"
)

// editHolder applies j.OnHolder to existing, the job holding j's key, if it is queued,
// and returns it as it is now, with Replaced set when it was changed. In the caller's
// transaction the UPDATE runs in a savepoint: under REPEATABLE READ or SERIALIZABLE a
// holder changed after the snapshot raises a serialization failure, which then leaves
// the caller's transaction usable and the holder kept.
func (w *writer) editHolder(ctx context.Context, db jobtype.DBTX, j *Job, existing *jobtype.JobRow, callerTx bool) (*jobtype.JobRow, error) {
	e := j.OnHolder
	if !e.any() || existing.Status != jobtype.StatusQueued {
		return existing, nil
	}
	var debounce, maxDelay *int64
	if e.Debounce > 0 {
		d := e.Debounce.Milliseconds()
		debounce = &d
	}
	if e.MaxDelay > 0 {
		m := e.MaxDelay.Milliseconds()
		maxDelay = &m
	}
	run := func() (*jobtype.JobRow, error) {
		return jobtype.ScanJob(db.QueryRow(ctx, pgutil.Render(w.schema, editHolderSQL), existing.ID, e.Replace, string(j.Payload), debounce, maxDelay))
	}
	var row *jobtype.JobRow
	var err error
	if callerTx {
		row, err = w.inSavepoint(ctx, db, run)
	} else {
		row, err = run()
	}
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		row.Replaced = true
		return row, nil
	case errors.Is(err, pgx.ErrNoRows), errors.As(err, &pgErr) && pgErr.Code == "40001":
		return existing, nil // it started (or changed after the snapshot): kept
	default:
		return nil, wrapErr(w.schema, "enqueue: replace the job holding the key", err)
	}
}

// inSavepoint runs fn inside a savepoint of the caller's transaction db, rolled back to
// when fn fails, so the transaction stays usable.
func (w *writer) inSavepoint(ctx context.Context, db jobtype.DBTX, fn func() (*jobtype.JobRow, error)) (*jobtype.JobRow, error) {
	var row *jobtype.JobRow
	err := pgutil.InSavepoint(ctx, db, savepointName, func() (err error) {
		row, err = fn()
		return err
	})
	if err != nil {
		return nil, err
	}
	return row, nil
}
