package skiplock_test

// This file holds the tests of a queue's concurrency limit while its limits change: after
// a limit is set or lowered, no job of the queue starts until fewer than the new limit
// are running, counting every running job of the queue whatever claimed it.

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/blackhole"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// limitedHoldArgs is a job whose handler runs until it is released or its context ends.
type limitedHoldArgs struct {
	N int `json:"n"`
}

func (limitedHoldArgs) Kind() string { return "limited_hold" }

func (limitedHoldArgs) EnqueueOptions() skiplock.EnqueueOptions {
	return skiplock.EnqueueOptions{Queue: "limited"}
}

// limitsApplied is a log handler that tells when a worker applied limits with a given
// Concurrency (its "queue limits" record, written once the claim loops take them).
type limitsApplied struct {
	mu      sync.Mutex
	waiters map[int64]chan struct{}
}

func (l *limitsApplied) wait(concurrency int64) chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.waiters == nil {
		l.waiters = map[int64]chan struct{}{}
	}
	if l.waiters[concurrency] == nil {
		l.waiters[concurrency] = make(chan struct{})
	}
	return l.waiters[concurrency]
}

func (l *limitsApplied) Enabled(context.Context, slog.Level) bool { return true }
func (l *limitsApplied) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "skiplock: queue limits" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "concurrency" {
			ch := l.wait(a.Value.Int64())
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
		return true
	})
	return nil
}
func (l *limitsApplied) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *limitsApplied) WithGroup(string) slog.Handler      { return l }

