// This file holds the tests of the ownership edges found after ownership by liveness
// (issue 41, docs/ownership.md): each reproduces its interleaving and checks with an
// attempt log that no attempt ran beside another of the same job.

package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

type poolHogArgs struct {
	N int `json:"n"`
}

func (poolHogArgs) Kind() string { return "pool_hog" }

// A healthy worker whose handlers hold every connection of its pool keeps its lease:
// the lease's renewals run on a connection of their own, not behind the handlers. Worker
// a has a pool of 2 connections and 16 slots; each handler begins a transaction on that
// pool, holds it 2 s and commits its success in it (CompleteTx), so 14 handlers at a time
// wait for a connection for up to 14 s. Before, the renewal waited among them: past
// 6.7 s without one, a cancelled every handler ("this worker's lease could not be
// renewed"), and past 10 s worker b took its live jobs.
func TestOwnership_HandlersHoldingThePoolDoNotStopTheWorkerLease(t *testing.T) {
	t.Parallel()
	handlersHoldingThePool(t, 0)
}

// At a short visibility timeout the jobs' own heartbeats matter too: the watchdog cancels
// a handler whose job lease went unrenewed for 2/3 of it (2 s here). Through the pool the
// heartbeats queued behind the handlers' transactions, and a healthy worker's handlers
// were cancelled (24 of 16 jobs' attempts in the chaos run's held-pool fault at 3 s); on
// the heartbeats' own connection none is.
func TestOwnership_HandlersHoldingThePoolDoNotStopTheJobHeartbeats(t *testing.T) {
	t.Parallel()
	handlersHoldingThePool(t, 3*time.Second)
}

// handlersHoldingThePool runs 16 jobs on a worker whose pool has 2 connections, each
// handler holding one 2 s in a transaction that commits its success (CompleteTx), at the
// visibility timeout visibility (0: the default), beside a second worker that takes any
// job whose owner's lease ends; no handler may be cancelled, no job run twice.
func handlersHoldingThePool(t *testing.T, visibility time.Duration) {
	b := setup(t)
	log := newAttemptLog(t, b)
	small := newPool(t, 2)
	client, err := skiplock.NewClient(small, skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)
	const jobs, hold = 16, 2 * time.Second
	a, err := skiplock.NewWorker(client, skiplock.WorkerConfig{ID: "a", Logger: testLogger(), VisibilityTimeout: visibility,
		Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: jobs}}})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(a, func(ctx context.Context, job *skiplock.Job[poolHogArgs]) error {
		if err := log.note(job.ID, job.Attempts, "a", "start"); err != nil {
			return err
		}
		tx, err := small.Begin(ctx) // waits for one of the pool's 2 connections
		if err != nil {
			return errors.Join(err, log.note(job.ID, job.Attempts, "a", "cancelled: "+fmt.Sprint(context.Cause(ctx))))
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		timer := time.NewTimer(hold) // the job's work, in its transaction
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			return errors.Join(context.Cause(ctx), log.note(job.ID, job.Attempts, "a", "cancelled: "+fmt.Sprint(context.Cause(ctx))))
		}
		if err := skiplock.CompleteTx(ctx, tx, job); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		return log.note(job.ID, job.Attempts, "a", "end")
	}))
	params := make([]skiplock.EnqueueParams, jobs)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: poolHogArgs{N: i}}
	}
	_, err = b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	runWorker(t, a)
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'running' AND locked_by = 'a'`) == jobs
	}, "worker a holds all %d jobs", jobs)

	// Worker b, on a pool of its own, takes any job whose owner's lease ends.
	wb := newWorker(t, b, skiplock.WorkerConfig{ID: "b", PollInterval: 50 * time.Millisecond, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(wb, func(ctx context.Context, job *skiplock.Job[poolHogArgs]) error {
		return log.note(job.ID, job.Attempts, "b", "start")
	}))
	runWorker(t, wb)

	// A success commits with the handler's transaction (CompleteTx); the handler notes its
	// end just after: wait for both.
	eventually(t, 90*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE status = 'succeeded'`) == jobs &&
			b.count(t, `SELECT count(*) FROM {s}.attempt_log WHERE event = 'end'`) >= jobs
	}, "every job succeeded")
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.attempt_log WHERE event LIKE 'cancelled%'`),
		"a handler was cancelled: %v", cancelled(t, b))
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.attempt_log WHERE worker = 'b' OR attempt > 1`),
		"a job ran again, on b or in a later attempt, while its first attempt ran on a")
	assert.Equal(t, jobs, b.count(t, `SELECT count(*) FROM {s}.attempt_log WHERE worker = 'a' AND attempt = 1 AND event = 'end'`))
}

