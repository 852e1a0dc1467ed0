package chaos

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/skiplock/skiplock/internal/chaos/audit"
)

// TestJudgeFlows_FindsBrokenPromises feeds the workflow checks made-up jobs and
// executions, so that a run that reports no workflow problem is known to be able to
// report one.
func TestJudgeFlows_FindsBrokenPromises(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) *time.Time { v := t0.Add(time.Duration(ms) * time.Millisecond); return &v }
	// A healthy world: workflow 1, its tasks a..e finishing at 10, 20, 20, 30, 40 ms and
	// each starting 1 ms after its last dependency; batch 1 of 2 jobs and its callback.
	healthy := func() ([]flowJob, []*execution, map[int64][]callbackCounts) {
		var jobs []flowJob
		var execs []*execution
		add := func(id int64, kind string, flow, batch int, task string, start, end int) {
			jobs = append(jobs, flowJob{jobRow: jobRow{seq: -1, id: id, status: "succeeded", attempts: 1, lockedBy: "w"},
				kind: kind, finished: at(end), flow: flow, batch: batch, task: task})
			execs = append(execs, &execution{id: fmt.Sprint(id), job: id, attempt: 1, worker: "w", start: *at(start), ended: at(end), end: *at(end)})
		}
		add(1, audit.FlowKind, 1, 0, "a", 0, 10)
		add(2, audit.FlowKind, 1, 0, "b", 11, 20)
		add(3, audit.FlowKind, 1, 0, "c", 11, 20)
		add(4, audit.FlowKind, 1, 0, "d", 21, 30)
		add(5, audit.FlowKind, 1, 0, "e", 31, 40)
		add(6, audit.FlowKind, 0, 1, "job-0", 0, 5)
		add(7, audit.FlowKind, 0, 1, "job-1", 0, 6)
		add(8, audit.CallbackKind, 0, 1, "", 7, 8)
		return jobs, execs, map[int64][]callbackCounts{8: {{S: 2}}}
	}
	tests := []struct {
		name   string
		mutate func(jobs []flowJob, execs []*execution, read map[int64][]callbackCounts, waiting map[string]bool) []flowJob
		check  func(t *testing.T, fr *FlowReport)
	}{
		{"healthy", nil, func(t *testing.T, fr *FlowReport) {
			assert.Empty(t, fr.broken())
			assert.EqualValues(t, 8, fr.TaskJobs)
			assert.EqualValues(t, 1, fr.CallbackRuns)
		}},
		{"d starts before c succeeded", func(_ []flowJob, execs []*execution, _ map[int64][]callbackCounts, _ map[string]bool) []flowJob {
			execs[3].start = *at(15)
			return nil
		}, func(t *testing.T, fr *FlowReport) { assert.EqualValues(t, 2, fr.OutOfOrder) }},
		{"the callback starts before the last batch job succeeded", func(_ []flowJob, execs []*execution, _ map[int64][]callbackCounts, _ map[string]bool) []flowJob {
			execs[7].start = *at(5)
			return nil
		}, func(t *testing.T, fr *FlowReport) { assert.EqualValues(t, 1, fr.OutOfOrder) }},
		{"a task with no job that is not waiting", func(jobs []flowJob, _ []*execution, _ map[int64][]callbackCounts, _ map[string]bool) []flowJob {
			return append(jobs[:4:4], jobs[5:]...)
		}, func(t *testing.T, fr *FlowReport) { assert.EqualValues(t, 1, fr.Lost) }},
		{"a task still waiting is not lost", func(jobs []flowJob, _ []*execution, _ map[int64][]callbackCounts, waiting map[string]bool) []flowJob {
			waiting["chaos-flow-1/e"] = true
			return append(jobs[:4:4], jobs[5:]...)
		}, func(t *testing.T, fr *FlowReport) { assert.EqualValues(t, 0, fr.Lost) }},
		{"a task with two jobs", func(jobs []flowJob, _ []*execution, _ map[int64][]callbackCounts, _ map[string]bool) []flowJob {
			dup := jobs[4]
			dup.id = 99
			return append(jobs, dup)
		}, func(t *testing.T, fr *FlowReport) { assert.EqualValues(t, 1, fr.Duplicated) }},
		{"a dead task", func(jobs []flowJob, _ []*execution, _ map[int64][]callbackCounts, _ map[string]bool) []flowJob {
			jobs[2].status = "dead"
			return nil
		}, func(t *testing.T, fr *FlowReport) {
			assert.EqualValues(t, 1, fr.NotSucceeded)
			assert.EqualValues(t, 1, fr.OutOfOrder, "d ran after a dependency that did not succeed")
		}},
		{"two callback jobs", func(jobs []flowJob, _ []*execution, _ map[int64][]callbackCounts, _ map[string]bool) []flowJob {
			dup := jobs[7]
			dup.id = 98
			return append(jobs, dup)
		}, func(t *testing.T, fr *FlowReport) { assert.EqualValues(t, 1, fr.CallbacksBad) }},
		{"a callback with wrong counts", func(_ []flowJob, _ []*execution, read map[int64][]callbackCounts, _ map[string]bool) []flowJob {
			read[8] = append(read[8], callbackCounts{S: 1, F: 1})
			return nil
		}, func(t *testing.T, fr *FlowReport) { assert.EqualValues(t, 1, fr.CallbacksBad) }},
		{"a callback that never read its counts", func(_ []flowJob, _ []*execution, read map[int64][]callbackCounts, _ map[string]bool) []flowJob {
			delete(read, 8)
			return nil
		}, func(t *testing.T, fr *FlowReport) { assert.EqualValues(t, 1, fr.CallbacksBad) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			jobs, execs, read := healthy()
			waiting := map[string]bool{}
			if tt.mutate != nil {
				if j := tt.mutate(jobs, execs, read, waiting); j != nil {
					jobs = j
				}
			}
			fr := &FlowReport{Workflows: 1, Batches: 1}
			judgeFlows(fr, 2, jobs, execs, waiting, read, func(string, string, ...any) {})
			tt.check(t, fr)
		})
	}
}
