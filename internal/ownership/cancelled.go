// This file holds the lease of an attempt whose job was cancelled while its handler ran
// (Client.Cancel keeps the row's lease_until): the worker renews it while the handler
// still runs, and ends it when the handler returns. RetryWorkflow reads it (the root's
// workflowadmin.go): a job whose lease has not ended may still be running, and putting
// it back in the queue would run a second attempt beside it. A sequence task's job
// cancelled while it ran is settled when its lease ends, not at the cancel (the root's
// admin.go): the key's next job starts only once the handler has returned. The worker
// settles it here, in the transaction that ends the lease; a lease that ends otherwise
// (the worker died, or stopped waiting for the handler) passes, and the sweeper settles
// the task then (internal/maintenance, cancelledseq.go).

package ownership

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/internal/settle"
)

// CancelledAttemptOpen is true of a jobs row cancelled while its handler ran whose attempt
// has not ended for skiplock: its lease has not passed (the handler may still run), or
// it is a sequence task's, whose task is settled only when that lease ends (by its
// worker in endCancelledSQL, or by the sweep once it has passed). Such a row is not
// deleted (the retention purge, Delete, DeleteMany): with the row gone, neither would
// find it, and the sequence key's next job would wait for ever.
const CancelledAttemptOpen = `(status = 'cancelled' AND lease_until IS NOT NULL
	AND (lease_until >= now() OR metadata ? '` + settle.MetaSequence + `'))`

// keepCancelledSQL renews, to now() + $4, the lease of the cancelled rows of this
// worker's ($3) attempts ($1, $2, pairs as in FenceSQL) whose handlers still run. A row
// whose lease was ended (NULL: the handler returned) is left alone, and so is a row
// requeued or claimed since (status): a renewal read before the handler returned never
// brings its lease back.
const keepCancelledSQL = `UPDATE {s}.jobs SET lease_until = now() + $4::interval
WHERE id = ANY ($1::bigint[]) AND status = 'cancelled' AND locked_by = $3 AND lease_until IS NOT NULL
	AND ((id, fence) IN (SELECT * FROM unnest($1::bigint[], $2::bigint[])) OR false)`

// endCancelledSQL ends the lease of the cancelled row of attempt ($1, $2) of worker $3,
// whose handler has returned, and says whether the job is a sequence task (to settle
// then: Client.Cancel left it to the end of this lease). No row: nothing was ended.
const endCancelledSQL = `UPDATE {s}.jobs SET lease_until = NULL
WHERE id = $1 AND fence = $2 AND status = 'cancelled' AND locked_by = $3 AND lease_until IS NOT NULL
RETURNING coalesce(metadata ? '` + settle.MetaSequence + `', false)`

// endCancelledTimeout bounds the statement that ends a cancelled attempt's lease; if it
// fails, the lease ends by itself within the visibility timeout (no one renews it).
const endCancelledTimeout = 10 * time.Second

// cancelledLeases renews and ends the leases of one worker's attempts whose jobs were
// cancelled while they ran.
type cancelledLeases struct {
	pool       *pgxpool.Pool
	workerID   string
	visibility time.Duration
	keepSQL    string // keepCancelledSQL, rendered
	endSQL     string // endCancelledSQL, rendered
	logger     *slog.Logger
}

func newCancelledLeases(pool *pgxpool.Pool, schema, workerID string, visibility time.Duration, logger *slog.Logger) *cancelledLeases {
	return &cancelledLeases{pool: pool, workerID: workerID, visibility: visibility, logger: logger,
		keepSQL: pgutil.Render(schema, keepCancelledSQL), endSQL: pgutil.Render(schema, endCancelledSQL)}
}

// keep renews the leases of the cancelled rows of lost, attempts the heartbeat found no
// longer running whose handlers have not returned. A failure is logged: the next
// heartbeat tries again.
func (c *cancelledLeases) keep(ctx context.Context, lost []jobtype.AttemptKey) {
	if len(lost) == 0 {
		return
	}
	ids, fences := sortedKeys(lost)
	if _, err := c.pool.Exec(ctx, c.keepSQL, ids, fences, c.workerID, c.visibility); err != nil {
		c.logger.Warn("skiplock: could not renew the lease of cancelled jobs whose handlers still run", "jobs", len(ids), "err", err)
	}
}

// end ends the lease of attempt k's row if the job was cancelled while k ran, and
// settles the job's task with flows in the same transaction when it is a sequence task,
// so the key's next job is released as the lease ends; for any other row it changes
// nothing. If it fails, the lease ends by itself within the visibility timeout, and the
// sweeper settles the task then.
func (c *cancelledLeases) end(k jobtype.AttemptKey, flows *settle.Settler) {
	ctx, cancel := context.WithTimeout(context.Background(), endCancelledTimeout)
	defer cancel()
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var seq bool
		err := tx.QueryRow(ctx, c.endSQL, k.ID, k.Fence, c.workerID).Scan(&seq)
		if errors.Is(err, pgx.ErrNoRows) || err == nil && (!seq || flows == nil) {
			return nil
		}
		if err != nil {
			return err
		}
		return flows.Settle(ctx, tx, []int64{k.ID})
	})
	if err != nil {
		c.logger.Warn("skiplock: could not end the lease of a cancelled job whose handler returned; it ends within the visibility timeout",
			"job", k.ID, "err", err)
	}
}