// cancelled lists the cancellation events of the attempt log.
func cancelled(t *testing.T, b *bundle) []string {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, b.q(`SELECT job_id || '/' || attempt || ': ' || event FROM {s}.attempt_log
		WHERE event LIKE 'cancelled%' ORDER BY at`))
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// User metadata cannot set the keys skiplock writes itself: a plain job marked as
// another workflow's task could read that workflow's outputs (DependencyOutputs), and a
// batch job marked as a callback would be counted as one. Every enqueue path refuses
// them before writing anything, and the caller's transaction stays usable.
func TestEnqueue_ReservedMetadataKeysAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reserved := []map[string]string{
		{"skiplock_workflow": "1", "skiplock_task": "charge"},
		{"skiplock_batch": "callback"},
		{"skiplock_sequence": "move_on"},
		{"skiplock_anything": "x"},
	}
	for _, meta := range reserved {
		_, err := b.client.Enqueue(b.ctx, noopArgs{}, &skiplock.EnqueueOptions{Metadata: meta})
		require.ErrorIs(t, err, skiplock.ErrInvalidOptions, "Enqueue with %v", meta)

		tx, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		_, err = b.client.EnqueueTx(b.ctx, tx, noopArgs{}, &skiplock.EnqueueOptions{Metadata: meta})
		require.ErrorIs(t, err, skiplock.ErrInvalidOptions, "EnqueueTx with %v", meta)
		var one int
		require.NoError(t, tx.QueryRow(b.ctx, `SELECT 1`).Scan(&one), "the caller's transaction is still usable")
		require.NoError(t, tx.Rollback(b.ctx))

		_, err = b.client.EnqueueMany(b.ctx, []skiplock.EnqueueParams{{Args: noopArgs{}}, {Args: noopArgs{}, Options: &skiplock.EnqueueOptions{Metadata: meta}}})
		require.ErrorIs(t, err, skiplock.ErrInvalidOptions, "EnqueueMany with %v", meta)

		_, err = b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "w", Tasks: []skiplock.WorkflowTask{
			{Name: "a", Args: noopArgs{}, Options: &skiplock.EnqueueOptions{Metadata: meta}}}})
		require.ErrorIs(t, err, skiplock.ErrInvalidOptions, "EnqueueWorkflow with %v", meta)

		_, err = b.client.EnqueueBatch(b.ctx, skiplock.Batch{Name: "b", Jobs: []skiplock.EnqueueParams{{Args: noopArgs{}}},
			Callback: noopArgs{}, CallbackOptions: &skiplock.EnqueueOptions{Metadata: meta}})
		require.ErrorIs(t, err, skiplock.ErrInvalidOptions, "EnqueueBatch with %v on its callback", meta)
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs`), "nothing was written")

	// Other keys, and a batch's own callback mark, still work.
	_, err := b.client.Enqueue(b.ctx, noopArgs{}, &skiplock.EnqueueOptions{Metadata: map[string]string{"tenant": "acme", "skiplock": "x"}})
	require.NoError(t, err)
	info, err := b.client.EnqueueBatch(b.ctx, skiplock.Batch{Name: "b", Jobs: []skiplock.EnqueueParams{{Args: noopArgs{}}}, Callback: noopArgs{},
		CallbackOptions: &skiplock.EnqueueOptions{Metadata: map[string]string{"tenant": "acme"}}})
	require.NoError(t, err)
	require.Len(t, info.Tasks, 2)
}

type lateReplyArgs struct {
	N int `json:"n"`
}

func (lateReplyArgs) Kind() string { return "late_reply" }

// A claim whose reply was held in a dead path while the worker's lease lapsed is lost:
// the worker puts its jobs back and never runs them, even when a renewal of its lease
// lands before the reply does. Worker a's claim waits for the queue's flow-control lock
// (held by the test) while a's path is black-holed; its lease ends; the test lets the
// claim commit; worker b takes the jobs back and runs them; a's path comes back for new
// connections first (a renews its lease), then the held reply arrives. Before, a ran all
// three jobs again beside b's runs: the reply was younger than the claim's age limit and
// the lease no longer read as ending.
func TestOwnership_AClaimRepliedAfterALapseOfTheLeaseIsNotRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	log := newAttemptLog(t, b)
	const queue, jobs = "late", 3
	limits := skiplock.QueueLimits{Rate: 1000} // limited claims take the queue's advisory lock

	proxy, pool := proxiedPool(t, 8)
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)
	a, err := skiplock.NewWorker(client, skiplock.WorkerConfig{ID: "a", SweepInterval: -1, Logger: testLogger(),
		Queues: map[string]skiplock.QueueConfig{queue: {MaxWorkers: jobs, Limits: limits}}})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(a, func(ctx context.Context, job *skiplock.Job[lateReplyArgs]) error {
		return log.note(job.ID, job.Attempts, "a", "start")
	}))
	require.NoError(t, skiplock.Handle(a, func(ctx context.Context, job *skiplock.Job[noopArgs]) error { return nil }))
	runWorker(t, a)
	// A first job takes a through its first limited claim (which adopts the queue's
	// running jobs under the same lock), so the claim below is a plain limited one.
	_, err = b.client.Enqueue(b.ctx, noopArgs{}, &skiplock.EnqueueOptions{Queue: queue})
	require.NoError(t, err)
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive`) == 1
	}, "a ran a first job")

	// The test holds the queue's flow lock (flowLockSQL: the key is the schema-qualified
	// queue), so a's claim waits at the server.
	lockTx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = lockTx.Rollback(context.Background()) }()
	key := b.schema + "." + queue
	_, err = lockTx.Exec(b.ctx, `SELECT pg_advisory_xact_lock(1936419190, hashtext($1))`, key)
	require.NoError(t, err)
	for i := range jobs {
		_, err := b.client.Enqueue(b.ctx, lateReplyArgs{N: i}, &skiplock.EnqueueOptions{Queue: queue})
		require.NoError(t, err)
	}
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND classid = 1936419190 AND objid = (hashtext($1)::bigint & 4294967295)::oid`, key) > 0
	}, "a's claim waits for the queue's lock")

	// a's path goes silent; its lease ends (its row expires) while its claim still waits.
	proxy.Blackhole()
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.workers WHERE id = 'a' AND expires_at < now()`) == 1
	}, "a's worker lease ended")
	require.NoError(t, lockTx.Commit(b.ctx)) // a's claim commits; its reply is held by the proxy
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'running' AND locked_by = 'a'`) > 0
	}, "a's claim committed")

	// b takes the jobs back (a's lease ended) and runs them; each run holds until released.
	release := make(chan struct{})
	wb := newWorker(t, b, skiplock.WorkerConfig{ID: "b", PollInterval: 50 * time.Millisecond, Logger: testLogger(),
		Queues: map[string]skiplock.QueueConfig{queue: {MaxWorkers: jobs, Limits: limits}}})
	require.NoError(t, skiplock.Handle(wb, func(ctx context.Context, job *skiplock.Job[lateReplyArgs]) error {
		if err := log.note(job.ID, job.Attempts, "b", "start"); err != nil {
			return err
		}
		<-release
		return log.note(job.ID, job.Attempts, "b", "end")
	}))
	stopB := runWorker(t, wb)
	defer stopB()
	defer close(release)
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.attempt_log WHERE worker = 'b' AND event = 'start'`) == jobs
	}, "b runs the jobs a's lapsed lease lost")

	// The path comes back for new connections: a renews its lease first. Then the held
	// reply arrives.
	proxy.RestoreNew()
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.workers WHERE id = 'a' AND expires_at > now()`) == 1
	}, "a's lease renewed")
	proxy.Restore()
	holdsFor(t, 3*time.Second, 20*time.Millisecond, func() {
		require.Zero(t, b.count(t, `SELECT count(*) FROM {s}.attempt_log WHERE worker = 'a'`),
			"a ran a job of the claim its lapsed lease lost, beside b's run")
	})
}

type twinTokenArgs struct{}

func (twinTokenArgs) Kind() string { return "twin_token" }

// A claim that hands out a token the worker already runs is not run twice. When a
// claim's commit is lost (an asynchronous standby promoted without it, or
// synchronous_commit = off and a crash), the row goes back to what it was before that
// claim, and the next claim takes the same token again; the worker that ran the lost
// claim still runs its attempt. The test rolls the row back by hand, as the lost commit
// would have left it. Before, the worker started a second run of the attempt beside the
// first.
func TestOwnership_ATokenHandedOutTwiceIsNotRunTwice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	log := newAttemptLog(t, b)
	hold := make(chan struct{})
	w := newWorker(t, b, skiplock.WorkerConfig{ID: "w", PollInterval: 50 * time.Millisecond, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[twinTokenArgs]) error {
		if err := log.note(job.ID, job.Attempts, "w", "start"); err != nil {
			return err
		}
		<-hold
		return log.note(job.ID, job.Attempts, "w", "end")
	}))
	stop := runWorker(t, w)
	defer stop()
	released := false
	defer func() {
		if !released {
			close(hold)
		}
	}()
	row, err := b.client.Enqueue(b.ctx, twinTokenArgs{}, nil)
	require.NoError(t, err)
	eventually(t, 10*time.Second, func() bool { return log.has(t, row.ID, 1, "start") }, "the job started")

	// The claim's commit is lost: the row is as it was before the claim.
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET status = 'queued', fence = fence - 1, attempts = attempts - 1,
		locked_by = NULL, locked_at = NULL, lease_until = NULL WHERE id = $1`), row.ID)
	require.NoError(t, err)
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND status = 'running'`, row.ID) == 1
	}, "the worker claimed the job again, with the same token")
	holdsFor(t, time.Second, 20*time.Millisecond, func() {
		require.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.attempt_log WHERE job_id = $1 AND event = 'start'`, row.ID),
			"the attempt started twice: %v", log.events(t, row.ID))
	})
	close(hold)
	released = true
	waitStatus(t, b, row.ID, skiplock.StatusSucceeded, 10*time.Second, "the first run's success is recorded")
	assert.Equal(t, []string{"1/start", "1/end"}, log.events(t, row.ID))
}

