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
