package skiplock_test

// Tests of the lease (lease.go): heartbeats keep a long job held, and the fence keeps a
// stale worker's late result out.

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/blackhole"
	"github.com/skiplock/skiplock/internal/pgtest"
)

func TestWorker_HeartbeatsKeepLongJobAlive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const vt = 1500 * time.Millisecond // heartbeats every 500 ms; generous for a loaded CI machine
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.audit (job_id bigint, attempt int, worker text)`))
	require.NoError(t, err)
	var workers []*skiplock.Worker
	for _, id := range []string{"hb-1", "hb-2"} {
		w := newWorker(t, b, skiplock.WorkerConfig{
			ID: id, VisibilityTimeout: vt, SweepInterval: 100 * time.Millisecond,
			PollInterval: 50 * time.Millisecond, Logger: testLogger(),
		})
		require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[slowArgs]) error {
			if _, err := b.pool.Exec(ctx, b.q(`INSERT INTO {s}.audit VALUES ($1, $2, $3)`), job.ID, job.Attempts, job.LockedBy); err != nil {
				return err
			}
			select {
			case <-time.After(time.Duration(job.Args.Ms) * time.Millisecond):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}))
		workers = append(workers, w)
	}
	job, err := b.client.Enqueue(b.ctx, slowArgs{Ms: int(3 * vt / time.Millisecond)}, nil)
	require.NoError(t, err)
	for _, w := range workers {
		runWorker(t, w)
	}
	waitStatus(t, b, job.ID, skiplock.StatusSucceeded, 15*time.Second, "long job succeeded")
	j, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, 1, j.Attempts, "never reclaimed")
	assert.Empty(t, j.Errors)
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.audit`), "ran once")
}

