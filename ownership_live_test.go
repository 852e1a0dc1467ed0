// This file holds the tests of ownership by liveness (issue 30, docs/ownership.md) that
// pass: a shutdown waits for every handler, a handler that overruns its timeout keeps
// its job, and one that returns after it has failed.

package skiplock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

type deafArgs struct{}

func (deafArgs) Kind() string { return "deaf" }

// ownershipPair starts worker "a", whose handler, in a job's first attempt, ignores its
// context until stuck is closed (later attempts succeed at once), and returns it
// unstarted with the log; worker "b" is started by startB, with a
// sweeper every 100 ms and a poll every 50 ms, ready to take any job whose lease ended.
func ownershipPair(t *testing.T, b *bundle, log attemptLog, cfgA skiplock.WorkerConfig, stuck <-chan struct{}, started chan<- int64) (a *skiplock.Worker, startB func()) {
	t.Helper()
	cfgA.ID, cfgA.Logger = "a", testLogger()
	a = newWorker(t, b, cfgA)
	require.NoError(t, skiplock.Handle(a, func(ctx context.Context, job *skiplock.Job[deafArgs]) error {
		if err := log.note(job.ID, job.Attempts, "a", "start"); err != nil {
			return err
		}
		if job.Attempts > 1 { // a later attempt, once the first is recorded: quick
			return log.note(job.ID, job.Attempts, "a", "end")
		}
		started <- job.ID
		<-stuck // deaf to ctx: blocked in a call that does not watch it
		if err := log.note(job.ID, job.Attempts, "a", "end"); err != nil {
			return err
		}
		return errors.New("returned late")
	}))
	startB = func() {
		w := newWorker(t, b, skiplock.WorkerConfig{ID: "b", VisibilityTimeout: time.Second,
			SweepInterval: 100 * time.Millisecond, PollInterval: 50 * time.Millisecond, JobTimeout: -1,
			Completion: skiplock.CompletionKeep, Logger: testLogger()})
		require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[deafArgs]) error {
			if err := log.note(job.ID, job.Attempts, "b", "start"); err != nil {
				return err
			}
			return log.note(job.ID, job.Attempts, "b", "end")
		}))
		runWorker(t, w)
	}
	return a, startB
}

// runStuck runs worker a, whose handlers wait for stuck; at cleanup stuck is closed (if
// the test has not) before a stops, since a's stop waits for them.
func runStuck(t *testing.T, a *skiplock.Worker, stuck chan struct{}) {
	t.Helper()
	stopA := runWorker(t, a)
	t.Cleanup(func() {
		select {
		case <-stuck:
		default:
			close(stuck)
		}
		stopA()
	})
}

// noTwinFor checks, for the whole window, that no worker (b, or a itself in a free slot)
// starts job id again: a's handler still runs its first attempt.
func noTwinFor(t *testing.T, b *bundle, log attemptLog, id int64, window time.Duration) {
	t.Helper()
	holdsFor(t, window, 20*time.Millisecond, func() {
		n := b.count(t, `SELECT count(*) FROM {s}.attempt_log WHERE job_id = $1 AND event = 'start'
			AND NOT (worker = 'a' AND attempt = 1)`, id)
		require.Zero(t, n, "job %d started again while a's handler still ran it (attempt/event: %v)", id, log.events(t, id))
	})
}

