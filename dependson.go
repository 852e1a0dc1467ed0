// This file holds enqueueing a job that depends on existing jobs (DependsOn): the job and
// its edges written together, in the caller's transaction inside a savepoint or in one
// of their own, and the hooks told once the job's fate is known.

package skiplock

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/enqueue"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// ErrDependencyNotFound is returned by an enqueue whose [EnqueueOptions].DependsOn names
// a job id found neither in the jobs table nor in the archive; nothing is written.
var ErrDependencyNotFound = enqueue.ErrDependencyNotFound

// enqueueDependent enqueues a job with DependsOn: in tx (the caller's, inside a
// savepoint, so that a refusal leaves it usable and writes nothing), or, when tx is nil,
// in a transaction of its own. The job is inserted first, then its parents are locked
// and judged (internal/enqueue, dependson.go).
func (c *Client) enqueueDependent(ctx context.Context, tx DBTX, args JobArgs, opts *EnqueueOptions) (*JobRow, error) {
	parents, err := enqueue.CheckDependsOn(opts.DependsOn)
	if err != nil {
		return nil, err
	}
	policy := opts.OnDependencyFailure
	if policy != CancelDependents && policy != RunDependents {
		return nil, fmt.Errorf("%w: OnDependencyFailure %d: use CancelDependents or RunDependents", ErrInvalidOptions, policy)
	}
	o := *opts
	o.DependsOn, o.OnDependencyFailure = nil, CancelDependents
	if o.UniqueKey != "" || o.Unique != nil {
		return nil, fmt.Errorf("%w: DependsOn cannot be used with UniqueKey or Unique", ErrInvalidOptions)
	}
	j, err := c.prepare(args, &o)
	if err != nil {
		return nil, err
	}
	// The enqueue hooks hear once the job's fate is known: after its edges are written
	// (and, without tx, committed), not after the insert alone, which a refused edge rolls
	// back.
	var told func(*JobRow, error)
	attach := func(db DBTX) (*JobRow, error) {
		row, done, err := c.enq.EnqueueTxUntold(ctx, db, j)
		told = done
		if err != nil {
			return nil, err
		}
		if err := c.enq.Attach(ctx, db, row, parents, enqueue.OnFailure(policy)); err != nil {
			return nil, c.wrapErr("enqueue", err)
		}
		return row, nil
	}
	row, err := c.writeDependent(ctx, tx, attach)
	if err != nil {
		row = nil
	}
	if told != nil {
		told(row, err)
	}
	return row, err
}

// writeDependent runs attach in tx inside a savepoint (a refusal leaves tx as it was,
// even when ctx ended between attach's statements), or, without tx, in a transaction of
// its own.
func (c *Client) writeDependent(ctx context.Context, tx DBTX, attach func(DBTX) (*JobRow, error)) (*JobRow, error) {
	if tx == nil {
		var row *JobRow
		err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) (err error) {
			row, err = attach(tx)
			return err
		})
		return row, err
	}
	var row *JobRow
	err := pgutil.InSavepoint(ctx, tx, "skiplock_depends_on", func() (err error) {
		row, err = attach(tx)
		return err
	})
	if err != nil && row != nil {
		// attach succeeded; the savepoint's release failed.
		return nil, c.wrapErr("enqueue", err)
	}
	return row, err
}
