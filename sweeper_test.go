package skiplock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/blackhole"
)

type blockArgs struct{}

func (blockArgs) Kind() string { return "block" }

// startSweeper runs a sweeper with a short visibility timeout until the test ends.
func startSweeper(t *testing.T, b *bundle, vt time.Duration) {
	t.Helper()
	s, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{
		Interval: 100 * time.Millisecond, VisibilityTimeout: vt, Logger: testLogger(),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// vanishingWorker runs a worker whose handler blocks until release is closed, whose
// heartbeats are too rare to matter, and whose handler makes its own lease end at once
// and names as the job's owner "old-<id>", which has no row in the workers table: to the
// database it is a worker of a release before the workers table that died mid-job, whose
// jobs the sweeper judges by their own leases. (A live worker of this release keeps its
// jobs while its row in the workers table is renewed.)
func vanishingWorker(t *testing.T, b *bundle, id string, slots int, release <-chan struct{}, claimed chan<- int) (*skiplock.Worker, func()) {
	t.Helper()
	pool := newPool(t, 4)
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{
		ID: id, Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: slots}}, VisibilityTimeout: time.Hour, SweepInterval: -1, PollInterval: 50 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second, Logger: testLogger(),
	})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[blockArgs]) error {
		_, err := b.pool.Exec(context.Background(), b.q(`UPDATE {s}.jobs SET locked_at = now() - interval '2 seconds', lease_until = now() - interval '1 second',
			locked_by = 'old-' || locked_by WHERE id = $1`), job.ID)
		require.NoError(t, err)
		claimed <- job.Attempts
		<-release
		return nil
	}))
	return w, runWorker(t, w)
}

func TestSweeper_ReclaimsJobOfVanishedWorkerAndFencesItsLateResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job, err := b.client.Enqueue(b.ctx, blockArgs{}, &skiplock.EnqueueOptions{MaxAttempts: 5})
	require.NoError(t, err)

	// Worker A claims the job and then, as far as the database can tell, dies.
	releaseA := make(chan struct{})
	claimedA := make(chan int, 5)
	_, stopA := vanishingWorker(t, b, "worker-a", 1, releaseA, claimedA)
	require.Equal(t, 1, <-claimedA)

	// The sweeper takes it back after the visibility timeout; worker B runs it.
	startSweeper(t, b, 500*time.Millisecond)
	var ranB atomic.Int32
	wb := newWorker(t, b, skiplock.WorkerConfig{ID: "worker-b", Completion: skiplock.CompletionKeep, SweepInterval: -1,
		PollInterval: 50 * time.Millisecond, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(wb, func(ctx context.Context, job *skiplock.Job[blockArgs]) error {
		ranB.Add(1)
		return nil
	}))
	runWorker(t, wb)
	eventually(t, 15*time.Second, func() bool { return ranB.Load() == 1 }, "worker B ran the reclaimed job")
	waitStatus(t, b, job.ID, skiplock.StatusSucceeded, 5*time.Second, "B's success recorded")

	// A wakes up and reports success for its stale attempt: nothing changes.
	before, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	close(releaseA)
	stopA() // flushes A's completions before returning
	after, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, before, after, "the stale worker changed the row")
	assert.Equal(t, "worker-b", after.LockedBy)
	assert.Equal(t, 2, after.Attempts)
	require.NotEmpty(t, after.Errors)
	assert.Contains(t, after.Errors[0].Error, "lease expired: worker old-worker-a")
}

func TestSweeper_JobWhoseEveryWorkerVanishesEndsDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job, err := b.client.Enqueue(b.ctx, blockArgs{}, &skiplock.EnqueueOptions{MaxAttempts: 2})
	require.NoError(t, err)
	release := make(chan struct{})
	claimed := make(chan int, 5)
	vanishingWorker(t, b, "doomed", 2, release, claimed)
	t.Cleanup(func() { close(release) }) // runs before the worker's stop
	startSweeper(t, b, 300*time.Millisecond)
	require.Equal(t, 1, <-claimed)
	require.Equal(t, 2, <-claimed, "reclaimed once and claimed again")
	waitStatus(t, b, job.ID, skiplock.StatusDead, 15*time.Second, "job dead after its attempts were lost")
	j, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, 2, j.Attempts)
	assert.Contains(t, j.LastError, "lease expired")
	assert.Len(t, j.Errors, 2)
}

