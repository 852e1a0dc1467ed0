// This file holds the enqueue of sequence jobs: the next job of a key, a task in the
// key's workflow that waits for the key's previous job.

package enqueue

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/internal/settle"
)

// Statements of InsertSequence, run in this order inside a savepoint.
const (
	// seqLockSQL takes the key's row (creating it), and holds it until the caller's
	// transaction ends: enqueues of one key serialize, and a settle of the key's tail
	// waits for it (lockSQL in internal/settle).
	seqLockSQL = `INSERT INTO {s}.sequences (key) VALUES ($1)
ON CONFLICT (key) DO UPDATE SET key = EXCLUDED.key
RETURNING workflow_id, tail`
	// seqWorkflowSQL creates the key's workflow: a failed or dead job is settled, so the
	// next one runs ("hold": a job waits while the previous one is retried).
	seqWorkflowSQL = `WITH w AS (
	INSERT INTO {s}.workflows (name, on_failure) VALUES ('sequence ' || $1::text, 'run') RETURNING id
)
UPDATE {s}.sequences SET workflow_id = (SELECT id FROM w) WHERE key = $1::text RETURNING workflow_id`
	// seqTailSQL reads, under the key's lock, the task the key's next job must follow:
	// the tail ($2), or, when the tail was cancelled before it ran (job_id NULL:
	// CancelWorkflow on the key's workflow), the nearest task before it that was not
	// (back, walking names down by one along the primary key; the cancelled ones in
	// between were all cancelled before they ran too). A cancelled task never settles
	// again, but the job before it may still run: following it (its name, its state) is
	// what keeps one job of the key at a time. It says too whether that task has moved
	// the sequence on already: a "move on" task whose job has a failed attempt recorded
	// (its error history) released its successor when that failure was recorded, so a
	// job enqueued after it does not wait for it either. No row: nothing to wait for.
	seqTailSQL = `WITH RECURSIVE back AS (
	SELECT t.name, t.state, t.job_id, t.metadata FROM {s}.workflow_tasks t
	WHERE t.workflow_id = $1 AND t.name = $2
	UNION ALL
	SELECT p.name, p.state, p.job_id, p.metadata FROM back b
	JOIN {s}.workflow_tasks p ON p.workflow_id = $1 AND p.name = (b.name::bigint - 1)::text
	WHERE b.state = 'cancelled' AND b.job_id IS NULL
)
SELECT b.name, b.state, coalesce(b.metadata ->> '` + settle.MetaSequence + `' = 'move_on'
		AND jsonb_array_length(coalesce(j.errors, '[]'::jsonb)) > 0, false)
FROM back b LEFT JOIN {s}.jobs j ON j.id = b.job_id
WHERE NOT (b.state = 'cancelled' AND b.job_id IS NULL)`
	// seqInsertSQL adds the job as the chain's new tail: a task named by its place in the
	// sequence (1, 2, …: the old tail $2's number plus one, under the key's lock), waiting
	// behind $14 (the task seqTailSQL found) when $3 is 1, else inserted as a job at once.
	// $13 is its policy, written into its metadata over any the caller gave under that key.
	seqInsertSQL = `WITH t AS (
	INSERT INTO {s}.workflow_tasks (workflow_id, name, state, waiting, queue, kind, payload,
		priority, run_at, max_attempts, timeout_ms, metadata, partition_key)
	SELECT $1::bigint, n.name, CASE WHEN $3::int = 0 THEN 'released' ELSE 'waiting' END, $3::int,
		$4, $5, $6::jsonb, $7, $8, $9, $10,
		$11::jsonb || jsonb_build_object('` + settle.MetaWorkflow + `', $1::bigint::text, '` + settle.MetaTask + `', n.name,
			'` + settle.MetaSequence + `', $13::text), $12
	FROM (SELECT coalesce(($2::text)::bigint + 1, 1)::text AS name) n
	RETURNING *
),
e AS (
	INSERT INTO {s}.workflow_edges (workflow_id, parent, child)
	SELECT $1::bigint, $14::text, t.name FROM t WHERE $3::int = 1
),
j AS (
	INSERT INTO {s}.jobs (queue, kind, payload, priority, run_at, max_attempts, timeout_ms, metadata, partition_key)
	SELECT queue, kind, payload, priority, coalesce(run_at, now()), max_attempts, timeout_ms,
		metadata, partition_key
	FROM t WHERE state = 'released'
	RETURNING id
),
s AS (
	UPDATE {s}.sequences SET tail = (SELECT name FROM t) WHERE workflow_id = $1::bigint
)
SELECT t.name, coalesce((SELECT id FROM j), 0), t.state FROM t`
)

