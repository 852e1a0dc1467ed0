package skiplock_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

type seqArgs struct {
	N int `json:"n"`
}

func (seqArgs) Kind() string { return "seq" }

// 100 jobs of one key run one at a time, in order; the 50th fails twice and the
// sequence holds until its third attempt succeeds. Jobs of another key are not held.
func TestSequence_RunsInOrderAndHoldsThroughRetries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.seq_audit (n int, attempt int, key text,
		started timestamptz NOT NULL, finished timestamptz NOT NULL)`))
	require.NoError(t, err)
	const n = 100
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1,
		RetryPolicy: fixedDelay(0), Logger: testLogger(), Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 8}}})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[seqArgs]) error {
		var started time.Time
		if err := b.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&started); err != nil {
			return err
		}
		_, err := b.pool.Exec(ctx, b.q(`INSERT INTO {s}.seq_audit VALUES ($1, $2, $3, $4, clock_timestamp())`),
			job.Args.N, job.Attempts, job.Metadata["key"], started)
		if err != nil {
			return err
		}
		if job.Args.N == n/2 && job.Attempts <= 2 {
			return errors.New("fails twice")
		}
		return nil
	}))
	runWorker(t, w) // running while the jobs are enqueued: each may start at once
	for i := range n {
		info, err := b.client.EnqueueSequence(b.ctx, "customer-1", seqArgs{N: i},
			&skiplock.EnqueueOptions{Metadata: map[string]string{"key": "customer-1"}})
		require.NoError(t, err)
		assert.Equal(t, strconv.Itoa(i+1), info.Name, "the task's place in the sequence")
		if i%10 == 0 {
			_, err := b.client.EnqueueSequence(b.ctx, "customer-2", seqArgs{N: 1000 + i},
				&skiplock.EnqueueOptions{Metadata: map[string]string{"key": "customer-2"}})
			require.NoError(t, err)
		}
	}
	eventually(t, 60*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.workflow_tasks WHERE state <> 'succeeded'`) == 0
	}, "the sequences did not finish")

	rows, err := b.pool.Query(b.ctx, b.q(`SELECT n, attempt, started, finished FROM {s}.seq_audit
		WHERE key = 'customer-1' ORDER BY started`))
	require.NoError(t, err)
	type run struct {
		n, attempt        int
		started, finished time.Time
	}
	var runs []run
	var r run
	_, err = pgx.ForEachRow(rows, []any{&r.n, &r.attempt, &r.started, &r.finished}, func() error {
		runs = append(runs, r)
		return nil
	})
	require.NoError(t, err)
	require.Len(t, runs, n+2, "every job once, the failing one three times")
	want := 0
	for i, r := range runs {
		if i > 0 {
			assert.False(t, r.started.Before(runs[i-1].finished), "run %d (job %d) overlapped the previous one", i, r.n)
		}
		assert.Equal(t, want, r.n, "run %d", i)
		if r.n != n/2 || r.attempt == 3 {
			want++
		}
	}
	assert.Equal(t, 10, b.count(t, `SELECT count(*) FROM {s}.seq_audit WHERE key = 'customer-2'`))
}

