package chaos_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/chaos"
	"github.com/skiplock/skiplock/internal/chaos/audit"
)

// testWriter sends the harness's output to the test log, a line at a time.
type testWriter struct {
	t   *testing.T
	mu  sync.Mutex
	buf []byte
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.t.Log(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}

// keepLogsOnFailure registers a cleanup that, when the test failed, copies the worker and
// server logs of the runs under dir (a t.TempDir, removed after it) to a directory that
// stays, and prints the end of each worker log, so that a failure on CI can be read.
// Register it after the call to t.TempDir that made dir, so that it runs first.
func keepLogsOnFailure(t *testing.T, dir string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		keep, err := os.MkdirTemp("", "skiplock-chaos-failed-")
		if err != nil {
			t.Logf("cannot keep the logs: %v", err)
			return
		}
		runs, _ := filepath.Glob(filepath.Join(dir, "chaos-*"))
		for _, run := range runs {
			dst := filepath.Join(keep, filepath.Base(run))
			_ = os.MkdirAll(dst, 0o755)
			for _, src := range []string{filepath.Join(run, "logs"), filepath.Join(run, "pg", "postgres.log")} {
				if out, err := exec.Command("cp", "-r", src, dst).CombinedOutput(); err != nil {
					t.Logf("cannot copy %s: %v: %s", src, err, out)
				}
			}
			logs, _ := filepath.Glob(filepath.Join(run, "logs", "*.log"))
			for _, l := range logs {
				out, _ := exec.Command("tail", "-n", "25", l).Output()
				t.Logf("--- end of %s ---\n%s", filepath.Base(l), out)
			}
		}
		t.Logf("logs of the failed run kept in %s", keep)
	})
}

