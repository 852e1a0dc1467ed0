// This file holds unique jobs by what they are: the UniqueOpts an enqueue may carry, and
// the key they compute (kind, optionally queue, args and time bucket, hashed), and the
// inserts that honour it (one job, or many with an unnest insert).

package skiplock

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// UniqueOpts makes a job unique by what it is: at most one job with the same kind (and,
// as chosen, the same queue, args and time bucket) exists in the states that count. A
// duplicate enqueue inserts nothing and returns the existing job with
// [JobRow].Duplicate set and a nil error; [Client.EnqueueMany] skips it and does not
// count it.
//
// Active jobs (queued, running) are arbitrated by a unique index, so concurrent enqueues
// from any number of transactions leave one row. Finished states that count are looked
// up by the same statement among the finished jobs of the jobs table and the archive.
//
// The zero value means: unique by kind alone, among queued and running jobs.
type UniqueOpts struct {
	// ByArgs makes the args part of the key, as canonical JSON (object keys sorted, so
	// field order does not matter). Defaults to false: the args do not matter.
	ByArgs bool
	// ArgsFields limits ByArgs to these top-level JSON fields of the args (by their JSON
	// names); a missing field counts as null. Setting it implies ByArgs. Defaults to
	// empty: every field.
	ArgsFields []string
	// ByQueue makes the queue part of the key: the same job may then be queued once per
	// queue. Defaults to false.
	ByQueue bool
	// ByPeriod makes the time bucket part of the key: at most one job per bucket of this
	// length (buckets are aligned to the Unix epoch, so 1h buckets start on the hour UTC).
	// The bucket is that of RunAt when set, else of the enqueuing host's clock. Zero means
	// no bucket; negative is an error.
	ByPeriod time.Duration
	// States are the states in which an existing job blocks a new one. They must include
	// queued and running. Adding succeeded means a job done within the period blocks
	// another: with the default CompletionArchive the archive is searched, and the
	// archive retention bounds how far back; under CompletionDelete a succeeded job
	// leaves no row and cannot count. Defaults to queued and running.
	States []JobStatus
}

// uniqueKeyPrefix marks keys computed from UniqueOpts, apart from caller-chosen keys.
const uniqueKeyPrefix = "u1:"

// allStatuses lists every job status, for validation and for periodic occurrences.
var allStatuses = []JobStatus{StatusQueued, StatusRunning, StatusSucceeded, StatusFailed, StatusDead, StatusCancelled}

// uniqueKey computes the key of a job enqueued with u, and the finished states that count
// (nil when only the active states do). now is the bucket time when runAt is nil.
func (u *UniqueOpts) uniqueKey(kind, queue string, payload []byte, runAt *time.Time, now time.Time) (string, []string, error) {
	if u.ByPeriod < 0 {
		return "", nil, fmt.Errorf("%w: Unique.ByPeriod %s is negative", ErrInvalidOptions, u.ByPeriod)
	}
	var finished []string
	if len(u.States) > 0 {
		if !slices.Contains(u.States, StatusQueued) || !slices.Contains(u.States, StatusRunning) {
			return "", nil, fmt.Errorf("%w: Unique.States %v must include queued and running", ErrInvalidOptions, u.States)
		}
		for _, s := range u.States {
			if !slices.Contains(allStatuses, s) {
				return "", nil, fmt.Errorf("%w: Unique.States: unknown status %q", ErrInvalidOptions, s)
			}
			if s != StatusQueued && s != StatusRunning && !slices.Contains(finished, string(s)) {
				finished = append(finished, string(s))
			}
		}
	}
	// The key hashes a JSON array, so its parts cannot run into each other.
	parts := []any{kind, nil, nil, nil}
	if u.ByQueue {
		parts[1] = queue
	}
	if u.ByArgs || len(u.ArgsFields) > 0 {
		canon, err := canonicalArgs(payload, u.ArgsFields)
		if err != nil {
			return "", nil, fmt.Errorf("%w: kind %q: %v", ErrInvalidPayload, kind, err)
		}
		parts[2] = canon
	}
	if u.ByPeriod > 0 {
		t := now
		if runAt != nil {
			t = *runAt
		}
		parts[3] = t.UTC().Truncate(u.ByPeriod).Unix()
	}
	b, err := json.Marshal(parts)
	if err != nil {
		return "", nil, fmt.Errorf("%w: kind %q: %v", ErrInvalidPayload, kind, err)
	}
	sum := sha256.Sum256(b)
	return uniqueKeyPrefix + hex.EncodeToString(sum[:]), finished, nil
}

