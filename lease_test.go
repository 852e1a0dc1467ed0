package skiplock_test

// Tests of the lease (lease.go): heartbeats keep a long job held, and the fence keeps a
// stale worker's late result out.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

func TestWorker_HeartbeatsKeepLongJobAlive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const vt = 1500 * time.Millisecond // heartbeats every 500 ms; generous for a loaded CI machine
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.audit (job_id bigint, attempt int, worker text)`))
	require.NoError(t, err)
	var workers []*skiplock.Worker
	for _, id := range []string{"hb-1", "hb-2"} {
		w := newWorker(t, b, skiplock.WorkerConfig{
			ID: id, VisibilityTimeout: vt, SweepInterval: 100 * time.Millisecond,
			PollInterval: 50 * time.Millisecond, Logger: testLogger(),
		})
		require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[slowArgs]) error {
			if _, err := b.pool.Exec(ctx, b.q(`INSERT INTO {s}.audit VALUES ($1, $2, $3)`), job.ID, job.Attempts, job.LockedBy); err != nil {
				return err
			}
			select {
			case <-time.After(time.Duration(job.Args.Ms) * time.Millisecond):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}))
		workers = append(workers, w)
	}
	job, err := b.client.Enqueue(b.ctx, slowArgs{Ms: int(3 * vt / time.Millisecond)}, nil)
	require.NoError(t, err)
	for _, w := range workers {
		runWorker(t, w)
	}
	eventually(t, 15*time.Second, func() bool {
		j, err := b.client.Get(b.ctx, job.ID)
		require.NoError(t, err)
		return j.Status == skiplock.StatusSucceeded
	}, "long job succeeded")
	j, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, 1, j.Attempts, "never reclaimed")
	assert.Empty(t, j.Errors)
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.audit`), "ran once")
}

func TestFencing_StaleFailureChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job, err := b.client.Enqueue(b.ctx, verdictArgs{Verdict: "x"}, nil)
	require.NoError(t, err)
	release := make(chan struct{})
	claimed := make(chan struct{}, 1)
	pool := newPool(t, 4)
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)
	wa, err := skiplock.NewWorker(client, skiplock.WorkerConfig{ID: "stale", VisibilityTimeout: time.Hour, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(wa, func(ctx context.Context, job *skiplock.Job[verdictArgs]) error {
		claimed <- struct{}{}
		<-release
		return errors.New("late failure")
	}))
	stop := runWorker(t, wa)
	<-claimed
	// An operator cancels the job while A still runs it.
	_, err = b.client.Cancel(b.ctx, job.ID)
	require.NoError(t, err)
	before, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	close(release)
	stop()
	after, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, before, after)
	assert.Equal(t, skiplock.StatusCancelled, after.Status)
}
