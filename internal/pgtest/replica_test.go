package pgtest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// TestStandby_FailoverKeepsSynchronousCommits builds a primary with a synchronous standby,
// kills the primary's every process with SIGKILL, promotes the standby, and checks that a
// multi-host connection string with target_session_attrs=read-write finds the new primary
// and that every commit acknowledged before the kill is there.
func TestStandby_FailoverKeepsSynchronousCommits(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	require.NoError(t, os.Chmod(dir, 0o755))

	primary, err := pgtest.StartCluster(ctx, filepath.Join(dir, "a"), pgtest.ClusterOptions{Settings: map[string]string{
		"synchronous_standby_names": "*", "synchronous_commit": "on",
	}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, primary.Stop(context.Background())) })
	standby, err := pgtest.StartStandby(ctx, primary, filepath.Join(dir, "b"), pgtest.ClusterOptions{Settings: map[string]string{
		"synchronous_standby_names": "",
	}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, standby.Stop(context.Background())) })

	url := fmt.Sprintf("postgres://postgres@/postgres?host=127.0.0.1,127.0.0.1&port=%d,%d&sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		primary.Port, standby.Port)
	conn := pgtest.Connect(t, url)
	var port int
	require.NoError(t, conn.QueryRow(ctx, "select current_setting('port')::int").Scan(&port))
	require.Equal(t, primary.Port, port, "read-write picks the primary")
	_, err = conn.Exec(ctx, "create table acked (n int)")
	require.NoError(t, err)
	for n := range 100 {
		_, err := conn.Exec(ctx, "insert into acked values ($1)", n)
		require.NoError(t, err)
	}

	// The standby is read-only until promoted.
	sconn := pgtest.Connect(t, standby.URL())
	_, err = sconn.Exec(ctx, "insert into acked values (-1)")
	require.Error(t, err)

	oldPID := primary.PID()
	require.NoError(t, primary.Kill(ctx))
	assert.False(t, processRuns(oldPID), "the postmaster is gone")
	_, err = conn.Exec(ctx, "select 1")
	require.Error(t, err, "the old primary's sessions died with it")
	_, err = pgx.Connect(ctx, url)
	require.Error(t, err, "no read-write server before the promotion")

	require.NoError(t, standby.Promote(ctx))
	conn = pgtest.Connect(t, url)
	require.NoError(t, conn.QueryRow(ctx, "select current_setting('port')::int").Scan(&port))
	assert.Equal(t, standby.Port, port, "read-write now picks the promoted standby")
	var n int
	require.NoError(t, conn.QueryRow(ctx, "select count(*) from acked").Scan(&n))
	assert.Equal(t, 100, n, "every acknowledged synchronous commit survived")
	_, err = conn.Exec(ctx, "insert into acked values (100)")
	require.NoError(t, err, "the new primary takes writes without waiting for a standby")
	require.NoError(t, primary.Stop(ctx), "stopping a killed cluster removes its stale postmaster.pid")
	assert.Zero(t, primary.PID())
}
