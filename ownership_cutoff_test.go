package skiplock_test

// The worker lease's own watchdog (reclaim.go, workerCancelAfter): a worker cut off from
// the database cancels its handlers before its row in the workers table can expire, so
// that when another worker takes its jobs (the reclaim by liveness, once the row has
// expired) none of its handlers still runs.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// With a job lease far longer than the worker's (VisibilityTimeout 2 minutes against the
// worker lease's 10 s), only the worker lease's watchdog can stop the cut-off worker's
// handlers in time: each is cancelled with its cause, and each job runs elsewhere only
// after its first handler returned.
func TestOwnership_CutOffWorkerCancelsItsHandlersBeforeItsLeaseEnds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const jobs = 3
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.audit (job_id bigint, worker text,
		started timestamptz, ended timestamptz, cause text)`))
	require.NoError(t, err)
	cutOffStarted := make(chan struct{}, jobs)
	handler := func(ctx context.Context, job *skiplock.Job[holdArgs]) error {
		started := time.Now()
		d := 100 * time.Millisecond
		if job.LockedBy == "cut-off" {
			d = 5 * time.Minute
			select {
			case cutOffStarted <- struct{}{}:
			default:
			}
		}
		cause := ""
		select {
		case <-time.After(d):
		case <-ctx.Done():
			cause = context.Cause(ctx).Error()
		}
		_, err := b.pool.Exec(context.Background(), b.q(`INSERT INTO {s}.audit VALUES ($1, $2, $3, $4, $5)`),
			job.ID, job.LockedBy, started, time.Now(), cause)
		if err != nil {
			return err
		}
		return ctx.Err()
	}
	proxy, pool := proxiedPool(t, 8)
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)
	cut, err := skiplock.NewWorker(client, skiplock.WorkerConfig{ID: "cut-off", VisibilityTimeout: 2 * time.Minute,
		SweepInterval: -1, JobTimeout: -1, PollInterval: 50 * time.Millisecond, ShutdownTimeout: time.Second, Logger: testLogger()})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(cut, handler))
	for i := range jobs {
		_, err := b.client.Enqueue(b.ctx, holdArgs{N: i}, nil)
		require.NoError(t, err)
	}
	runWorker(t, cut)
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'running' AND locked_by = 'cut-off'`) == jobs
	}, "the cut-off worker runs every job")
	for range jobs {
		select {
		case <-cutOffStarted:
		case <-time.After(10 * time.Second):
			t.Fatal("the cut-off worker's handlers did not all start")
		}
	}
	proxy.Blackhole()
	cutAt := time.Now()
	healthy := newWorker(t, b, skiplock.WorkerConfig{ID: "healthy", VisibilityTimeout: 2 * time.Minute, SweepInterval: -1,
		PollInterval: 50 * time.Millisecond, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(healthy, handler))
	runWorker(t, healthy)

	eventually(t, 40*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.audit WHERE worker = 'healthy'`) == jobs &&
			b.count(t, `SELECT count(*) FROM {s}.audit WHERE worker = 'cut-off'`) == jobs
	}, "every job ran elsewhere, and every cut-off handler returned")
	assert.Less(t, time.Since(cutAt), 30*time.Second, "the jobs ran elsewhere within the worker lease, not the job lease")
	assert.Equal(t, jobs, b.count(t, `SELECT count(*) FROM {s}.audit WHERE worker = 'cut-off'
		AND cause LIKE '%this worker''s lease could not be renewed%'`), "each cut-off handler was cancelled by the worker lease's watchdog")
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.audit a JOIN {s}.audit o
		ON a.job_id = o.job_id AND a.worker = 'cut-off' AND o.worker = 'healthy' AND o.started < a.ended`),
		"a job started elsewhere before the cut-off worker's handler returned")
	proxy.Restore() // the cut-off worker can stop at once
}