func TestSweeper_TwoSweepersNeverReclaimTheSameJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const jobs = 3000
	_, err := b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.jobs (kind, status, attempts, locked_at, locked_by)
		SELECT 'k', 'running', 1, now() - interval '1 hour', 'gone' FROM generate_series(1, $1)`), jobs)
	require.NoError(t, err)

	var sweepers []*skiplock.Sweeper
	for range 2 {
		pool := newPool(t, 2)
		c, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema})
		require.NoError(t, err)
		s, err := skiplock.NewSweeper(c, skiplock.SweeperConfig{VisibilityTimeout: time.Minute, BatchSize: 100, Logger: testLogger()})
		require.NoError(t, err)
		sweepers = append(sweepers, s)
	}
	seen := map[int64]int{}
	var mu sync.Mutex
	for round := 0; round < 5; round++ {
		var wg sync.WaitGroup
		for _, s := range sweepers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := s.Sweep(b.ctx)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				for _, id := range res.Reclaimed {
					seen[id]++
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	assert.Len(t, seen, jobs, "every expired job reclaimed")
	for id, n := range seen {
		if n != 1 {
			t.Errorf("job %d reclaimed %d times", id, n)
		}
	}
	assert.Equal(t, jobs, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'queued' AND jsonb_array_length(errors) = 1`))
}

func TestSweeper_PurgesPastRetention(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`
		INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts, created_at, finished_at)
		SELECT i, 'default', 'k', '{}', 'succeeded', 0, now(), 1, 20, now(), now() - (CASE WHEN i % 2 = 0 THEN interval '8 days' ELSE interval '1 day' END)
		FROM generate_series(1, 2500) AS i`))
	require.NoError(t, err)
	s, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{BatchSize: 500, Logger: testLogger()})
	require.NoError(t, err)
	res, err := s.Sweep(b.ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1250), res.Purged)
	assert.Equal(t, 1250, b.count(t, `SELECT count(*) FROM {s}.jobs_archive`))
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE finished_at < now() - interval '7 days'`))
}

// DeadRetention deletes dead and failed jobs that ended before it, and nothing else; by
// default they are kept (an operator requeues them).
func TestSweeper_DeadRetentionPurgesOnlyOldDeadAndFailedJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`
		INSERT INTO {s}.jobs (kind, status, attempts, finished_at)
		SELECT 'k', s, 1, now() - age
		FROM unnest(ARRAY['dead', 'failed', 'cancelled']) AS u(s),
			unnest(ARRAY[interval '31 days', interval '29 days']) AS a(age),
			generate_series(1, 6)`))
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.jobs (kind) SELECT 'k' FROM generate_series(1, 4)`))
	require.NoError(t, err)
	counts := func() string {
		var out string
		require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT string_agg(status || ' ' || old || ' ' || n, ', ' ORDER BY status, old)
			FROM (SELECT status, coalesce(finished_at < now() - interval '30 days', false) AS old, count(*) AS n
				FROM {s}.jobs GROUP BY 1, 2) c`)).Scan(&out))
		return out
	}
	before := "cancelled false 6, cancelled true 6, dead false 6, dead true 6, failed false 6, failed true 6, queued false 4"

	// The default keeps them.
	year := 365 * 24 * time.Hour
	s, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{BatchSize: 4, ArchiveRetention: year, Logger: testLogger()})
	require.NoError(t, err)
	_, err = s.Sweep(b.ctx)
	require.NoError(t, err)
	require.Equal(t, before, counts(), "a sweep with no DeadRetention deleted dead or failed jobs")

	// 30 days, in batches of 4: the 12 dead and failed jobs older than that go; the
	// younger ones stay, and so do the queued jobs and the cancelled ones (kept a year by
	// the archive retention, which DeadRetention does not change).
	s, err = skiplock.NewSweeper(b.client, skiplock.SweeperConfig{BatchSize: 4, DeadRetention: 30 * 24 * time.Hour,
		ArchiveRetention: year, Logger: testLogger()})
	require.NoError(t, err)
	res, err := s.Sweep(b.ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(12), res.Purged)
	assert.Equal(t, "cancelled false 6, cancelled true 6, dead false 6, failed false 6, queued false 4", counts())
}

// A worker's embedded sweeper applies WorkerConfig.DeadRetention.
func TestWorker_DeadRetentionReachesTheEmbeddedSweeper(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.jobs (kind, status, attempts, finished_at)
		VALUES ('k', 'dead', 1, now() - interval '2 hours'), ('k', 'dead', 1, now())`))
	require.NoError(t, err)
	w := newWorker(t, b, skiplock.WorkerConfig{SweepInterval: 20 * time.Millisecond, DeadRetention: time.Hour})
	defer runWorker(t, w)()
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'dead'`) == 1
	}, "the embedded sweeper deleted the dead job older than an hour")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'dead' AND finished_at > now() - interval '1 hour'`))
}

