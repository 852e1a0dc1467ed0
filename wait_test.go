package skiplock_test

// This file holds the tests of Client.Wait and Client.WaitWorkflow (issue 42): woken by
// the notification of the batch that records the outcome, from another pool; no
// completion missed with many jobs and many waiters (the jobs table is the judge); ctx
// cancellation; a job that does not exist.

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

type waitedArgs struct {
	N    int  `json:"n"`
	Fail bool `json:"fail"` // fail for good (Permanent)
}

func (waitedArgs) Kind() string { return "waited" }

// retryOnce fails a job's first attempt with a retry due at once.
type retryOnce struct{}

func (retryOnce) NextRetry(*skiplock.JobRow) time.Duration { return time.Millisecond }

// retriedArgs is a waited job whose first attempt fails and is retried.
type retriedArgs struct {
	N int `json:"n"`
}

func (retriedArgs) Kind() string                              { return "retried" }
func (retriedArgs) RetryPolicy() skiplock.RetryPolicy         { return retryOnce{} }
func (a retriedArgs) EnqueueOptions() skiplock.EnqueueOptions { return skiplock.EnqueueOptions{} }

// waitClient is a second client on a pool of its own, as another process would have,
// whose waits read again only after an hour without a notification.
// waitCtx is the context of a wait a test runs in a goroutine: it ends when the test's
// cleanup begins, before the pools close, so a wait that never returned gives its
// connection back and the test fails on its own assertion, not on a hung cleanup.
func waitCtx(t *testing.T, b *bundle) context.Context {
	ctx, cancel := context.WithCancel(b.ctx)
	t.Cleanup(cancel)
	return ctx
}

func waitClient(t *testing.T, b *bundle, conns int32) *skiplock.Client {
	t.Helper()
	c, err := skiplock.NewClient(newPool(t, conns), skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)
	skiplock.SetWaitPoll(c, time.Hour)
	return c
}

// Wait from another pool returns the job's final row with its output as soon as the
// worker's batch records it, succeeded or failed: with an hour between its reads, only
// the notification can wake it.
func TestWait_FromAnotherPoolSeesTheOutcomePromptly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	waiter := waitClient(t, b, 4)
	release := make(chan struct{})
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[waitedArgs]) error {
		<-release
		if job.Args.Fail {
			return skiplock.Permanent(errors.New("bad input"))
		}
		return skiplock.SetOutput(ctx, map[string]int{"n": job.Args.N * 2})
	}))
	ok, err := b.client.Enqueue(b.ctx, waitedArgs{N: 21}, nil)
	require.NoError(t, err)
	bad, err := b.client.Enqueue(b.ctx, waitedArgs{Fail: true}, nil)
	require.NoError(t, err)
	runWorker(t, w)

	type result struct {
		row *skiplock.JobRow
		err error
	}
	got := make(chan result, 2)
	wctx := waitCtx(t, b)
	for _, id := range []int64{ok.ID, bad.ID} {
		go func() {
			row, err := waiter.Wait(wctx, id)
			got <- result{row, err}
		}()
	}
	// Both waiters are registered before the handlers may return.
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, `SELECT count(DISTINCT job_id) FROM {s}.job_waiters`) == 2
	}, "both waits registered")
	close(release)
	began := time.Now()
	for range 2 {
		select {
		case r := <-got:
			require.NoError(t, r.err)
			switch r.row.ID {
			case ok.ID:
				assert.Equal(t, skiplock.StatusSucceeded, r.row.Status)
				assert.JSONEq(t, `{"n":42}`, string(r.row.Output))
			case bad.ID:
				assert.Equal(t, skiplock.StatusFailed, r.row.Status)
				assert.Contains(t, r.row.LastError, "bad input")
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Wait did not return: the notification was not received")
		}
	}
	assert.Less(t, time.Since(began), 10*time.Second)
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.job_waiters`), "each Wait removes its rows")
}

// Many waiters on many jobs, registering while the jobs run, succeed, fail or are
// retried: every Wait returns (an hour between reads: a missed notification would hang
// it past the test's deadline), with the job's final status as the database holds it.
func TestWait_MissesNoOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const jobs, waiters = 300, 24
	waiter := waitClient(t, b, waiters+2)
	w := newWorker(t, b, skiplock.WorkerConfig{Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 8}}, PollInterval: 20 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[waitedArgs]) error {
		work(ctx, time.Duration(job.Args.N%4)*time.Millisecond)
		if job.Args.Fail {
			return skiplock.Permanent(errors.New("no"))
		}
		return skiplock.SetOutput(ctx, job.Args.N)
	}))
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[retriedArgs]) error {
		if job.Attempts == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}))
	ids := make([]int64, jobs)
	for i := range ids {
		var args skiplock.JobArgs = waitedArgs{N: i, Fail: i%7 == 0}
		if i%5 == 0 {
			args = retriedArgs{N: i}
		}
		row, err := b.client.Enqueue(b.ctx, args, nil)
		require.NoError(t, err)
		ids[i] = row.ID
	}
	ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	got := make([]*skiplock.JobRow, jobs)
	errs := make([]error, jobs)
	var wg sync.WaitGroup
	for g := range waiters {
		wg.Go(func() {
			for i := g; i < jobs; i += waiters {
				got[i], errs[i] = waiter.Wait(ctx, ids[i])
			}
		})
	}
	runWorker(t, w) // while the waiters register
	wg.Wait()
	for i := range ids {
		require.NoError(t, errs[i], "job %d: Wait missed its outcome", ids[i])
	}
	// SQL is the judge: what each Wait returned is the job's final status as stored.
	rows, err := b.pool.Query(b.ctx, b.q(`SELECT id, status FROM {s}.jobs WHERE id = ANY($1)
		UNION ALL SELECT id, status FROM {s}.jobs_archive WHERE id = ANY($1)`), ids)
	require.NoError(t, err)
	stored := map[int64]string{}
	for rows.Next() {
		var id int64
		var s string
		require.NoError(t, rows.Scan(&id, &s))
		stored[id] = s
	}
	require.NoError(t, rows.Err())
	for i, id := range ids {
		want := "succeeded"
		if i%5 != 0 && i%7 == 0 {
			want = "failed"
		}
		assert.Equal(t, want, stored[id], "job %d as stored", id)
		assert.Equal(t, stored[id], string(got[i].Status), "job %d as Wait returned it", id)
	}
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.job_waiters`))
}

