package pgtest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/pgtest"
)

func TestURL_Connects(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	conn := pgtest.Connect(t, pgtest.URL(t))

	var one int
	require.NoError(t, conn.QueryRow(ctx, "select 1").Scan(&one))
	assert.Equal(t, 1, one)

	// PGTEST_FORCE=initdb must really make URL start a throwaway cluster of its own.
	if os.Getenv("PGTEST_FORCE") == "initdb" {
		var dataDir string
		require.NoError(t, conn.QueryRow(ctx, "show data_directory").Scan(&dataDir))
		assert.True(t, strings.HasPrefix(filepath.Base(filepath.Dir(dataDir)), "pgtest-"),
			"data directory %s is not a throwaway cluster's", dataDir)
	}
}

func TestPool_Connects(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)

	var one int
	require.NoError(t, pool.QueryRow(t.Context(), "select 1").Scan(&one))
	assert.Equal(t, 1, one)
}

func TestStartCluster_ThrowawayClusterPath(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	// The parent t.TempDir makes is mode 0700; the unprivileged user that runs postgres when
	// the tests run as root must be able to pass through it.
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))

	c, err := pgtest.StartCluster(ctx, dir, pgtest.ClusterOptions{Settings: map[string]string{"work_mem": "5MB"}})
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, c.Stop(context.Background()))
	})
	assert.Equal(t, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.Port), c.URL())
	assert.NotZero(t, c.Port)
	firstPID := c.PID()
	require.NotZero(t, firstPID)

	conn, err := pgx.Connect(ctx, c.URL())
	require.NoError(t, err)
	var workMem string
	require.NoError(t, conn.QueryRow(ctx, "show work_mem").Scan(&workMem))
	assert.Equal(t, "5MB", workMem, "ClusterOptions.Settings must reach the server")
	_, err = conn.Exec(ctx, "create table survivor (v text); insert into survivor values ('kept')")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))

	require.NoError(t, c.Restart(ctx))
	assert.NotEqual(t, firstPID, c.PID(), "a restart starts a new postmaster")

	conn, err = pgx.Connect(ctx, c.URL())
	require.NoError(t, err)
	var v string
	require.NoError(t, conn.QueryRow(ctx, "select v from survivor").Scan(&v))
	assert.Equal(t, "kept", v)
	require.NoError(t, conn.Close(ctx))

	require.NoError(t, c.Stop(ctx))
	assert.Zero(t, c.PID(), "a stopped cluster has no postmaster.pid")
	_, err = pgx.Connect(ctx, c.URL())
	assert.Error(t, err, "a stopped cluster must not answer")
	require.NoError(t, c.Stop(ctx), "stopping a stopped cluster does nothing")

	t.Run("RestartsStoppedCluster", func(t *testing.T) {
		require.NoError(t, c.Restart(ctx))
		conn := pgtest.Connect(t, c.URL())
		require.NoError(t, conn.QueryRow(ctx, "select v from survivor").Scan(&v))
		assert.Equal(t, "kept", v)
	})

	// URL's step 3 is the same StartCluster plus a watchdog that removes the cluster when
	// the test process exits.
	t.Run("URLFallback", func(t *testing.T) {
		tc, err := pgtest.StartThrowaway(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, tc.Stop(context.Background())) })
		assert.Equal(t, os.TempDir(), filepath.Dir(tc.Dir))
		conn := pgtest.Connect(t, tc.URL())
		var one int
		require.NoError(t, conn.QueryRow(ctx, "select 1").Scan(&one))
	})
}

func TestStartCluster_RejectsBadOptions(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string]pgtest.ClusterOptions{
		"NegativePort":   {Port: -1},
		"PortTooHigh":    {Port: 70000},
		"BadSettingName": {Settings: map[string]string{"work_mem = 1; x": "1"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := pgtest.StartCluster(t.Context(), filepath.Join(t.TempDir(), "c"), opts)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "use ")
		})
	}
}

func TestFindBin_FindsServerPrograms(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		p, err := pgtest.FindBin(name)
		require.NoError(t, err)
		assert.Equal(t, name, filepath.Base(p))
	}
	_, err := pgtest.FindBin("pgtest-no-such-program")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "apt-get install postgresql")
}

func TestSchema_Isolated(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	conn := pgtest.Connect(t, pgtest.URL(t))

	var first, second string
	t.Run("TwoSchemas", func(t *testing.T) {
		first, second = pgtest.Schema(t), pgtest.Schema(t)
		require.NotEqual(t, first, second)
		for _, s := range []string{first, second} {
			id := pgx.Identifier{s}.Sanitize()
			_, err := conn.Exec(ctx, "create table "+id+".t (v text)")
			require.NoError(t, err)
			_, err = conn.Exec(ctx, "insert into "+id+".t values ($1)", s)
			require.NoError(t, err)
		}
		for _, s := range []string{first, second} {
			var v string
			require.NoError(t, conn.QueryRow(ctx, "select v from "+pgx.Identifier{s}.Sanitize()+".t").Scan(&v))
			assert.Equal(t, s, v, "each schema holds only its own rows")
		}
	})

	var left int
	require.NoError(t, conn.QueryRow(ctx,
		"select count(*) from pg_namespace where nspname = any($1)", []string{first, second}).Scan(&left))
	assert.Zero(t, left, "schemas %s and %s must be dropped when their test ends", first, second)
}

func TestSchema_NameIsValid(t *testing.T) {
	t.Parallel()
	valid := regexp.MustCompile(`^t_[a-z0-9_]*[0-9a-f]{8}$`)
	for _, name := range []string{
		"Plain",
		"with spaces and UPPER",
		"ünïcödé ✓ only",
		"✓✓✓",
		"a very long subtest name that goes on and on well past forty characters",
		"__under__scores__",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := pgtest.Schema(t)
			assert.LessOrEqual(t, len(s), 40)
			assert.Regexp(t, valid, s)
			assert.NotContains(t, s, "__")
		})
	}
}

// A server run under a FakeClock reads its wall clock stepped, at once and in both
// directions, across a restart too.
func TestFakeClock_StepsTheServersWallClock(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	require.NoError(t, os.Chmod(dir, 0o755))
	clock, err := pgtest.NewFakeClock(dir)
	require.NoError(t, err, "libfaketime is needed")
	c, err := pgtest.StartCluster(ctx, filepath.Join(dir, "pg"), pgtest.ClusterOptions{Env: clock.Env()})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Stop(context.Background())) })

	// ahead returns how far the server's clock_timestamp() is ahead of ours, in seconds.
	ahead := func() float64 {
		conn := pgtest.Connect(t, c.URL())
		var server time.Time
		require.NoError(t, conn.QueryRow(ctx, "select clock_timestamp()").Scan(&server))
		return server.Sub(time.Now()).Seconds()
	}
	assert.InDelta(t, 0, ahead(), 2)
	require.NoError(t, clock.Step(time.Hour))
	assert.InDelta(t, 3600, ahead(), 2)
	require.NoError(t, clock.Step(-2*time.Hour))
	assert.InDelta(t, -3600, ahead(), 2)
	assert.Equal(t, -time.Hour, clock.Offset())
	require.NoError(t, c.Restart(ctx))
	assert.InDelta(t, -3600, ahead(), 2, "a restarted server runs under the clock too")
}
