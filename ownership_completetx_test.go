package skiplock_test

// Tests of the exactly-once call (issue 30, docs/ownership.md "Exactly-once effects"):
// CompleteTx marks the current attempt succeeded inside the handler's own transaction,
// fenced on the attempt's token, so a handler's business write and its job's success
// commit together or not at all, and a twin whose attempt was taken away cannot commit
// its business write. ExampleCompleteTx (completetx_example_test.go) shows the call.

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

type orderArgs struct {
	Order int `json:"order"`
}

func (orderArgs) Kind() string { return "order_paid" }

// businessSetup makes the business table a handler writes in its own transaction.
func businessSetup(t *testing.T, b *bundle) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.payments (
		order_id int, job_id bigint, attempt int, token bigint)`))
	require.NoError(t, err)
}

// The business row and the job's success commit together; a rollback after CompleteTx
// leaves neither, and the worker then records the attempt by the handler's result.
func TestCompleteTx_BusinessRowAndSuccessCommitTogether(t *testing.T) {
	t.Parallel()
	b := setup(t)
	businessSetup(t, b)
	w := newWorker(t, b, skiplock.WorkerConfig{SweepInterval: -1, PollInterval: 50 * time.Millisecond,
		Completion: skiplock.CompletionKeep, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[orderArgs]) error {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.Background())
		if _, err := tx.Exec(ctx, b.q(`INSERT INTO {s}.payments VALUES ($1, $2, $3, $4)`),
			job.Args.Order, job.ID, job.Attempts, job.Fence); err != nil {
			return err
		}
		if err := skiplock.CompleteTx(ctx, tx, job); err != nil {
			return err
		}
		if job.Args.Order == 2 && job.Attempts == 1 {
			return errors.New("changed its mind") // rolls back the payment and the success
		}
		return tx.Commit(ctx)
	}))
	one, err := b.client.Enqueue(b.ctx, orderArgs{Order: 1}, nil)
	require.NoError(t, err)
	two, err := b.client.Enqueue(b.ctx, orderArgs{Order: 2}, &skiplock.EnqueueOptions{MaxAttempts: 3})
	require.NoError(t, err)
	runWorker(t, w)
	for _, id := range []int64{one.ID, two.ID} {
		waitStatus(t, b, id, skiplock.StatusSucceeded, 30*time.Second, "job %d succeeded", id)
	}
	// One payment per order: order 2's first attempt rolled back with its success, and
	// its second attempt paid and succeeded together.
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.payments WHERE order_id = 1 AND attempt = 1`))
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.payments WHERE order_id = 2`))
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.payments WHERE order_id = 2 AND attempt = 2`))
	j, err := b.client.Get(b.ctx, two.ID)
	require.NoError(t, err)
	assert.Equal(t, 2, j.Attempts)
	// The token a handler was given is the one its attempt's row held.
	assert.Equal(t, 2, b.count(t, `SELECT count(*) FROM {s}.payments p JOIN {s}.jobs j ON j.id = p.job_id
		WHERE p.token = j.fence`))
}

// A handler that commits its success with CompleteTx and returns nil (the docs' sample)
// raises no "stale successes ignored" warning, which told operators their jobs were being
// taken away: the worker's own success statement, written in case the handler's
// transaction rolled back, is expected to match no row. Each job succeeds once, with its
// payment.
func TestCompleteTx_ANilReturnAfterTheCommitIsNoStaleSuccess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	businessSetup(t, b)
	var logs lockedBuffer
	w := newWorker(t, b, skiplock.WorkerConfig{SweepInterval: -1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[orderArgs]) error {
		return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, b.q(`INSERT INTO {s}.payments VALUES ($1, $2, $3, $4)`),
				job.Args.Order, job.ID, job.Attempts, job.Fence); err != nil {
				return err
			}
			return skiplock.CompleteTx(ctx, tx, job)
		})
	}))
	var ids []int64
	for n := range 5 {
		j, err := b.client.Enqueue(b.ctx, orderArgs{Order: n}, nil)
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	stop := runWorker(t, w)
	for _, id := range ids {
		waitStatus(t, b, id, skiplock.StatusSucceeded, 30*time.Second, "job %d succeeded", id)
	}
	stop()
	assert.Equal(t, 5, b.count(t, `SELECT count(*) FROM {s}.payments`))
	assert.Equal(t, 5, b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE status = 'succeeded' AND attempts = 1`))
	assert.NotContains(t, logs.String(), "stale successes", "the worker wrote a success CompleteTx had committed")
}

// An attempt taken away while its handler runs cannot commit its business write:
// CompleteTx fails with ErrAttemptLost, the caller's transaction rolls back, and the next
// attempt's payment is the only one.
func TestCompleteTx_AttemptTakenAwayDuringTheHandlerCommitsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	businessSetup(t, b)
	inside := make(chan struct{})
	goOn := make(chan struct{})
	lost := make(chan error, 1)
	w := newWorker(t, b, skiplock.WorkerConfig{ID: "w",
		Queues:            map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 2}},
		VisibilityTimeout: time.Minute, SweepInterval: -1, PollInterval: 20 * time.Millisecond, JobTimeout: -1,
		Completion: skiplock.CompletionKeep, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[orderArgs]) error {
		tx, err := b.pool.Begin(context.Background()) // not ctx: the handler is deaf to it
		if err != nil {
			return err
		}
		defer tx.Rollback(context.Background())
		if _, err := tx.Exec(context.Background(), b.q(`INSERT INTO {s}.payments VALUES ($1, $2, $3, $4)`),
			job.Args.Order, job.ID, job.Attempts, job.Fence); err != nil {
			return err
		}
		if job.Attempts == 1 {
			close(inside)
			<-goOn // meanwhile the attempt is taken away and the job claimed again
		}
		if err := skiplock.CompleteTx(context.Background(), tx, job); err != nil {
			if job.Attempts == 1 {
				lost <- err
			}
			return err
		}
		return tx.Commit(context.Background())
	}))
	job, err := b.client.Enqueue(b.ctx, orderArgs{Order: 7}, &skiplock.EnqueueOptions{MaxAttempts: 5})
	require.NoError(t, err)
	runWorker(t, w)
	<-inside
	takeBack(t, b, job.ID)
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.payments WHERE attempt = 2`) == 1
	}, "attempt 2 paid")
	close(goOn)
	select {
	case err := <-lost:
		assert.ErrorIs(t, err, skiplock.ErrAttemptLost)
	case <-time.After(30 * time.Second):
		t.Fatal("attempt 1's CompleteTx did not fail")
	}
	waitStatus(t, b, job.ID, skiplock.StatusSucceeded, 30*time.Second, "job %d succeeded", job.ID)
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.payments`), "the twin's payment committed")
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.payments WHERE attempt = 1`))
}