// Point 1: Run must not return, and the job's lease must keep being renewed, while a
// handler that ignores cancellation still runs. On the code before the ownership work,
// Run returned after ShutdownTimeout and min(ShutdownTimeout, 5s), the lease ended, and
// worker b ran the same job while a's handler still ran.
func TestOwnership_ShutdownNeverHandsARunningJobToAnotherWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	log := newAttemptLog(t, b)
	stuck, started := make(chan struct{}), make(chan int64, 1)
	a, startB := ownershipPair(t, b, log, skiplock.WorkerConfig{ShutdownTimeout: 300 * time.Millisecond,
		VisibilityTimeout: time.Second, SweepInterval: -1, JobTimeout: -1, Completion: skiplock.CompletionKeep}, stuck, started)
	job, err := b.client.Enqueue(b.ctx, deafArgs{}, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	var returned atomic.Int64
	go func() { runErr = a.Run(ctx); returned.Store(time.Now().UnixNano()); close(done) }()
	t.Cleanup(func() {
		select {
		case <-stuck:
		default:
			close(stuck)
		}
		cancel()
		<-done
	})
	<-started
	startB()
	cancel()
	// Five leases of a's and fifty sweeps of b's.
	noTwinFor(t, b, log, job.ID, 5*time.Second)
	assert.Zero(t, returned.Load(), "Run returned while a handler still ran")
	close(stuck)
	select {
	case <-done:
		require.NoError(t, runErr)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the last handler returned")
	}
	var ended time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT at FROM {s}.attempt_log WHERE job_id = $1 AND worker = 'a' AND event = 'end'`),
		job.ID).Scan(&ended))
	assert.False(t, time.Unix(0, returned.Load()).Before(ended.Add(-50*time.Millisecond)),
		"Run returned before the handler did")
	// The job goes on: whatever a's late return recorded, no two executions overlapped. (An
	// attempt number may repeat: a job cut off by shutdown is put back with its attempt
	// given back, and b may then run it as attempt 1 again, after a's handler returned.)
	events := log.events(t, job.ID)
	open := 0
	for _, e := range events {
		switch {
		case strings.HasSuffix(e, "/start"):
			open++
			require.Equal(t, 1, open, "two executions of the job overlapped: %v", events)
		case strings.HasSuffix(e, "/end"):
			open--
		}
	}
}

// Point 2: a handler that ignores its timeout keeps its job: its lease is renewed until it
// returns, and the attempt is then recorded as a timed-out failure. On the code before the
// ownership work, the lease was no longer renewed from JobTimeout + VisibilityTimeout/3 on,
// and worker b ran the job while the first copy still ran.
func TestOwnership_HandlerIgnoringItsTimeoutGetsNoTwin(t *testing.T) {
	t.Parallel()
	b := setup(t)
	log := newAttemptLog(t, b)
	stuck, started := make(chan struct{}), make(chan int64, 2)
	a, startB := ownershipPair(t, b, log, skiplock.WorkerConfig{JobTimeout: time.Second,
		VisibilityTimeout: 1500 * time.Millisecond, SweepInterval: -1, Completion: skiplock.CompletionKeep}, stuck, started)
	job, err := b.client.Enqueue(b.ctx, deafArgs{}, &skiplock.EnqueueOptions{MaxAttempts: 5})
	require.NoError(t, err)
	runStuck(t, a, stuck)
	<-started
	startB()
	// The timeout, then four leases of a's.
	noTwinFor(t, b, log, job.ID, time.Second+4*1500*time.Millisecond)
	j, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusRunning, j.Status)
	assert.Equal(t, "a", j.LockedBy)
	close(stuck)
	// Recorded as a timed-out failure when it returned, and retried afterwards.
	waitStatus(t, b, job.ID, skiplock.StatusSucceeded, 30*time.Second, "job %d retried and succeeded", job.ID)
	j, err = b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	require.NotEmpty(t, j.Errors)
	assert.Contains(t, j.Errors[0].Error, skiplock.ErrJobTimeout.Error())
	var overlap int
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT count(*) FROM {s}.attempt_log s
		WHERE s.job_id = $1 AND s.event = 'start' AND s.attempt > 1
			AND s.at < (SELECT at FROM {s}.attempt_log WHERE job_id = $1 AND attempt = 1 AND event = 'end')`),
		job.ID).Scan(&overlap))
	assert.Zero(t, overlap, "attempt 2 started before attempt 1 ended: %v", log.events(t, job.ID))
}

type lateNilArgs struct{}

func (lateNilArgs) Kind() string { return "late_nil" }

// Point 6: a handler that returns nil after its timeout is a failed attempt, as docs/workers.md (Job timeout),
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

type lateSnoozeArgs struct{}

func (lateSnoozeArgs) Kind() string { return "late_snooze" }