// Wait returns ctx's error when ctx ends first, and leaves no row behind; a job that does
// not exist is ErrJobNotFound.
func TestWait_CancelledAndNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	waiter := waitClient(t, b, 2)
	row, err := b.client.Enqueue(b.ctx, waitedArgs{}, nil) // no worker: it never runs
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { _, err := waiter.Wait(ctx, row.ID); done <- err }()
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.job_waiters WHERE job_id = $1`, row.ID) == 1
	}, "the wait registered")
	cancel()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after its ctx ended")
	}
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.job_waiters`), "the cancelled Wait removed its row")

	_, err = waiter.Wait(b.ctx, row.ID+1000)
	assert.ErrorIs(t, err, skiplock.ErrJobNotFound)

	// The pool's connections came back, without their LISTEN: both can wait again.
	for range 2 {
		ctx, cancel := context.WithTimeout(b.ctx, 50*time.Millisecond)
		_, err := waiter.Wait(ctx, row.ID)
		cancel()
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	}
}

// Cancel tells the waiters of the job it cancels.
func TestWait_CancelWakesTheWaiter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	waiter := waitClient(t, b, 2)
	row, err := b.client.Enqueue(b.ctx, waitedArgs{}, nil)
	require.NoError(t, err)
	done := make(chan *skiplock.JobRow, 1)
	wctx := waitCtx(t, b)
	go func() {
		r, err := waiter.Wait(wctx, row.ID)
		assert.NoError(t, err)
		done <- r
	}()
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.job_waiters`) == 1
	}, "the wait registered")
	_, err = b.client.Cancel(b.ctx, row.ID)
	require.NoError(t, err)
	select {
	case r := <-done:
		assert.Equal(t, skiplock.StatusCancelled, r.Status)
	case <-time.After(20 * time.Second):
		t.Fatal("Wait was not woken by Cancel")
	}
}

// WaitWorkflow returns once every task is final, woken by the tasks' outcomes, including
// the job of a task released after the wait began.
func TestWaitWorkflow_ReturnsWhenEveryTaskIsFinal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	waiter := waitClient(t, b, 2)
	release := make(chan struct{})
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[waitedArgs]) error {
		<-release
		return skiplock.SetOutput(ctx, job.Args.N)
	}))
	info, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "wait", Tasks: []skiplock.WorkflowTask{
		{Name: "a", Args: waitedArgs{N: 1}},
		{Name: "b", Args: waitedArgs{N: 2}, DependsOn: []string{"a"}},
		{Name: "c", Args: waitedArgs{N: 3}, DependsOn: []string{"b"}},
	}})
	require.NoError(t, err)
	runWorker(t, w)
	done := make(chan *skiplock.WorkflowInfo, 1)
	wctx := waitCtx(t, b)
	go func() {
		got, err := waiter.WaitWorkflow(wctx, info.ID)
		assert.NoError(t, err)
		done <- got
	}()
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.job_waiters`) >= 1
	}, "the wait registered")
	close(release)
	select {
	case got := <-done:
		for _, task := range got.Tasks {
			assert.Equal(t, "succeeded", task.State, "task %s", task.Name)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("WaitWorkflow did not return")
	}
	_, err = waiter.WaitWorkflow(b.ctx, info.ID+1000)
	assert.ErrorIs(t, err, skiplock.ErrWorkflowNotFound)
}

