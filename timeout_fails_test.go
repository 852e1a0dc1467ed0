// This file holds the tests that a handler returning after its timeout is a failed attempt.

package skiplock_test

// Point 6 of issue 30 (docs/ownership.md): one story for timeouts.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

type lateNilArgs struct{}

func (lateNilArgs) Kind() string { return "late_nil" }

// Point 6: a handler that returns nil after its timeout is a failed attempt, as README,
// WorkerConfig.JobTimeout and ErrJobTimeout say. On the code before the ownership work it
// was recorded as succeeded.
func TestOwnership_HandlerReturningNilAfterItsTimeoutFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, b, skiplock.WorkerConfig{JobTimeout: 200 * time.Millisecond, SweepInterval: -1,
		PollInterval: 50 * time.Millisecond, Completion: skiplock.CompletionKeep, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[lateNilArgs]) error {
		<-ctx.Done()
		return nil // past its timeout, it claims success anyway
	}))
	job, err := b.client.Enqueue(b.ctx, lateNilArgs{}, &skiplock.EnqueueOptions{MaxAttempts: 1})
	require.NoError(t, err)
	runWorker(t, w)
	eventually(t, 30*time.Second, func() bool {
		j, err := b.client.Get(b.ctx, job.ID)
		require.NoError(t, err)
		return j.Status != skiplock.StatusQueued && j.Status != skiplock.StatusRunning
	}, "job %d final", job.ID)
	j, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusDead, j.Status, "a handler that returned after its timeout was recorded as %s", j.Status)
	assert.Contains(t, j.LastError, skiplock.ErrJobTimeout.Error())
}