// canonicalArgs decodes payload and returns it (or its fields) in a form that marshals
// to the same JSON whatever the order of object keys: encoding/json sorts map keys, and
// numbers keep their text.
func canonicalArgs(payload []byte, fields []string) (any, error) {
	d := json.NewDecoder(bytes.NewReader(payload))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if len(fields) == 0 {
		return v, nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("Unique.ArgsFields needs args that marshal to a JSON object, got %s", strings.TrimSpace(string(payload[:min(len(payload), 20)])))
	}
	out := make(map[string]any, len(fields))
	for _, f := range fields {
		out[f] = obj[f] // nil when missing
	}
	return out, nil
}

// insertUnique writes a job with a unique key, or finds the job that holds the key.
//
// The insert is ON CONFLICT DO NOTHING on the active-key index, so a duplicate is not an
// error and the caller's transaction stays usable. Under REPEATABLE READ or SERIALIZABLE,
// though, a conflict with a row committed after the transaction's snapshot raises a
// serialization failure, which would abort the caller's transaction. So inside the
// caller's transaction the insert runs only when the transaction is READ COMMITTED (the
// statement checks; no round trip is added); otherwise, once the lookup has found no
// visible holder, it runs again inside a savepoint that absorbs such a failure.
func (c *Client) insertUnique(ctx context.Context, db DBTX, j *newJob, notify, callerTx bool) (*JobRow, error) {
	args := []any{j.queue, j.kind, string(j.payload), j.priority, j.runAt, j.maxAttempts, *j.uniqueKey, j.uniqueStates, j.timeoutMs, j.metadataText(), j.partitionKey}
	if notify {
		args = append(args, c.notify.Channel)
	}
	q := c.sql.insertUnique[b2i(callerTx)][b2i(notify)]
	// A holder that finishes between the insert and the lookup frees the key (unless its
	// final state counts): try again a few times.
	for range 3 {
		row, err := scanJob(db.QueryRow(ctx, q, args...))
		if err == nil {
			return row, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, c.wrapErr("enqueue", err)
		}
		existing, err := scanJob(db.QueryRow(ctx, c.sql.findUnique, *j.uniqueKey, j.uniqueStates))
		if err == nil {
			return c.duplicate(j, existing)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, c.wrapErr("enqueue", err)
		}
		if callerTx {
			var iso string
			if err := db.QueryRow(ctx, isolationSQL).Scan(&iso); err != nil {
				return nil, c.wrapErr("enqueue", err)
			}
			if iso != "read committed" {
				return c.insertUniqueSavepoint(ctx, db, j, args, notify)
			}
		}
	}
	return nil, fmt.Errorf("%w: key %q: the job holding it keeps changing state; try again", ErrDuplicateJob, *j.uniqueKey)
}

// insertUniqueSavepoint is the unique insert in a transaction that is not READ COMMITTED:
// inside a savepoint, so that a serialization failure (the key is held by a job this
// transaction's snapshot cannot see) is rolled back to the savepoint and reported as a
// duplicate, leaving the caller's transaction usable. It costs three round trips.
func (c *Client) insertUniqueSavepoint(ctx context.Context, db DBTX, j *newJob, args []any, notify bool) (*JobRow, error) {
	if _, err := db.Exec(ctx, savepointSQL); err != nil {
		return nil, c.wrapErr("enqueue", err)
	}
	row, err := scanJob(db.QueryRow(ctx, c.sql.insertUnique[0][b2i(notify)], args...))
	if err != nil {
		// Roll back even if ctx ended: the caller's transaction must not stay aborted.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, rerr := db.Exec(rctx, rollbackToSavepointSQL); rerr != nil {
			return nil, c.wrapErr("enqueue", errors.Join(err, rerr))
		}
		if _, rerr := db.Exec(rctx, releaseSavepointSQL); rerr != nil {
			return nil, c.wrapErr("enqueue", rerr)
		}
		var pgErr *pgconn.PgError
		if errors.Is(err, pgx.ErrNoRows) || errors.As(err, &pgErr) && pgErr.Code == "40001" {
			return nil, fmt.Errorf("%w: key %q is held by a job committed after this transaction's snapshot (%s); the transaction is still usable",
				ErrDuplicateJob, *j.uniqueKey, "REPEATABLE READ or SERIALIZABLE")
		}
		return nil, c.wrapErr("enqueue", err)
	}
	if _, err := db.Exec(ctx, releaseSavepointSQL); err != nil {
		return nil, c.wrapErr("enqueue", err)
	}
	return row, nil
}

