package chaos

import (
	"fmt"
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

// TestCheckLimitPeriods_FindsStartsAboveTheLimitInForce feeds the limit check made-up
// executions around a lowering and a raise: a start while the old jobs still run at the
// new limit is a broken promise once the lowering took hold, not during its grace.
func TestCheckLimitPeriods_FindsStartsAboveTheLimitInForce(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := func(d time.Duration) time.Duration { return d * time.Second }
	changes := []LimitChange{
		{At: s(10), Took: 10 * time.Millisecond, Concurrency: 2},
		{At: s(20), Took: 10 * time.Millisecond, Concurrency: 4},
	}
	periods := limitPeriods(changes)
	assert.Equal(t, []LimitPeriod{
		{From: 0, Limit: 6},
		{From: s(10) + 10*time.Millisecond + limitGrace, Limit: 2},
		{From: s(20), Limit: 4},
	}, periods)

	// Three jobs from t=1s to t=30s; a fourth starts in the lowering's grace (allowed),
	// a fifth after it (broken), a sixth after the raise (five running: broken).
	var execs []*execution
	add := func(job int64, from, to time.Duration) {
		execs = append(execs, &execution{job: job, attempt: 1, start: t0.Add(from), end: t0.Add(to)})
	}
	for j := range int64(3) {
		add(j, s(1), s(30))
	}
	add(3, s(10)+limitGrace/2, s(30))
	add(4, s(15), s(16))
	add(5, s(25), s(26))
	which := map[int64]bool{0: true, 1: true, 2: true, 3: true, 4: true, 5: true}
	evs := concurrencyEvents(execs, which, func(e *execution) time.Time { return e.end })
	var examples []string
	over := checkLimitPeriods(periods, evs, t0, func(kind, format string, args ...any) {
		examples = append(examples, kind+": "+fmt.Sprintf(format, args...))
	})
	assert.Len(t, examples, 2)
	assert.EqualValues(t, 2, over, "starts above the limit in force")
	assert.Equal(t, 4, periods[0].MostAtStart)
	assert.Equal(t, 5, periods[1].MostAtStart)
	assert.Equal(t, 5, periods[2].MostAtStart)
}