// A handler that returns Snooze after its timeout (a "not ready, try later" on its ended
// context, or a middleware mapping errors to Snooze) has failed its attempt too, as the
// docs say of whatever it returns then: before, the snooze gave the attempt back, so a
// job that hung at every attempt was snoozed for ever and never went dead.
func TestOwnership_HandlerSnoozingAfterItsTimeoutFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs atomic.Int32
	w := newWorker(t, b, skiplock.WorkerConfig{JobTimeout: 100 * time.Millisecond, SweepInterval: -1,
		PollInterval: 20 * time.Millisecond, RetryPolicy: fixedDelay(0), Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[lateSnoozeArgs]) error {
		if runs.Add(1) > 10 {
			return nil // ends the test's job on the code before the fix
		}
		<-ctx.Done()
		return skiplock.Snooze(0)
	}))
	job, err := b.client.Enqueue(b.ctx, lateSnoozeArgs{}, &skiplock.EnqueueOptions{MaxAttempts: 2})
	require.NoError(t, err)
	runWorker(t, w)
	eventually(t, 30*time.Second, func() bool {
		j, err := b.client.Get(b.ctx, job.ID)
		require.NoError(t, err)
		return j.Status != skiplock.StatusQueued && j.Status != skiplock.StatusRunning
	}, "job %d final", job.ID)
	j, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusDead, j.Status, "a job whose handler snoozed past its timeout at every attempt ended %s after %d runs", j.Status, runs.Load())
	assert.Equal(t, 2, j.Attempts)
	require.Len(t, j.Errors, 2)
	for _, e := range j.Errors {
		assert.Contains(t, e.Error, skiplock.ErrJobTimeout.Error())
	}
	assert.Equal(t, int32(2), runs.Load())
}

