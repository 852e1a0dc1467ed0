package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/skiplock/skiplock"
)

// runWorker starts w.Run in the background; the returned stop cancels it and waits.
func runWorker(t *testing.T, w *skiplock.Worker) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(60 * time.Second):
				t.Error("worker did not stop within 60s")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func newWorker(t *testing.T, b *bundle, cfg skiplock.WorkerConfig) *skiplock.Worker {
	t.Helper()
	w, err := skiplock.NewWorker(b.client, cfg)
	require.NoError(t, err)
	return w
}

type auditArgs struct {
	N int `json:"n"`
}

func (auditArgs) Kind() string { return "audit" }

// enqueueAudit enqueues n audit jobs (N = 0 … n-1) with one EnqueueMany.
func enqueueAudit(t *testing.T, b *bundle, n int) {
	t.Helper()
	params := make([]skiplock.EnqueueParams, n)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: auditArgs{N: i}}
	}
	_, err := b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
}

func TestWorker_ManyWorkersRunEachJobExactlyOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.audit (
		job_id bigint, attempt int, worker text, started timestamptz, finished timestamptz)`))
	require.NoError(t, err)

	const jobs = 10_000
	enqueueAudit(t, b, jobs)

	// Three workers, each with its own pool and client, 20 slots in total.
	var stops []func()
	for i, slots := range []int{5, 7, 8} {
		pool := newPool(t, 6)
		client, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema, Logger: testLogger()})
		require.NoError(t, err)
		w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{
			ID:     fmt.Sprintf("w%d", i),
			Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: slots}},
			Logger: testLogger(),
		})
		require.NoError(t, err)
		auditSQL := b.q(`INSERT INTO {s}.audit VALUES ($1, $2, $3, $4, clock_timestamp())`)
		require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[auditArgs]) error {
			_, err := pool.Exec(ctx, auditSQL, job.ID, job.Attempts, job.LockedBy, time.Now())
			return err
		}))
		stops = append(stops, runWorker(t, w))
	}
	eventually(t, 3*time.Minute, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive`) == jobs
	}, "all jobs archived")
	for _, stop := range stops {
		stop()
	}

	assert.Equal(t, jobs, b.count(t, `SELECT count(*) FROM {s}.audit`), "executions")
	assert.Equal(t, jobs, b.count(t, `SELECT count(DISTINCT job_id) FROM {s}.audit`), "distinct jobs")
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs`), "hot table empty")
	if n := b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE attempts <> 1 OR status <> 'succeeded'`); n != 0 {
		t.Errorf("%d jobs needed another attempt or did not succeed, want 0: %s", n, b.text(t, `SELECT string_agg(format('job %s attempts %s errors %s', id, attempts, errors), '; ')
		FROM {s}.jobs_archive WHERE attempts <> 1 OR status <> 'succeeded'`))
	}
	assert.Equal(t, 3, b.count(t, `SELECT count(DISTINCT worker) FROM {s}.audit`), "all three workers took part")
	// No job was ever held by two workers at once: no overlapping executions.
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.audit a JOIN {s}.audit o
		ON a.job_id = o.job_id AND a.ctid <> o.ctid AND a.started < o.finished AND o.started < a.finished`))
}

func TestWorker_FutureRunAtWaitsUntilDue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	type start struct {
		n  int
		at time.Time
	}
	started := make(chan start, 2)
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 100 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error {
		started <- start{job.Args.N, time.Now()}
		return nil
	}))
	runAt := time.Now().Add(1500 * time.Millisecond)
	_, err := b.client.Enqueue(b.ctx, noopArgs{N: 1}, &skiplock.EnqueueOptions{RunAt: runAt})
	require.NoError(t, err)
	runWorker(t, w)
	_, err = b.client.Enqueue(b.ctx, noopArgs{N: 2}, nil)
	require.NoError(t, err)

	got := <-started
	assert.Equal(t, 2, got.n, "the due job runs first")
	select {
	case got = <-started:
		assert.Equal(t, 1, got.n)
		assert.False(t, got.at.Before(runAt.Add(-50*time.Millisecond)), "started %s before run_at", runAt.Sub(got.at))
		assert.Less(t, got.at.Sub(runAt), 3*time.Second, "started late")
	case <-time.After(10 * time.Second):
		t.Fatal("the scheduled job never ran")
	}
}

func TestWorker_HigherPriorityFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, p := range []int{1, 5, -3, 3, 10} {
		_, err := b.client.Enqueue(b.ctx, noopArgs{N: p}, &skiplock.EnqueueOptions{Priority: p})
		require.NoError(t, err)
	}
	var mu sync.Mutex
	var order []int
	w := newWorker(t, b, skiplock.WorkerConfig{
		Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 1}}, SweepInterval: -1, Logger: testLogger(),
	})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error {
		mu.Lock()
		order = append(order, job.Args.N)
		mu.Unlock()
		return nil
	}))
	runWorker(t, w)
	eventually(t, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 5 }, "5 jobs ran")
	assert.Equal(t, []int{10, 5, 3, 1, -3}, order)
}

// While a claim loop drains a backlog it resumes each claim where its last one took
// jobs, so a job queued before that place (here one enqueued with a past RunAt, as one
// committed by a long transaction or put back by the sweeper would be) is seen only by a
// claim that walks from the front: those come at least every FullWalkEvery (500 ms), so
// such a job starts within about that, long before the backlog is drained.
// A job of a higher priority is taken by the next claim, resumed or not.
func TestWorker_JobQueuedBehindADrainingBacklogStartsWithinAFullWalk(t *testing.T) {
	t.Parallel()
	b := setup(t)
	enqueueAudit(t, b, 6_000)
	started := make(chan int, 2)
	w := newWorker(t, b, skiplock.WorkerConfig{
		Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 4}}, SweepInterval: -1, Logger: testLogger(),
	})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[auditArgs]) error {
		time.Sleep(5 * time.Millisecond) // 4 slots: about 800 jobs a second, a drain of 7.5 s
		return nil
	}))
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error {
		started <- job.Args.N
		return nil
	}))
	runWorker(t, w)
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive`) >= 200
	}, "the drain is under way")

	// One at a time: a claim that takes the higher priority walks the next one from the
	// front, and would take the other job with it.
	for _, o := range []skiplock.EnqueueOptions{{RunAt: time.Now().Add(-time.Hour)}, {Priority: 5}} {
		_, err := b.client.Enqueue(b.ctx, noopArgs{N: o.Priority}, &o)
		require.NoError(t, err)
		enqueued := time.Now()
		select {
		case n := <-started:
			assert.Equal(t, o.Priority, n)
			assert.Less(t, time.Since(enqueued), 2*time.Second, "job %d started late", n)
		case <-time.After(10 * time.Second):
			t.Fatal("a job enqueued during the drain did not start")
		}
	}
	assert.Greater(t, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE kind = 'audit'`), 2_000, "the backlog is far from drained")
}

type panicArgs struct{}

func (panicArgs) Kind() string { return "panics" }

type orphanArgs struct{}

func (orphanArgs) Kind() string { return "nobody_handles_this" }

func TestWorker_PanicAndUnknownKindAreRecordedAndWorkerGoesOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ok atomic.Int32
	// Retries an hour later: on a loaded machine the default backoff (1-2 s) could run the
	// second attempt before the test looks at the first.
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1,
		RetryPolicy: fixedDelay(time.Hour), Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[panicArgs]) error {
		panic("handler exploded")
	}))
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error {
		ok.Add(1)
		return nil
	}))
	p, err := b.client.Enqueue(b.ctx, panicArgs{}, nil)
	require.NoError(t, err)
	o, err := b.client.Enqueue(b.ctx, orphanArgs{}, nil)
	require.NoError(t, err)
	runWorker(t, w)
	for i := range 20 {
		_, err := b.client.Enqueue(b.ctx, noopArgs{N: i}, nil)
		require.NoError(t, err)
	}
	eventually(t, 10*time.Second, func() bool { return ok.Load() == 20 }, "the worker keeps running other jobs")

	for _, id := range []int64{p.ID, o.ID} {
		eventually(t, 10*time.Second, func() bool {
			j, err := b.client.Get(b.ctx, id)
			require.NoError(t, err)
			return j.Attempts == 1 && j.Status == skiplock.StatusQueued && j.LastError != ""
		}, "job %d has a recorded failed attempt", id)
	}
	pj, err := b.client.Get(b.ctx, p.ID)
	require.NoError(t, err)
	assert.Contains(t, pj.LastError, "panic: handler exploded")
	assert.Contains(t, pj.LastError, "worker_test.go", "the stack is recorded")
	assert.True(t, pj.RunAt.After(time.Now()), "retried later, with backoff")
	require.Len(t, pj.Errors, 1)
	assert.Equal(t, 1, pj.Errors[0].Attempt)

	oj, err := b.client.Get(b.ctx, o.ID)
	require.NoError(t, err)
	assert.Equal(t, `no handler registered for kind "nobody_handles_this"`, oj.LastError)
	assert.True(t, oj.RunAt.After(time.Now()), "retried later, not dropped")
}

type goexitArgs struct{}

func (goexitArgs) Kind() string { return "goexit" }

// TestWorker_HandlerCallingGoexitFailsItsAttemptAndWorkerGoesOn: a handler that ends its
// goroutine with runtime.Goexit (what t.FailNow and require do) neither returns nor
// panics. Its attempt is recorded as a failure and retried, the queue's only runner is
// replaced, so the retry runs, and Run returns at once on cancel with no goroutine left.
// Not parallel: the goroutine check needs the process to itself.
func TestWorker_HandlerCallingGoexitFailsItsAttemptAndWorkerGoesOn(t *testing.T) {
	b := setup(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), ignorePgxReader)
	w := newWorker(t, b, skiplock.WorkerConfig{
		Queues:     map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 1}}, // the runner that exits is the only one
		Completion: skiplock.CompletionKeep, RetryPolicy: fixedDelay(0), PollInterval: 50 * time.Millisecond,
		SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[goexitArgs]) error {
		if job.Attempts == 1 {
			runtime.Goexit()
		}
		return nil
	}))
	job, err := b.client.Enqueue(b.ctx, goexitArgs{}, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	waitStatus(t, b, job.ID, skiplock.StatusSucceeded, 10*time.Second, "the job succeeds on its second attempt")
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}

	j, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, 2, j.Attempts)
	require.Len(t, j.Errors, 1)
	assert.Equal(t, 1, j.Errors[0].Attempt)
	assert.Contains(t, j.Errors[0].Error, "handler exited without returning (runtime.Goexit")
	assert.Contains(t, j.Errors[0].Error, "worker_test.go", "the stack says where")
	assert.Contains(t, j.LastError, "runtime.Goexit")
}

type badPayloadArgs struct {
	N int `json:"n"`
}

func (badPayloadArgs) Kind() string { return "bad_payload" }

func TestWorker_UndecodablePayloadFailsPermanently(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Written by an older producer: n is a string now.
	var id int64
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`INSERT INTO {s}.jobs (kind, payload) VALUES ('bad_payload', '{"n": "seven"}') RETURNING id`)).Scan(&id))
	w := newWorker(t, b, skiplock.WorkerConfig{SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[badPayloadArgs]) error {
		t.Error("handler must not run with an undecodable payload")
		return nil
	}))
	runWorker(t, w)
	waitStatus(t, b, id, skiplock.StatusFailed, 10*time.Second, "job failed")
	j, err := b.client.Get(b.ctx, id)
	require.NoError(t, err)
	assert.Contains(t, j.LastError, "decoding payload")
	assert.JSONEq(t, `{"n": "seven"}`, string(j.Payload), "the payload is kept for inspection")
}

type slowArgs struct {
	Ms int `json:"ms"`
}

func (slowArgs) Kind() string { return "slow" }

func TestWorker_ShutdownPutsUnfinishedJobsBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	slow, err := b.client.Enqueue(b.ctx, slowArgs{Ms: 60_000}, nil)
	require.NoError(t, err)
	quick, err := b.client.Enqueue(b.ctx, slowArgs{Ms: 100}, nil)
	require.NoError(t, err)

	bothStarted := make(chan struct{}, 2)
	cancelled := make(chan error, 1)
	w := newWorker(t, b, skiplock.WorkerConfig{ShutdownTimeout: 500 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[slowArgs]) error {
		bothStarted <- struct{}{}
		select {
		case <-time.After(time.Duration(job.Args.Ms) * time.Millisecond):
			return nil
		case <-ctx.Done():
			cancelled <- context.Cause(ctx)
			return ctx.Err()
		}
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-bothStarted
	<-bothStarted
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	select {
	case err := <-cancelled:
		require.Error(t, err)
	default:
		t.Fatal("the slow job's context was not cancelled")
	}

	// Right after Run returns: the slow job is queued again (attempt given back), the quick one succeeded.
	s, err := b.client.Get(b.ctx, slow.ID)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusQueued, s.Status)
	assert.Equal(t, 0, s.Attempts, "a shutdown does not use up an attempt")
	assert.Empty(t, s.LockedBy)
	assert.False(t, s.RunAt.After(time.Now().Add(time.Second)), "due now")
	assert.Equal(t, slow.RunAt, s.RunAt, "back in its place in line: run_at kept")
	q, err := b.client.Get(b.ctx, quick.ID)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusSucceeded, q.Status)
}

type shutdownVerdictArgs struct {
	Do string `json:"do"`
}

func (shutdownVerdictArgs) Kind() string { return "shutdown_verdict" }

// TestWorker_ShutdownKeepsAHandlersFinalVerdict: handlers cut off by a graceful shutdown
// return once their contexts end. A job whose handler returns Permanent or CancelJob
// ends as it says (failed, cancelled), as it would without the shutdown; one whose
// handler returns a plain error, or a Snooze, is put back, its attempt given back.
func TestWorker_ShutdownKeepsAHandlersFinalVerdict(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, b, skiplock.WorkerConfig{ShutdownTimeout: 200 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	started := make(chan struct{}, 4)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[shutdownVerdictArgs]) error {
		started <- struct{}{}
		<-ctx.Done() // the shutdown's cancel, after ShutdownTimeout
		switch job.Args.Do {
		case "permanent":
			return fmt.Errorf("wrapped: %w", skiplock.Permanent(errors.New("never again")))
		case "cancel":
			return skiplock.CancelJob(errors.New("not wanted"))
		case "snooze":
			return skiplock.Snooze(time.Hour)
		default:
			return errors.New("cut off")
		}
	}))
	ids := map[string]int64{}
	for _, do := range []string{"permanent", "cancel", "plain", "snooze"} {
		j, err := b.client.Enqueue(b.ctx, shutdownVerdictArgs{Do: do}, nil)
		require.NoError(t, err)
		ids[do] = j.ID
	}
	stop := runWorker(t, w)
	for range ids {
		<-started
	}
	stop()

	tests := []struct {
		do       string
		status   skiplock.JobStatus
		attempts int
		lastErr  string
	}{
		{"permanent", skiplock.StatusFailed, 1, "never again"},
		{"cancel", skiplock.StatusCancelled, 1, "not wanted"},
		{"plain", skiplock.StatusQueued, 0, ""},
		{"snooze", skiplock.StatusQueued, 0, ""},
	}
	for _, tt := range tests {
		j, err := b.client.Get(b.ctx, ids[tt.do])
		require.NoError(t, err)
		assert.Equal(t, tt.status, j.Status, tt.do)
		assert.Equal(t, tt.attempts, j.Attempts, tt.do)
		if tt.lastErr != "" {
			assert.Contains(t, j.LastError, tt.lastErr, tt.do)
		} else {
			assert.Empty(t, j.LastError, "%s: put back, no failure recorded", tt.do)
			assert.Empty(t, j.LockedBy, tt.do)
			assert.False(t, j.RunAt.After(time.Now().Add(time.Second)), "%s: due now, not snoozed", tt.do)
		}
	}
}

type deafAtShutdownArgs struct{}

func (deafAtShutdownArgs) Kind() string { return "deaf_at_shutdown" }

// docs/guarantees.md: at a shutdown, "Run waits for every handler, leases renewed, logging
// every ShutdownTimeout which jobs hold it up". A handler deaf to its cancelled context
// keeps Run waiting; the worker warns, naming its job, until it returns; then Run returns
// nil and the job's outcome is recorded.
func TestWorker_ShutdownWaitingForADeafHandlerNamesItsJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logs := &logCapture{}
	w := newWorker(t, b, skiplock.WorkerConfig{ShutdownTimeout: 200 * time.Millisecond, SweepInterval: -1, Logger: slog.New(logs)})
	started, release := make(chan struct{}, 1), make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[deafAtShutdownArgs]) error {
		started <- struct{}{}
		<-release // deaf to its context
		return nil
	}))
	job, err := b.client.Enqueue(b.ctx, deafAtShutdownArgs{}, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-started
	cancel()
	want := fmt.Sprintf("running=[{%d deaf_at_shutdown 1 ", job.ID) // id, kind, attempt, running for
	eventually(t, 10*time.Second, func() bool {
		return logs.find("shutdown waits for handlers", want) != ""
	}, "no warning naming job %d while the shutdown waits for it", job.ID)
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) while a handler still ran", err)
	default:
	}
	releaseOnce.Do(func() { close(release) })
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return once the handler did")
	}
	// Its nil is its verdict, recorded before Run returned (only an error is put back).
	got, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusSucceeded, got.Status)
	assert.Equal(t, 1, got.Attempts)
}

func TestWorker_RunTwiceAndNotMigrated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, b, skiplock.WorkerConfig{SweepInterval: -1, Logger: testLogger()})
	stop := runWorker(t, w)
	stop()
	require.ErrorIs(t, w.Run(context.Background()), skiplock.ErrWorkerStarted)

	pool := newPool(t, 2)
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: "not_migrated_" + b.schema[:10]})
	require.NoError(t, err)
	w2, err := skiplock.NewWorker(c, skiplock.WorkerConfig{})
	require.NoError(t, err)
	require.ErrorIs(t, w2.Run(context.Background()), skiplock.ErrNotMigrated)
}

// A worker whose pool holds connections the server has just closed (a restart, an
// administrator's pg_terminate_backend, an idle timeout) still starts: its start-up
// statements retry on a fresh connection, and it runs jobs.
func TestWorker_StartsThroughClosedPooledConnections(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := newPool(t, 4)
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)

	// Open every connection of the pool, note their backends, and give them back idle.
	var pids []int64
	var conns []*pgxpool.Conn
	for range 4 {
		conn, err := pool.Acquire(b.ctx)
		require.NoError(t, err)
		conns = append(conns, conn)
		pids = append(pids, int64(conn.Conn().PgConn().PID()))
	}
	for _, conn := range conns {
		conn.Release()
	}
	var killed int
	require.NoError(t, b.pool.QueryRow(b.ctx,
		`SELECT count(*) FILTER (WHERE pg_terminate_backend(pid::int)) FROM unnest($1::int8[]) AS pid`, pids).Scan(&killed))
	require.Equal(t, 4, killed)

	// Started at once: pgxpool checks a connection only after it idled a second.
	w, err := skiplock.NewWorker(c, skiplock.WorkerConfig{SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, err)
	var ran atomic.Int32
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error {
		ran.Add(1)
		return nil
	}))
	stop := runWorker(t, w) // fails the test if Run returns an error
	// Through the other pool: Enqueue does not retry (a lost reply may hide a committed row).
	_, err = b.client.Enqueue(b.ctx, noopArgs{N: 1}, nil)
	require.NoError(t, err)
	eventually(t, 10*time.Second, func() bool { return ran.Load() == 1 }, "the job ran")
	stop()
}

func TestHandle_RejectsDuplicateKind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, b, skiplock.WorkerConfig{})
	h := func(ctx context.Context, job *skiplock.Job[noopArgs]) error { return nil }
	require.NoError(t, skiplock.Handle(w, h))
	require.Error(t, skiplock.Handle(w, h))
}

// A registration after Run was called is refused, and the message says which case it is:
// the worker runs, or it ran and returned (a Worker runs once).
func TestHandle_AfterRunSaysWhetherTheWorkerRunsOrRan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, b, skiplock.WorkerConfig{Logger: testLogger()})
	ran := make(chan struct{}, 1)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error {
		ran <- struct{}{}
		return nil
	}))
	_, err := b.client.Enqueue(b.ctx, noopArgs{}, nil)
	require.NoError(t, err)
	stop := runWorker(t, w)
	<-ran // Run has started
	err = skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[editArgs]) error { return nil })
	require.EqualError(t, err, `skiplock: Handle("edit"): the worker is already running: register before Run`)

	stop() // Run has returned
	ranMsg := "the worker has already run (a Worker runs once): register on a new Worker before its Run"
	err = skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[editArgs]) error { return nil })
	require.EqualError(t, err, `skiplock: Handle("edit"): `+ranMsg)
	require.EqualError(t, skiplock.Use(w, func(next skiplock.JobHandler) skiplock.JobHandler { return next }), "skiplock: Use: "+ranMsg)
	require.EqualError(t, skiplock.HandleErrors(w, nopErrorHandler{}), "skiplock: HandleErrors: "+ranMsg)
}

// nopErrorHandler is an ErrorHandler that does nothing.
type nopErrorHandler struct{}

func (nopErrorHandler) HandleError(context.Context, *skiplock.JobRow, skiplock.JobStatus, error) {}
func (nopErrorHandler) HandleStuck(context.Context, *skiplock.JobRow, time.Duration)             {}

// hookRecorder counts hook calls.
type hookRecorder struct {
	started, finished atomic.Int32
	mu                sync.Mutex
	results           []skiplock.JobResult
}

func (h *hookRecorder) JobStarted(ctx context.Context, job *skiplock.JobRow) context.Context {
	h.started.Add(1)
	return ctx
}

func (h *hookRecorder) JobFinished(ctx context.Context, job *skiplock.JobRow, res skiplock.JobResult) {
	h.mu.Lock()
	h.results = append(h.results, res)
	h.mu.Unlock()
	h.finished.Add(1)
}

func TestWorker_HooksSeeOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &hookRecorder{}
	w := newWorker(t, b, skiplock.WorkerConfig{Hooks: []skiplock.Hook{rec}, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error {
		if job.Args.N == 1 {
			return errors.New("try again")
		}
		return nil
	}))
	for i := range 2 {
		_, err := b.client.Enqueue(b.ctx, noopArgs{N: i}, nil)
		require.NoError(t, err)
	}
	runWorker(t, w)
	eventually(t, 10*time.Second, func() bool { return rec.finished.Load() == 2 }, "two results")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	statuses := map[skiplock.JobStatus]int{}
	for _, r := range rec.results {
		statuses[r.Status]++
	}
	assert.Equal(t, map[skiplock.JobStatus]int{skiplock.StatusSucceeded: 1, skiplock.StatusQueued: 1}, statuses)
	assert.Equal(t, int32(2), rec.started.Load())
}

var _ = pgxpool.New

type hangArgs struct {
	IgnoreCancel bool `json:"ignore_cancel"`
}

func (hangArgs) Kind() string { return "hang" }

// A handler that honours its timeout fails each attempt with ErrJobTimeout; one deaf to
// its context keeps its job (no other attempt starts, its lease renewed), is counted as
// overrunning, and its attempt is recorded as a timed-out failure when it returns.
func TestWorker_HungHandlerHitsJobTimeoutAndEndsDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	causes := make(chan error, 10)
	stuck := make(chan struct{})
	var unstick sync.Once
	w := newWorker(t, b, skiplock.WorkerConfig{
		Queues:     map[string]skiplock.QueueConfig{"default": {MaxWorkers: 4}},
		JobTimeout: 300 * time.Millisecond, VisibilityTimeout: 900 * time.Millisecond,
		SweepInterval: 100 * time.Millisecond, PollInterval: 50 * time.Millisecond,
		RetryPolicy: fixedDelay(0), Logger: testLogger(),
	})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[hangArgs]) error {
		if job.Args.IgnoreCancel {
			<-stuck // hangs, deaf to its context, in its first attempt
			return nil
		}
		<-ctx.Done() // hangs until told
		causes <- context.Cause(ctx)
		return ctx.Err()
	}))
	polite, err := b.client.Enqueue(b.ctx, hangArgs{}, &skiplock.EnqueueOptions{MaxAttempts: 2})
	require.NoError(t, err)
	deaf, err := b.client.Enqueue(b.ctx, hangArgs{IgnoreCancel: true}, &skiplock.EnqueueOptions{MaxAttempts: 2})
	require.NoError(t, err)
	runWorker(t, w)
	t.Cleanup(func() { unstick.Do(func() { close(stuck) }) }) // before the worker stops

	waitStatus(t, b, polite.ID, skiplock.StatusDead, 30*time.Second, "job %d dead after its attempts", polite.ID)
	p, err := b.client.Get(b.ctx, polite.ID)
	require.NoError(t, err)
	assert.Equal(t, 2, p.Attempts)
	require.Len(t, p.Errors, 2)
	for _, e := range p.Errors {
		assert.Contains(t, e.Error, "job timeout after 300ms")
	}
	assert.ErrorIs(t, <-causes, skiplock.ErrJobTimeout, "the handler can read why it was cancelled")

	// The deaf handler has not returned: it keeps its job, overrunning, its lease renewed
	// past many of its 900ms leases (the polite job's two attempts and the sweeps).
	eventually(t, 10*time.Second, func() bool { return w.Overrunning() == 1 }, "the deaf handler counted as overrunning")
	d, err := b.client.Get(b.ctx, deaf.ID)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusRunning, d.Status)
	assert.Equal(t, 1, d.Attempts, "no other attempt started while the deaf handler ran")
	unstick.Do(func() { close(stuck) })
	// It returned nil past its timeout: a timed-out failure, then a second attempt that
	// succeeds at once.
	waitStatus(t, b, deaf.ID, skiplock.StatusSucceeded, 30*time.Second, "job %d retried after its overrun", deaf.ID)
	d, err = b.client.Get(b.ctx, deaf.ID)
	require.NoError(t, err)
	assert.Equal(t, 2, d.Attempts)
	require.Len(t, d.Errors, 1)
	assert.Contains(t, d.Errors[0].Error, "job timeout after 300ms")
	assert.Zero(t, w.Overrunning())
}

type slotArgs struct {
	Deaf bool `json:"deaf"`
}

func (slotArgs) Kind() string { return "slot" }

// docs/getting-started.md: "A handler that ignores its timeout keeps its job and its slot
// until it returns". With one slot, a handler deaf to its context past its timeout holds
// the slot: the next job does not start until it returns.
func TestWorker_AHandlerPastItsTimeoutKeepsItsSlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	var releaseOnce sync.Once
	started := make(chan bool, 4)
	timedOut := make(chan error, 1)
	w := newWorker(t, b, skiplock.WorkerConfig{
		Queues:     map[string]skiplock.QueueConfig{"default": {MaxWorkers: 1}},
		JobTimeout: 200 * time.Millisecond, SweepInterval: -1, PollInterval: 20 * time.Millisecond, Logger: testLogger(),
	})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[slotArgs]) error {
		started <- job.Args.Deaf
		if job.Args.Deaf && job.Attempts == 1 {
			<-ctx.Done()
			timedOut <- context.Cause(ctx)
			<-release // and does not return
		}
		return nil
	}))
	deaf, err := b.client.Enqueue(b.ctx, slotArgs{Deaf: true}, nil)
	require.NoError(t, err)
	runWorker(t, w)
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // before the worker stops
	require.True(t, <-started)
	next, err := b.client.Enqueue(b.ctx, slotArgs{}, nil)
	require.NoError(t, err)
	select {
	case err := <-timedOut:
		require.ErrorIs(t, err, skiplock.ErrJobTimeout)
	case <-time.After(10 * time.Second):
		t.Fatal("the deaf handler's context did not time out")
	}
	// Many poll intervals past the timeout: the next job waits for the slot.
	holdsFor(t, time.Second, 20*time.Millisecond, func() {
		require.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND status <> 'queued'`, next.ID),
			"the next job started while the overrunning handler held the only slot")
		require.Empty(t, started)
	})
	releaseOnce.Do(func() { close(release) })
	waitStatus(t, b, next.ID, skiplock.StatusSucceeded, 30*time.Second, "the next job runs once the slot is free")
	waitStatus(t, b, deaf.ID, skiplock.StatusSucceeded, 30*time.Second, "the overrun job retried")
	d, err := b.client.Get(b.ctx, deaf.ID)
	require.NoError(t, err)
	require.NotEmpty(t, d.Errors)
	assert.Contains(t, d.Errors[0].Error, skiplock.ErrJobTimeout.Error(), "the overrun attempt counts as failed")
}