// TestFlow_LimitChangesNeverLetMoreJobsStart runs each transition of a queue's limits
// with jobs whose handlers hold until released, and samples the queue's running jobs in
// the database after the change: none starts while the running ones (whatever path
// claimed them) are at least the new limit, and once fewer run, jobs start again up to
// that limit.
func TestFlow_LimitChangesNeverLetMoreJobsStart(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		declared skiplock.QueueLimits // the worker's own limits before the change
		jobs     int                  // enqueued before the change
		before   int                  // of them running when the change comes
		change   skiplock.QueueLimits
		more     int // jobs enqueued once the worker applied the change
		release  int // jobs ended after the change
	}{
		{name: "lock path to slot path", declared: skiplock.QueueLimits{Concurrency: 2, Rate: 1000},
			jobs: 10, before: 2, change: skiplock.QueueLimits{Concurrency: 2}},
		{name: "unlimited to slot path", jobs: 5, before: 5, change: skiplock.QueueLimits{Concurrency: 2}, more: 5},
		{name: "unlimited to lock path", jobs: 5, before: 5, change: skiplock.QueueLimits{Concurrency: 2, Rate: 1000}, more: 5},
		{name: "slot path lowered", declared: skiplock.QueueLimits{Concurrency: 5},
			jobs: 10, before: 5, change: skiplock.QueueLimits{Concurrency: 2}, release: 2},
		{name: "lock path lowered", declared: skiplock.QueueLimits{Concurrency: 5, Rate: 1000},
			jobs: 10, before: 5, change: skiplock.QueueLimits{Concurrency: 2, Rate: 1000}, release: 2},
		{name: "slot path to lock path", declared: skiplock.QueueLimits{Concurrency: 5},
			jobs: 10, before: 5, change: skiplock.QueueLimits{Concurrency: 2, KeyConcurrency: 5}, release: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			applied := &limitsApplied{}
			release := make(chan struct{}, 100)
			w, err := skiplock.NewWorker(b.client, skiplock.WorkerConfig{
				Queues:          map[string]skiplock.QueueConfig{"limited": {MaxWorkers: 10, Limits: tc.declared}},
				PollInterval:    50 * time.Millisecond,
				ShutdownTimeout: 100 * time.Millisecond,
				Logger:          slog.New(applied),
			})
			require.NoError(t, err)
			require.NoError(t, skiplock.Handle(w, func(ctx context.Context, _ *skiplock.Job[limitedHoldArgs]) error {
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}))
			running := func() int {
				return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue = 'limited' AND status = 'running'`)
			}
			enqueue := func(n int) {
				for i := range n {
					_, err := b.client.Enqueue(b.ctx, limitedHoldArgs{N: i}, nil)
					require.NoError(t, err)
				}
			}
			stop := runWorker(t, w)
			defer stop()
			enqueue(tc.jobs)
			eventually(t, 30*time.Second, func() bool { return running() == tc.before }, "%d jobs running", tc.before)

			require.NoError(t, b.client.SetQueueLimits(b.ctx, "limited", tc.change))
			select {
			case <-applied.wait(int64(tc.change.Concurrency)):
			case <-time.After(30 * time.Second):
				t.Fatal("the worker did not apply the new limits")
			}
			enqueue(tc.more)
			for range tc.release {
				release <- struct{}{}
			}
			left := tc.before - tc.release
			eventually(t, 30*time.Second, func() bool { return b.count(t, `SELECT count(*) FROM {s}.jobs_archive`) == tc.release },
				"%d jobs ended", tc.release)
			// Still at least the new limit running: no job may start. Sample the queue for
			// longer than its worker takes to claim (its poll runs every 50 ms).
			most := 0
			for end := time.Now().Add(time.Second); time.Now().Before(end); {
				most = max(most, running())
			}
			assert.LessOrEqual(t, most, max(left, tc.change.Concurrency),
				"jobs running after the limit became %d with %d running", tc.change.Concurrency, left)

			// Below the limit, jobs start again, up to it and no more.
			for range running() {
				release <- struct{}{}
			}
			eventually(t, 30*time.Second, func() bool { return running() == tc.change.Concurrency },
				"%d jobs running under the new limit", tc.change.Concurrency)
			most = 0
			for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
				most = max(most, running())
			}
			assert.LessOrEqual(t, most, tc.change.Concurrency, "jobs running under the new limit")
		})
	}
}

type startLimitArgs struct{}

func (startLimitArgs) Kind() string { return "start_limit" }

// A limit set while a starting worker's listener cannot reach the database yet (so the
// notification of the change never reaches it) is in force from the worker's first claim:
// the worker reads the limits set at run time once it listens, before it claims. When it
// read them before its listener was up, a change in between was missed until the
// listener's first connect, and the claims meanwhile ran under the declared limits (seen
// in a chaos run under load: a worker restarted 0.7 s before a lowering started jobs
// above it for 1.3 s).
func TestFlow_ALimitSetWhileAWorkerStartsIsInForceFromItsFirstClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u, err := url.Parse(pgtest.URL(t))
	require.NoError(t, err)
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	proxy, err := blackhole.Start(target)
	require.NoError(t, err)
	t.Cleanup(func() { proxy.Close() })
	proxy.Blackhole() // the listener's connection hangs until Restore
	u.Host = proxy.Addr()
	listenURL := u.String()

	// Each job runs until the test releases it, so jobs started above the limit overlap.
	var handlers atOnce
	release := make(chan struct{})
	w := newWorker(t, b, skiplock.WorkerConfig{ListenURL: listenURL, PollInterval: 50 * time.Millisecond,
		Queues: map[string]skiplock.QueueConfig{"startlim": {MaxWorkers: 5}}, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[startLimitArgs]) error {
		defer handlers.enter()()
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}))
	runWorker(t, w) // returns at once: Run starts in the background
	eventually(t, 10*time.Second, func() bool { return proxy.Accepted() > 0 }, "the worker's listener is connecting")
	require.NoError(t, b.client.SetQueueLimits(b.ctx, "startlim", skiplock.QueueLimits{Concurrency: 1}))
	for range 20 {
		_, err := b.client.Enqueue(b.ctx, startLimitArgs{}, &skiplock.EnqueueOptions{Queue: "startlim"})
		require.NoError(t, err)
	}
	// The window in which a worker that read the limits before listening would claim
	// under the declared ones. A wait, not a condition: with the limits read after
	// listening, nothing happens in it to wait for.
	time.Sleep(700 * time.Millisecond)
	proxy.Restore()
	for i := range 20 {
		select {
		case release <- struct{}{}:
		case <-time.After(30 * time.Second):
			t.Fatalf("job %d of 20 did not start", i+1)
		}
	}
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE queue = 'startlim'`) == 20
	}, "the 20 jobs ran")
	assert.Equal(t, int32(1), handlers.most.Load(), "jobs of the queue ran at once above the limit set while the worker started")
}