// A process restarted with a fixed WorkerConfig.ID renews the row its dead predecessor
// left in the workers table, so the predecessor's running jobs would look alive forever:
// the new process takes them back before its first claim, and runs them as their next
// attempt.
func TestOwnership_RestartWithTheSameIDTakesBackThePredecessorsJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var id int64
	// As the predecessor left it, killed mid-job a moment ago: its row alive, its job's
	// lease an hour long.
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`INSERT INTO {s}.jobs (kind, status, attempts, max_attempts, locked_at, locked_by, lease_until, fence)
		VALUES ('late_nil', 'running', 1, 3, now(), 'fixed', now() + interval '1 hour', 1) RETURNING id`)).Scan(&id))
	_, err := b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.workers (id, queues, started_at, expires_at) VALUES ('fixed', '{default}', now(), now() + interval '10 seconds')`))
	require.NoError(t, err)
	ran := make(chan int, 1)
	w := newWorker(t, b, skiplock.WorkerConfig{ID: "fixed", SweepInterval: -1, PollInterval: 50 * time.Millisecond,
		Completion: skiplock.CompletionKeep, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[lateNilArgs]) error {
		ran <- job.Attempts
		return nil
	}))
	runWorker(t, w)
	select {
	case n := <-ran:
		assert.Equal(t, 2, n, "run as its next attempt")
	case <-time.After(30 * time.Second):
		t.Fatal("the predecessor's job was not run again")
	}
	waitStatus(t, b, id, skiplock.StatusSucceeded, 30*time.Second, "job %d succeeded", id)
}

// A worker's own reclaim of dead workers' jobs, run after each renewal of its row, never
// takes back the worker's own jobs, even when its row reads expired at that moment (ended
// by something else between the renewal and the reclaim). Before this was excluded, a
// handler running fine lost its job to the next claim of its own worker.
func TestOwnership_AWorkersReclaimNeverTakesItsOwnJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	log := newAttemptLog(t, b)
	stuck, started := make(chan struct{}), make(chan int64, 2)
	a, _ := ownershipPair(t, b, log, skiplock.WorkerConfig{VisibilityTimeout: time.Minute, SweepInterval: -1,
		JobTimeout: -1, PollInterval: 20 * time.Millisecond, Completion: skiplock.CompletionKeep}, stuck, started)
	job, err := b.client.Enqueue(b.ctx, deafArgs{}, &skiplock.EnqueueOptions{MaxAttempts: 5})
	require.NoError(t, err)
	runStuck(t, a, stuck)
	<-started
	// End a's row over and over for four of its renewals: each renewal is followed by its
	// reclaim, and many of them find the row ended again.
	ctx, cancel := context.WithCancel(b.ctx)
	expired := make(chan struct{})
	go func() {
		defer close(expired)
		for ctx.Err() == nil {
			_, _ = b.pool.Exec(ctx, b.q(`UPDATE {s}.workers SET expires_at = now() - interval '1 hour' WHERE id = 'a'`))
		}
	}()
	noTwinFor(t, b, log, job.ID, 4*time.Second)
	cancel()
	<-expired
	j, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusRunning, j.Status)
	assert.Equal(t, 1, j.Attempts)
}

// A handler that runs past its timeout is counted in Stats while it runs (the worker marks
// its attempt in the database), and no longer once it returned; CachedStats says the same.
func TestOwnership_OverrunningHandlerIsCountedInStats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	log := newAttemptLog(t, b)
	stuck, started := make(chan struct{}), make(chan int64, 2)
	a, _ := ownershipPair(t, b, log, skiplock.WorkerConfig{JobTimeout: 500 * time.Millisecond,
		VisibilityTimeout: 1500 * time.Millisecond, SweepInterval: -1, Completion: skiplock.CompletionKeep}, stuck, started)
	_, err := b.client.Enqueue(b.ctx, deafArgs{}, &skiplock.EnqueueOptions{MaxAttempts: 5})
	require.NoError(t, err)
	runStuck(t, a, stuck)
	<-started
	overrunning := func() int64 {
		stats, err := b.client.Stats(b.ctx)
		require.NoError(t, err)
		var n int64
		for _, s := range stats {
			n += s.Overrunning
		}
		return n
	}
	assert.Zero(t, overrunning(), "not overrunning before its timeout")
	eventually(t, 10*time.Second, func() bool { return overrunning() == 1 }, "the overrunning job is counted")
	assert.Equal(t, 1, a.Overrunning())
	cached, _, err := b.client.CachedStats(b.ctx, 0)
	require.NoError(t, err)
	require.Len(t, cached, 1)
	assert.Equal(t, int64(1), cached[0].Overrunning)
	close(stuck)
	eventually(t, 10*time.Second, func() bool { return overrunning() == 0 }, "no longer counted once the handler returned")
}

type ownedArgs struct{}

func (ownedArgs) Kind() string { return "owned" }

// A worker claims nothing before its row in the workers table is written: every job it
// runs has an owner that the reclaim by liveness can judge if the worker dies. Here the
// registration is held up for a second (a lock on the table); before the worker waited
// for it, the job ran in that second with no row for its owner, and a crash then left it
// to its own lease (71 s in a chaos recovery run instead of ~10).
func TestOwnership_AWorkerClaimsOnlyOnceItsRowIsWritten(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.client.Enqueue(b.ctx, ownedArgs{}, nil)
	require.NoError(t, err)
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, b.q(`LOCK TABLE {s}.workers IN SHARE ROW EXCLUSIVE MODE`))
	require.NoError(t, err)
	rows := make(chan int, 1)
	w := newWorker(t, b, skiplock.WorkerConfig{ID: "owner", PollInterval: 20 * time.Millisecond, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[ownedArgs]) error {
		var n int
		err := b.pool.QueryRow(ctx, b.q(`SELECT count(*) FROM {s}.workers WHERE id = $1`), job.LockedBy).Scan(&n)
		if err != nil {
			n = -1
		}
		rows <- n
		return err
	}))
	runWorker(t, w)
	// The second of held-up registration: the window in which a worker that claimed
	// before its row was written would run the job. Nothing happens in it to wait for.
	time.Sleep(time.Second)
	require.NoError(t, tx.Rollback(b.ctx))
	select {
	case n := <-rows:
		assert.Equal(t, 1, n, "the job ran while its worker had no row in the workers table")
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not run")
	}
}

type unrecordableArgs struct{}

func (unrecordableArgs) Kind() string { return "unrecordable" }

// refusedSuccesses makes the database refuse every success of an unrecordable job (a
// trigger on the archive, while {s}.refuse holds true) and returns the count of its
// handler's runs on a worker that the test then starts with runWorker.
func refusedSuccesses(t *testing.T, b *bundle) (runs *atomic.Int64, w *skiplock.Worker) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.refuse (on_ bool NOT NULL);
		INSERT INTO {s}.refuse VALUES (true);
		CREATE FUNCTION {s}.refuse_archive() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.kind = 'unrecordable' AND (SELECT on_ FROM {s}.refuse) THEN
				RAISE EXCEPTION 'refused by the test';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse BEFORE INSERT ON {s}.jobs_archive FOR EACH ROW EXECUTE FUNCTION {s}.refuse_archive()`))
	require.NoError(t, err)
	runs = new(atomic.Int64)
	w = newWorker(t, b, skiplock.WorkerConfig{PollInterval: 20 * time.Millisecond, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[unrecordableArgs]) error {
		runs.Add(1)
		return nil
	}))
	return runs, w
}

