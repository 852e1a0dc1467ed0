package skiplock_test

// Tests of the leader election (leader.go): one worker of a fleet leads the maintenance,
// and when its process dies another takes over within seconds.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// childWorkerEnv, when set in the environment of this test binary, makes it run one
// worker instead of the tests: "url|schema|id". Tests start such children to kill them
// with SIGKILL, as a crashed host would die.
const childWorkerEnv = "SKIPLOCK_TEST_CHILD_WORKER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childWorkerEnv); spec != "" {
		if err := runChildWorker(spec); err != nil {
			fmt.Fprintln(os.Stderr, "child worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runChildWorker runs a worker on every queue named in spec with a one-second sweep, until
// SIGTERM (or SIGKILL, which is the point).
func runChildWorker(spec string) error {
	parts := strings.SplitN(spec, "|", 3)
	if len(parts) != 3 {
		return fmt.Errorf("bad %s %q", childWorkerEnv, spec)
	}
	url, schema, id := parts[0], parts[1], parts[2]
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.MaxConns = 3 // the test server's connections are shared by the whole suite
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Logger: testLogger()})
	if err != nil {
		return err
	}
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{ID: id, SweepInterval: time.Second, Logger: testLogger()})
	if err != nil {
		return err
	}
	if err := skiplock.Handle(w, func(context.Context, *skiplock.Job[noopArgs]) error { return nil }); err != nil {
		return err
	}
	return w.Run(ctx)
}

// startChild starts this test binary as a child worker with id, killed at cleanup.
func startChild(t *testing.T, b *bundle, url, id string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childWorkerEnv+"="+url+"|"+b.schema+"|"+id)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	})
	return cmd
}

// leaderRow reads the maintenance leader and whether its term is still running.
func leaderRow(t *testing.T, b *bundle) (id string, elected time.Time, live bool) {
	t.Helper()
	err := b.pool.QueryRow(b.ctx, b.q(`SELECT leader_id, elected_at, expires_at > now()
		FROM {s}.leader WHERE name = 'maintenance'`)).Scan(&id, &elected, &live)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", time.Time{}, false
	}
	require.NoError(t, err)
	return id, elected, live
}

func TestLeader_AnotherWorkerTakesOverWhenTheLeaderProcessDies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	url := b.pool.Config().ConnString()
	ids := []string{"lead-a-" + b.schema, "lead-b-" + b.schema}
	procs := map[string]*exec.Cmd{}
	for _, id := range ids {
		procs[id] = startChild(t, b, url, id)
	}
	var leader string
	eventually(t, 60*time.Second, func() bool {
		id, _, live := leaderRow(t, b)
		leader = id
		return live && procs[id] != nil
	}, "one of the two workers leads")

	// A job finished long ago: only the leader's sweep purges it.
	purgeable := func() int {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE id = 1`)
	}
	killed := time.Now()
	require.NoError(t, procs[leader].Process.Signal(syscall.SIGKILL))
	_ = procs[leader].Wait()
	_, err := b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority,
		run_at, attempts, max_attempts, created_at, finished_at)
		VALUES (1, 'default', 'k', '{}', 'succeeded', 0, now(), 1, 20, now(), now() - interval '30 days')`))
	require.NoError(t, err)

	var successor string
	eventually(t, 30*time.Second, func() bool {
		id, _, live := leaderRow(t, b)
		successor = id
		return live && id != leader
	}, "the surviving worker took over the lead from %s", leader)
	took := time.Since(killed)
	t.Logf("leader %s killed; %s leads %.1fs later (term %s)", leader, successor, took.Seconds(), "5s")
	assert.NotEqual(t, leader, successor)
	assert.Contains(t, ids, successor)
	eventually(t, 30*time.Second, func() bool { return purgeable() == 0 }, "the new leader's sweep purged the old archive row")
}

func TestLeader_OneLeaderAmongManyWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Five workers in one process, each on its own pool as separate hosts would be (small
	// pools: the test server's connections are shared by the whole suite).
	for i := range 5 {
		client, err := skiplock.NewClient(newPool(t, 2), skiplock.Config{Schema: b.schema, Logger: testLogger()})
		require.NoError(t, err)
		w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{ID: fmt.Sprintf("many-%d-%s", i, b.schema), SweepInterval: time.Second, Logger: testLogger()})
		require.NoError(t, err)
		runWorker(t, w)
	}
	var first string
	eventually(t, 30*time.Second, func() bool {
		id, _, live := leaderRow(t, b)
		first = id
		return live
	}, "a leader is elected")
	// Over three terms, the lead never changes hands: followers only take an expired term.
	_, elected, _ := leaderRow(t, b)
	holdsFor(t, 15*time.Second, 250*time.Millisecond, func() {
		id, e, live := leaderRow(t, b)
		require.True(t, live, "the leader's term lapsed while it was running")
		require.Equal(t, first, id, "the lead changed hands while its leader was alive")
		require.True(t, e.Equal(elected), "the leader's term restarted")
	})
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.leader`))
}

func TestLeader_ResignsAtShutdown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, b, skiplock.WorkerConfig{ID: "resign-" + b.schema, SweepInterval: time.Second, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(context.Context, *skiplock.Job[noopArgs]) error { return nil }))
	stop := runWorker(t, w)
	eventually(t, 30*time.Second, func() bool { id, _, live := leaderRow(t, b); return live && id == w.ID() }, "the only worker leads")
	stop()
	id, _, live := leaderRow(t, b)
	assert.Equal(t, w.ID(), id)
	assert.False(t, live, "a worker that stopped must end its term, so another takes over at once")
}

func TestLeader_StandaloneSweepersElectOneAndItPurges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority,
		run_at, attempts, max_attempts, created_at, finished_at)
		VALUES (1, 'default', 'k', '{}', 'succeeded', 0, now(), 1, 20, now(), now() - interval '30 days')`))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 3 {
		s, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{Interval: 200 * time.Millisecond, Logger: testLogger()})
		require.NoError(t, err)
		wg.Go(func() { assert.NoError(t, s.Run(ctx)) })
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			wg.Wait()
		}
	}
	t.Cleanup(stop)
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive`) == 0
	}, "the leading sweeper purged the archive row past retention")
	id, _, live := leaderRow(t, b)
	assert.True(t, live)
	assert.True(t, strings.HasPrefix(id, "sweeper-"), "leader %q", id)
	stop()
	_, _, live = leaderRow(t, b)
	assert.False(t, live, "the leading sweeper resigned when its Run ended")
}
