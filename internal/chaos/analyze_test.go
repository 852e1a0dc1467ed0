package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestCheckJob_FindsBrokenPromises feeds the per-job checks made-up executions, so that a
// run that reports "all promises kept" is known to be able to report otherwise.
func TestCheckJob_FindsBrokenPromises(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ended := func(ms int) *time.Time { e := at(ms); return &e }
	killed := &proc{id: "k", killed: true, expected: true, killAt: at(50), exitAt: at(55)}
	live := &proc{id: "a", expected: true, exitAt: at(100_000)}
	other := &proc{id: "b", expected: true, exitAt: at(100_000)}
	procs := map[string]*proc{"k": killed, "a": live, "b": other}
	restart := Fault{Kind: FaultRestart, At: at(20_000), End: at(21_000)}
	final := func(attempt int, worker string) *jobRow {
		return &jobRow{id: 1, status: "succeeded", attempts: attempt, lockedBy: worker}
	}
	// exec builds an execution; end < 0 means no end recorded.
	exec := func(attempt int, worker string, start, end int) *execution {
		e := &execution{id: worker, job: 1, attempt: attempt, worker: worker, start: at(start)}
		if end >= 0 {
			e.ended = ended(end)
			e.end = *e.ended
		} else {
			e.end = procs[worker].exitAt
			e.cutByDie = procs[worker].killed
		}
		return e
	}

	tests := []struct {
		name   string
		execs  []*execution
		final  *jobRow
		faults []Fault
		want   Report
	}{
		{
			name:  "one execution",
			execs: []*execution{exec(1, "a", 0, 10)},
			final: final(1, "a"),
		},
		{
			name:  "re-run after a kill, no overlap",
			execs: []*execution{exec(1, "k", 40, -1), exec(2, "a", 3100, 3110)},
			final: final(2, "a"),
			want:  Report{RerunJobs: 1, Reruns: 1, RerunsKill: 1},
		},
		{
			name:  "re-run that started before the kill overlaps",
			execs: []*execution{exec(1, "k", 40, -1), exec(2, "a", 45, 60)},
			final: final(2, "a"),
			want:  Report{Overlapping: 1, OverlappingKilled: 1, RerunJobs: 1, Reruns: 1, RerunsUnexplained: 1},
		},
		{
			name:  "two live executions overlap",
			execs: []*execution{exec(1, "a", 0, 30), exec(2, "b", 20, 40)},
			final: final(2, "b"),
			want:  Report{Overlapping: 1, RerunJobs: 1, Reruns: 1, RerunsUnexplained: 1},
		},
		{
			name:   "re-run across a database restart",
			execs:  []*execution{exec(1, "a", 19_990, 19_995), exec(2, "b", 24_000, 24_010)},
			final:  final(2, "b"),
			faults: []Fault{restart},
			want:   Report{RerunJobs: 1, Reruns: 1, RerunsDBFault: 1},
		},
		{
			name:  "one attempt executed twice",
			execs: []*execution{exec(1, "a", 0, 10), exec(1, "b", 20, 30)},
			final: final(1, "b"),
			want:  Report{SameAttempt: 1, RerunJobs: 1, Reruns: 1, RerunsUnexplained: 1},
		},
		{
			name:  "a stale worker completed the job",
			execs: []*execution{exec(1, "a", 0, 10), exec(2, "b", 5000, 5010)},
			final: final(1, "a"),
			want:  Report{AfterFinal: 1, RerunJobs: 1, Reruns: 1, RerunsUnexplained: 1},
		},
		{
			name:  "succeeded but the final attempt never finished",
			execs: []*execution{exec(1, "k", 40, -1)},
			final: final(1, "k"),
			want:  Report{NoFinalExecution: 1, RerunJobs: 1, Reruns: 1, RerunsUnexplained: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &runner{faults: tt.faults}
			var got Report
			r.checkJob(&got, tt.execs, tt.final, procs, func(string, string, ...any) {})
			assert.Equal(t, tt.want, got)
		})
	}
}