// A success written by CompleteTx in the handler's transaction tells the waiters at that
// transaction's commit.
func TestWait_WokenByCompleteTx(t *testing.T) {
	t.Parallel()
	b := setup(t)
	waiter := waitClient(t, b, 2)
	release := make(chan struct{})
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[waitedArgs]) error {
		<-release
		return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return skiplock.CompleteTx(ctx, tx, job) })
	}))
	row, err := b.client.Enqueue(b.ctx, waitedArgs{}, nil)
	require.NoError(t, err)
	runWorker(t, w)
	done := make(chan *skiplock.JobRow, 1)
	wctx := waitCtx(t, b)
	go func() {
		r, err := waiter.Wait(wctx, row.ID)
		assert.NoError(t, err)
		done <- r
	}()
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.job_waiters`) == 1
	}, "the wait registered")
	close(release)
	select {
	case r := <-done:
		assert.Equal(t, skiplock.StatusSucceeded, r.Status)
	case <-time.After(20 * time.Second):
		t.Fatal("Wait was not woken by CompleteTx's commit")
	}
}

// Without a notification (the outcome written by hand here, as a take-back of a dead
// worker's job would), Wait finds the outcome at its poll, after polls that found
// nothing, on the same connection.
func TestWait_PollsWithoutANotification(t *testing.T) {
	t.Parallel()
	b := setup(t)
	waiter := waitClient(t, b, 1)
	skiplock.SetWaitPoll(waiter, 20*time.Millisecond)
	row, err := b.client.Enqueue(b.ctx, waitedArgs{}, nil)
	require.NoError(t, err)
	done := make(chan *skiplock.JobRow, 1)
	wctx := waitCtx(t, b)
	go func() {
		r, err := waiter.Wait(wctx, row.ID)
		assert.NoError(t, err)
		done <- r
	}()
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.job_waiters`) == 1
	}, "the wait registered")
	holdsFor(t, 200*time.Millisecond, 20*time.Millisecond, func() {
		select {
		case r := <-done:
			t.Fatalf("Wait returned early: %+v", r)
		default:
		}
	})
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET status = 'dead', finished_at = now() WHERE id = $1`), row.ID)
	require.NoError(t, err)
	select {
	case r := <-done:
		assert.Equal(t, skiplock.StatusDead, r.Status)
	case <-time.After(20 * time.Second):
		t.Fatal("Wait did not find the outcome at its poll")
	}
}

// A workflow's wait registers for a task's job after the wake-up its outcome batch sent
// with the batch's statement, and before the batch settles the task: the settle wakes it
// at the commit. (Before, the wait read the job as running, the batch not committed yet,
// and slept until its poll: an hour here.)
func TestWaitWorkflow_WokenBySettleAfterALateRegistration(t *testing.T) {
	t.Parallel()
	b := setup(t)
	info, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "late", Tasks: []skiplock.WorkflowTask{
		{Name: "a", Args: waitedArgs{N: 1}},
	}})
	require.NoError(t, err)
	job := info.Tasks[0].JobID
	require.NotZero(t, job)

	listener, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(b.ctx, "LISTEN "+pgx.Identifier{b.schema + "_done"}.Sanitize())
	require.NoError(t, err)

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	// The batch: its outcome (a success leaves the jobs table), then its own wake-up,
	// which finds nobody registered yet.
	_, err = tx.Exec(b.ctx, b.q(`DELETE FROM {s}.jobs WHERE id = $1`), job)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, b.q(`SELECT pg_notify($2, job_id::text) FROM {s}.job_waiters WHERE job_id = ANY($1)`),
		[]int64{job}, b.schema+"_done")
	require.NoError(t, err)
	// The wait registers (and commits) now.
	_, err = b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.job_waiters (job_id, waiter) VALUES ($1, 1)`), job)
	require.NoError(t, err)
	require.NoError(t, skiplock.SettleTx(b.ctx, b.client, tx, []int64{job}))
	require.NoError(t, tx.Commit(b.ctx))

	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	n, err := listener.Conn().WaitForNotification(ctx)
	require.NoError(t, err, "the settle did not wake the wait")
	require.Equal(t, strconv.FormatInt(job, 10), n.Payload)
	got, err := b.client.GetWorkflow(b.ctx, info.ID)
	require.NoError(t, err)
	require.Equal(t, "succeeded", got.Tasks[0].State)
}

