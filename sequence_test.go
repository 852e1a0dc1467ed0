package skiplock_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

type seqArgs struct {
	N int `json:"n"`
}

func (seqArgs) Kind() string { return "seq" }

// 100 jobs of one key run one at a time, in order; the 50th fails twice and the
// sequence holds until its third attempt succeeds. Jobs of another key are not held.
func TestSequence_RunsInOrderAndHoldsThroughRetries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.seq_audit (n int, attempt int, key text,
		started timestamptz NOT NULL, finished timestamptz NOT NULL)`))
	require.NoError(t, err)
	const n = 100
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1,
		RetryPolicy: fixedDelay(0), Logger: testLogger(), Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 8}}})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[seqArgs]) error {
		var started time.Time
		if err := b.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&started); err != nil {
			return err
		}
		_, err := b.pool.Exec(ctx, b.q(`INSERT INTO {s}.seq_audit VALUES ($1, $2, $3, $4, clock_timestamp())`),
			job.Args.N, job.Attempts, job.Metadata["key"], started)
		if err != nil {
			return err
		}
		if job.Args.N == n/2 && job.Attempts <= 2 {
			return errors.New("fails twice")
		}
		return nil
	}))
	runWorker(t, w) // running while the jobs are enqueued: each may start at once
	for i := range n {
		info, err := b.client.EnqueueSequence(b.ctx, "customer-1", seqArgs{N: i},
			&skiplock.EnqueueOptions{Metadata: map[string]string{"key": "customer-1"}})
		require.NoError(t, err)
		assert.Equal(t, strconv.Itoa(i+1), info.Name, "the task's place in the sequence")
		if i%10 == 0 {
			_, err := b.client.EnqueueSequence(b.ctx, "customer-2", seqArgs{N: 1000 + i},
				&skiplock.EnqueueOptions{Metadata: map[string]string{"key": "customer-2"}})
			require.NoError(t, err)
		}
	}
	eventually(t, 60*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.workflow_tasks WHERE state <> 'succeeded'`) == 0
	}, "the sequences did not finish")

	rows, err := b.pool.Query(b.ctx, b.q(`SELECT n, attempt, started, finished FROM {s}.seq_audit
		WHERE key = 'customer-1' ORDER BY started`))
	require.NoError(t, err)
	type run struct {
		n, attempt        int
		started, finished time.Time
	}
	var runs []run
	var r run
	_, err = pgx.ForEachRow(rows, []any{&r.n, &r.attempt, &r.started, &r.finished}, func() error {
		runs = append(runs, r)
		return nil
	})
	require.NoError(t, err)
	require.Len(t, runs, n+2, "every job once, the failing one three times")
	want := 0
	for i, r := range runs {
		if i > 0 {
			assert.False(t, r.started.Before(runs[i-1].finished), "run %d (job %d) overlapped the previous one", i, r.n)
		}
		assert.Equal(t, want, r.n, "run %d", i)
		if r.n != n/2 || r.attempt == 3 {
			want++
		}
	}
	assert.Equal(t, 10, b.count(t, `SELECT count(*) FROM {s}.seq_audit WHERE key = 'customer-2'`))
}