// TestLease_SuccessWaitingToBeWrittenKeepsItsLease: a success waits in its batch for up
// to CompleteFlushInterval (and, on a busy database, for a connection and the statements
// before it). Its lease is renewed meanwhile, so the sweeper does not take back a job
// that already succeeded and run it again. Here every success waits three leases long.
func TestLease_SuccessWaitingToBeWrittenKeepsItsLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const vt = 1500 * time.Millisecond
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.audit (job_id bigint, attempt int, worker text)`))
	require.NoError(t, err)
	for _, id := range []string{"wait-1", "wait-2"} {
		w := newWorker(t, b, skiplock.WorkerConfig{
			ID: id, VisibilityTimeout: vt, SweepInterval: 100 * time.Millisecond,
			PollInterval: 50 * time.Millisecond, CompleteFlushInterval: 3 * vt, Logger: testLogger(),
		})
		require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[slowArgs]) error {
			_, err := b.pool.Exec(ctx, b.q(`INSERT INTO {s}.audit VALUES ($1, $2, $3)`), job.ID, job.Attempts, job.LockedBy)
			return err
		}))
		runWorker(t, w)
	}
	const jobs = 6
	for range jobs {
		_, err := b.client.Enqueue(b.ctx, slowArgs{}, nil)
		require.NoError(t, err)
	}
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE status = 'succeeded'`) == jobs
	}, "every job succeeded")
	assert.Equal(t, jobs, b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE attempts = 1`), "never reclaimed")
	assert.Equal(t, jobs, b.count(t, `SELECT count(*) FROM {s}.audit`), "each ran once")
}

func TestFencing_StaleFailureChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job, err := b.client.Enqueue(b.ctx, verdictArgs{Verdict: "x"}, nil)
	require.NoError(t, err)
	release := make(chan struct{})
	claimed := make(chan struct{}, 1)
	pool := newPool(t, 4)
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)
	wa, err := skiplock.NewWorker(client, skiplock.WorkerConfig{ID: "stale", VisibilityTimeout: time.Hour, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(wa, func(ctx context.Context, job *skiplock.Job[verdictArgs]) error {
		claimed <- struct{}{}
		<-release
		return errors.New("late failure")
	}))
	stop := runWorker(t, wa)
	<-claimed
	// An operator cancels the job while A still runs it.
	_, err = b.client.Cancel(b.ctx, job.ID)
	require.NoError(t, err)
	before, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	close(release)
	stop()
	after, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, before, after)
	assert.Equal(t, skiplock.StatusCancelled, after.Status)
}

func TestLease_WorkersWithDifferentVisibilityTimeoutsAgree(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.audit (job_id bigint, attempt int, worker text)`))
	require.NoError(t, err)
	handler := func(ctx context.Context, job *skiplock.Job[slowArgs]) error {
		if _, err := b.pool.Exec(ctx, b.q(`INSERT INTO {s}.audit VALUES ($1, $2, $3)`), job.ID, job.Attempts, job.LockedBy); err != nil {
			return err
		}
		select {
		case <-time.After(time.Duration(job.Args.Ms) * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// A worker of the old deploy: a long visibility timeout, so it heartbeats rarely.
	old := newWorker(t, b, skiplock.WorkerConfig{ID: "old", VisibilityTimeout: time.Hour, SweepInterval: -1,
		PollInterval: 50 * time.Millisecond, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(old, handler))
	job, err := b.client.Enqueue(b.ctx, slowArgs{Ms: 3000}, nil)
	require.NoError(t, err)
	runWorker(t, old)
	eventually(t, 10*time.Second, func() bool { return b.count(t, `SELECT count(*) FROM {s}.audit`) == 1 }, "old worker started the job")

	// A worker of the new deploy joins with a much shorter timeout and a busy embedded
	// sweeper. It must leave the old worker's live job alone: its lease is the old one's.
	young := newWorker(t, b, skiplock.WorkerConfig{ID: "young", VisibilityTimeout: 500 * time.Millisecond,
		SweepInterval: 100 * time.Millisecond, PollInterval: 50 * time.Millisecond, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(young, handler))
	runWorker(t, young)

	waitStatus(t, b, job.ID, skiplock.StatusSucceeded, 20*time.Second, "job succeeded")
	j, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, 1, j.Attempts, "never reclaimed")
	assert.Equal(t, "old", j.LockedBy)
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.audit`), "ran once")
}

type holdArgs struct {
	N int `json:"n"`
}

func (holdArgs) Kind() string { return "hold" }

func TestLease_BlackHoledWorkerCancelsItsHandlersBeforeOthersRunItsJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const jobs = 4
	const vt = 2 * time.Second
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.audit (job_id bigint, attempt int, worker text,
		started timestamptz, ended timestamptz, ok bool)`))
	require.NoError(t, err)
	// Every handler writes its audit row through the test's own pool, which is not cut off.
	var cutStarted atomic.Int32
	handler := func(ctx context.Context, job *skiplock.Job[holdArgs]) error {
		started := time.Now()
		d := 200 * time.Millisecond
		if job.LockedBy == "cut-off" {
			d = time.Minute // holds its jobs until the network fails under it
			cutStarted.Add(1)
		}
		var err error
		select {
		case <-time.After(d):
		case <-ctx.Done():
			err = context.Cause(ctx)
		}
		_, aerr := b.pool.Exec(context.Background(), b.q(`INSERT INTO {s}.audit VALUES ($1, $2, $3, $4, $5, $6)`),
			job.ID, job.Attempts, job.LockedBy, started, time.Now(), err == nil)
		require.NoError(t, aerr)
		return err
	}

	// Worker "cut-off" reaches the database through a proxy that will stop forwarding.
	proxy, pool := proxiedPool(t, 4)
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)
	cut, err := skiplock.NewWorker(client, skiplock.WorkerConfig{ID: "cut-off", VisibilityTimeout: vt, SweepInterval: -1,
		PollInterval: 50 * time.Millisecond, ShutdownTimeout: time.Second, Logger: testLogger()})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(cut, handler))
	for i := range jobs {
		_, err := b.client.Enqueue(b.ctx, holdArgs{N: i}, nil)
		require.NoError(t, err)
	}
	stopCut := runWorker(t, cut)
	// Its handlers run every job. (The rows alone are not enough: a claim's commit can be
	// seen before its reply has passed the proxy, and a reply held by the black hole
	// starts no handler, so that job would leave no audit row of the cut-off worker.)
	eventually(t, 10*time.Second, func() bool {
		return cutStarted.Load() == jobs &&
			b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'running' AND locked_by = 'cut-off'`) == jobs
	}, "the cut-off worker runs every job")

	// Its network path goes dead: no reset, no error, just silence.
	proxy.Blackhole()
	healthy := newWorker(t, b, skiplock.WorkerConfig{ID: "healthy", VisibilityTimeout: vt, SweepInterval: 100 * time.Millisecond,
		PollInterval: 50 * time.Millisecond, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(healthy, handler))
	runWorker(t, healthy)

	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE status = 'succeeded'`) == jobs
	}, "every job finished elsewhere")
	// A cancelled handler takes its end time first and then writes its audit row through
	// the test's pool, which the healthy worker's statements share (4 connections on a
	// 2-core machine): the rows may land after the jobs finished elsewhere. The overlap
	// check below compares those end times, so it needs every row; a handler that was
	// never cancelled would write its row only after a minute, and with ok set, which the
	// next assertion refuses. (10 s was once too short in a loaded CI run.)
	eventually(t, 45*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.audit WHERE worker = 'cut-off'`) == jobs
	}, "the cut-off worker's handlers returned")
	assert.Equal(t, jobs, b.count(t, `SELECT count(*) FROM {s}.audit WHERE worker = 'cut-off' AND NOT ok`),
		"the cut-off worker cancelled each of its handlers")
	assert.Equal(t, jobs, b.count(t, `SELECT count(*) FROM {s}.audit WHERE worker = 'healthy' AND ok`), "each job finished once")
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.audit a JOIN {s}.audit o
		ON a.job_id = o.job_id AND a.ctid <> o.ctid AND a.started < o.ended AND o.started < a.ended`),
		"a job ran in two places at once")
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE attempts <> 2`), "the cut-off attempt counts")

	// The network comes back: the stale worker's late writes change nothing.
	before := b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE locked_by = 'healthy'`)
	proxy.Restore()
	stopCut()
	assert.Equal(t, before, b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE locked_by = 'healthy'`))
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs`))
}

