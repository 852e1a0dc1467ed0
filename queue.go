// This file holds enqueueing: one job (Enqueue, EnqueueTx, EnqueueSQLTx) and many in one
// transaction (EnqueueMany, EnqueueManyTx, EnqueueManySQLTx: COPY, or one unnest insert
// when unique keys are involved, a constant number of statements whatever the count). The
// Client is in client.go, the per-job options and their preparation in options.go, a job
// that depends on existing ones in dependson.go, the operator calls in admin.go.

package skiplock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/skiplock/skiplock/internal/enqueue"
)

// Enqueue inserts one job outside any transaction of the caller and returns it once it is
// committed. It is the fast path for jobs that need not share a transaction with other
// writes: concurrent calls share one INSERT and one commit (see [Config].CoalesceWindow),
// and each returns its own row or its own error — a job the database refuses fails only
// its own call. The wake-up notification is throttled as [Config].NotifyInterval says.
// opts may be nil.
//
// If ctx ends while the call waits, Enqueue returns at once with an error that wraps
// ctx.Err(). The job is then not inserted if it was still waiting for its batch to be
// sent; if its batch was already being written, it is inserted if that commit succeeds.
// The error message says which. (The same holds for a single statement whose reply a
// caller stops waiting for.) Use a UniqueKey if a retry after such an error must not
// insert the job twice. A batch whose commit's answer is lost (the connection breaks, or
// a pooler reports its own error) is sent again by the library with its key, for up to
// 30 seconds, without inserting its jobs twice: the call returns its job once that is
// settled.
func (c *Client) Enqueue(ctx context.Context, args JobArgs, opts *EnqueueOptions) (*JobRow, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("skiplock: enqueue: %w", err)
	}
	if opts != nil && len(opts.DependsOn) > 0 {
		return c.enqueueDependent(ctx, nil, args, opts)
	}
	j, err := c.prepare(args, opts)
	if err != nil {
		return nil, err
	}
	return c.enq.Enqueue(ctx, j)
}

// EnqueueTx inserts one job inside the caller's transaction tx (a pgx.Tx): if tx rolls
// back there is no job, if it commits there is. The wake-up notification is part of the
// same transaction, so workers hear of the job only after the commit. skiplock does not
// commit or roll back tx. opts may be nil.
//
// A refusal (bad input, a duplicate, an unknown DependsOn id) leaves tx usable, as does a
// ctx that ended before the call or between its statements. A ctx that ends while a
// statement runs makes pgx close the connection, and tx ends with it.
func (c *Client) EnqueueTx(ctx context.Context, tx DBTX, args JobArgs, opts *EnqueueOptions) (*JobRow, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("skiplock: enqueue: %w", err)
	}
	if tx == nil {
		return nil, errors.New("skiplock: EnqueueTx: tx is nil")
	}
	if opts != nil && len(opts.DependsOn) > 0 {
		return c.enqueueDependent(ctx, tx, args, opts)
	}
	j, err := c.prepare(args, opts)
	if err != nil {
		return nil, err
	}
	return c.enq.EnqueueTx(ctx, tx, j)
}

// EnqueueSQLTx is [Client.EnqueueTx] for a database/sql transaction, as services using
// sqlc, GORM or sqlx over pgx's database/sql driver (github.com/jackc/pgx/v5/stdlib) hold
// one: if tx rolls back there is no job, if it commits there is, and the wake-up
// notification is sent by Postgres at the commit. It runs the same statements as
// EnqueueTx, so it keeps the same promise that its refusals leave tx usable: bad input is
// refused in Go before anything is sent, a duplicate unique key is not an error to
// Postgres (ON CONFLICT DO NOTHING), and under REPEATABLE READ or SERIALIZABLE the unique
// insert runs inside a savepoint. A ctx that ends while a statement runs ends tx, as in
// EnqueueTx (database/sql then reports driver.ErrBadConn). skiplock does not commit or roll back tx. tx must use
// pgx's driver ("pgx" in sql.Open, or stdlib.OpenDBFromPool); other drivers cannot send
// the statements' array parameters. opts may be nil.
func (c *Client) EnqueueSQLTx(ctx context.Context, tx *sql.Tx, args JobArgs, opts *EnqueueOptions) (*JobRow, error) {
	if tx == nil {
		return nil, errors.New("skiplock: EnqueueSQLTx: tx is nil")
	}
	return c.EnqueueTx(ctx, enqueue.SQLTx(tx), args, opts)
}

// EnqueueMany inserts many jobs in one transaction of its own with a constant number of
// statements (COPY, or one multi-row insert when unique keys are used) and returns how
// many were inserted. Every job is validated, and one refused writes nothing: the jobs
// are committed all together or not at all, and the error names the first refused job.
// Jobs whose UniqueKey is already active are skipped and not counted.
//
// A call of 1000 jobs or more, on a client with no enqueue hooks and no insert
// middleware, prepares each job (marshals its args) while COPY sends the jobs before
// it, in a goroutine of pgx's: the args' Kind, EnqueueOptions and MarshalJSON methods
// then run there, one job at a time, in order, while EnqueueMany waits; a panic in them
// still reaches the caller.
//
// A call of at most 100 jobs without unique keys shares its statement and commit with
// concurrent Enqueue and EnqueueMany calls, as [Client.Enqueue] does (and with the same
// answer when ctx ends while it waits); its jobs still commit all together or not at all.
func (c *Client) EnqueueMany(ctx context.Context, params []EnqueueParams) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("skiplock: enqueue many: %w", err)
	}
	// The jobs are prepared as the engine asks for them: a large call's are prepared while
	// COPY sends those before them (internal/enqueue, stream.go).
	return c.enq.EnqueueManyFunc(ctx, len(params), func(i int) (enqueue.Job, error) {
		return c.prepareBulk(params[i])
	})
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
