package skiplock_test

// Tests of a fleet of idle workers with many queues: what they cost the server while no
// job exists (counted by the server, on a throwaway cluster of the test's own), and how
// fast a job in any of the queues starts — by notification, by the fallback poll when the
// listener is down, and by the poll right after the listener reconnects.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// statsServer is a throwaway cluster with pg_stat_statements loaded and a database "fleet"
// that only the workers under test use, so every statement counted in it is theirs.
type statsServer struct {
	url   string // of the fleet database
	admin *pgx.Conn
	dbid  uint32
}

func startStatsServer(t *testing.T) *statsServer {
	t.Helper()
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "skl-idle-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	c, err := pgtest.StartCluster(ctx, dir, pgtest.ClusterOptions{Settings: map[string]string{
		"shared_preload_libraries": "pg_stat_statements",
		// Autovacuum's transactions would count as the fleet database's commits.
		"autovacuum": "off",
	}})
	require.NoError(t, err, "a throwaway cluster (initdb) is needed to count the server's statements exactly")
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Error(err)
		}
		_ = os.RemoveAll(dir)
	})
	admin, err := pgx.Connect(ctx, c.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	for _, q := range []string{`CREATE EXTENSION pg_stat_statements`, `CREATE DATABASE fleet`} {
		_, err := admin.Exec(ctx, q)
		require.NoError(t, err)
	}
	s := &statsServer{admin: admin, url: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/fleet?sslmode=disable", c.Port)}
	require.NoError(t, admin.QueryRow(ctx, `SELECT oid FROM pg_database WHERE datname = 'fleet'`).Scan(&s.dbid))
	return s
}

// counts returns the statements run in the fleet database so far (pg_stat_statements,
// updated as each statement ends) and its committed transactions (pg_stat_database, which
// backends report up to a few seconds late).
func (s *statsServer) counts(t *testing.T) (statements, commits int64) {
	t.Helper()
	err := s.admin.QueryRow(context.Background(), `SELECT
		(SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements WHERE dbid = $1),
		(SELECT xact_commit FROM pg_stat_database WHERE datid = $1)`, s.dbid).Scan(&statements, &commits)
	require.NoError(t, err)
	return statements, commits
}

// listeners counts the LISTEN sessions connected to the fleet database.
func (s *statsServer) listeners(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, s.admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datid = $1 AND application_name LIKE 'skiplock-listen %' AND query LIKE 'LISTEN%'`, s.dbid).Scan(&n))
	return n
}

// queueNames returns q000 … q<n-1>.
func queueNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("q%03d", i)
	}
	return names
}

// manyQueues configures a worker on n queues with two slots each.
func manyQueues(n int) map[string]skiplock.QueueConfig {
	qs := map[string]skiplock.QueueConfig{}
	for _, name := range queueNames(n) {
		qs[name] = skiplock.QueueConfig{MaxWorkers: 2}
	}
	return qs
}

func TestWorker_IdleCostDoesNotGrowWithQueueCount(t *testing.T) {
	t.Parallel()
	srv := startStatsServer(t)
	ctx := context.Background()
	pool := newPoolAt(t, srv.url, 4)
	require.NoError(t, skiplock.Migrate(ctx, pool))

	const window = 10 * time.Second
	for _, tc := range []struct {
		name             string
		workers, queues  int
		maxStatementsPer float64 // per second, for all the workers together
	}{
		{"one worker, 1 queue", 1, 1, 5},
		{"one worker, 100 queues", 1, 100, 5},
		{"16 workers, 100 queues each", 16, 100, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Each worker has its own pool and listener, as separate hosts would.
			var stops []func()
			for i := range tc.workers {
				client, err := skiplock.NewClient(newPoolAt(t, srv.url, 12), skiplock.Config{Logger: testLogger()})
				require.NoError(t, err)
				w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{
					ID: fmt.Sprintf("idle-%d", i), Queues: manyQueues(tc.queues), Logger: testLogger(),
				})
				require.NoError(t, err)
				require.NoError(t, skiplock.Handle(w, func(context.Context, *skiplock.Job[noopArgs]) error { return nil }))
				stops = append(stops, runWorker(t, w))
			}
			defer func() {
				var wg sync.WaitGroup
				for _, stop := range stops {
					wg.Go(stop)
				}
				wg.Wait()
			}()
			// Started: every listener is connected and a leader is elected. Then wait until
			// the start-up transactions (connections, schema check, first poll, first
			// election) are reported: an idle backend reports its commits up to 10s late.
			eventually(t, 60*time.Second, func() bool { return srv.listeners(t) == tc.workers }, "%d listeners connected", tc.workers)
			eventually(t, 30*time.Second, func() bool {
				var n int
				require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.leader WHERE expires_at > now()`).Scan(&n))
				return n == 1
			}, "a leader elected")
			// A wait, not a condition: other backends' unreported counts cannot be seen.
			time.Sleep(11 * time.Second)

			s0, c0 := srv.counts(t)
			began := time.Now()
			time.Sleep(window) // the idle time being measured
			s1, c1 := srv.counts(t)
			secs := time.Since(began).Seconds()
			perSec := float64(s1-s0) / secs
			commitsPerSec := float64(c1-c0) / secs
			t.Logf("%d idle worker(s) × %d queue(s): %.2f statements/s (pg_stat_statements), %.2f commits/s (pg_stat_database) over %.1fs",
				tc.workers, tc.queues, perSec, commitsPerSec, secs)
			assert.LessOrEqual(t, perSec, tc.maxStatementsPer, "idle statements per second on the server")
			assert.LessOrEqual(t, commitsPerSec, tc.maxStatementsPer, "idle commits per second on the server")
		})
	}
}