// Sequences writes sequence jobs on one schema.
type Sequences struct {
	schema string
	mapper settle.JobMapper // maps a released job to its task
	// The statements of InsertSequence, rendered for schema.
	seqLock, seqWorkflow, seqTail, seqInsert string
}

func newSequences(schema string, mapper settle.JobMapper) *Sequences {
	r := func(q string) string { return pgutil.Render(schema, q) }
	return &Sequences{schema: schema, mapper: mapper,
		seqLock: r(seqLockSQL), seqWorkflow: r(seqWorkflowSQL), seqTail: r(seqTailSQL), seqInsert: r(seqInsertSQL)}
}

// InsertSequence writes j, inside tx, as the next job of the sequence key, with the
// failure policy policy ("hold" or "move_on"): a task of the key's workflow, released at
// once when the key's previous job has finished (or moved the sequence on), else waiting
// for it; jobs cancelled before they ran (CancelWorkflow) are passed over, to the job
// before them. The key is locked until tx ends. The statements run inside a savepoint, so no
// error aborts tx.
func (s *Sequences) InsertSequence(ctx context.Context, tx jobtype.DBTX, key string, j *Job, policy string) (*TaskInfo, error) {
	if err := j.encodeMetadata(); err != nil {
		return nil, err
	}
	if j.ConcurrencyKeys != nil {
		return nil, fmt.Errorf("%w: ConcurrencyKeys are not supported on sequence jobs (PartitionKey is)", ErrInvalidOptions)
	}
	var info *TaskInfo
	err := pgutil.InSavepoint(ctx, tx, "skiplock_sequence", func() (err error) {
		info, err = s.insertSequenced(ctx, tx, key, j, policy)
		return err
	})
	if err != nil {
		return nil, wrapErr(s.schema, "enqueue sequence", err)
	}
	return info, nil
}

// insertSequenced runs the statements of InsertSequence through tx.
func (s *Sequences) insertSequenced(ctx context.Context, tx jobtype.DBTX, key string, j *Job, policy string) (*TaskInfo, error) {
	var wf *int64
	var tail *string
	if err := tx.QueryRow(ctx, s.seqLock, key).Scan(&wf, &tail); err != nil {
		return nil, err
	}
	if wf == nil {
		wf = new(int64)
		if err := tx.QueryRow(ctx, s.seqWorkflow, key).Scan(wf); err != nil {
			return nil, err
		}
	}
	waiting := 0
	var after string // the task the job waits for, when waiting
	if tail != nil {
		var state string
		var movedOn bool
		err := tx.QueryRow(ctx, s.seqTail, *wf, *tail).Scan(&after, &state, &movedOn)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
		if (state == "waiting" || state == "released") && !movedOn {
			waiting = 1
		}
	}
	info := &TaskInfo{}
	err := tx.QueryRow(ctx, s.seqInsert, *wf, tail, waiting, j.Queue, j.Kind, string(j.Payload), j.Priority,
		j.RunAt, j.MaxAttempts, j.TimeoutMs, j.metadataText(), j.PartitionKey, policy, after).Scan(&info.Name, &info.JobID, &info.State)
	if err != nil {
		return nil, err
	}
	if waiting == 1 {
		info.DependsOn = []string{after}
	}
	if info.JobID != 0 {
		ins := settle.Inserted{IDs: []int64{info.JobID}, Workflows: []int64{*wf}, Names: []string{info.Name}, Queues: []string{j.Queue}}
		if err := s.mapper.Run(ctx, tx, &ins, j.dueNow()); err != nil {
			return nil, err
		}
	}
	return info, nil
}