// TestChaos_Reduced runs the reduced-size chaos run (3 worker processes, 3,000 jobs, 4
// kills, a Postgres restart, a termination of every backend, a rolling deploy that halves
// the visibility timeout, 2 s of CPU starvation at four busy processes per core, a
// black-holed worker, a worker whose pool its CompleteTx handlers hold full, a 75 s step
// of the server's clock (libfaketime: back for 3 s, then forward, so every worker's row
// and job lease reads expired at once), and six changes of the limited queue's limits),
// with 120 durable jobs of five steps among the jobs (40 sleeping between two steps, 40
// waiting for a signal, half of them sent before the wait), and checks the promises:
// nothing lost, everything final, no overlapping executions, no double claims, no stale
// completions. Re-runs that no injected fault explains are logged, not failed:
// at-least-once execution allows them.
func TestChaos_Reduced(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The run's directory (cluster, logs) goes when the test ends, whatever happened; the
	// postgres user must be able to reach it.
	opts := chaos.Quick()
	opts.Dir = t.TempDir()
	keepLogsOnFailure(t, opts.Dir)
	for _, d := range []string{opts.Dir, filepath.Dir(opts.Dir)} {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	rep, err := chaos.Run(ctx, opts, &testWriter{t: t})
	require.NoError(t, err)

	assert.Equal(t, int64(3000), rep.Enqueued)
	assert.Equal(t, rep.Enqueued, rep.Succeeded, "every job succeeds")
	assert.Zero(t, rep.Lost, "lost jobs")
	assert.Zero(t, rep.NotFinal, "jobs not final")
	assert.Zero(t, rep.Dead+rep.Failed, "dead or failed jobs")
	assert.Zero(t, rep.Overlapping, "overlapping executions")
	assert.Zero(t, rep.SameAttempt, "attempts executed twice")
	assert.Zero(t, rep.NoFinalExecution+rep.AfterFinal, "stale or phantom completions")
	assert.Empty(t, rep.Crashes, "worker crashes")
	// The workers of odd slots claim ahead of their free slots (a raised threshold):
	// one of their claims took more jobs than the queue's 32 slots, at most four times
	// that, and no worker ever ran more than 32 handlers of the queue at once.
	assert.Greater(t, rep.ClaimMax, rep.Options.Concurrency, "a claim ahead of the free slots")
	assert.LessOrEqual(t, rep.ClaimMax, 4*rep.Options.Concurrency, "a claim ahead holds at most 4 x MaxWorkers")
	assert.Positive(t, rep.RunningMax, "the default queue ran")
	assert.LessOrEqual(t, rep.RunningMax, rep.Options.Concurrency, "handlers at once in one worker (MaxWorkers)")
	assert.Equal(t, int64(3000/audit.LimitedEvery), rep.LimitedJobs, "jobs of the limited queue")
	assert.Positive(t, rep.LimitedMax, "the limited queue ran")
	assert.LessOrEqual(t, rep.LimitedMax, audit.LimitedConcurrency, "the limited queue's global limit")
	// Its limits changed during the run, across both claim paths and both directions; no
	// start left more of its jobs running than the limit in force.
	assert.Len(t, rep.LimitChanges, 6, "changes of the limited queue's limits")
	assert.Zero(t, rep.LimitedOver, "starts above the limit in force")
	for _, p := range rep.LimitPeriods {
		assert.LessOrEqual(t, p.MostAtStart, p.Limit, "running at a start from %v, under limit %d", p.From, p.Limit)
	}
	assert.Empty(t, rep.Broken())
	for _, w := range rep.Warnings() {
		t.Logf("warning: %s", w)
	}
	// A healthy worker whose handlers held its pool full (more slots than connections,
	// each handler holding a transaction for 2 s and committing its success in it) kept
	// every job: none cancelled, none run twice, every one succeeded.
	require.NotNil(t, rep.HeldPool, "the held-pool fault ran")
	assert.Equal(t, chaos.HeldPoolSlots, rep.HeldPool.Jobs, "held-pool jobs")
	assert.Zero(t, rep.HeldPool.NotSucceeded, "held-pool jobs not succeeded")
	assert.Zero(t, rep.HeldPool.EndedEarly, "held-pool handlers cancelled or failed: %v", rep.HeldPool.Examples)
	assert.Zero(t, rep.HeldPool.Reruns, "held-pool jobs run again")
	assert.GreaterOrEqual(t, rep.HeldPool.MostWaited, chaos.HeldPoolHold, "the pool was held: a handler waited for a connection")
	// The faults happened, and the workers recovered from each.
	require.Len(t, rep.Faults, 11)
	stepped := false
	for _, f := range rep.Faults {
		assert.GreaterOrEqual(t, f.FirstCompletion, time.Duration(0), "no job completed after %s at %v", f.Kind, f.At)
		stepped = stepped || f.Kind == chaos.FaultClockStep
	}
	assert.True(t, stepped, "the server's clock stepped")
	// The durable jobs: every one succeeded, with exactly one business row per step; no
	// step's function ran again once its step had committed, none started before the step
	// before it had committed (chaos.durable_execs, written outside the steps' transactions).
	d := rep.Durable
	require.NotNil(t, d, "the durable phase ran")
	t.Log(d.Summary())
	assert.Equal(t, int64(120), d.Jobs)
	assert.Equal(t, d.Jobs, d.Succeeded, "every durable job succeeds")
	assert.Equal(t, int64(audit.DurableSteps)*d.Jobs, d.Steps, "one business row per step")
	assert.Zero(t, d.RunTwice(), "durable steps run twice")
	assert.Zero(t, d.Lost(), "durable jobs or steps lost")
	assert.Zero(t, d.OutOfOrder, "durable steps out of order")
	assert.Zero(t, d.SignalWrong, "signal steps without the payload sent")
	assert.Equal(t, int64(40), d.Sleeping)
	assert.Equal(t, int64(40), d.Signalled)
	assert.Positive(t, d.SignalsBefore, "signals sent before the wait")
	assert.Positive(t, d.SignalsAfter, "signals sent to a parked job")
}

// TestChaos_FailoverSynchronous runs the reduced failover run with synchronous
// replication: a streaming standby, every process on a multi-host URL, the primary's WAL
// sender paused for 500ms and then every process of the primary killed with SIGKILL, the
// standby promoted. Nothing acknowledged may be lost and nothing may run twice at once;
// the workers, their listeners and sweepers must find the new primary and finish the run.
func TestChaos_FailoverSynchronous(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	opts := chaos.QuickFailover(chaos.SyncFailover)
	opts.Dir = t.TempDir()
	keepLogsOnFailure(t, opts.Dir)
	for _, d := range []string{opts.Dir, filepath.Dir(opts.Dir)} {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	rep, err := chaos.Run(ctx, opts, &testWriter{t: t})
	require.NoError(t, err)

	assert.Equal(t, int64(3000), rep.Enqueued)
	assert.Equal(t, rep.Enqueued, rep.Succeeded, "every acknowledged enqueue succeeds")
	assert.Zero(t, rep.Lost, "acknowledged enqueues lost")
	assert.Zero(t, rep.NotFinal, "jobs not final")
	assert.Zero(t, rep.Overlapping, "overlapping executions")
	assert.Zero(t, rep.SameAttempt, "attempts executed twice")
	assert.Zero(t, rep.NoFinalExecution+rep.AfterFinal, "successes the audit does not back")
	assert.Zero(t, rep.UnfinishedOther, "executions whose end was lost")
	assert.Empty(t, rep.Crashes, "worker crashes")
	assert.Empty(t, rep.Broken())
	require.Len(t, rep.Faults, 1)
	assert.GreaterOrEqual(t, rep.Faults[0].FirstCompletion, time.Duration(0), "a job completed on the new primary")

	fr := rep.Failover
	require.NotNil(t, fr)
	assert.Zero(t, fr.RunningNotDone, "jobs running at the kill that never succeeded")
	assert.Equal(t, fr.RunningAtKill, fr.RunningSameAttempt+fr.RunningLeaseExpired+fr.RunningFailed)
	assert.Empty(t, fr.OldInspectErr)
	assert.Equal(t, fr.Workers, fr.Listeners, "every worker's listener reconnected to the new primary")
}

// A fault that outlasts the time planned for it (the held pool needs four rounds of its
// 2 s transactions, 8 s, against a 1.5 s fault interval) pushes the faults after it past
// the planned fault window. The run's jobs are tied to the faults as they happen, so the
// faults after it still meet work, and the run measures a first completion after each.
// Before, the jobs were spread over the planned window only: here all 300 were done
// before the restart and the termination after the held pool, whose first completions
// read "never". (No kill: a killed worker's jobs run again seconds later, which would
// hide the missing work.)
func TestChaos_FaultsAfterALongFaultStillMeetWork(t *testing.T) {
	t.Parallel()
	rep := runChaos(t, 3*time.Minute, chaos.Options{Workers: 2, Jobs: 300, Kills: -1, Workflows: -1, Batches: -1, Durable: -1,
		NoDeploy: true, NoBlackhole: true, NoStarve: true, NoClockStep: true,
		HeldPoolJobs: chaos.HeldPoolSlots, DrainTimeout: time.Minute})

	assert.Equal(t, int64(300), rep.Enqueued)
	assert.Equal(t, rep.Enqueued, rep.Succeeded, "every job succeeds")
	assert.Zero(t, rep.Lost, "lost jobs")
	assert.Empty(t, rep.Broken())
	// The plan: the held pool, the restart, the termination; the held pool ended after
	// the planned window (Warmup + 3 × FaultInterval from the start, the first fault at
	// Warmup).
	kinds := []chaos.FaultKind{chaos.FaultHeldPool, chaos.FaultRestart, chaos.FaultTerminate}
	require.Len(t, rep.Faults, len(kinds))
	for i, f := range rep.Faults {
		assert.Equal(t, kinds[i], f.Kind, "fault %d", i+1)
	}
	assert.Greater(t, rep.Faults[0].End.Sub(rep.Faults[0].At), time.Duration(len(kinds))*rep.Options.FaultInterval,
		"the held pool outlasted the planned fault window")
	for i, f := range rep.Faults {
		assert.GreaterOrEqual(t, f.FirstCompletion, time.Duration(0), "no job completed after fault %d (%s)", i+1, f.Kind)
	}
}