// A success that cannot be written (here the database refuses it: a trigger on the
// archive) puts the job back in the queue, its attempt counted (it ran), so that it runs
// again.
// Before, the worker stopped renewing it and left it running; with ownership by liveness
// no one takes a live worker's job, so it stayed running for as long as the worker lived.
func TestOwnership_AnOutcomeThatCannotBeWrittenPutsTheJobBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	runs, w := refusedSuccesses(t, b)
	job, err := b.client.Enqueue(b.ctx, unrecordableArgs{}, &skiplock.EnqueueOptions{MaxAttempts: 10})
	require.NoError(t, err)
	runWorker(t, w)
	eventually(t, 15*time.Second, func() bool { return runs.Load() >= 3 }, "the job ran again after its success was refused")
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.refuse SET on_ = false`))
	require.NoError(t, err)
	waitStatus(t, b, job.ID, skiplock.StatusSucceeded, 15*time.Second, "job %d succeeded once its success could be written", job.ID)
	j, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, int(runs.Load()), j.Attempts, "each attempt that ran counts, recorded or not")
}

type lostClaimArgs struct{}

func (lostClaimArgs) Kind() string { return "orphan" }

// A job that a claim committed for a worker whose reply never reached it (the connection
// died after the commit, as in a failover) names the worker in locked_by but is not held
// by it. The worker puts it back at a heartbeat once its lease has ended, and then runs
// it. Before, it stayed running for as long as the worker lived: the sweeper takes no job
// of a live worker (a chaos failover run ended with one job running, its worker alive).
func TestOwnership_AClaimWhoseReplyNeverArrivedIsPutBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ran atomic.Int64
	w := newWorker(t, b, skiplock.WorkerConfig{ID: "w", VisibilityTimeout: 1500 * time.Millisecond,
		SweepInterval: 100 * time.Millisecond, PollInterval: 50 * time.Millisecond, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[lostClaimArgs]) error {
		ran.Add(1)
		return nil
	}))
	runWorker(t, w)
	// Once w's row is written, its start-up take-back of its predecessor's jobs is done
	// (that one counts the attempt): only the heartbeats' can find the job below.
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.workers WHERE id = 'w'`) == 1
	}, "w registered")
	job, err := b.client.Enqueue(b.ctx, lostClaimArgs{}, &skiplock.EnqueueOptions{RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	// What the lost claim committed: the job running for w, its lease over by now.
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET status = 'running', locked_by = 'w', attempts = attempts + 1,
		fence = fence + 1, locked_at = now() - interval '2 seconds', lease_until = now() - interval '500 milliseconds',
		run_at = now() WHERE id = $1`), job.ID)
	require.NoError(t, err)
	waitStatus(t, b, job.ID, skiplock.StatusSucceeded, 15*time.Second, "job %d, claimed for w without w's knowing, ran", job.ID)
	assert.Equal(t, int64(1), ran.Load())
	j, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, 1, j.Attempts, "the lost claim's attempt was given back")
}

// Two live processes with one WorkerConfig.ID take each other's running jobs for orphans,
// so jobs run twice (config.go, ID: "it must be unique among live workers"). Each
// registration reads the row's expires_at before it writes its own: a value this worker
// did not write means another process renews the row, which the worker logs. A worker
// alone with an explicit id, through several renewals, logs nothing of the kind.
func TestWorker_TwoLiveWorkersSharingAnIDLogIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const shared = "two processes share this worker id"
	id := "shared-" + b.schema
	start := func(logs *logCapture) {
		w := newWorker(t, b, skiplock.WorkerConfig{ID: id, SweepInterval: -1, Logger: slog.New(logs)})
		require.NoError(t, skiplock.Handle(w, func(context.Context, *skiplock.Job[auditArgs]) error { return nil }))
		runWorker(t, w)
	}
	first, second := &logCapture{}, &logCapture{}
	start(first)
	time.Sleep(6 * time.Second) // a renewal every 1.7-3 s
	require.Empty(t, first.find(shared), "a worker alone with its id")

	start(second)
	eventually(t, 30*time.Second, func() bool {
		return first.find(shared, "worker="+id) != "" || second.find(shared, "worker="+id) != ""
	}, "no log of two live workers sharing id %q", id)
}
