package skiplock_test

// The server's clock is not the workers' clock (issue 41, point 3; docs/ownership.md §9):
// a worker is judged dead by what the others saw over their own monotonic clocks, so a
// step of the server's wall clock, forward or back, takes no live worker's jobs, and a
// dead worker is still found within about a lease.

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/blackhole"
	"github.com/skiplock/skiplock/internal/pgtest"
)

type clockStepArgs struct {
	N int `json:"n"`
}

func (clockStepArgs) Kind() string { return "clock_step" }

// clockAudit records each attempt's start and end in a table ordered by a sequence, not
// by a clock: the server's clock steps in this test.
type clockAudit struct{ b *bundle }

func newClockAudit(t *testing.T, b *bundle) clockAudit {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.clock_audit (
		seq bigserial PRIMARY KEY, job_id bigint, attempt int, worker text, event text)`))
	require.NoError(t, err)
	return clockAudit{b}
}

// note records an event, on the test's own pool and context: a cancelled handler, or one
// whose worker's path is cut, still records.
func (a clockAudit) note(job *skiplock.Job[clockStepArgs], worker, event string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := a.b.pool.Exec(ctx, a.b.q(`INSERT INTO {s}.clock_audit (job_id, attempt, worker, event)
		VALUES ($1, $2, $3, $4)`), job.ID, job.Attempts, worker, event)
	return err
}

// overlaps counts the moments at which two attempts of one job ran at once: walking each
// job's events in order, a start while another attempt has not ended.
func (a clockAudit) overlaps(t *testing.T) int {
	return a.b.count(t, `SELECT count(*) FROM (
		SELECT sum(CASE event WHEN 'start' THEN 1 ELSE -1 END) OVER (PARTITION BY job_id ORDER BY seq) AS running
		FROM {s}.clock_audit) r WHERE running > 1`)
}

// startFakeClockServer starts a throwaway cluster under libfaketime and returns its clock
// and a bundle on its default schema, migrated.
func startFakeClockServer(t *testing.T) (*pgtest.FakeClock, *pgtest.Cluster, *bundle) {
	t.Helper()
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "skl-clock-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	clock, err := pgtest.NewFakeClock(dir)
	require.NoError(t, err, "this test steps the server's clock with libfaketime")
	c, err := pgtest.StartCluster(ctx, filepath.Join(dir, "pg"), pgtest.ClusterOptions{Env: clock.Env()})
	require.NoError(t, err, "a throwaway cluster (initdb) runs under libfaketime")
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	pool := newPoolAt(t, c.URL(), 20)
	require.NoError(t, skiplock.Migrate(ctx, pool))
	client, err := skiplock.NewClient(pool, skiplock.Config{Logger: testLogger()})
	require.NoError(t, err)
	return clock, c, &bundle{ctx: ctx, pool: pool, client: client, schema: skiplock.DefaultSchema}
}

// proxiedPoolAt opens a pool on the cluster c through a loopback proxy that the test can
// black-hole.
func proxiedPoolAt(t *testing.T, c *pgtest.Cluster, maxConns int32) (*blackhole.Proxy, *pgxpool.Pool) {
	t.Helper()
	proxy, err := blackhole.Start(net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port)))
	require.NoError(t, err)
	t.Cleanup(func() { proxy.Close() })
	cfg, err := pgxpool.ParseConfig(c.URL())
	require.NoError(t, err)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", uint16(proxy.Port())
	cfg.ConnConfig.ConnectTimeout = time.Second
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return proxy, pool
}

// Three workers run two long jobs each while the server's wall clock steps forward 15 s
// (every lease timestamp reads expired at once), then 70 s more (past the minute after
// which expired worker rows were pruned), then back 85 s. No job is taken from its live
// worker, and no attempt runs beside another. Then worker c's path is cut: its jobs run
// on a and b within about a lease, after c's handlers were cancelled. Before, 2–3 s after
// the first step a worker took another's live jobs ("its worker lease ended") and ran
// them beside their owner; the sweeper did the same by the jobs' own leases.
func TestOwnership_AServerClockStepTakesNoLiveWorkersJobs(t *testing.T) {
	t.Parallel()
	clock, cluster, b := startFakeClockServer(t)
	audit := newClockAudit(t, b)
	const perWorker = 2
	proxy, cPool := proxiedPoolAt(t, cluster, 8)
	cClient, err := skiplock.NewClient(cPool, skiplock.Config{Logger: testLogger()})
	require.NoError(t, err)
	release := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{}), "c": make(chan struct{})}
	for _, id := range []string{"a", "b", "c"} {
		client := b.client
		if id == "c" {
			client = cClient
		}
		// A short visibility timeout and sweep interval: the jobs' own leases read expired
		// after the first step, and the sweeper looks often.
		w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{ID: id, Logger: testLogger(),
			PollInterval: 100 * time.Millisecond, VisibilityTimeout: 5 * time.Second, SweepInterval: 300 * time.Millisecond,
			Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: perWorker}}})
		require.NoError(t, err)
		require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[clockStepArgs]) error {
			if err := audit.note(job, id, "start"); err != nil {
				return err
			}
			select {
			case <-release[id]:
			case <-ctx.Done():
			}
			return audit.note(job, id, "end")
		}))
		runWorker(t, w)
	}
	defer close(release["c"])
	eventually(t, 15*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.workers`) == 3
	}, "the three workers registered")
	params := make([]skiplock.EnqueueParams, 3*perWorker)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: clockStepArgs{N: i}}
	}
	_, err = b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	eventually(t, 15*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM (SELECT locked_by FROM {s}.jobs WHERE status = 'running'
			GROUP BY locked_by HAVING count(*) = $1) w`, perWorker) == 3 &&
			b.count(t, `SELECT count(*) FROM {s}.clock_audit WHERE event = 'start'`) == 3*perWorker
	}, "each worker runs %d jobs", perWorker)
	began := time.Now()

	untouched := func() {
		require.Zero(t, audit.overlaps(t), "two attempts of a job ran at once")
		require.Equal(t, 3*perWorker, b.count(t, `SELECT count(*) FROM {s}.clock_audit WHERE event = 'start'`),
			"a job was taken from its live worker and started again")
		require.Equal(t, 3*perWorker, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'running' AND attempts = 1`),
			"a live worker's job was taken back: %v", b.count(t, `SELECT count(*) FROM {s}.jobs WHERE last_error LIKE '%lease%'`))
		require.Equal(t, 3, b.count(t, `SELECT count(*) FROM {s}.workers`), "a live worker's row was pruned")
	}
	for _, step := range []time.Duration{15 * time.Second, 70 * time.Second, -85 * time.Second} {
		require.NoError(t, clock.Step(step))
		holdsFor(t, 5*time.Second, 50*time.Millisecond, untouched)
	}
	t.Logf("the steps took %.1f s", time.Since(began).Seconds())

	// a's and b's jobs end, so that they have free slots. Then worker c's path goes
	// silent: it cancels its handlers (6.7 s after its last renewal), and a and b, who saw
	// its row stop changing, take its jobs after a lease and run them at once.
	close(release["a"])
	close(release["b"])
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE status = 'succeeded'`) == 2*perWorker
	}, "a's and b's jobs succeeded")
	cut := time.Now()
	proxy.Blackhole()
	defer proxy.Restore() // before the workers stop, so that c stops at once
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.clock_audit WHERE event = 'start' AND attempt = 2 AND worker <> 'c'`) == perWorker
	}, "c's jobs run again on a and b")
	t.Logf("c's jobs started again %.1f s after its path was cut", time.Since(cut).Seconds())
	assert.Zero(t, audit.overlaps(t), "two attempts of a job ran at once")
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.clock_audit WHERE attempt > 1 AND job_id NOT IN
		(SELECT job_id FROM {s}.clock_audit WHERE worker = 'c')`), "a live worker's job was taken")
}