func TestWorker_PerKindAndPerJobTimeouts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	got := make(chan time.Duration, 2)
	w := newWorker(t, b, skiplock.WorkerConfig{JobTimeout: time.Hour, SweepInterval: -1, PollInterval: 50 * time.Millisecond, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[timedArgs]) error {
		dl, ok := ctx.Deadline()
		require.True(t, ok)
		got <- time.Until(dl)
		return nil
	}))
	_, err := b.client.Enqueue(b.ctx, timedArgs{}, nil)
	require.NoError(t, err)
	runWorker(t, w)
	kind := <-got
	assert.InDelta(t, float64(timedArgsTimeout), float64(kind), float64(5*time.Second), "the kind's Timeout method")
	_, err = b.client.Enqueue(b.ctx, timedArgs{}, &skiplock.EnqueueOptions{Timeout: 3 * time.Minute})
	require.NoError(t, err)
	job := <-got
	assert.InDelta(t, float64(3*time.Minute), float64(job), float64(5*time.Second), "EnqueueOptions.Timeout")

	_, err = b.client.Enqueue(b.ctx, timedArgs{}, &skiplock.EnqueueOptions{Timeout: -time.Second})
	require.ErrorIs(t, err, skiplock.ErrInvalidOptions)
}

// timedStepArgs is a job of TestWorker_RunnerTimesEachAttemptByItsOwnTimeout: its handler
// blocks until its context ends (Block), or waits Wait and reports whether its context
// ended meanwhile.
type timedStepArgs struct {
	Block bool          `json:"block"`
	Wait  time.Duration `json:"wait"`
}