func TestSweeper_VacuumsBloatedJobsTable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`
		INSERT INTO {s}.jobs (kind) SELECT 'k' FROM generate_series(1, 20000);
		DELETE FROM {s}.jobs;`))
	require.NoError(t, err)
	s, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{Logger: testLogger()})
	require.NoError(t, err)
	// The statistics arrive asynchronously; sweep until the sweeper sees the dead rows.
	eventually(t, 20*time.Second, func() bool {
		res, err := s.Sweep(b.ctx)
		require.NoError(t, err)
		return res.Vacuumed
	}, "the sweeper vacuumed the jobs table")
	// And analyzed it: without column statistics (autovacuum off), a vacuumed table made
	// the planner read a queue's whole backlog on every claim.
	require.Positive(t, b.count(t, `SELECT analyze_count::int FROM pg_stat_user_tables WHERE relid = $1::regclass`, `"`+b.schema+`".jobs`),
		"the sweeper analyzed the jobs table with its vacuum")
	// The empty pages at the end of the heap are given back. A transaction of a test
	// running beside this one can hold back the horizon, leaving the rows dead but not yet
	// removable; they still count as dead, so the sweeper vacuums again on a later sweep.
	eventually(t, 60*time.Second, func() bool {
		_, err := s.Sweep(b.ctx)
		require.NoError(t, err)
		return b.count(t, `SELECT pg_relation_size($1::regclass)::int`, `"`+b.schema+`".jobs`) < 64*1024
	}, "the jobs table shrank below 64 KiB")
	// The small tables limited claims and coalesced enqueues rewrite are vacuumed with it:
	// nothing else vacuums them with autovacuum off.
	for _, table := range []string{"queue_slots", "queue_flow", "enqueue_batches"} {
		assert.Positive(t, b.count(t, `SELECT vacuum_count::int FROM pg_stat_user_tables WHERE relid = $1::regclass`, `"`+b.schema+`".`+table),
			"the sweeper vacuumed %s with the jobs table", table)
	}
}

