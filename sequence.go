// This file holds sequences: jobs that share a key run one at a time in the order they
// were enqueued, each starting only once the previous one has finished. A key's jobs
// are a chain of tasks in a workflow of its own (workflow.go), released by the
// transaction that records the previous job's final outcome, or with [SequenceMoveOn]
// its first failed attempt (workflowsettle.go).

package skiplock

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/settle"
)

// SequencePolicy is what a failed attempt of a sequence job does to the jobs enqueued
// after it with the same key ([EnqueueOptions].SequenceOnFailure).
type SequencePolicy int

const (
	// SequenceHold, the zero value, holds the sequence: the next job of the key waits
	// while this one waits for its retries, until it succeeds or ends failed, dead or
	// cancelled. Jobs of the key run strictly one at a time, in order.
	SequenceHold SequencePolicy = iota
	// SequenceMoveOn moves on: the first failed attempt of this job (one that will be
	// retried, or its final failure, death or cancellation) releases the next job of the
	// key, in the transaction that records the failure. The job's own retries then run
	// whenever they are due, out of order, possibly at the same time as later jobs of the
	// key; the jobs after it still run one at a time, each after the previous one's first
	// attempt has ended. A snooze is not a failure.
	SequenceMoveOn
)

// sequencePolicies names the policies as the metadata of a sequence task stores them
// (settle.MetaSequence), which the settle statement reads.
var sequencePolicies = map[SequencePolicy]string{SequenceHold: "hold", SequenceMoveOn: "move_on"}

// Statements of EnqueueSequenceTx, run in this order inside a savepoint.
const (
	// seqLockSQL takes the key's row (creating it), and holds it until the caller's
	// transaction ends: enqueues of one key serialize, and a settle of the key's tail
	// waits for it (lockSequencesSQL).
	seqLockSQL = `INSERT INTO {s}.sequences (key) VALUES ($1)
ON CONFLICT (key) DO UPDATE SET key = EXCLUDED.key
RETURNING workflow_id, tail`
	// seqWorkflowSQL creates the key's workflow: a failed or dead job is settled, so the
	// next one runs ("hold": a job waits while the previous one is retried).
	seqWorkflowSQL = `WITH w AS (
	INSERT INTO {s}.workflows (name, on_failure) VALUES ('sequence ' || $1::text, 'run') RETURNING id
)
UPDATE {s}.sequences SET workflow_id = (SELECT id FROM w) WHERE key = $1::text RETURNING workflow_id`
	// seqTailSQL reads the state of the key's last job, under the key's lock, and whether
	// it has moved the sequence on already: a "move on" task whose job has a failed
	// attempt recorded (its error history) released its successor when that failure was
	// recorded, so a job enqueued after it does not wait for it either.
	seqTailSQL = `SELECT t.state, coalesce(t.metadata ->> '` + settle.MetaSequence + `' = 'move_on'
		AND jsonb_array_length(coalesce(j.errors, '[]'::jsonb)) > 0, false)
FROM {s}.workflow_tasks t LEFT JOIN {s}.jobs j ON j.id = t.job_id
WHERE t.workflow_id = $1 AND t.name = $2`
	// seqInsertSQL adds the job as the chain's new tail: a task named by its place in the
	// sequence (1, 2, …: the old tail's number plus one, under the key's lock), waiting
	// behind $2 (the old tail) when $3 is 1, else inserted as a job at once. $13 is its
	// policy, written into its metadata over any the caller gave under that key.
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
	SELECT $1::bigint, $2::text, t.name FROM t WHERE $3::int = 1
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

// EnqueueSequence enqueues args as the next job of the sequence key, in a transaction of
// its own. See [Client.EnqueueSequenceTx].
func (c *Client) EnqueueSequence(ctx context.Context, key string, args JobArgs, opts *EnqueueOptions) (*WorkflowTaskInfo, error) {
	var info *WorkflowTaskInfo
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var err error
		info, err = c.EnqueueSequenceTx(ctx, tx, key, args, opts)
		return err
	})
	if err != nil {
		return nil, err
	}
	return info, nil
}