// Wait returns within half a second of its deadline even when its path to the database
// went silent while it waited: its cleanup (removing its job_waiters row) gets half a
// second once ctx has ended, no more. It took the full five seconds of the cleanup's
// limit before (a 1 s deadline returned after 6 s). With the path healthy the same
// cleanup removes the row; with the path silent the row stays behind (until the sweeper
// prunes it, an hour later: a row without its waiter costs a notification when its job's
// outcome is recorded).
func TestWait_ReturnsSoonAfterItsDeadlineWhenThePathGoesSilent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		silent bool
		rows   int // the waiter's rows left after it returned
	}{
		{"healthy", false, 0},
		{"silent", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			proxy, pool := proxiedPool(t, 2)
			waiter, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema, Logger: testLogger()})
			require.NoError(t, err)
			skiplock.SetWaitPoll(waiter, time.Hour)                // it sits in its wait for a notification
			row, err := b.client.Enqueue(b.ctx, waitedArgs{}, nil) // no worker: it never runs
			require.NoError(t, err)

			deadline := time.Now().Add(1500 * time.Millisecond)
			ctx, cancel := context.WithDeadline(b.ctx, deadline)
			defer cancel()
			done := make(chan error, 1)
			go func() { _, err := waiter.Wait(ctx, row.ID); done <- err }()
			eventually(t, 10*time.Second, func() bool {
				return b.count(t, `SELECT count(*) FROM {s}.job_waiters WHERE job_id = $1`, row.ID) == 1
			}, "the wait registered")
			require.True(t, time.Now().Before(deadline), "registered before the deadline")
			if tc.silent {
				proxy.Blackhole()
				defer proxy.Restore() // the pool's cleanup then closes its connections at once
			}
			select {
			case err := <-done:
				late := time.Since(deadline)
				t.Logf("Wait returned %s after its deadline", late.Round(10*time.Millisecond))
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				assert.Less(t, late, time.Second, "Wait returned long after its deadline")
			case <-time.After(20 * time.Second):
				t.Fatal("Wait did not return")
			}
			assert.Equal(t, tc.rows, b.count(t, `SELECT count(*) FROM {s}.job_waiters`))
		})
	}
}

// A sweep prunes job_waiters rows left behind by waits that were cut off (their cleanup
// could not reach the database) once they are older than any live wait's row can be: a
// live Wait refreshes its rows while it waits, so one waiting for longer than the bound
// keeps its row through the sweep, and the notification still reaches it.
func TestSweep_PrunesLeftoverWaiterRowsAndKeepsALiveWaitsRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	waiter := waitClient(t, b, 4) // an hour between reads: only the notification wakes it
	skiplock.SetWaitRefresh(waiter, 100*time.Millisecond)
	row, err := b.client.Enqueue(b.ctx, waitedArgs{N: 1}, nil)
	require.NoError(t, err)
	// A waiter cut off two hours ago, on this job and on one long gone.
	_, err = b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.job_waiters (job_id, waiter, since)
		VALUES ($1, 1, now() - interval '2 hours'), ($1 + 1000000, 1, now() - interval '2 hours')`), row.ID)
	require.NoError(t, err)

	done := make(chan error, 1)
	wctx := waitCtx(t, b)
	go func() {
		got, err := waiter.Wait(wctx, row.ID)
		if err == nil && got.Status != skiplock.StatusSucceeded {
			err = errors.New("Wait returned status " + string(got.Status))
		}
		done <- err
	}()
	live := `SELECT count(*) FROM {s}.job_waiters WHERE job_id = $1 AND waiter <> 1`
	eventually(t, 10*time.Second, func() bool { return b.count(t, live, row.ID) == 1 }, "the wait registered")
	// As if it had been waiting for two hours: its refresh brings the row back to now.
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.job_waiters SET since = now() - interval '2 hours' WHERE waiter <> 1`))
	require.NoError(t, err)
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, live+` AND since > now() - interval '1 minute'`, row.ID) == 1
	}, "the live wait did not refresh its row")

	s, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{Logger: testLogger()})
	require.NoError(t, err)
	_, err = s.Sweep(b.ctx)
	require.NoError(t, err)
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.job_waiters WHERE waiter = 1`), "the leftover rows were pruned")
	require.Equal(t, 1, b.count(t, live, row.ID), "the live wait's row was pruned")

	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[waitedArgs]) error { return nil }))
	runWorker(t, w)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Wait did not return: the notification was not received")
	}
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.job_waiters`))
}