// The output a handler set with SetOutput, and its last progress, commit with the success
// CompleteTx writes, in the archive and in the kept row.
func TestCompleteTx_WritesTheHandlersOutputAndProgress(t *testing.T) {
	t.Parallel()
	forKeepingModes(t, func(t *testing.T, mode skiplock.Completion) {
		b := setup(t)
		businessSetup(t, b)
		w := newWorker(t, b, skiplock.WorkerConfig{SweepInterval: -1, PollInterval: 50 * time.Millisecond,
			Completion: mode, Logger: testLogger()})
		require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[orderArgs]) error {
			if err := skiplock.RecordProgress(ctx, 100, "paid"); err != nil {
				return err
			}
			if err := skiplock.SetOutput(ctx, map[string]int{"receipt": job.Args.Order * 10}); err != nil {
				return err
			}
			return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, b.q(`INSERT INTO {s}.payments VALUES ($1, $2, $3, $4)`),
					job.Args.Order, job.ID, job.Attempts, job.Fence); err != nil {
					return err
				}
				return skiplock.CompleteTx(ctx, tx, job)
			})
		}))
		job, err := b.client.Enqueue(b.ctx, orderArgs{Order: 4}, nil)
		require.NoError(t, err)
		runWorker(t, w)
		waitStatus(t, b, job.ID, skiplock.StatusSucceeded, 30*time.Second, "the job succeeded")
		got, err := b.client.Get(b.ctx, job.ID)
		require.NoError(t, err)
		assert.JSONEq(t, `{"receipt": 40}`, string(got.Output), "the output commits with the success")
		require.NotNil(t, got.Progress)
		assert.Equal(t, skiplock.Progress{Value: 100, Message: "paid"}, *got.Progress)
		assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.payments WHERE order_id = 4`))
	})
}

type paidOrderArgs struct {
	Order int `json:"order"`
}

func (paidOrderArgs) Kind() string { return "paid_order" }

// outcomeLog is a hook that writes every JobFinished into the test's schema.
type outcomeLog struct{ b *bundle }

func (outcomeLog) JobStarted(ctx context.Context, _ *skiplock.JobRow) context.Context { return ctx }

func (h outcomeLog) JobFinished(_ context.Context, job *skiplock.JobRow, res skiplock.JobResult) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = h.b.pool.Exec(ctx, h.b.q(`INSERT INTO {s}.outcomes VALUES ($1, $2, $3)`), job.ID, string(res.Status), string(res.Outcome))
}

// A handler commits its payment and its job's success together (CompleteTx, Commit),
// then goes on with something that waits for its context; StopAndCancel cuts that off,
// and the handler returns the shutdown's error. The job succeeded — the archive holds it,
// with the one payment — so the hooks are told it succeeded, and the worker puts nothing
// back. Before, the hooks were told the job was released to the queue.
func TestCompleteTx_ASuccessCommittedBeforeStopAndCancelIsReportedSucceeded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	businessSetup(t, b)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.outcomes (job_id bigint, status text, outcome text)`))
	require.NoError(t, err)
	committed := make(chan struct{})
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, JobTimeout: -1,
		Hooks: []skiplock.Hook{outcomeLog{b}}, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[paidOrderArgs]) error {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.Background())
		if _, err := tx.Exec(ctx, b.q(`INSERT INTO {s}.payments VALUES ($1, $2, $3, $4)`),
			job.Args.Order, job.ID, job.Attempts, job.Fence); err != nil {
			return err
		}
		if err := skiplock.CompleteTx(ctx, tx, job); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		close(committed)
		<-ctx.Done() // what comes after the commit: StopAndCancel cuts it off
		return context.Cause(ctx)
	}))
	job, err := b.client.Enqueue(b.ctx, paidOrderArgs{Order: 9}, nil)
	require.NoError(t, err)
	runWorker(t, w)
	select {
	case <-committed:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler did not commit")
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, w.StopAndCancel(ctx))

	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE id = $1 AND status = 'succeeded'`, job.ID))
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1`, job.ID), "the job was put back")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.payments WHERE order_id = 9`))
	var status, outcome string
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT status, outcome FROM {s}.outcomes WHERE job_id = $1`), job.ID).
		Scan(&status, &outcome))
	assert.Equal(t, []string{string(skiplock.StatusSucceeded), string(skiplock.OutcomeSucceeded)}, []string{status, outcome},
		"what the hooks were told")
}
