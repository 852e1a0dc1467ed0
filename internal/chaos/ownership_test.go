package chaos_test

// Process-level test of ownership by liveness (issue 30, point 3), on the chaos harness:
// real worker processes, a CPU stressor, a stopped worker. It failed on the code before
// the ownership work (docs/ownership.md lists how). Point 4 is in recovery_test.go.

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/chaos"
)

// Point 3: with the CPU starved (four busy processes per core) for most of the run, at the
// chaos run's short lease (1.5 s, the rolling deploy's), and one busy worker getting no
// CPU at all for 3 s (SIGSTOP, then SIGCONT: the deterministic form of a heartbeat that
// cannot run), no attempt runs twice and no two executions of a job overlap: a live
// worker that was slow for a few seconds must not lose the jobs its handlers still run.
// On the code before the ownership work, a full chaos run at load 25 reported 2
// overlapping executions (a heartbeat missed a 1.5 s lease while the handler still ran);
// here the stalled worker's jobs are reclaimed and run elsewhere while its handlers are
// stopped mid-work, and they finish when it continues.
func TestOwnership_CPUStarvedWorkersNeverRunAnAttemptTwice(t *testing.T) {
	rep := runChaos(t, 10*time.Minute, chaos.Options{Workers: 3, Jobs: 3000, Kills: -1, Durable: -1,
		NoRestart: true, NoTerminate: true, NoDeploy: true, NoBlackhole: true, NoHeldPool: true, NoClockStep: true,
		StarveProcs: 4 * runtime.NumCPU(), StallFor: 3 * time.Second, MaxWork: 500 * time.Millisecond,
		VisibilityTimeout: 1500 * time.Millisecond, SweepInterval: 500 * time.Millisecond,
		// The jobs are enqueued over the fault window (Warmup + FaultInterval), which the
		// starvation fills. No durable jobs: TestChaos_Reduced runs them through every
		// fault, and 600 here lengthened the drain from 3 s to 13 s.
		Warmup: time.Second, FaultInterval: 30 * time.Second, StarveFor: 29 * time.Second, DrainTimeout: 2 * time.Minute})
	require.Len(t, rep.Faults, 1)
	assert.Equal(t, chaos.FaultStarve, rep.Faults[0].Kind)
	t.Logf("starvation: %s", rep.Faults[0].Detail)
	assert.Zero(t, rep.Lost, "lost jobs")
	assert.Zero(t, rep.NotFinal, "jobs not final")
	assert.Zero(t, rep.Overlapping, "overlapping executions (%d during the starvation)", rep.OverlappingStarved)
	assert.Zero(t, rep.SameAttempt, "attempts executed twice")
	assert.Zero(t, rep.NoFinalExecution+rep.AfterFinal, "stale or phantom completions")
}