// Statistics that count more dead rows than the jobs table's file can hold predate a
// TRUNCATE (another session's counts reach them after it): the sweeper neither vacuums nor
// analyzes the emptied table, whose ANALYZE would make every session re-plan its claims
// for a table of no rows.
func TestSweeper_NoVacuumOnStatisticsOlderThanATruncate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	writer, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer writer.Release()
	table := `"` + b.schema + `".jobs`
	dead := func() int {
		return b.count(t, `SELECT coalesce(n_dead_tup, 0)::int FROM pg_stat_user_tables WHERE relid = $1::regclass`, table)
	}
	// A session's counts reach the statistics when it goes idle, at most once a second;
	// counts held back by that wait go up to 10 s later (Postgres's PGSTAT_IDLE_INTERVAL).
	// So the writer's INSERT is counted at once and its DELETE, within the second after,
	// is held back past the TRUNCATE that follows it, unless the flush timing lets it in
	// first (then the TRUNCATE zeroes the counts, and the sequence is tried again).
	eventually(t, 90*time.Second, func() bool {
		_, err := writer.Exec(b.ctx, b.q(`INSERT INTO {s}.jobs (kind) SELECT 'k' FROM generate_series(1, 20000)`))
		require.NoError(t, err)
		_, err = writer.Exec(b.ctx, b.q(`DELETE FROM {s}.jobs`))
		require.NoError(t, err)
		// The TRUNCATE's own counts (which zero the table's) go at once.
		_, err = b.pool.Exec(b.ctx, b.q(`SELECT pg_stat_force_next_flush(); TRUNCATE {s}.jobs`))
		require.NoError(t, err)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for end := time.Now().Add(12 * time.Second); time.Now().Before(end); <-tick.C {
			if dead() >= 20000 {
				return true
			}
		}
		return false
	}, "the writer's dead rows reached the statistics after the TRUNCATE")
	require.Less(t, b.count(t, `SELECT (pg_relation_size($1::regclass) / 8192)::int`, table), 2,
		"the jobs table's file is empty")
	s, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{Logger: testLogger()})
	require.NoError(t, err)
	res, err := s.Sweep(b.ctx)
	require.NoError(t, err)
	assert.False(t, res.Vacuumed, "the sweeper vacuumed a table of no pages on stale statistics")
	assert.Zero(t, b.count(t, `SELECT (vacuum_count + analyze_count)::int FROM pg_stat_user_tables WHERE relid = $1::regclass`, table),
		"the emptied jobs table was neither vacuumed nor analyzed")
}

// holeOnReclaim black-holes a proxy the moment its pool starts the sweeper's reclaim
// statement: the sweep transaction then holds the sweep lock with a connection that
// never answers.
type holeOnReclaim struct {
	proxy *blackhole.Proxy
	hit   chan struct{}
	once  sync.Once
}

func (h *holeOnReclaim) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "WITH expired AS") {
		h.once.Do(func() { h.proxy.Blackhole(); close(h.hit) })
	}
	return ctx
}

func (h *holeOnReclaim) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func TestSweeper_StuckSweepDoesNotStopSweeping(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// Sweeper A's connection black-holes in the middle of its sweep, after it took the
	// sweep lock.
	proxy, pool := proxiedPool(t, 2)
	tracer := &holeOnReclaim{proxy: proxy, hit: make(chan struct{})}
	cfg := pool.Config() // the same settings, with a tracer
	cfg.ConnConfig.Tracer = tracer
	tracedPool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(tracedPool.Close)
	ca, err := skiplock.NewClient(tracedPool, skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)
	sa, err := skiplock.NewSweeper(ca, skiplock.SweeperConfig{Logger: testLogger()})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = sa.Sweep(context.Background())
	}()
	t.Cleanup(func() { proxy.Close(); <-done })
	select {
	case <-tracer.hit:
	case <-time.After(10 * time.Second):
		t.Fatal("sweeper A never reached its reclaim")
	}

	// Meanwhile a worker vanished: its job's lease ended. Sweeper B must take it back.
	var id int64
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`INSERT INTO {s}.jobs (kind, status, attempts, locked_at, locked_by, lease_until, fence)
		VALUES ('k', 'running', 1, now() - interval '2 seconds', 'gone', now() - interval '1 second', 1) RETURNING id`)).Scan(&id))
	sb, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{Logger: testLogger()})
	require.NoError(t, err)
	began := time.Now()
	eventually(t, 30*time.Second, func() bool {
		res, err := sb.Sweep(b.ctx)
		require.NoError(t, err)
		return !res.Skipped && len(res.Reclaimed) == 1 && res.Reclaimed[0] == id
	}, "sweeper B reclaims the expired job although A's sweep hangs")
	t.Logf("sweeper B took over %s after A's connection went dead", time.Since(began).Round(time.Millisecond))
}