// newPoolAt opens a pool on url with maxConns connections, closed at cleanup.
func newPoolAt(t *testing.T, url string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// startedAt records when each job (by its N) started.
type startedAt struct {
	mu sync.Mutex
	at map[int]time.Time
}

func (s *startedAt) handler(_ context.Context, job *skiplock.Job[noopArgs]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at == nil {
		s.at = map[int]time.Time{}
	}
	s.at[job.Args.N] = time.Now()
	return nil
}

func (s *startedAt) get(n int) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.at[n]
	return at, ok
}

// enqueueAcross enqueues one job into each of count random queues of names, one after
// the other, and returns each one's latency from enqueue to start.
func enqueueAcross(t *testing.T, b *bundle, names []string, count int, started *startedAt, each time.Duration) []time.Duration {
	t.Helper()
	var lats []time.Duration
	for i := range count {
		q := names[rand.IntN(len(names))]
		sent := time.Now()
		_, err := b.client.Enqueue(b.ctx, noopArgs{N: i}, &skiplock.EnqueueOptions{Queue: q})
		require.NoError(t, err)
		var at time.Time
		eventually(t, each, func() bool { var ok bool; at, ok = started.get(i); return ok }, "job %d in queue %s started", i, q)
		lats = append(lats, at.Sub(sent))
	}
	slices.Sort(lats)
	return lats
}

