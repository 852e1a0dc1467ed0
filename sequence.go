// This file holds sequences: jobs that share a key run one at a time in the order they
// were enqueued, each starting only once the previous one has finished. A key's jobs
// are a chain of tasks in a workflow of its own (workflow.go), released by the
// transaction that records the previous job's final outcome, or with [SequenceMoveOn]
// its first failed attempt (internal/settle). The statements are in internal/enqueue.

package skiplock

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// sequencePolicies names the policies as the metadata of a sequence task stores them
// (settle.MetaSequence), which the settle statement reads.
var sequencePolicies = map[SequencePolicy]string{SequenceHold: "hold", SequenceMoveOn: "move_on"}

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
	info, err := c.enq.InsertSequence(ctx, tx, key, &j, sequencePolicies[policy])
	if err != nil {
		return nil, err
	}
	t := WorkflowTaskInfo(*info)
	return &t, nil
}