// With SequenceMoveOn, 20 jobs of one key: the 10th fails twice, and its first failure
// releases the 11th at once; its retries run out of order. Every job's first attempt
// still runs one at a time, in order. A job enqueued behind a job that has failed once
// (another key) starts at once.
func TestSequence_MoveOnReleasesTheNextJobAtTheFirstFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.seq_audit (n int, attempt int,
		started timestamptz NOT NULL, finished timestamptz NOT NULL)`))
	require.NoError(t, err)
	const n, failing = 20, 9 // the 10th job
	nextDone, enqueued := make(chan struct{}), make(chan struct{})
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1,
		RetryPolicy: fixedDelay(0), Logger: testLogger(), Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 8}}})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[seqArgs]) error {
		var started time.Time
		if err := b.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&started); err != nil {
			return err
		}
		if job.Args.N == 100 && job.Attempts == 2 {
			select { // the job stays in its retry while its successor is enqueued
			case <-enqueued:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if job.Args.N == failing && job.Attempts == 3 {
			// The attempt that succeeds waits until the 11th job has run: under the hold
			// policy it never would.
			select {
			case <-nextDone:
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(30 * time.Second):
				t.Errorf("the 11th job did not run while the 10th waited for its retry")
			}
		}
		_, err := b.pool.Exec(ctx, b.q(`INSERT INTO {s}.seq_audit VALUES ($1, $2, $3, clock_timestamp())`),
			job.Args.N, job.Attempts, started)
		if err != nil {
			return err
		}
		if job.Args.N == failing+1 {
			close(nextDone)
		}
		if (job.Args.N == failing || job.Args.N == 100) && job.Attempts <= 2 {
			return errors.New("fails twice")
		}
		return nil
	}))
	runWorker(t, w)
	enqueue := func(key string, i int) *skiplock.WorkflowTaskInfo {
		info, err := b.client.EnqueueSequence(b.ctx, key, seqArgs{N: i},
			&skiplock.EnqueueOptions{SequenceOnFailure: skiplock.SequenceMoveOn})
		require.NoError(t, err)
		return info
	}
	for i := range n {
		info := enqueue("customer-1", i)
		if i == failing+1 {
			assert.Equal(t, []string{"10"}, info.DependsOn, "the 11th job waits behind the 10th")
		}
	}

	first := enqueue("customer-2", 100)
	eventually(t, 60*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = `+strconv.FormatInt(first.JobID, 10)+
			` AND errors IS NOT NULL`) > 0
	}, "the first job of customer-2 did not fail")
	info := enqueue("customer-2", 101)
	close(enqueued)
	assert.Equal(t, "released", info.State, "the tail failed once: the next job does not wait for its retry")
	assert.NotZero(t, info.JobID)
	eventually(t, 60*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.workflow_tasks WHERE state <> 'succeeded'`) == 0
	}, "the sequence did not finish")

	rows, err := b.pool.Query(b.ctx, b.q(`SELECT n, attempt, started, finished FROM {s}.seq_audit WHERE n < 100 ORDER BY started`))
	require.NoError(t, err)
	type run struct {
		n, attempt        int
		started, finished time.Time
	}
	var runs, firsts []run
	var r run
	_, err = pgx.ForEachRow(rows, []any{&r.n, &r.attempt, &r.started, &r.finished}, func() error {
		runs = append(runs, r)
		if r.attempt == 1 {
			firsts = append(firsts, r)
		}
		return nil
	})
	require.NoError(t, err)
	require.Len(t, runs, n+2, "every job once, the failing one three times")
	require.Len(t, firsts, n)
	for i, r := range firsts {
		assert.Equal(t, i, r.n, "first attempts run in order")
		if i > 0 {
			assert.False(t, r.started.Before(firsts[i-1].finished), "job %d started before job %d's first attempt ended", r.n, i-1)
		}
	}
	var success run
	for _, r := range runs {
		if r.n == failing && r.attempt == 3 {
			success = r
		}
	}
	assert.True(t, firsts[failing+1].started.Before(success.finished), "the 11th job started before the 10th succeeded")
	assert.Equal(t, 4, b.count(t, `SELECT count(*) FROM {s}.seq_audit WHERE n >= 100`), "customer-2: 3 attempts and 1")
}

// A sequence policy other than SequenceHold is refused outside a sequence, and an
// unknown one in a sequence.
func TestSequence_PolicyIsRefusedWhereItDoesNotApply(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.client.Enqueue(b.ctx, seqArgs{N: 1}, &skiplock.EnqueueOptions{SequenceOnFailure: skiplock.SequenceMoveOn})
	require.ErrorIs(t, err, skiplock.ErrInvalidOptions)
	_, err = b.client.EnqueueSequence(b.ctx, "k", seqArgs{N: 1}, &skiplock.EnqueueOptions{SequenceOnFailure: 7})
	require.ErrorIs(t, err, skiplock.ErrInvalidOptions)
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs`))
}

// seqGateArgs is a sequence job; job 1 waits for the test's gate.
type seqGateArgs struct {
	N int `json:"n"`
}

func (seqGateArgs) Kind() string { return "seq_gate" }