func TestWorker_NotificationStartsJobsInAnyOfManyQueues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := &startedAt{}
	names := queueNames(100)
	// A one-minute poll: a job that starts within seconds was woken by its notification.
	w := newWorker(t, b, skiplock.WorkerConfig{
		ID: fmt.Sprintf("many-%x", rand.Uint64()), Queues: manyQueues(100), PollInterval: time.Minute, SweepInterval: -1, Logger: testLogger(),
	})
	require.NoError(t, skiplock.Handle(w, started.handler))
	runWorker(t, w)
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`, "skiplock-listen "+w.ID()) == 1
	}, "listener connected")
	lats := enqueueAcross(t, b, names, 30, started, 10*time.Second)
	t.Logf("enqueue→start by notification, 30 jobs in random queues of 100: p50 %s, max %s", lats[len(lats)/2], lats[len(lats)-1])
	assert.Less(t, lats[len(lats)/2], 2*time.Second, "median start by notification")
}

func TestWorker_PollStartsJobsInManyQueuesWithinOneIntervalWhileListenerIsDown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := &startedAt{}
	names := queueNames(100)
	const poll = 500 * time.Millisecond
	// The listener points at a port nobody listens on: only the fallback poll starts jobs.
	w := newWorker(t, b, skiplock.WorkerConfig{
		Queues: manyQueues(100), PollInterval: poll, SweepInterval: -1, Logger: testLogger(),
		ListenURL: "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=1",
	})
	require.NoError(t, skiplock.Handle(w, started.handler))
	runWorker(t, w)
	lats := enqueueAcross(t, b, names, 20, started, 10*time.Second)
	t.Logf("enqueue→start by the %s poll alone, 20 jobs in random queues of 100: p50 %s, max %s", poll, lats[len(lats)/2], lats[len(lats)-1])
	// One interval (plus its 10% jitter), and a margin for a loaded machine.
	assert.Less(t, lats[len(lats)-1], poll*11/10+time.Second, "every job started within one poll interval")
}

func TestWorker_ListenerReconnectPollsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := &startedAt{}
	// A short id: the listener's application_name (which the test looks for) is cut at 63 bytes.
	id := fmt.Sprintf("rc-%x", rand.Uint64())
	w := newWorker(t, b, skiplock.WorkerConfig{
		ID: id, Queues: manyQueues(100), PollInterval: time.Minute, SweepInterval: -1, Logger: testLogger(),
	})
	require.NoError(t, skiplock.Handle(w, started.handler))
	runWorker(t, w)
	listener := func() int {
		return b.count(t, `SELECT coalesce(max(pid), 0) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`, "skiplock-listen "+id)
	}
	var pid int
	eventually(t, 30*time.Second, func() bool { pid = listener(); return pid != 0 }, "listener connected")
	// Kill the listener, and enqueue while it is away: the notification is lost, and only
	// the poll that follows the reconnect can start the job before the one-minute poll.
	_, err := b.pool.Exec(b.ctx, `SELECT pg_terminate_backend($1)`, pid)
	require.NoError(t, err)
	_, err = b.client.Enqueue(b.ctx, noopArgs{N: 1}, &skiplock.EnqueueOptions{Queue: "q042"})
	require.NoError(t, err)
	eventually(t, 20*time.Second, func() bool { _, ok := started.get(1); return ok }, "the job enqueued while the listener was down started after it reconnected")
	assert.NotEqual(t, pid, listener(), "the listener reconnected")
}

// A fleet bounds the statements it keeps in flight on its queues by its size: each worker
// registers with its election statement, learns how many live workers serve its queues,
// and takes that into its bound; a worker that stops leaves the count at once. The jobs
// of a queue served by many bounded workers all run, each exactly once.
func TestFleet_WorkersLearnTheirFleetAndBoundTheirStatementsByIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.audit (job_id bigint, attempt int, worker text,
		started timestamptz, finished timestamptz)`))
	require.NoError(t, err)
	const shared = 5 // workers on the default queue: a bound of 1 statement each
	require.Equal(t, 1, max(1, skiplock.DefaultFleetStatements/shared))

	start := func(id string, budget int, queues ...string) (*skiplock.Worker, func()) {
		pool := newPool(t, 3) // the test server's connections are shared by the whole suite
		client, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema, Logger: testLogger()})
		require.NoError(t, err)
		qs := map[string]skiplock.QueueConfig{}
		for _, q := range queues {
			qs[q] = skiplock.QueueConfig{MaxWorkers: 10}
		}
		w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{ID: id, Queues: qs, FleetStatements: budget, Logger: testLogger()})
		require.NoError(t, err)
		auditSQL := b.q(`INSERT INTO {s}.audit VALUES ($1, $2, $3, $4, clock_timestamp())`)
		require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[auditArgs]) error {
			_, err := pool.Exec(ctx, auditSQL, job.ID, job.Attempts, job.LockedBy, time.Now())
			return err
		}))
		return w, runWorker(t, w)
	}
	var workers []*skiplock.Worker
	var stops []func()
	for i := range shared {
		w, stop := start(fmt.Sprintf("shared-%d", i), 0, "default")
		workers, stops = append(workers, w), append(stops, stop)
	}
	alone, _ := start("alone", 0, "other")

	fleetIs := func(ws []*skiplock.Worker, peers, limit int) func() bool {
		return func() bool {
			for _, w := range ws {
				if p, l := skiplock.WorkerFleet(w); p != peers || l != limit {
					return false
				}
			}
			return true
		}
	}
	eventually(t, 20*time.Second, fleetIs(workers, shared, 1), "each of the %d workers of the default queue counts %d and keeps 1 statement in flight", shared, shared)
	eventually(t, 20*time.Second, fleetIs([]*skiplock.Worker{alone}, 1, 0), "a worker alone on its queue is not bounded")
	assert.Equal(t, shared+1, b.count(t, `SELECT count(*) FROM {s}.workers WHERE expires_at > now()`), "live workers")
	assert.Equal(t, shared, b.count(t, `SELECT count(*) FROM {s}.workers WHERE queues = '{default}'`))
	listed, err := b.client.Workers(b.ctx)
	require.NoError(t, err)
	require.Len(t, listed, shared+1)
	leaders := 0
	for _, w := range listed {
		assert.True(t, w.Alive, w.ID)
		if w.Leader {
			leaders++
		}
		want := []string{"default"}
		if w.ID == "alone" {
			want = []string{"other"}
		}
		assert.Equal(t, want, w.Queues, w.ID)
	}
	assert.Equal(t, 1, leaders, "one worker leads the maintenance")

	// A second worker on the other queue: both count 2; the one whose budget is negative
	// stays unbounded, the other keeps half the default budget.
	unbounded, _ := start("unbounded", -1, "other")
	eventually(t, 20*time.Second, fleetIs([]*skiplock.Worker{alone}, 2, skiplock.DefaultFleetStatements/2), "a worker with one peer keeps half the budget")
	eventually(t, 20*time.Second, fleetIs([]*skiplock.Worker{unbounded}, 2, 0), "a negative FleetStatements: no bound")

	const jobs = 3000
	enqueueAudit(t, b, jobs)
	eventually(t, 2*time.Minute, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive`) == jobs
	}, "all jobs archived")
	assert.Equal(t, jobs, b.count(t, `SELECT count(*) FROM {s}.audit`), "executions")
	assert.Equal(t, jobs, b.count(t, `SELECT count(DISTINCT job_id) FROM {s}.audit`), "distinct jobs")
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE attempts <> 1 OR status <> 'succeeded'`))
	assert.Equal(t, shared, b.count(t, `SELECT count(DISTINCT worker) FROM {s}.audit`), "every bounded worker took part")

	// A worker that stops removes its row at once; the others count one fewer.
	stops[0]()
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.workers WHERE id = 'shared-0'`))
	eventually(t, 20*time.Second, fleetIs(workers[1:], shared-1, max(1, skiplock.DefaultFleetStatements/(shared-1))), "the other workers count %d", shared-1)
}

// A worker of this version needs migration 7 (the workers table): on a schema migrated
// only up to 6 it refuses to start, saying so, and starts once the schema is migrated.
func TestWorker_RefusesASchemaWithoutTheWorkersTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	require.NoError(t, skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema, TargetVersion: 6}))
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Logger: testLogger()})
	require.NoError(t, err)
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{Logger: testLogger()})
	require.NoError(t, err)
	require.ErrorIs(t, w.Run(ctx), skiplock.ErrNotMigrated)

	require.NoError(t, skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}))
	w, err = skiplock.NewWorker(client, skiplock.WorkerConfig{Logger: testLogger()})
	require.NoError(t, err)
	stop := runWorker(t, w)
	stop()
}

// Workers that take no part in the election (a negative SweepInterval: a Sweeper runs
// elsewhere) still register, so they count each other and are bounded the same way; they
// never take the lead.
func TestFleet_WorkersWithoutTheElectionRegisterToo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var workers []*skiplock.Worker
	for i := range 3 {
		client, err := skiplock.NewClient(newPool(t, 3), skiplock.Config{Schema: b.schema, Logger: testLogger()})
		require.NoError(t, err)
		w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{ID: fmt.Sprintf("nosweep-%d", i), SweepInterval: -1, Logger: testLogger()})
		require.NoError(t, err)
		require.NoError(t, skiplock.Handle(w, func(context.Context, *skiplock.Job[noopArgs]) error { return nil }))
		runWorker(t, w)
		workers = append(workers, w)
	}
	eventually(t, 20*time.Second, func() bool {
		for _, w := range workers {
			if p, l := skiplock.WorkerFleet(w); p != 3 || l != skiplock.DefaultFleetStatements/3 {
				return false
			}
		}
		return true
	}, "each of 3 workers without the election counts 3")
	listed, err := b.client.Workers(b.ctx)
	require.NoError(t, err)
	require.Len(t, listed, 3)
	for _, w := range listed {
		assert.True(t, w.Alive, w.ID)
		assert.False(t, w.Leader, w.ID)
	}
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.leader WHERE expires_at > now()`), "no worker campaigned")
}
