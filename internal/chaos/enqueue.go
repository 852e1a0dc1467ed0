package chaos

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/chaos/audit"
)

// enqueuer inserts the run's jobs in batches spread evenly over the fault window, through
// the faults, on the run's schedule (schedule.go): the batches planned in a fault's slot
// go once the slot has started, and the last batch once the last fault is over. Job seq
// numbers are 0..jobs-1; batch b holds seqs [b*size, (b+1)*size).
type enqueuer struct {
	client *skiplock.Client
	pool   *pgxpool.Pool
	rec    *recorder
	jobs   int
	size   int // jobs per batch
	window time.Duration

	enqueued atomic.Int64 // jobs known committed
	mu       sync.Mutex
	failures []string // enqueue calls that failed, and what became of them
}

func newEnqueuer(client *skiplock.Client, pool *pgxpool.Pool, rec *recorder, jobs int, window time.Duration) *enqueuer {
	// About one batch every 100ms.
	size := int((int64(jobs)*int64(100*time.Millisecond) + int64(window) - 1) / int64(window))
	size = max(1, min(size, maxBatch))
	return &enqueuer{client: client, pool: pool, rec: rec, jobs: jobs, size: size, window: window}
}

func (e *enqueuer) batches() int { return (e.jobs + e.size - 1) / e.size }

// run enqueues batch b at the real time of the planned offset window*b/batches (see
// schedule.at), the last batch not before every fault is over: the last fault too has
// work after it. A batch that is behind schedule (the database was down) goes at once.
func (e *enqueuer) run(ctx context.Context, sched *schedule) error {
	n := e.batches()
	for b := range n {
		if err := sched.wait(ctx, e.window*time.Duration(b)/time.Duration(n)); err != nil {
			return err
		}
		if b == n-1 {
			if err := sched.afterFaults(ctx); err != nil {
				return err
			}
		}
		lo, hi := b*e.size, min((b+1)*e.size, e.jobs)
		params := make([]skiplock.EnqueueParams, 0, hi-lo)
		for seq := lo; seq < hi; seq++ {
			p := skiplock.EnqueueParams{Args: audit.Args{Seq: int64(seq), Batch: b}}
			if seq%audit.LimitedEvery == 0 {
				p.Options = &skiplock.EnqueueOptions{Queue: audit.LimitedQueue}
			}
			params = append(params, p)
		}
		if err := e.enqueue(ctx, b, params); err != nil {
			return err
		}
		e.enqueued.Add(int64(len(params)))
	}
	return nil
}

// enqueue inserts one batch exactly once. EnqueueMany is one transaction; when it fails
// with a lost connection the commit may or may not have happened, so before trying again
// it asks the database whether the batch's jobs are there.
func (e *enqueuer) enqueue(ctx context.Context, b int, params []skiplock.EnqueueParams) error {
	for {
		n, err := e.client.EnqueueMany(ctx, params)
		if err == nil {
			if n != len(params) {
				return fmt.Errorf("chaos: EnqueueMany of batch %d inserted %d of %d jobs", b, n, len(params))
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var found int
		qerr := retryDB(ctx, func(ctx context.Context) error {
			return e.pool.QueryRow(ctx, batchCountSQL, b).Scan(&found)
		})
		if qerr != nil {
			return fmt.Errorf("chaos: enqueue of batch %d failed (%v), and checking whether it committed failed: %w", b, err, qerr)
		}
		switch found {
		case len(params):
			e.note("batch %d: EnqueueMany failed (%v) but had committed", b, err)
			return nil
		case 0:
			e.note("batch %d: EnqueueMany failed (%v) and had not committed; retried", b, err)
		default:
			return fmt.Errorf("chaos: batch %d: EnqueueMany failed (%v) and %d of its %d jobs are in the database: a transaction was half committed", b, err, found, len(params))
		}
	}
}

func (e *enqueuer) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	e.rec.logf("enqueue: %s", msg)
	e.mu.Lock()
	e.failures = append(e.failures, msg)
	e.mu.Unlock()
}

// batchCountSQL counts a batch's jobs wherever they are now.
const batchCountSQL = `SELECT
	(SELECT count(*) FROM skiplock.jobs WHERE payload->>'batch' = $1::int::text) +
	(SELECT count(*) FROM skiplock.jobs_archive WHERE payload->>'batch' = $1::int::text)`