// An outcome that can never be written (here a trigger refuses every success) does not
// make its handler run without end: each put-back counts the attempt and waits the
// default backoff, and the last attempt ends dead. Before, the job went straight back to
// the queue every time, at no cost to its attempts: it ran again and again (dozens of
// runs in a few seconds) and never ended.
func TestOwnership_AnOutcomeThatCanNeverBeWrittenEndsDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	runs, w := refusedSuccesses(t, b) // never turned off
	job, err := b.client.Enqueue(b.ctx, unrecordableArgs{}, &skiplock.EnqueueOptions{MaxAttempts: 3})
	require.NoError(t, err)
	runWorker(t, w)
	waitStatus(t, b, job.ID, skiplock.StatusDead, 30*time.Second, "job %d ended dead once its attempts were spent", job.ID)
	j, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, int64(3), runs.Load(), "one run per attempt")
	assert.Equal(t, 3, j.Attempts)
	assert.Contains(t, j.LastError, "outcome could not be written")
	require.Len(t, j.Errors, 3, "each unrecorded attempt is in the error history")
	// The retries waited their backoff (attempt 1: 1-2 s, attempt 2: 2-4 s).
	assert.GreaterOrEqual(t, j.Errors[2].At.Sub(j.Errors[0].At), 2*time.Second)
}