// EnqueueSequenceTx enqueues args, inside the caller's transaction tx, as the next job of
// the sequence key (1-255 bytes): it starts only once the job enqueued before it with the
// same key has finished — succeeded, or failed, dead or cancelled for good; while that
// one waits for a retry, the sequence holds. Jobs of one key therefore run one at a time,
// in the order their enqueues committed. With opts.SequenceOnFailure set to
// [SequenceMoveOn], this job's first failed attempt releases the next job instead, and
// its retries run out of order (see [SequenceMoveOn]). It returns the task: State "released" if it may
// run now (JobID is its job's id), "waiting" if it waits for the previous job (JobID 0).
//
// Enqueues of one key wait for each other: the key is locked until tx ends, and so is the
// recording of the outcome of the key's last job. No error of this call aborts tx.
func (c *Client) EnqueueSequenceTx(ctx context.Context, tx DBTX, key string, args JobArgs, opts *EnqueueOptions) (*WorkflowTaskInfo, error) {
	if tx == nil {
		return nil, errors.New("skiplock: EnqueueSequenceTx: tx is nil")
	}
	if key == "" || len(key) > 255 || !validText(key) {
		return nil, fmt.Errorf("%w: sequence key %q: 1-255 bytes of UTF-8 without NUL", ErrInvalidWorkflow, truncate(key, 40))
	}
	if opts != nil && (opts.UniqueKey != "" || opts.Unique != nil) {
		return nil, fmt.Errorf("%w: UniqueKey and Unique are not supported on sequence jobs", ErrInvalidWorkflow)
	}
	policy := SequenceHold
	if opts != nil {
		policy = opts.SequenceOnFailure
		o := *opts
		o.SequenceOnFailure = SequenceHold
		opts = &o
	}
	if _, ok := sequencePolicies[policy]; !ok {
		return nil, fmt.Errorf("%w: SequenceOnFailure %d: not a SequencePolicy", ErrInvalidOptions, policy)
	}
	j, err := c.prepare(args, opts)
	if err != nil {
		return nil, err
	}
	if err := j.encodeMetadata(); err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `SAVEPOINT skiplock_sequence`); err != nil {
		return nil, c.wrapErr("enqueue sequence", err)
	}
	info, err := c.insertSequenced(ctx, tx, key, &j, policy)
	if err != nil {
		if _, rerr := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT skiplock_sequence`); rerr != nil {
			return nil, errors.Join(c.wrapErr("enqueue sequence", err), rerr)
		}
	}
	if _, rerr := tx.Exec(ctx, `RELEASE SAVEPOINT skiplock_sequence`); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		return nil, c.wrapErr("enqueue sequence", err)
	}
	return info, nil
}

// insertSequenced runs the statements of EnqueueSequenceTx through tx.
func (c *Client) insertSequenced(ctx context.Context, tx DBTX, key string, j *newJob, policy SequencePolicy) (*WorkflowTaskInfo, error) {
	var wf *int64
	var tail *string
	if err := tx.QueryRow(ctx, c.wf.seqLock, key).Scan(&wf, &tail); err != nil {
		return nil, err
	}
	if wf == nil {
		wf = new(int64)
		if err := tx.QueryRow(ctx, c.wf.seqWorkflow, key).Scan(wf); err != nil {
			return nil, err
		}
	}
	waiting := 0
	if tail != nil {
		var state string
		var movedOn bool
		err := tx.QueryRow(ctx, c.wf.seqTail, *wf, *tail).Scan(&state, &movedOn)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
		if (state == "waiting" || state == "released") && !movedOn {
			waiting = 1
		}
	}
	info := &WorkflowTaskInfo{}
	err := tx.QueryRow(ctx, c.wf.seqInsert, *wf, tail, waiting, j.queue, j.kind, string(j.payload), j.priority,
		j.runAt, j.maxAttempts, j.timeoutMs, j.metadataText(), j.partitionKey, sequencePolicies[policy]).Scan(&info.Name, &info.JobID, &info.State)
	if err != nil {
		return nil, err
	}
	if waiting == 1 {
		info.DependsOn = []string{*tail}
	}
	if info.JobID != 0 {
		ins := settle.Inserted{IDs: []int64{info.JobID}, Workflows: []int64{*wf}, Names: []string{info.Name}, Queues: []string{j.queue}}
		if err := c.flows.Mapper.Run(ctx, tx, &ins, j.dueNow()); err != nil {
			return nil, err
		}
	}
	return info, nil
}