// proxiedPool opens a pool on the test database through a loopback proxy that a test can
// black-hole; both are closed at cleanup.
func proxiedPool(t *testing.T, maxConns int32) (*blackhole.Proxy, *pgxpool.Pool) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	target := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	proxy, err := blackhole.Start(target)
	require.NoError(t, err)
	t.Cleanup(func() { proxy.Close() })
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", uint16(proxy.Port())
	cfg.ConnConfig.Fallbacks = nil
	cfg.ConnConfig.ConnectTimeout = time.Second
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return proxy, pool
}

// A worker whose own lease went unrenewed past the point where it cancels its handlers
// claims nothing, and starts nothing a claim returns, until a renewal lands. When its path
// to the database came back before its renewal did, it claimed jobs only for its watchdog
// to cancel them at once, spending an attempt of each (the chaos run's black-holed worker:
// three jobs ran again 18 s later, at their second attempt).
func TestLease_AWorkerWhoseLeaseIsEndingStartsNoJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.audit (job_id bigint, attempt int, ok bool)`))
	require.NoError(t, err)
	proxy, pool := proxiedPool(t, 6)
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{ID: "cut-off", SweepInterval: -1,
		PollInterval: 50 * time.Millisecond, Logger: testLogger()})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[holdArgs]) error {
		var err error
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			err = context.Cause(ctx)
		}
		_, aerr := b.pool.Exec(context.Background(), b.q(`INSERT INTO {s}.audit VALUES ($1, $2, $3)`),
			job.ID, job.Attempts, err == nil)
		require.NoError(t, aerr)
		return err
	}))
	runWorker(t, w)
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.workers WHERE id = 'cut-off'`) == 1
	}, "the worker registered")

	// Its path goes silent for longer than it waits before cancelling its handlers (6.7 s
	// after the start of its last renewal, which may have been sent up to ~2.5 s before the
	// silence and come back after it). Jobs arrive meanwhile.
	proxy.Blackhole()
	const jobs = 6
	for i := range jobs {
		_, err := b.client.Enqueue(b.ctx, holdArgs{N: i}, nil)
		require.NoError(t, err)
	}
	time.Sleep(9500 * time.Millisecond) // the silence itself: its length is what is tested
	proxy.Restore()

	eventually(t, 60*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE status = 'succeeded'`) == jobs
	}, "every job succeeded")
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.audit WHERE NOT ok`), "no handler was cancelled")
	assert.Equal(t, jobs, b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE attempts = 1`),
		"every job succeeded at its first attempt")
}

type lateBeatArgs struct {
	N int `json:"n"`
}

func (lateBeatArgs) Kind() string { return "late_beat" }

// A claim whose reply arrives too late for its jobs' leases, counted from the claim's
// start, to outlast the worker's next heartbeat starts none of them: they are put back,
// their attempts given back, and a fresh claim runs them. The job-lease watchdog cancels
// a handler at two thirds of the visibility timeout without a renewal, and heartbeats
// come every third: a claim answered just under two thirds started jobs that the
// watchdog cut at its next look, before any heartbeat could renew them, each attempt
// spent (make chaos: the black-holed worker, at a 3 s visibility timeout, started 3 jobs
// as its path came back, most likely those of a claim sent into the black hole, and
// cancelled them 30 ms later; each ran again at its second attempt). Whether a heartbeat
// or the watchdog came first was the luck of their phases; which token starts is not.
// The claim waits at the server for the queue's flow lock, held by the test until the
// claim is 1.5 s old.
func TestLease_AClaimRepliedTooLateForItsNextHeartbeatStartsNoJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	log := newAttemptLog(t, b)
	const queue = "late_beat"
	const vt = 3 * time.Second                 // heartbeats every 1 s, handlers cancelled 2 s after a lease's last renewal
	limits := skiplock.QueueLimits{Rate: 1000} // limited claims take the queue's advisory lock
	w := newWorker(t, b, skiplock.WorkerConfig{ID: "a", VisibilityTimeout: vt, SweepInterval: -1, Logger: testLogger(),
		Queues: map[string]skiplock.QueueConfig{queue: {MaxWorkers: 1, Limits: limits}}})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[lateBeatArgs]) error {
		if err := log.note(job.ID, job.Attempts, "a", "start "+strconv.FormatInt(job.Fence, 10)); err != nil {
			return err
		}
		select {
		case <-time.After(time.Second): // past the 2 s mark of a claim answered 1.5 s late
			return nil
		case <-ctx.Done():
			return errors.Join(log.note(job.ID, job.Attempts, "a", "cancelled"), context.Cause(ctx))
		}
	}))
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error { return nil }))
	runWorker(t, w)
	// A first job takes the worker through its first limited claim (which adopts the
	// queue's running jobs under the same lock), so the claim below is a plain limited one.
	_, err := b.client.Enqueue(b.ctx, noopArgs{}, &skiplock.EnqueueOptions{Queue: queue})
	require.NoError(t, err)
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive`) == 1
	}, "the worker ran a first job")

	// The test holds the queue's flow lock, so the worker's claim waits at the server.
	lockTx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = lockTx.Rollback(context.Background()) }()
	key := b.schema + "." + queue
	_, err = lockTx.Exec(b.ctx, `SELECT pg_advisory_xact_lock(1936419190, hashtext($1))`, key)
	require.NoError(t, err)
	job, err := b.client.Enqueue(b.ctx, lateBeatArgs{}, &skiplock.EnqueueOptions{Queue: queue})
	require.NoError(t, err)
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND classid = 1936419190 AND objid = (hashtext($1)::bigint & 4294967295)::oid`, key) > 0
	}, "the worker's claim waits for the queue's lock")
	waiting := time.Now()
	// The token the waiting claim takes: the job's next one.
	lateFence := b.count(t, `SELECT fence + 1 FROM {s}.jobs WHERE id = $1`, job.ID)

	// The claim commits 1.5 s after it was seen waiting: later than a heartbeat interval,
	// earlier than the watchdog's cut. (The wait itself is what is tested.)
	time.Sleep(time.Until(waiting.Add(vt / 2)))
	require.NoError(t, lockTx.Commit(b.ctx))

	waitStatus(t, b, job.ID, skiplock.StatusSucceeded, 30*time.Second, "the job succeeded")
	assert.Equal(t, []string{"1/start " + strconv.Itoa(lateFence+1)}, log.events(t, job.ID),
		"the job started once, under the token of the claim after the late one (put back)")
	j, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, 1, j.Attempts, "the job succeeded at its first attempt")
	assert.Equal(t, lateFence+1, b.count(t, `SELECT fence FROM {s}.jobs_archive WHERE id = $1`, job.ID),
		"the job succeeded under a fresh claim's token")
}