func (timedStepArgs) Kind() string { return "timed_step" }

// One runner runs attempts of different timeouts one after the other, and each is timed
// by its own: a short timeout after a long one still cancels its attempt, and a long one
// after a short one is not cut at the short one's end (the runner's overrun watch keeps
// its timer armed across attempts: internal/execute, execute.go).
func TestWorker_RunnerTimesEachAttemptByItsOwnTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	type ended struct {
		cause error // the context's cause once the handler returns; nil: not ended
	}
	got := make(chan ended, 1)
	w := newWorker(t, b, skiplock.WorkerConfig{Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 1}},
		JobTimeout: time.Hour, SweepInterval: -1, PollInterval: 20 * time.Millisecond, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[timedStepArgs]) error {
		if job.Args.Block {
			<-ctx.Done()
		} else if job.Args.Wait > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(job.Args.Wait):
			}
		}
		got <- ended{cause: context.Cause(ctx)}
		return nil
	}))
	runWorker(t, w)
	run := func(args timedStepArgs, timeout time.Duration) ended {
		t.Helper()
		_, err := b.client.Enqueue(b.ctx, args, &skiplock.EnqueueOptions{Timeout: timeout})
		require.NoError(t, err)
		select {
		case e := <-got:
			return e
		case <-time.After(30 * time.Second):
			t.Fatalf("the job (%+v, timeout %v) did not end", args, timeout)
			return ended{}
		}
	}
	assert.NoError(t, run(timedStepArgs{}, time.Hour).cause, "a long timeout, returned at once")
	assert.ErrorIs(t, run(timedStepArgs{Block: true}, 200*time.Millisecond).cause, skiplock.ErrJobTimeout,
		"a short timeout after a long one")
	assert.NoError(t, run(timedStepArgs{}, 100*time.Millisecond).cause, "a short timeout, returned at once")
	assert.NoError(t, run(timedStepArgs{Wait: 500 * time.Millisecond}, time.Hour).cause,
		"a long timeout after a short one is not cut at the short one's end")
	assert.ErrorIs(t, run(timedStepArgs{Block: true}, 300*time.Millisecond).cause, skiplock.ErrJobTimeout,
		"a short timeout again")
}