// A workflow task whose last attempt's outcome cannot be written ends dead, and so does
// its task: its dependents are cancelled, and the workflow settles. Before, the put-back
// sent the job dead without settling its task, which stayed released: its dependents
// waited for ever, and so did WaitWorkflow.
func TestOwnership_AnUnrecordedLastAttemptOfAWorkflowTaskSettlesIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	runs, w := refusedSuccesses(t, b) // never turned off
	info, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "w", Tasks: []skiplock.WorkflowTask{
		{Name: "a", Args: unrecordableArgs{}, Options: &skiplock.EnqueueOptions{MaxAttempts: 1}},
		{Name: "b", Args: noopArgs{}, DependsOn: []string{"a"}},
	}})
	require.NoError(t, err)
	runWorker(t, w)
	waitStatus(t, b, info.Task("a").JobID, skiplock.StatusDead, 30*time.Second, "task a's job ended dead")
	assert.Equal(t, int64(1), runs.Load())
	got := waitSettled(t, b, info.ID)
	assert.Equal(t, map[string]string{"a": "dead", "b": "cancelled"}, states(got))
}

type deafToCancelArgs struct{}

func (deafToCancelArgs) Kind() string { return "deaf_to_cancel" }

// StopAndCancel returns soon after its context ends, also while the database is down:
// it no longer waits for Run's last statements (ending the worker's lease, putting jobs
// back) to reach their time limits. Before, with the path black-holed, it returned tens
// of seconds after its deadline.
func TestWorker_StopAndCancelReturnsSoonAfterItsContextWhileTheDatabaseIsDown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proxy, pool := proxiedPool(t, 8)
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{ID: "w", Logger: testLogger(), PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	started, unblock := make(chan struct{}, 1), make(chan struct{})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[deafToCancelArgs]) error {
		started <- struct{}{}
		<-unblock // deaf to ctx
		return nil
	}))
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(context.Background()) }()
	t.Cleanup(func() {
		close(unblock)
		proxy.Restore()
		select {
		case <-runErr: // nil, or ErrHandlersStillRunning: the handler returned meanwhile or not
		case <-time.After(2 * time.Minute):
			t.Error("Run did not return")
		}
	})
	_, err = b.client.Enqueue(b.ctx, deafToCancelArgs{}, nil)
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not start")
	}

	proxy.Blackhole() // the database stops answering
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	began := time.Now()
	err = w.StopAndCancel(ctx)
	took := time.Since(began)
	require.ErrorIs(t, err, skiplock.ErrHandlersStillRunning)
	t.Logf("StopAndCancel took %s", took)
	assert.Less(t, took, 5*time.Second, "StopAndCancel with a 1 s context returned after %s", took)
}

