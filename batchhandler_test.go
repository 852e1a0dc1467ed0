package skiplock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

type rowArgs struct {
	N int `json:"n"`
}

func (rowArgs) Kind() string { return "row" }

// A batch handler gets batches of at most MaxJobs, writes each batch with one statement,
// and each job ends with its own result.
func TestHandleBatch_BatchesOfUpToNWithEachJobsResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.rows (n int PRIMARY KEY, batch_size int)`))
	require.NoError(t, err)
	const n, maxJobs = 500, 50
	params := make([]skiplock.EnqueueParams, n)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: rowArgs{N: i}}
	}
	_, err = b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)

	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger(),
		Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 100}}})
	var mu sync.Mutex
	var sizes []int
	require.NoError(t, skiplock.HandleBatch(w, skiplock.BatchHandlerConfig{MaxJobs: maxJobs, MaxWait: 20 * time.Millisecond},
		func(ctx context.Context, jobs []*skiplock.Job[rowArgs]) []error {
			mu.Lock()
			sizes = append(sizes, len(jobs))
			mu.Unlock()
			errs := make([]error, len(jobs))
			var ns []int32
			for i, j := range jobs {
				if j.Args.N%7 == 0 {
					errs[i] = skiplock.Permanent(errors.New("multiple of 7"))
					continue
				}
				ns = append(ns, int32(j.Args.N))
			}
			// One statement for the whole batch.
			if _, err := b.pool.Exec(ctx, b.q(`INSERT INTO {s}.rows SELECT unnest($1::int[]), $2`), ns, len(jobs)); err != nil {
				return []error{err} // wrong length: every job fails and is retried
			}
			return errs
		}))
	runWorker(t, w)
	failed := (n + 6) / 7
	eventually(t, 60*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'failed'`) == failed &&
			b.count(t, `SELECT count(*) FROM {s}.jobs_archive`) == n-failed
	}, "the jobs did not all finish")
	assert.Equal(t, n-failed, b.count(t, `SELECT count(*) FROM {s}.rows`))
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs j JOIN {s}.rows r ON r.n = (j.payload->>'n')::int`),
		"a failed job's row was written")
	mu.Lock()
	defer mu.Unlock()
	total, most := 0, 0
	for _, s := range sizes {
		total += s
		most = max(most, s)
	}
	assert.Equal(t, n, total, "every job went through one call")
	assert.LessOrEqual(t, most, maxJobs)
	assert.Greater(t, most, 1, "jobs were batched")
	t.Logf("%d calls, largest %d", len(sizes), most)
}

// fn returning the wrong number of results, or panicking, fails each job of the call.
func TestHandleBatch_WrongResultCountOrPanicFailsEveryJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	params := make([]skiplock.EnqueueParams, 10)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: rowArgs{N: i}, Options: &skiplock.EnqueueOptions{MaxAttempts: 1}}
	}
	_, err := b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.HandleBatch(w, skiplock.BatchHandlerConfig{},
		func(ctx context.Context, jobs []*skiplock.Job[rowArgs]) []error {
			if jobs[0].Args.N%2 == 0 {
				panic("boom")
			}
			return nil
		}))
	runWorker(t, w)
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'dead'`) == 10
	}, "the jobs did not all die")
	assert.Equal(t, 10, b.count(t, `SELECT count(*) FROM {s}.jobs
		WHERE last_error LIKE '%batch handler panicked: boom%' OR last_error LIKE '%batch handler returned 0 results%'`))
}
