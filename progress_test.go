package skiplock_test

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

func TestProgress_VisibleViaGetWhileTheJobRunsAndOutputStoredWithTheSuccess(t *testing.T) {
	t.Parallel()
	forKeepingModes(t, func(t *testing.T, mode skiplock.Completion) {
		b := setup(t)
		// A short visibility timeout: heartbeats every 200ms.
		w := newWorker(t, b, skiplock.WorkerConfig{VisibilityTimeout: 600 * time.Millisecond, SweepInterval: -1, Completion: mode, Logger: testLogger()})
		release := make(chan struct{})
		checks := make(chan error, 8)
		require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error {
			checks <- skiplock.RecordProgress(ctx, 50, "half of the "+strings.Repeat("images ", 100))
			<-release
			checks <- skiplock.RecordProgress(ctx, 100, "done")
			checks <- skiplock.SetOutput(ctx, map[string]int{"thumbnails": 3})
			return nil
		}))
		job, err := b.client.Enqueue(b.ctx, noopArgs{N: 1}, nil)
		require.NoError(t, err)
		runWorker(t, w)

		var running *skiplock.JobRow
		eventually(t, 20*time.Second, func() bool {
			running, err = b.client.Get(b.ctx, job.ID)
			require.NoError(t, err)
			return running.Progress != nil
		}, "the heartbeat writes the progress")
		assert.Equal(t, skiplock.StatusRunning, running.Status)
		assert.Equal(t, 50.0, running.Progress.Value)
		assert.Len(t, running.Progress.Message, skiplock.MaxProgressMessage, "long messages are cut")
		assert.True(t, strings.HasPrefix(running.Progress.Message, "half of the images"))
		assert.Nil(t, running.Output)
		close(release)

		var done *skiplock.JobRow
		eventually(t, 20*time.Second, func() bool {
			done, err = b.client.Get(b.ctx, job.ID)
			require.NoError(t, err)
			return done.Status == skiplock.StatusSucceeded
		}, "the job succeeds")
		for range 3 {
			require.NoError(t, <-checks)
		}
		require.NotNil(t, done.Progress)
		assert.Equal(t, skiplock.Progress{Value: 100, Message: "done"}, *done.Progress, "the last progress is written with the success")
		assert.JSONEq(t, `{"thumbnails": 3}`, string(done.Output))
	})
}

func TestProgress_RefusesBadInputAndContextsOfNoJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	assert.ErrorIs(t, skiplock.RecordProgress(context.Background(), 1, ""), skiplock.ErrNotInJob)
	assert.ErrorIs(t, skiplock.SetOutput(context.Background(), 1), skiplock.ErrNotInJob)

	client, err := skiplock.NewClient(b.pool, skiplock.Config{Schema: b.schema, MaxPayloadBytes: 100, Logger: testLogger()})
	require.NoError(t, err)
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, err)
	errs := make(chan []error, 1)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error {
		errs <- []error{
			skiplock.RecordProgress(ctx, math.NaN(), "x"),
			skiplock.RecordProgress(ctx, math.Inf(1), "x"),
			skiplock.SetOutput(ctx, func() {}),
			skiplock.SetOutput(ctx, json.RawMessage(`"a\u0000b"`)),
			skiplock.SetOutput(ctx, strings.Repeat("x", 200)),
			skiplock.RecordProgress(ctx, 1, "nul \x00 and bad \xff bytes"),
		}
		return nil
	}))
	job, err := client.Enqueue(b.ctx, noopArgs{}, nil)
	require.NoError(t, err)
	runWorker(t, w)
	got := <-errs
	assert.ErrorIs(t, got[0], skiplock.ErrInvalidPayload)
	assert.ErrorIs(t, got[1], skiplock.ErrInvalidPayload)
	assert.ErrorIs(t, got[2], skiplock.ErrInvalidPayload)
	assert.ErrorIs(t, got[3], skiplock.ErrInvalidPayload)
	assert.ErrorIs(t, got[4], skiplock.ErrPayloadTooLarge)
	assert.NoError(t, got[5], "a message is cleaned, not refused")
	eventually(t, 20*time.Second, func() bool {
		j, err := client.Get(b.ctx, job.ID)
		require.NoError(t, err)
		return j.Status == skiplock.StatusSucceeded && j.Progress != nil && j.Progress.Message == "nul  and bad \uFFFD bytes" && j.Output == nil
	}, "the job succeeds with its cleaned progress and no output")
}