// duplicate returns the job that holds a key as the answer to a duplicate enqueue. A
// caller-chosen UniqueKey also reports ErrDuplicateJob, as it did before UniqueOpts.
func (c *Client) duplicate(j *newJob, existing *JobRow) (*JobRow, error) {
	existing.Duplicate = true
	if j.keyIsCallers {
		return existing, fmt.Errorf("%w: key %q is held by job %d", ErrDuplicateJob, *j.uniqueKey, existing.ID)
	}
	return existing, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// onConflictUnique names the partial unique index on unique_key, so an active job with the
// same key makes the insert a no-op instead of an error that would abort the caller's
// transaction.
const onConflictUnique = `ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('queued', 'running') DO NOTHING`

// readCommittedGate makes an insert insert nothing outside READ COMMITTED, where an ON
// CONFLICT with an invisible row would raise instead of doing nothing (insertUnique).
const readCommittedGate = `
	AND current_setting('transaction_isolation') = 'read committed'`

// finishedHolderSQL finds a finished job that holds key $7 in one of the finished states
// $8 that count, in the hot table (jobs_unique_key_done_idx) and the archive
// (jobs_archive_unique_key_idx). Active holders are the ON CONFLICT's business.
const finishedHolderSQL = `SELECT 1 FROM {s}.jobs d
		WHERE d.unique_key = $7 AND d.status NOT IN ('queued', 'running') AND d.status = ANY ($8::text[])
		UNION ALL
		SELECT 1 FROM {s}.jobs_archive a WHERE a.unique_key = $7 AND a.status = ANY ($8::text[])`

// insertUniqueSQL is the single-job insert with a unique key $7: nothing is inserted when
// a finished job holds the key in a state of $8 (NULL: no finished state counts, and the
// lookup is never run), nor when an active job holds it (ON CONFLICT DO NOTHING, which
// also settles concurrent inserts of one key: the later waits for the earlier to commit).
// gated adds readCommittedGate. $9 is the job's timeout_ms, $10 its metadata, $11 its
// partition_key; the channel of notify is $12.
func insertUniqueSQL(gated, notify bool) string {
	gate := ""
	if gated {
		gate = readCommittedGate
	}
	ins := `INSERT INTO {s}.jobs (queue, kind, payload, priority, run_at, max_attempts, unique_key, timeout_ms, metadata, partition_key)
SELECT $1::text, $2::text, $3::jsonb, $4::smallint, COALESCE($5::timestamptz, now()), $6::integer, $7::text, $9::bigint, $10::jsonb, $11::text
WHERE ($8::text[] IS NULL OR NOT EXISTS (` + finishedHolderSQL + `))` + gate + `
` + onConflictUnique + `
RETURNING ` + jobColumns
	if !notify {
		return ins
	}
	return `WITH ins AS (` + ins + `)
SELECT ins.* FROM ins CROSS JOIN pg_notify($12, $1::text) AS n`
}

// findUniqueSQL returns the job holding key $1: an active one first, else a finished one
// in a state of $2 that counts, from the hot table or the archive.
const findUniqueSQL = `(SELECT ` + jobColumns + ` FROM {s}.jobs
	WHERE unique_key = $1 AND (status IN ('queued', 'running') OR status = ANY ($2::text[]))
	ORDER BY status IN ('queued', 'running') DESC, id DESC LIMIT 1)
UNION ALL
(SELECT ` + archiveJobColumns + ` FROM {s}.jobs_archive
	WHERE unique_key = $1 AND status = ANY ($2::text[]) ORDER BY id DESC LIMIT 1)
LIMIT 1`

// archiveJobColumns is jobColumns for a jobs_archive row, which keeps no lease.
const archiveJobColumns = `id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
	NULL::timestamptz, locked_by, last_error, errors, unique_key, created_at, finished_at,
	metadata, progress, output`
