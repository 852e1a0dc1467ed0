// This file holds editing a job that has not started: Client.Update changes when and
// where it runs, its priority, args or metadata, fenced against a claim racing it.

package skiplock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/enqueue"
	"github.com/skiplock/skiplock/internal/jobtype"
)

// ErrJobFinished is returned by [Client.Update] for a job that succeeded or was
// cancelled: it will not run again, so there is nothing to edit; and by [Client.Signal]
// for a job that has finished (succeeded, failed, dead, cancelled or archived): no wait
// would ever read the signal.
var ErrJobFinished = jobtype.ErrJobFinished

// JobUpdate says what [Client.Update] changes. Its zero value changes nothing; each field
// set replaces that part of the job and is checked as [EnqueueOptions] are.
type JobUpdate struct {
	// RunNow makes the job due at once (the database's now()): "run now". It cannot be
	// combined with RunAt.
	RunNow bool
	// RunAt, when not zero, is the job's new due time: "reschedule".
	RunAt time.Time
	// Priority, when not nil, is the job's new priority.
	Priority *int
	// Queue, when not empty, moves the job to that queue.
	Queue string
	// Args, when not nil, replaces the job's args. Its Kind must be the job's kind. The
	// new args are sealed with the client's [Keyring] when the job's args are encrypted
	// or its kind always encrypts ([EnqueueOptions].Encrypt); without a keyring such an
	// edit is refused.
	Args JobArgs
	// Metadata, when not nil, replaces the job's metadata (skiplock's own marks of a
	// workflow task, a batch or a sequence are kept); an empty map clears it.
	Metadata map[string]string
}

// updateSQL edits job $1 unless it is running or final: run_at ($2: now(); else $3 when
// not NULL), priority $4, queue $5, payload $6 (only for kind $7, and only while the
// payload is still $10, the one read to decide whether to seal $6) and metadata $8 (the
// caller's keys, over skiplock's own marks, which stay), each when not NULL. The run_at
// of a job that waits for its dependencies (EnqueueOptions.DependsOn: a job_waits row)
// is not changed: its wait holds it, and its last parent's success sets it. A claim that
// locked the row first makes the UPDATE wait and then re-check status, so an edit never
// lands on a job a worker has just claimed; an edit that locked it first makes the claim
// skip the row (SKIP LOCKED) and take it afterwards, edited. A queued job that is due
// after the edit wakes its queue's workers at commit. The job's metadata keeps when it
// was last edited (metaEdited).
const updateSQL = `WITH u AS (
	UPDATE {s}.jobs SET
		run_at = CASE WHEN $2 THEN now() ELSE coalesce($3::timestamptz, run_at) END,
		priority = coalesce($4::smallint, priority),
		queue = coalesce($5::text, queue),
		payload = coalesce($6::jsonb, payload),
		metadata = CASE WHEN $8::jsonb IS NULL THEN coalesce(metadata, '{}')
			ELSE $8::jsonb || coalesce((SELECT jsonb_object_agg(k, v) FROM jsonb_each(metadata) AS m(k, v)
				WHERE starts_with(k, '` + reservedMetadataPrefix + `')), '{}') END
			|| jsonb_build_object('` + metaEdited + `', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
	WHERE id = $1 AND status IN ('queued', 'dead', 'failed') AND ($6::jsonb IS NULL OR kind = $7 AND payload = $10::jsonb)
		AND (NOT $2 AND $3::timestamptz IS NULL OR NOT EXISTS (SELECT 1 FROM {s}.job_waits w WHERE w.job_id = $1))
	RETURNING ` + jobColumns + `
)
SELECT u.* FROM u LEFT JOIN LATERAL (
	SELECT pg_notify($9, u.queue) WHERE u.status = 'queued' AND u.run_at <= now()) AS n ON true`

// metaEdited is the reserved metadata key in which Update keeps when the job was last
// edited (RFC 3339, UTC), for the dashboard's job page.
const metaEdited = "skiplock_edited_at"