const timedArgsTimeout = 7 * time.Minute

type timedArgs struct{}

func (timedArgs) Kind() string           { return "timed" }
func (timedArgs) Timeout() time.Duration { return timedArgsTimeout }

// TestWorker_StopAndCancelGivesUpAndFreesTheJobs: a graceful shutdown waits for a
// handler deaf to its context; StopAndCancel gives up on it at its own deadline, Run and
// StopAndCancel say so (ErrHandlersStillRunning), and the job goes to the next worker as
// the next attempt, the deaf handler's late success changing nothing. Not parallel: it
// checks that no goroutine is left once the deaf handler returns, which needs the
// process to itself.
func TestWorker_StopAndCancelGivesUpAndFreesTheJobs(t *testing.T) {
	b := setup(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), ignorePgxReader)
	started := make(chan int64, 2)
	stuck := make(chan struct{})
	w := newWorker(t, b, skiplock.WorkerConfig{ID: "stopping", ShutdownTimeout: 300 * time.Millisecond,
		VisibilityTimeout: time.Second, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[hangArgs]) error {
		started <- job.ID
		if job.Args.IgnoreCancel {
			<-stuck
			return nil // a late success: it must not be recorded over the next attempt's
		}
		<-ctx.Done()
		return ctx.Err()
	}))
	polite, err := b.client.Enqueue(b.ctx, hangArgs{}, nil)
	require.NoError(t, err)
	deaf, err := b.client.Enqueue(b.ctx, hangArgs{IgnoreCancel: true}, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-started
	<-started
	cancel()
	// The graceful shutdown waits for the deaf handler, past ShutdownTimeout, the grace
	// and its lease.
	select {
	case err := <-done:
		t.Fatalf("Run returned while a handler still ran: %v", err)
	case <-time.After(2 * time.Second):
	}
	giveUp, stop := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer stop()
	require.ErrorIs(t, w.StopAndCancel(giveUp), skiplock.ErrHandlersStillRunning)
	select {
	case err := <-done:
		require.ErrorIs(t, err, skiplock.ErrHandlersStillRunning)
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return")
	}

	// The polite handler returned when cancelled: its job is back, its attempt given back.
	p, err := b.client.Get(b.ctx, polite.ID)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusQueued, p.Status)
	assert.Equal(t, 0, p.Attempts)
	// The deaf one still runs: its job must not be handed to anyone else as the same attempt.
	d, err := b.client.Get(b.ctx, deaf.ID)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusRunning, d.Status, "a job whose handler still runs was put back")
	assert.Equal(t, "stopping", d.LockedBy)

	// Another worker takes it once the given-up worker's lease ends, as the next attempt.
	var mu sync.Mutex
	ran := map[int64]int{}
	w2 := newWorker(t, b, skiplock.WorkerConfig{ID: "next", VisibilityTimeout: time.Second, SweepInterval: 100 * time.Millisecond,
		PollInterval: 50 * time.Millisecond, Completion: skiplock.CompletionKeep, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w2, func(ctx context.Context, job *skiplock.Job[hangArgs]) error {
		mu.Lock()
		ran[job.ID] = job.Attempts
		mu.Unlock()
		return nil
	}))
	stop2 := runWorker(t, w2)
	for _, id := range []int64{polite.ID, deaf.ID} {
		waitStatus(t, b, id, skiplock.StatusSucceeded, 15*time.Second, "job %d succeeded", id)
	}
	stop2()
	mu.Lock()
	assert.Equal(t, map[int64]int{polite.ID: 1, deaf.ID: 2}, ran, "attempts run by the next worker")
	mu.Unlock()

	// The deaf handler returns at last: its stale success changes nothing, and its
	// goroutine ends.
	before, err := b.client.Get(b.ctx, deaf.ID)
	require.NoError(t, err)
	close(stuck)
	after, err := b.client.Get(b.ctx, deaf.ID)
	require.NoError(t, err)
	assert.Equal(t, before, after)
	assert.Equal(t, "next", after.LockedBy)
}

