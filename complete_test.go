package skiplock_test

// Tests of success recording (complete.go): the three completion modes.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

func TestWorker_CompletionModes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode           skiplock.Completion
		hot, archived  int
		wantFromGetErr error
	}{
		{skiplock.CompletionArchive, 0, 1, nil},
		{skiplock.CompletionDelete, 0, 0, skiplock.ErrJobNotFound},
		{skiplock.CompletionKeep, 1, 0, nil},
	} {
		t.Run(fmt.Sprint(tc.mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			job, err := b.client.Enqueue(b.ctx, noopArgs{}, nil)
			require.NoError(t, err)
			w := newWorker(t, b, skiplock.WorkerConfig{Completion: tc.mode, SweepInterval: -1, Logger: testLogger()})
			require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error { return nil }))
			runWorker(t, w)
			eventually(t, 10*time.Second, func() bool {
				return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'queued' OR status = 'running'`) == 0
			}, "job done")
			assert.Equal(t, tc.hot, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'succeeded'`))
			assert.Equal(t, tc.archived, b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE status = 'succeeded'`))
			got, err := b.client.Get(b.ctx, job.ID)
			if tc.wantFromGetErr != nil {
				require.ErrorIs(t, err, tc.wantFromGetErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, skiplock.StatusSucceeded, got.Status)
			assert.False(t, got.FinishedAt.IsZero())
		})
	}
}