// Update edits the job with the given id and returns it as it is now. Only a job that
// will or may run again can be edited: a queued (or scheduled) job, or a dead or failed
// one (whose args can be fixed before a [Client.Requeue]). A running job returns
// [ErrJobRunning]; a succeeded or cancelled one, [ErrJobFinished]; no such job,
// [ErrJobNotFound]; an invalid change or Args of another kind, [ErrInvalidOptions] (or
// the error an enqueue of those args would return), with nothing changed.
//
// The edit is atomic against the claim: either it lands before a worker claims the job
// (which then runs the edited job) or the claim comes first and Update returns
// [ErrJobRunning]. Editing a unique job's args, queue or run_at does not change its
// unique key (one made ByQueue or ByPeriod keeps the queue and period it was enqueued with).
func (c *Client) Update(ctx context.Context, id int64, u JobUpdate) (*JobRow, error) {
	args, err := c.updateArgs(ctx, id, u)
	if err != nil {
		return nil, err
	}
	row, err := scanJob(c.pool.QueryRow(ctx, c.db.Render(updateSQL), append([]any{id}, args...)...))
	if err == nil {
		return row, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, c.wrapErr("update", err)
	}
	cur, err := c.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	switch {
	case cur.Status == StatusRunning:
		return cur, fmt.Errorf("%w: job %d: it can be edited only before it starts", ErrJobRunning, id)
	case cur.Status == StatusSucceeded || cur.Status == StatusCancelled:
		return cur, fmt.Errorf("%w: job %d is %s", ErrJobFinished, id, cur.Status)
	case u.Args != nil && u.Args.Kind() != cur.Kind:
		return cur, invalidUpdate("job %d is of kind %q: Args of kind %q cannot replace its args", id, cur.Kind, u.Args.Kind())
	case u.RunNow || !u.RunAt.IsZero():
		var waits bool
		if err := c.pool.QueryRow(ctx, c.db.Render(`SELECT EXISTS (SELECT 1 FROM {s}.job_waits WHERE job_id = $1)`), id).Scan(&waits); err != nil {
			return cur, c.wrapErr("update", err)
		}
		if waits {
			return cur, invalidUpdate("job %d waits for the jobs it depends on (DependsOn): it runs once they succeeded, not before", id)
		}
	}
	return cur, fmt.Errorf("skiplock: update: job %d changed while it was edited; try again", id)
}

// updateArgs checks u as an enqueue checks its options and args, and returns updateSQL's
// arguments from $2 (the channel, then the payload read). New args are sealed when the
// job's stored args are (read here; updateSQL changes them only while they are still
// what was read) or when their kind always encrypts.
func (c *Client) updateArgs(ctx context.Context, id int64, u JobUpdate) ([]any, error) {
	if u.RunNow && !u.RunAt.IsZero() {
		return nil, invalidUpdate("JobUpdate sets both RunNow and RunAt: set one")
	}
	var jargs JobArgs = editArgs{}
	if u.Args != nil {
		jargs = u.Args
	}
	o := EnqueueOptions{Queue: u.Queue, RunAt: u.RunAt, Metadata: u.Metadata}
	if u.Priority != nil {
		o.Priority = *u.Priority
	}
	j, err := c.prepare(jargs, &o)
	if err != nil {
		return nil, updateRefusal(err)
	}
	var runAt, priority, queue, payload, kind, metadata, stored any
	if !u.RunAt.IsZero() {
		runAt = u.RunAt
	}
	if u.Priority != nil {
		priority = j.Priority
	}
	if u.Queue != "" {
		queue = u.Queue
	}
	if u.Args != nil {
		var was []byte
		err := c.pool.QueryRow(ctx, c.db.Render(`SELECT payload FROM {s}.jobs WHERE id = $1`), id).Scan(&was)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, c.wrapErr("update", err)
		}
		if key, sealed := SealedKey(was); sealed {
			if c.keyring == nil {
				return nil, invalidUpdate("job %d's args are encrypted (key %q): new Args need a client with Config.Keyring, which seals them", id, key)
			}
			j.Sealer = c.keyring.Seal
		}
		if err := j.Seal(c.maxBytes); err != nil {
			return nil, err
		}
		payload, kind = string(j.Payload), j.Kind
		if was != nil { // else no such job: the UPDATE changes nothing, and Update says why
			stored = string(was)
		}
	}
	if u.Metadata != nil {
		b, err := enqueue.EncodeMetadata(u.Metadata)
		if err != nil {
			return nil, updateRefusal(err)
		}
		metadata = string(b)
	}
	return []any{u.RunNow, runAt, priority, queue, payload, kind, metadata, c.db.Channel, stored}, nil
}

// invalidUpdate is a JobUpdate that [Client.Update] refuses by itself (not as an enqueue
// of its fields would).
func invalidUpdate(format string, args ...any) error {
	return &optionsError{what: "update", msg: fmt.Sprintf(format, args...)}
}

// updateRefusal words an enqueue's refusal of a JobUpdate field (ErrInvalidOptions) as
// the update's: "invalid update: Priority 40000: …", not "invalid enqueue options".
func updateRefusal(err error) error {
	if msg, ok := strings.CutPrefix(err.Error(), ErrInvalidOptions.Error()+": "); ok && errors.Is(err, ErrInvalidOptions) {
		return &optionsError{what: "update", msg: msg}
	}
	return err
}

// editArgs stands for the args of a JobUpdate that leaves them as they are, so that
// prepare checks the other fields.
type editArgs struct{}

// Kind implements JobArgs.
func (editArgs) Kind() string { return "update" }