// A worker stopped while its database is out of reach at start (a SIGTERM during an
// outage) returns at once, with nil: nothing ran. Before, Run kept retrying its start-up
// statements for their 30 s, and StopAndCancel, giving up on it, reported handlers still
// running, which tells the caller the process must exit for fear of a twin.
func TestWorker_StoppedWhileTheDatabaseIsOutOfReachAtStart(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig("postgres://postgres@127.0.0.1:1/none?connect_timeout=1")
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	defer pool.Close()
	client, err := skiplock.NewClient(pool, skiplock.Config{Logger: testLogger()})
	require.NoError(t, err)
	for _, viaStop := range []bool{false, true} {
		w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{Logger: testLogger()})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		began := time.Now()
		go func() { ran <- w.Run(ctx) }()
		time.Sleep(300 * time.Millisecond) // Run is retrying its first statement
		if viaStop {
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			assert.NoError(t, w.StopAndCancel(sctx), "StopAndCancel: no handler ever ran")
			scancel()
		} else {
			cancel()
		}
		select {
		case err := <-ran:
			assert.NoError(t, err, "viaStop=%v", viaStop)
			assert.Less(t, time.Since(began), 10*time.Second, "viaStop=%v", viaStop)
		case <-time.After(20 * time.Second):
			t.Fatalf("viaStop=%v: Run did not return 20 s after it was stopped", viaStop)
		}
		cancel()
	}
}

