// This file holds bulk enqueueing: EnqueueMany, EnqueueManyTx and EnqueueManySQLTx,
// written with COPY (or one unnest insert when unique keys are involved), a constant
// number of statements whatever the count (internal/enqueue).

package skiplock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/skiplock/skiplock/internal/enqueue"
)

// EnqueueMany inserts many jobs in one transaction of its own with a constant number of
// statements (COPY, or one multi-row insert when unique keys are used) and returns how
// many were inserted. Every job is validated before anything is written, and the jobs are
// committed all together or not at all. Jobs whose UniqueKey is already active are
// skipped and not counted.
//
// A call of at most 100 jobs without unique keys shares its statement and commit with
// concurrent Enqueue and EnqueueMany calls, as [Client.Enqueue] does (and with the same
// answer when ctx ends while it waits); its jobs still commit all together or not at all.
func (c *Client) EnqueueMany(ctx context.Context, params []EnqueueParams) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("skiplock: enqueue many: %w", err)
	}
	jobs, err := c.prepareMany(params)
	if err != nil || len(jobs) == 0 {
		return 0, err
	}
	return c.enq.EnqueueMany(ctx, jobs)
}

// EnqueueManyTx is [Client.EnqueueMany] inside the caller's transaction tx.
func (c *Client) EnqueueManyTx(ctx context.Context, tx DBTX, params []EnqueueParams) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("skiplock: enqueue many: %w", err)
	}
	if tx == nil {
		return 0, errors.New("skiplock: EnqueueManyTx: tx is nil")
	}
	jobs, err := c.prepareMany(params)
	if err != nil || len(jobs) == 0 {
		return 0, err
	}
	return c.enq.EnqueueManyTx(ctx, tx, jobs)
}

// EnqueueManySQLTx is [Client.EnqueueManyTx] for a database/sql transaction (see
// [Client.EnqueueSQLTx]). database/sql has no COPY, so the jobs go in one unnest insert,
// as EnqueueManyTx sends jobs with unique keys: one statement for the jobs and one for
// the wake-ups, whatever their number.
func (c *Client) EnqueueManySQLTx(ctx context.Context, tx *sql.Tx, params []EnqueueParams) (int, error) {
	if tx == nil {
		return 0, errors.New("skiplock: EnqueueManySQLTx: tx is nil")
	}
	return c.EnqueueManyTx(ctx, enqueue.SQLTx(tx), params)
}

// prepareMany prepares every job of params, or returns the first error, naming its job.
func (c *Client) prepareMany(params []EnqueueParams) ([]enqueue.Job, error) {
	jobs := make([]enqueue.Job, len(params))
	for i := range params {
		j, err := c.prepare(params[i].Args, params[i].Options)
		if err != nil {
			return nil, fmt.Errorf("job %d of %d: %w", i, len(params), err)
		}
		jobs[i] = j
	}
	return jobs, nil
}
