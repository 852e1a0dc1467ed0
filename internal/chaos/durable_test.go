package chaos

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/skiplock/skiplock/internal/chaos/audit"
)

// TestJudgeDurable_FindsBrokenPromises feeds the durable phase's checks made-up jobs, rows
// and executions, so that a run that reports "0 run twice, 0 lost, 0 out of order" is known
// to be able to report otherwise.
func TestJudgeDurable_FindsBrokenPromises(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	sig := audit.SignalJSON(2)
	// A healthy world: durable job 1 (plain, job 101), 2 (signal, job 102) and 3 (sleep
	// 500ms before step 3, job 103), each step k executed once at 10k ms and committed.
	healthy := func() durableData {
		var d durableData
		for n, mode := range []string{audit.DurablePlain, audit.DurableSignal, audit.DurableSleep} {
			args := audit.DurableArgs{N: n + 1, Mode: mode}
			if mode == audit.DurableSleep {
				args.SleepMS = 500
			}
			id := int64(101 + n)
			d.jobs = append(d.jobs, durableJob{id: id, status: "succeeded", attempts: 1, args: args})
			for k := 1; k <= audit.DurableSteps; k++ {
				start := 10 * k
				if mode == audit.DurableSleep && k >= audit.SleepBefore {
					start += 600
				}
				e := durableExec{id: fmt.Sprintf("%d-%d", id, k), job: id, step: k, attempt: 1, worker: "w", start: at(start), prevDone: true}
				d.execs = append(d.execs, e)
				b := durableRow{job: id, step: k, exec: e.id, at: at(start + 1)}
				if mode == audit.DurableSignal && k == audit.WaitBefore {
					b.signal = &sig
				}
				d.rows = append(d.rows, b)
			}
		}
		return d
	}
	wrong := `{"n": 7}`
	tests := []struct {
		name  string
		spoil func(d *durableData)
		want  func(r *DurableReport) int64
		n     int64
	}{
		{name: "healthy", spoil: func(*durableData) {}, want: func(r *DurableReport) int64 { return int64(len(r.broken())) }, n: 0},
		{
			name: "a finished step runs again",
			spoil: func(d *durableData) {
				d.execs = append(d.execs, durableExec{id: "again", job: 101, step: 2, attempt: 2, worker: "x", start: at(100), doneBefore: true, prevDone: true})
			},
			want: func(r *DurableReport) int64 { return r.RanAgain }, n: 1,
		},
		{
			name:  "a step commits twice",
			spoil: func(d *durableData) { d.rows = append(d.rows, durableRow{job: 102, step: 5, exec: "x", at: at(200)}) },
			want:  func(r *DurableReport) int64 { return r.CommittedTwice }, n: 1,
		},
		{
			name:  "a step is lost",
			spoil: func(d *durableData) { d.rows = d.rows[1:] },
			want:  func(r *DurableReport) int64 { return r.LostSteps }, n: 1,
		},
		{
			name:  "a step starts before the one before it committed",
			spoil: func(d *durableData) { d.execs[3].prevDone = false },
			want:  func(r *DurableReport) int64 { return r.OutOfOrder }, n: 1,
		},
		{
			name: "a retry before the commit is allowed",
			spoil: func(d *durableData) {
				d.execs = append(d.execs, durableExec{id: "cut", job: 101, step: 3, prevDone: true})
			},
			want: func(r *DurableReport) int64 { return r.Retried*10 + int64(len(r.broken())) }, n: 10,
		},
		{
			name:  "the signal step holds another payload",
			spoil: func(d *durableData) { d.rows[5+audit.WaitBefore-1].signal = &wrong },
			want:  func(r *DurableReport) int64 { return r.SignalWrong }, n: 1,
		},
		{
			name:  "a job does not succeed",
			spoil: func(d *durableData) { d.jobs[1].status = "queued" },
			want:  func(r *DurableReport) int64 { return r.NotSucceeded }, n: 1,
		},
		{
			name:  "a job is lost",
			spoil: func(d *durableData) { d.jobs = d.jobs[:2] },
			want:  func(r *DurableReport) int64 { return r.LostJobs }, n: 1,
		},
		{
			name:  "a sleep is short",
			spoil: func(d *durableData) { d.execs[10+audit.SleepBefore-1].start = at(10*(audit.SleepBefore-1) + 100) },
			want:  func(r *DurableReport) int64 { return r.SleptShort*10 + int64(len(r.warnings())) }, n: 11,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := healthy()
			tt.spoil(&d)
			r := &DurableReport{Jobs: 3}
			judgeDurable(r, d, nil, func(kind, format string, args ...any) { t.Logf(kind+": "+format, args...) })
			assert.Equal(t, tt.n, tt.want(r))
			if tt.n == 0 {
				assert.Equal(t, "durable: 3 jobs, 15 steps, 0 run twice, 0 lost, 0 out of order", r.Summary())
				assert.Equal(t, int64(3), r.Succeeded)
				assert.Equal(t, int64(1), r.Sleeping)
				assert.Equal(t, int64(1), r.Signalled)
			}
		})
	}
}
