package chaos_test

// Point 4 of issue 30 (docs/ownership.md): the reclaim by liveness, measured at the
// library's defaults on real worker processes killed with SIGKILL.

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/chaos"
)

// runChaos runs opts in a directory of the test's, logging to the test.
func runChaos(t *testing.T, timeout time.Duration, opts chaos.Options) chaos.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// A short directory: these tests' names would make the cluster's socket path too long
	// under t.TempDir().
	dir, err := os.MkdirTemp("", "chaos-own-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	opts.Dir = dir
	keepLogsOnFailure(t, opts.Dir)
	require.NoError(t, os.Chmod(dir, 0o755))
	rep, err := chaos.Run(ctx, opts, &testWriter{t: t})
	if !errors.Is(err, chaos.ErrPromiseBroken) {
		require.NoError(t, err, "the run could not be carried out")
	}
	return rep
}

// Point 4: at the library's default settings, a SIGKILLed worker's jobs run elsewhere
// within seconds, whoever leads: over 20 kills alternating between the maintenance leader
// and a follower, a median of at most 15 s and a max of at most 25 s. On the code before
// the ownership work, a killed worker's jobs waited for its one-minute lease and the next
// 30 s sweep of the leader (64.6 s and 82.9 s measured, leader and follower).
func TestOwnership_DeadWorkersJobsRunElsewhereWithinSecondsAtDefaults(t *testing.T) {
	rep := runChaos(t, 15*time.Minute, chaos.DefaultLeaseRecovery())
	assert.Zero(t, rep.Lost, "lost jobs")
	assert.Zero(t, rep.NotFinal, "jobs not final")
	assert.Zero(t, rep.Overlapping, "overlapping executions")
	assert.Zero(t, rep.SameAttempt, "attempts executed twice")
	rec, err := rep.KillRecovery()
	require.NoError(t, err)
	t.Logf("recovery at default leases: %d kills (%d leaders), median %s, max %s", rec.Kills, rec.Leaders, rec.Median, rec.Max)
	assert.GreaterOrEqual(t, rec.Kills, 20, "kills of workers holding jobs")
	assert.Positive(t, rec.Leaders, "kills of the leader")
	assert.Less(t, rec.Leaders, rec.Kills, "kills of followers")
	assert.LessOrEqual(t, rec.Median, chaos.RecoveryMedianTarget, "median time until a killed worker's jobs ran elsewhere")
	assert.LessOrEqual(t, rec.Max, chaos.RecoveryMaxTarget, "longest time until a killed worker's jobs ran elsewhere")
}