// CancelWorkflow on a sequence's workflow cancels the jobs still waiting and leaves the
// running one running; a job enqueued afterwards waits for that running one (past the
// cancelled ones, however many cancels in a row), so the key's jobs still run one at a
// time, in order. Before, the next job saw the cancelled tail as finished and ran at
// once, beside the running job.
func TestSequence_CancelWorkflowKeepsOneJobOfTheKeyAtATime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.seq_audit (n int,
		started timestamptz NOT NULL, finished timestamptz NOT NULL)`))
	require.NoError(t, err)
	gate := make(chan struct{})
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(gate) }) }
	first := make(chan struct{})
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1,
		Logger: testLogger(), Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 4}}})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[seqGateArgs]) error {
		var started time.Time
		if err := b.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&started); err != nil {
			return err
		}
		if job.Args.N == 1 {
			close(first)
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		_, err := b.pool.Exec(ctx, b.q(`INSERT INTO {s}.seq_audit VALUES ($1, $2, clock_timestamp())`), job.Args.N, started)
		return err
	}))
	runWorker(t, w)
	t.Cleanup(openGate) // before the worker stops (cleanups run last first)

	enqueue := func(n int) *skiplock.WorkflowTaskInfo {
		info, err := b.client.EnqueueSequence(b.ctx, "k", seqGateArgs{N: n}, nil)
		require.NoError(t, err)
		return info
	}
	one := enqueue(1)
	<-first
	assert.Equal(t, "waiting", enqueue(2).State)
	row, err := b.client.Get(b.ctx, one.JobID)
	require.NoError(t, err)
	wf, err := strconv.ParseInt(row.Metadata["skiplock_workflow"], 10, 64)
	require.NoError(t, err)
	cancelled, err := b.client.CancelWorkflow(b.ctx, wf)
	require.NoError(t, err)
	require.Equal(t, 1, cancelled, "job 2, waiting")

	three := enqueue(3)
	assert.Equal(t, "waiting", three.State, "job 3 does not run while job 1 runs")
	assert.Equal(t, []string{"1"}, three.DependsOn)
	cancelled, err = b.client.CancelWorkflow(b.ctx, wf)
	require.NoError(t, err)
	require.Equal(t, 1, cancelled, "job 3, waiting")
	four := enqueue(4)
	assert.Equal(t, "waiting", four.State, "job 4 does not run while job 1 runs")
	assert.Equal(t, []string{"1"}, four.DependsOn, "past the cancelled jobs 3 and 2")

	openGate()
	eventually(t, 30*time.Second, func() bool {
		info, err := b.client.GetWorkflow(b.ctx, wf)
		require.NoError(t, err)
		return info.Task("4").State == "succeeded"
	}, "job 4 did not run after job 1")
	assert.Equal(t, "released", enqueue(5).State, "job 5 runs at once: job 4 has finished")
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.seq_audit WHERE n = 5`) == 1
	}, "job 5 did not run")
	assert.Equal(t, 3, b.count(t, `SELECT count(*) FROM {s}.seq_audit`), "jobs 1, 4 and 5 ran; 2 and 3 were cancelled")
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.seq_audit a JOIN {s}.seq_audit o
		ON o.n <> a.n AND o.started < a.finished AND a.started < o.finished`), "two jobs of the key ran at once")
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.seq_audit a JOIN {s}.seq_audit o
		ON o.n > a.n AND o.started < a.started`), "the key's jobs ran out of order")
}

// seqDeafArgs is a sequence job; job 1 goes on after its cancel, deaf to its context.
type seqDeafArgs struct {
	N int `json:"n"`
}

func (seqDeafArgs) Kind() string { return "seq_deaf" }

