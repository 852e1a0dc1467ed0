package skiplock

// Tests of the fencing token (lease.go) at the level of the statements: a statement about
// one claim, replayed or run late, never touches a later claim of the same job by the same
// worker.

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/claim"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/ownership"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/internal/record"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type fenceArgs struct{}

func (fenceArgs) Kind() string { return "fence" }

// claimOne claims the one queued job of the default queue as worker w.
func claimOne(t *testing.T, cl *claim.Claimer, w string) claim.ClaimedJob {
	t.Helper()
	jobs, err := cl.Claim(context.Background(), DefaultQueue, 1, w, nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	return jobs[0]
}

func TestFence_ReplayedSnoozeDoesNotTouchTheNextClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, pool, schema := claimSetup(t)
	job, err := c.Enqueue(ctx, fenceArgs{}, nil)
	require.NoError(t, err)
	cl := claim.NewClaimer(c.db, time.Minute)
	f := record.NewFailureRecorder(pool, schema, "w", DefaultCompleteBatchSize, DefaultCompleteFlushInterval, nil, record.BatchListeners{}, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))

	// Worker w claims the job, and its handler snoozes it: the job is queued again, with
	// its attempt given back.
	first := claimOne(t, cl, "w")
	k1 := jobtype.AttemptKey{ID: first.Row.ID, Fence: first.Fence}
	require.Equal(t, StatusQueued, recordNow(f, k1, first.Row, Snooze(0), BackoffPolicy{}))
	// w claims it again: the same attempt number, by the same worker.
	second := claimOne(t, cl, "w")
	require.Equal(t, first.Row.Attempts, second.Row.Attempts)
	assert.Greater(t, second.Fence, first.Fence, "every claim takes a new token")

	// The snooze statement is run again (its commit reply was lost, and the DB retry
	// replays it): it must not put the live run back in the queue.
	recordNow(f, k1, first.Row, Snooze(0), BackoffPolicy{})
	got, err := c.Get(ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, StatusRunning, got.Status, "the replayed snooze took the live run back")
	assert.Equal(t, "w", got.LockedBy)

	// The live run's own writes still land.
	require.Equal(t, StatusQueued, recordNow(f, jobtype.AttemptKey{ID: second.Row.ID, Fence: second.Fence}, second.Row, Snooze(0), BackoffPolicy{}))
}

// heartbeatHook runs start when the pool starts a heartbeat statement and end when it has
// read the statement's result, once each.
type heartbeatHook struct {
	start, end func()
	s, e       sync.Once
}

func (h *heartbeatHook) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "refreshed AS") {
		h.s.Do(h.start)
		return context.WithValue(ctx, h, true)
	}
	return ctx
}

func (h *heartbeatHook) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if ctx.Value(h) != nil {
		h.e.Do(h.end)
	}
}

func TestFence_LateHeartbeatDoesNotCancelTheNextClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, pool, schema := claimSetup(t)
	_, err := c.Enqueue(ctx, fenceArgs{}, nil)
	require.NoError(t, err)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cl := claim.NewClaimer(c.db, time.Minute)
	f := record.NewFailureRecorder(pool, schema, "w", DefaultCompleteBatchSize, DefaultCompleteFlushInterval, nil, record.BatchListeners{}, nil, nil, logger)
	held := ownership.NewHeldJobs()

	first := claimOne(t, cl, "w")
	k1 := jobtype.AttemptKey{ID: first.Row.ID, Fence: first.Fence}
	_, cancel1 := context.WithCancelCause(ctx)
	defer cancel1(nil)
	held.Add(k1, jobtype.CancelFunc(cancel1), first.Leased, nil, first.Row)

	// The heartbeat has read the keys it renews (k1) when the first run's snooze commits;
	// its statement then finds the job queued. Before it acts on that, the job is claimed
	// again by this worker: the same attempt number, a new run.
	ctx2, cancel2 := context.WithCancelCause(ctx)
	defer cancel2(nil)
	hook := &heartbeatHook{
		start: func() {
			held.Remove(k1)
			require.Equal(t, StatusQueued, recordNow(f, k1, first.Row, Snooze(0), BackoffPolicy{}))
		},
		end: func() {
			second := claimOne(t, cl, "w")
			held.Add(jobtype.AttemptKey{ID: second.Row.ID, Fence: second.Fence}, jobtype.CancelFunc(cancel2), second.Leased, nil, second.Row)
		},
	}
	cfg := pool.Config()
	cfg.ConnConfig.Tracer = hook
	traced, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer traced.Close()
	l := ownership.NewLease(traced, schema, "w", time.Minute, held, nil, logger)

	l.Beat(ctx)
	// The heartbeat found the first run gone: that must not cancel the second.
	assert.NoError(t, ctx2.Err(), "the new run was cancelled: %v", context.Cause(ctx2))
	assert.Equal(t, 1, held.Count())

	// The next heartbeat renews the second run's lease.
	var before, after time.Time
	lease := pgutil.Render(schema, `SELECT lease_until FROM {s}.jobs WHERE id = $1`)
	require.NoError(t, pool.QueryRow(ctx, lease, k1.ID).Scan(&before))
	l.Beat(ctx)
	require.NoError(t, pool.QueryRow(ctx, lease, k1.ID).Scan(&after))
	assert.True(t, after.After(before), "lease renewed: %v -> %v", before, after)
	assert.NoError(t, ctx2.Err())
}

// recordNow records a failure and waits until it is written.
func recordNow(f *record.FailureRecorder, k jobtype.AttemptKey, row *JobRow, herr error, policy RetryPolicy) JobStatus {
	status := f.Record(k, row, herr, policy)
	f.Flush()
	return status
}

// A handler that returned leaves its attempt held, its lease renewed, until the batch that
// writes its outcome ends; but it no longer counts as running: the shutdown's count and
// log, the watchdog and a cancel pass over it. The runner marks it through the attempt's
// state (jobtype.State.MarkReturned), which must be the state of its held entry.
func TestHeldJobs_AnAttemptWhoseHandlerReturnedStaysHeldButNotRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _, _ := claimSetup(t)
	_, err := c.Enqueue(ctx, fenceArgs{}, nil)
	require.NoError(t, err)
	w, err := NewWorker(c, WorkerConfig{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, Handle(w, func(context.Context, *Job[fenceArgs]) error { return nil }))
	w.starter.SetBase(ctx)
	t.Cleanup(func() { w.starter.Cancel(nil) })

	d, ok := w.starter.Start(claimOne(t, claim.NewClaimer(c.db, time.Minute), "w"), false)
	require.True(t, ok)
	held := w.held()
	require.Equal(t, 1, held.Count(), "a started attempt runs")
	require.Len(t, held.Running(), 1)

	// The completer's loops do not run: the success waits to be written.
	res := w.executor.Execute(d, nil)
	require.Equal(t, OutcomeSucceeded, res.Outcome)
	assert.True(t, held.Holds(d.Key), "the attempt is no longer held before its outcome is written: its lease would end")
	assert.Zero(t, held.Count(), "an attempt whose handler returned still counts as running")
	assert.Empty(t, held.Running())
}