// TestWorker_ShutdownOnASilentNetworkReportsUnrecordedOutcomes: a graceful shutdown whose
// path to the database went silent cannot write the success of a handler that returns
// during it, nor put the job back. Run says so, with ErrOutcomesNotRecorded naming the
// one job, instead of nil; the job stays running under the worker (another worker takes
// it back once the worker's lease lapses). Run returns once the success batch's write
// limit (30 s, not configurable) and the put-back's have passed: the test takes ~35 s.
func TestWorker_ShutdownOnASilentNetworkReportsUnrecordedOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proxy, pool := proxiedPool(t, 8)
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{ID: "silent", ShutdownTimeout: time.Second,
		PollInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, err)
	started, release := make(chan struct{}), make(chan struct{})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[holdArgs]) error {
		close(started)
		<-release
		return nil // a success, within ShutdownTimeout
	}))
	job, err := b.client.Enqueue(b.ctx, holdArgs{}, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-started

	proxy.Blackhole()
	cancel()
	close(release)
	began := time.Now()
	select {
	case err = <-done:
	case <-time.After(90 * time.Second):
		t.Fatal("Run did not return")
	}
	t.Logf("Run returned %v after %s", err, time.Since(began).Round(100*time.Millisecond))
	require.ErrorIs(t, err, skiplock.ErrOutcomesNotRecorded)
	assert.Contains(t, err.Error(), "1 job")
	assert.NotErrorIs(t, err, skiplock.ErrHandlersStillRunning)

	row, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusRunning, row.Status, "neither recorded nor put back")
	assert.Equal(t, "silent", row.LockedBy)
	proxy.Restore() // the pool's cleanup then closes its connections at once
}
