package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// The four kinds of the isolation tests, one per queue.
type (
	isoBlockArgs struct{ N int }
	isoPanicArgs struct{ N int }
	isoFailArgs  struct{ N int }
	isoGoodArgs  struct{ N int }
)

func (isoBlockArgs) Kind() string { return "iso_block" }
func (isoPanicArgs) Kind() string { return "iso_panic" }
func (isoFailArgs) Kind() string  { return "iso_fail" }
func (isoGoodArgs) Kind() string  { return "iso_good" }

// isoRetry retries failed jobs almost at once, so the panicking and failing queues keep
// their slots busy for the whole test.
type isoRetry struct{}

func (isoRetry) NextRetry(*skiplock.JobRow) time.Duration { return 5 * time.Millisecond }

// isoSlots is MaxWorkers of each queue in each worker.
var isoSlots = map[string]int{"blocker": 3, "panicker": 3, "failer": 3, "good": 4}

// isoWorker is a worker of all four queues whose handlers block until their context ends,
// panic, fail, or succeed.
func isoWorker(t *testing.T, b *bundle, id string) *skiplock.Worker {
	t.Helper()
	queues := map[string]skiplock.QueueConfig{}
	for q, n := range isoSlots {
		queues[q] = skiplock.QueueConfig{MaxWorkers: n}
	}
	w := newWorker(t, b, skiplock.WorkerConfig{
		ID:              id,
		Queues:          queues,
		PollInterval:    100 * time.Millisecond, // retried jobs send no notification
		RetryPolicy:     isoRetry{},
		ShutdownTimeout: 300 * time.Millisecond, // then the blocked handlers' contexts end
		SweepInterval:   -1,
		Logger:          testLogger(),
	})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[isoBlockArgs]) error {
		<-ctx.Done()
		return context.Cause(ctx)
	}))
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[isoPanicArgs]) error {
		panic(fmt.Sprintf("isolation test panic %d", job.Args.N))
	}))
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[isoFailArgs]) error {
		return errors.New("isolation test failure")
	}))
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[isoGoodArgs]) error {
		return nil
	}))
	return w
}

// TestIsolation_BadQueuesNeverStopGoodQueue: handlers that block for ever, panic, or fail
// every job take up their own queues' slots and nothing else: the good queue's jobs all
// complete, quickly, while the other queues are saturated.
func TestIsolation_BadQueuesNeverStopGoodQueue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		workers int
	}{
		{"one worker with four queues", 1},
		{"two workers sharing the database", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			const (
				blocked = 40
				bad     = 200 // per panicking and failing queue
				good    = 500
			)
			var params []skiplock.EnqueueParams
			add := func(queue string, n int, args func(i int) skiplock.JobArgs) {
				for i := range n {
					// Far more attempts than the test can use: the bad jobs never run out.
					params = append(params, skiplock.EnqueueParams{Args: args(i),
						Options: &skiplock.EnqueueOptions{Queue: queue, MaxAttempts: 1_000_000}})
				}
			}
			add("blocker", blocked, func(i int) skiplock.JobArgs { return isoBlockArgs{i} })
			add("panicker", bad, func(i int) skiplock.JobArgs { return isoPanicArgs{i} })
			add("failer", bad, func(i int) skiplock.JobArgs { return isoFailArgs{i} })
			_, err := b.client.EnqueueMany(b.ctx, params)
			require.NoError(t, err)

			var stops []func()
			for i := range tc.workers {
				stops = append(stops, runWorker(t, isoWorker(t, b, fmt.Sprintf("iso-%s-%d", b.schema, i))))
			}

			// First the bad queues are saturated: every blocker slot is held, and panics and
			// failures have been recorded.
			eventually(t, time.Minute, func() bool {
				return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue = 'blocker' AND status = 'running'`) == isoSlots["blocker"]*tc.workers &&
					b.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue = 'panicker' AND last_error LIKE 'panic: isolation test panic%'`) > 0 &&
					b.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue = 'failer' AND last_error = 'isolation test failure'`) > 0
			}, "blocker slots all held, panics and failures recorded")

			// Then the good jobs arrive, and all of them complete while that goes on.
			params = params[:0]
			add("good", good, func(i int) skiplock.JobArgs { return isoGoodArgs{i} })
			began := time.Now()
			_, err = b.client.EnqueueMany(b.ctx, params)
			require.NoError(t, err)
			eventually(t, time.Minute, func() bool {
				return b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE queue = 'good' AND status = 'succeeded'`) == good
			}, "all %d good jobs succeeded", good)
			took := time.Since(began)
			t.Logf("%d good jobs completed in %s next to blocked, panicking and failing queues", good, took)
			assert.Less(t, took, 30*time.Second, "the good queue was slowed down by the others")

			// The bad queues were busy the whole time: still blocked, still retrying.
			assert.Equal(t, isoSlots["blocker"]*tc.workers,
				b.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue = 'blocker' AND status = 'running'`))
			assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue = 'good'`), "no good job left in the hot table")
			assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE queue = 'good' AND attempts <> 1`))
			assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue IN ('panicker', 'failer') AND status NOT IN ('queued', 'running')`),
				"panicking and failing jobs keep being retried")
			assert.Positive(t, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue IN ('panicker', 'failer') AND attempts > 1`))

			// Shutdown does not hang on the blocked handlers: after ShutdownTimeout their
			// contexts end and their jobs go back to the queue, attempt given back.
			stopBegan := time.Now()
			for _, stop := range stops {
				stop()
			}
			assert.Less(t, time.Since(stopBegan), 10*time.Second, "shutdown took too long")
			assert.Equal(t, blocked, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue = 'blocker' AND status = 'queued' AND attempts = 0`),
				"blocked jobs back in the queue after shutdown, their attempt given back")
			// A claim in flight as Run's context is cancelled outlives the cancellation and its
			// jobs run before Run returns: no job of any queue is left running.
			assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'running'`), "jobs left running after shutdown")
			orphans := 0
			assert.Equal(t, 2*bad, orphans+b.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue IN ('panicker', 'failer') AND status = 'queued'`))
		})
	}
}