func TestSweeper_JudgesRowsWithoutALeaseOfTheirOwnByLockedAt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Rows as a fleet of mixed releases leaves them during the rollout of migration 002.
	var ids [4]int64
	for i, q := range []string{
		// claimed by an old worker, recently: no lease, live
		`INSERT INTO {s}.jobs (kind, status, attempts, locked_at, locked_by) VALUES ('k', 'running', 1, now(), 'old') RETURNING id`,
		// claimed by an old worker long ago: no lease, dead
		`INSERT INTO {s}.jobs (kind, status, attempts, locked_at, locked_by) VALUES ('k', 'running', 1, now() - interval '1 hour', 'old') RETURNING id`,
		// claimed by an old worker just now, after an old sweeper took it from a new worker
		// whose lease had ended: that lease is not this claim's
		`INSERT INTO {s}.jobs (kind, status, attempts, locked_at, locked_by, lease_until) VALUES ('k', 'running', 2, now(), 'old', now() - interval '5 minutes') RETURNING id`,
		// claimed by a new worker with a long lease, not heartbeated for longer than the
		// sweeper's timeout: its own lease decides
		`INSERT INTO {s}.jobs (kind, status, attempts, locked_at, locked_by, lease_until, fence) VALUES ('k', 'running', 1, now() - interval '10 minutes', 'new', now() + interval '1 hour', 1) RETURNING id`,
	} {
		require.NoError(t, b.pool.QueryRow(b.ctx, b.q(q)).Scan(&ids[i]))
	}
	s, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{VisibilityTimeout: time.Minute, Logger: testLogger()})
	require.NoError(t, err)
	res, err := s.Sweep(b.ctx)
	require.NoError(t, err)
	assert.Equal(t, []int64{ids[1]}, res.Reclaimed)
}