// With SequenceMoveOn, 20 jobs of one key: the 10th fails twice, and its first failure
// releases the 11th at once; its retries run out of order. Every job's first attempt
// still runs one at a time, in order. A job enqueued behind a job that has failed once
// (another key) starts at once.
func TestSequence_MoveOnReleasesTheNextJobAtTheFirstFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.seq_audit (n int, attempt int,
		started timestamptz NOT NULL, finished timestamptz NOT NULL)`))
	require.NoError(t, err)
	const n, failing = 20, 9 // the 10th job
	nextDone, enqueued := make(chan struct{}), make(chan struct{})
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1,
		RetryPolicy: fixedDelay(0), Logger: testLogger(), Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 8}}})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[seqArgs]) error {
		var started time.Time
		if err := b.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&started); err != nil {
			return err
		}
		if job.Args.N == 100 && job.Attempts == 2 {
			select { // the job stays in its retry while its successor is enqueued
			case <-enqueued:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if job.Args.N == failing && job.Attempts == 3 {
			// The attempt that succeeds waits until the 11th job has run: under the hold
			// policy it never would.
			select {
			case <-nextDone:
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(30 * time.Second):
				t.Errorf("the 11th job did not run while the 10th waited for its retry")
			}
		}
		_, err := b.pool.Exec(ctx, b.q(`INSERT INTO {s}.seq_audit VALUES ($1, $2, $3, clock_timestamp())`),
			job.Args.N, job.Attempts, started)
		if err != nil {
			return err
		}
		if job.Args.N == failing+1 {
			close(nextDone)
		}
		if (job.Args.N == failing || job.Args.N == 100) && job.Attempts <= 2 {
			return errors.New("fails twice")
		}
		return nil
	}))
	runWorker(t, w)
	enqueue := func(key string, i int) *skiplock.WorkflowTaskInfo {
		info, err := b.client.EnqueueSequence(b.ctx, key, seqArgs{N: i},
			&skiplock.EnqueueOptions{SequenceOnFailure: skiplock.SequenceMoveOn})
		require.NoError(t, err)
		return info
	}
	for i := range n {
		info := enqueue("customer-1", i)
		if i == failing+1 {
			assert.Equal(t, []string{"10"}, info.DependsOn, "the 11th job waits behind the 10th")
		}
	}

	first := enqueue("customer-2", 100)
	eventually(t, 60*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = `+strconv.FormatInt(first.JobID, 10)+
			` AND errors IS NOT NULL`) > 0
	}, "the first job of customer-2 did not fail")
	info := enqueue("customer-2", 101)
	close(enqueued)
	assert.Equal(t, "released", info.State, "the tail failed once: the next job does not wait for its retry")
	assert.NotZero(t, info.JobID)
	eventually(t, 60*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.workflow_tasks WHERE state <> 'succeeded'`) == 0
	}, "the sequence did not finish")

	rows, err := b.pool.Query(b.ctx, b.q(`SELECT n, attempt, started, finished FROM {s}.seq_audit WHERE n < 100 ORDER BY started`))
	require.NoError(t, err)
	type run struct {
		n, attempt        int
		started, finished time.Time
	}
	var runs, firsts []run
	var r run
	_, err = pgx.ForEachRow(rows, []any{&r.n, &r.attempt, &r.started, &r.finished}, func() error {
		runs = append(runs, r)
		if r.attempt == 1 {
			firsts = append(firsts, r)
		}
		return nil
	})
	require.NoError(t, err)
	require.Len(t, runs, n+2, "every job once, the failing one three times")
	require.Len(t, firsts, n)
	for i, r := range firsts {
		assert.Equal(t, i, r.n, "first attempts run in order")
		if i > 0 {
			assert.False(t, r.started.Before(firsts[i-1].finished), "job %d started before job %d's first attempt ended", r.n, i-1)
		}
	}
	var success run
	for _, r := range runs {
		if r.n == failing && r.attempt == 3 {
			success = r
		}
	}
	assert.True(t, firsts[failing+1].started.Before(success.finished), "the 11th job started before the 10th succeeded")
	assert.Equal(t, 4, b.count(t, `SELECT count(*) FROM {s}.seq_audit WHERE n >= 100`), "customer-2: 3 attempts and 1")
}

// A sequence policy other than SequenceHold is refused outside a sequence, and an
// unknown one in a sequence.
func TestSequence_PolicyIsRefusedWhereItDoesNotApply(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.client.Enqueue(b.ctx, seqArgs{N: 1}, &skiplock.EnqueueOptions{SequenceOnFailure: skiplock.SequenceMoveOn})
	require.ErrorIs(t, err, skiplock.ErrInvalidOptions)
	_, err = b.client.EnqueueSequence(b.ctx, "k", seqArgs{N: 1}, &skiplock.EnqueueOptions{SequenceOnFailure: 7})
	require.ErrorIs(t, err, skiplock.ErrInvalidOptions)
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs`))
}