// seqDeafAudit creates the audit table the handlers of seqDeafArgs write: one row per
// run, with when it started and when it returned.
func seqDeafAudit(t *testing.T, b *bundle) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.seq_audit (n int,
		started timestamptz NOT NULL, finished timestamptz NOT NULL)`))
	require.NoError(t, err)
}

// seqDeafHandler records each run in seq_audit; job 1 tells started, then runs on until
// goOn returns, whatever its context says.
func seqDeafHandler(b *bundle, started chan<- struct{}, goOn func(ctx context.Context)) func(context.Context, *skiplock.Job[seqDeafArgs]) error {
	return func(ctx context.Context, job *skiplock.Job[seqDeafArgs]) error {
		var start time.Time
		if err := b.pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&start); err != nil {
			return err
		}
		if job.Args.N == 1 {
			close(started)
			goOn(ctx)
		}
		_, err := b.pool.Exec(context.Background(), b.q(`INSERT INTO {s}.seq_audit VALUES ($1, $2, clock_timestamp())`),
			job.Args.N, start)
		return err
	}
}

// Client.Cancel of a key's running job whose handler goes on for a second after its
// context ended: the key's next job starts only once that handler has returned, when its
// worker ends the cancelled attempt's lease. Before, the cancel released it at once, and
// it ran beside the cancelled one.
func TestSequence_CancelOfARunningJobHoldsTheNextUntilItsHandlerReturns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seqDeafAudit(t, b)
	started := make(chan struct{})
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1,
		Logger: testLogger(), Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 4}}})
	require.NoError(t, skiplock.Handle(w, seqDeafHandler(b, started, func(ctx context.Context) {
		<-ctx.Done()
		work(context.Background(), time.Second) // deaf: it goes on after its cancel
	})))
	runWorker(t, w)

	one, err := b.client.EnqueueSequence(b.ctx, "k", seqDeafArgs{N: 1}, nil)
	require.NoError(t, err)
	<-started
	two, err := b.client.EnqueueSequence(b.ctx, "k", seqDeafArgs{N: 2}, nil)
	require.NoError(t, err)
	require.Equal(t, "waiting", two.State)
	row, err := b.client.Cancel(b.ctx, one.JobID)
	require.NoError(t, err)
	require.Equal(t, skiplock.StatusCancelled, row.Status)

	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.seq_audit`) == 2
	}, "job 1's handler did not return, or job 2 did not run")
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.seq_audit a JOIN {s}.seq_audit o
		ON a.n = 1 AND o.n = 2 AND o.started < a.finished`), "job 2 started while job 1's cancelled handler still ran")
	wf, err := strconv.ParseInt(row.Metadata["skiplock_workflow"], 10, 64)
	require.NoError(t, err)
	info := waitSettled(t, b, wf)
	assert.Equal(t, "cancelled", info.Task("1").State)
	assert.Equal(t, "succeeded", info.Task("2").State)
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND lease_until IS NOT NULL`, one.JobID),
		"the cancelled attempt's lease ended")
}

// Client.Cancel of a key's running job whose worker then gives up on its deaf handler
// (StopAndCancel past its deadline): no one ends the cancelled attempt's lease, and the
// key's next job is not held for ever: the sweep settles the cancelled task once the
// lease has passed, and another worker runs the next job, not before.
func TestSequence_CancelOfARunningJobWhoseWorkerStopsReleasesTheNextAfterItsLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seqDeafAudit(t, b)
	started := make(chan struct{})
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	handler := seqDeafHandler(b, started, func(context.Context) { <-stuck })
	a := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1,
		VisibilityTimeout: time.Second, ShutdownTimeout: 100 * time.Millisecond, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(a, handler))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	one, err := b.client.EnqueueSequence(b.ctx, "k", seqDeafArgs{N: 1}, nil)
	require.NoError(t, err)
	<-started
	_, err = b.client.EnqueueSequence(b.ctx, "k", seqDeafArgs{N: 2}, nil)
	require.NoError(t, err)
	_, err = b.client.Cancel(b.ctx, one.JobID)
	require.NoError(t, err)
	giveUp, stop := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer stop()
	require.ErrorIs(t, a.StopAndCancel(giveUp), skiplock.ErrHandlersStillRunning)
	select {
	case err := <-done:
		require.ErrorIs(t, err, skiplock.ErrHandlersStillRunning)
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return")
	}
	// Run has returned: nothing renews the cancelled attempt's lease any more.
	var leaseEnd time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT lease_until FROM {s}.jobs WHERE id = $1`), one.JobID).Scan(&leaseEnd))

	other := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(other, handler))
	runWorker(t, other)
	sw, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{Logger: testLogger()})
	require.NoError(t, err)
	eventually(t, 30*time.Second, func() bool {
		_, err := sw.Sweep(b.ctx)
		require.NoError(t, err)
		return b.count(t, `SELECT count(*) FROM {s}.seq_audit WHERE n = 2`) == 1
	}, "job 2 did not run after job 1's lease passed")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.seq_audit WHERE n = 2 AND started > $1`, leaseEnd),
		"job 2 started before job 1's lease had passed")
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.seq_audit WHERE n = 1`), "job 1's handler still runs")
}