// The queued job of a workflow task cannot be deleted: its task would never settle, and
// its dependents would wait for ever. Delete returns ErrTaskPending, DeleteMany leaves it
// (and counts only what it deleted), and the workflow still runs to its end. Before,
// both deleted it, and the dependent task waited for ever.
func TestDelete_AQueuedWorkflowTaskIsNotDeleted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	info, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "w", Tasks: []skiplock.WorkflowTask{
		{Name: "a", Args: noopArgs{}},
		{Name: "b", Args: noopArgs{}, DependsOn: []string{"a"}},
	}})
	require.NoError(t, err)
	plain, err := b.client.Enqueue(b.ctx, noopArgs{}, nil)
	require.NoError(t, err)
	a := info.Task("a").JobID

	_, err = b.client.Delete(b.ctx, a)
	require.ErrorIs(t, err, skiplock.ErrTaskPending)
	n, err := b.client.DeleteMany(b.ctx, skiplock.ListParams{Status: skiplock.StatusQueued})
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "only the plain job was deleted")
	_, err = b.client.Get(b.ctx, plain.ID)
	require.ErrorIs(t, err, skiplock.ErrJobNotFound)

	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error { return nil }))
	runWorker(t, w)
	eventually(t, 20*time.Second, func() bool {
		wf, err := b.client.GetWorkflow(b.ctx, info.ID)
		require.NoError(t, err)
		return wf.Task("b").State == "succeeded"
	}, "the workflow ran to its end")
}

// The last attempt of a workflow task whose worker died is taken back by the reclaim by
// liveness, as any other job is, and goes dead with its dependents settled in the same
// transaction. Before, the reclaim left it to the sweeper's lease-based reclaim: 60–90 s
// at defaults, and for ever when no worker sweeps (here: SweepInterval -1).
func TestOwnership_ADeadWorkersLastAttemptOfAWorkflowTaskIsTakenBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	info, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "w", Tasks: []skiplock.WorkflowTask{
		{Name: "a", Args: noopArgs{}, Options: &skiplock.EnqueueOptions{MaxAttempts: 1}},
		{Name: "b", Args: noopArgs{}, DependsOn: []string{"a"}},
	}})
	require.NoError(t, err)
	a := info.Task("a").JobID
	// Task a's only attempt runs on worker "ghost", which died: its row has expired.
	_, err = b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.workers (id, queues, started_at, expires_at)
		VALUES ('ghost', '{default}', now() - interval '1 minute', now() - interval '1 second')`))
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET status = 'running', attempts = 1, fence = fence + 1,
		locked_by = 'ghost', locked_at = now(), lease_until = now() + interval '1 hour' WHERE id = $1`), a)
	require.NoError(t, err)

	w := newWorker(t, b, skiplock.WorkerConfig{ID: "live", SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error { return nil }))
	runWorker(t, w)
	waitStatus(t, b, a, skiplock.StatusDead, 20*time.Second, "task a's job was taken back, dead")
	eventually(t, 10*time.Second, func() bool {
		wf, err := b.client.GetWorkflow(b.ctx, info.ID)
		require.NoError(t, err)
		return wf.Task("a").State == "dead" && wf.Task("b").State == "cancelled"
	}, "task a settled dead and its dependent was cancelled")
}