// A job taken back from a worker that died goes back to its place in line, ahead of the
// jobs queued after it, not behind the whole backlog.
func TestSweeper_ReclaimedJobKeepsItsPlaceInLine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job, err := b.client.Enqueue(b.ctx, blockArgs{}, nil)
	require.NoError(t, err)
	release := make(chan struct{})
	claimed := make(chan int, 5)
	_, stop := vanishingWorker(t, b, "vanished", 1, release, claimed)
	require.Equal(t, 1, <-claimed)
	// A backlog queued after the job was claimed (another kind: the vanished worker's
	// only slot is taken anyway).
	for range 20 {
		_, err := b.client.Enqueue(b.ctx, noopArgs{}, nil)
		require.NoError(t, err)
	}
	s, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{VisibilityTimeout: time.Second, Logger: testLogger()})
	require.NoError(t, err)
	res, err := s.Sweep(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []int64{job.ID}, res.Reclaimed)

	// The claim order (jobs_claim_idx: priority, then run_at, then id) puts it first.
	var first int64
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT id FROM {s}.jobs WHERE status = 'queued' AND queue = 'default'
		ORDER BY priority DESC, run_at, id LIMIT 1`)).Scan(&first))
	assert.Equal(t, job.ID, first, "the reclaimed job went behind the jobs queued after it")
	j, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, job.RunAt, j.RunAt, "run_at changed")
	close(release)
	stop()
}

// The maintenance vacuum is spaced by its own duration, and the cost delay it runs with
// does not stay on the pooled connection it used.
func TestSweeper_VacuumIsSpacedAndLeavesNoSettingBehind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := newPool(t, 1) // one connection: the vacuum's, and then the check's
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)
	s, err := skiplock.NewSweeper(client, skiplock.SweeperConfig{Logger: testLogger()})
	require.NoError(t, err)
	bloat := func() {
		_, err := b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.jobs (kind) SELECT 'k' FROM generate_series(1, 20000);
			DELETE FROM {s}.jobs;`))
		require.NoError(t, err)
	}
	sweepVacuums := func() bool {
		res, err := s.Sweep(b.ctx)
		require.NoError(t, err)
		return res.Vacuumed
	}
	bloat()
	eventually(t, 20*time.Second, sweepVacuums, "the sweeper vacuumed the jobs table")
	var delay string
	require.NoError(t, pool.QueryRow(b.ctx, `SHOW vacuum_cost_delay`).Scan(&delay))
	assert.Equal(t, "0", delay, "the vacuum's cost delay was reset on its connection")

	// Not yet due: dead rows wait, however many.
	skiplock.SetSweeperVacuumAfter(s, time.Now().Add(time.Hour))
	bloat()
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT n_dead_tup::int FROM pg_stat_user_tables WHERE relid = $1::regclass`, `"`+b.schema+`".jobs`) >= 20000
	}, "the statistics show the new dead rows")
	assert.False(t, sweepVacuums(), "a vacuum before its spacing ran out")
	skiplock.SetSweeperVacuumAfter(s, time.Time{})
	assert.True(t, sweepVacuums(), "the vacuum once its spacing ran out")
}

// A backlog written into an empty queue gets the jobs table analyzed, which makes Postgres
// plan the claims anew: a plan cached on the empty table read the whole table for each
// claim (bench/README, "A worker started on an empty queue").
func TestSweeper_AnalyzesTheJobsTableOnceABacklogHasGrownIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, b, skiplock.WorkerConfig{SweepInterval: time.Second, PollInterval: 50 * time.Millisecond, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error { return nil }))
	runWorker(t, w)
	for i := range 10 { // the worker's statements run, and are cached, on the empty table
		job, err := b.client.Enqueue(b.ctx, noopArgs{N: i}, nil)
		require.NoError(t, err)
		waitStatus(t, b, job.ID, skiplock.StatusSucceeded, 20*time.Second, "job %d ran", job.ID)
	}
	analyzed := func() int {
		return b.count(t, `SELECT analyze_count::int FROM pg_stat_user_tables WHERE relid = $1::regclass`, `"`+b.schema+`".jobs`)
	}
	before := analyzed()
	// A backlog for later: it grows the table and stays queued.
	params := make([]skiplock.EnqueueParams, 20_000)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: noopArgs{N: i}, Options: &skiplock.EnqueueOptions{RunAt: time.Now().Add(time.Hour)}}
	}
	_, err := b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	eventually(t, 30*time.Second, func() bool {
		return analyzed() > before &&
			b.count(t, `SELECT relpages FROM pg_class WHERE oid = $1::regclass`, `"`+b.schema+`".jobs`) > 32
	}, "the leading worker analyzed the grown jobs table")
}

// The same for the workflow tasks the settler reads and writes by job id and task name.
func TestSweeper_AnalyzesTheWorkflowTasksOnceWorkflowsHaveGrownThem(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, b, skiplock.WorkerConfig{SweepInterval: time.Second, PollInterval: time.Hour, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error { return nil }))
	runWorker(t, w)
	analyzed := func() int {
		return b.count(t, `SELECT analyze_count::int FROM pg_stat_user_tables WHERE relid = $1::regclass`, `"`+b.schema+`".workflow_tasks`)
	}
	before := analyzed()
	// 3,000 five-task workflows due in an hour: 15,000 task rows.
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		for i := range 3000 {
			wf := skiplock.Workflow{Name: fmt.Sprint("wf-", i)}
			for j, name := range []string{"a", "b", "c", "d", "e"} {
				task := skiplock.WorkflowTask{Name: name, Args: noopArgs{N: i}, Options: &skiplock.EnqueueOptions{RunAt: time.Now().Add(time.Hour)}}
				if j > 0 {
					task.DependsOn = []string{"a"}
				}
				wf.Tasks = append(wf.Tasks, task)
			}
			if _, err := b.client.EnqueueWorkflowTx(b.ctx, tx, wf); err != nil {
				return err
			}
		}
		return nil
	}))
	eventually(t, 30*time.Second, func() bool {
		return analyzed() > before &&
			b.count(t, `SELECT relpages FROM pg_class WHERE oid = $1::regclass`, `"`+b.schema+`".workflow_tasks`) > 32
	}, "the leading worker analyzed the grown workflow_tasks table")
}
