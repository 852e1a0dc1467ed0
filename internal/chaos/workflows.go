// This file holds the run's workflow phase: five-task workflows (audit.FlowTasks) and
// batches with a callback, enqueued over the fault window beside the plain jobs, and the
// checks made afterwards from the audit data: every task ran only after its dependencies
// had succeeded, every batch's callback was enqueued once with the right counts, no
// workflow is stuck and no task was lost.

package chaos

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/chaos/audit"
)

// FlowReport is what the workflow phase found.
type FlowReport struct {
	Workflows     int64 // workflows whose enqueue committed
	Batches       int64 // batches whose enqueue committed
	TaskJobs      int64 // jobs of workflow tasks, batch jobs and callbacks that succeeded
	OutOfOrder    int64 // executions that started before a dependency's success was recorded
	Stuck         int64 // workflows and batches with a task still waiting or released at the end
	Lost          int64 // tasks with no job that are not waiting either
	Duplicated    int64 // tasks with more than one job
	NotSucceeded  int64 // task, batch and callback jobs that ended other than succeeded
	CallbacksBad  int64 // batches whose callback was not enqueued exactly once, or ran with wrong counts
	CallbackRuns  int64 // executions of callbacks (more than Batches after a kill: at least once)
	flowsEnqueued atomic.Int64
	batchEnqueued atomic.Int64
}

// broken lists what the phase found broken, for [Report.Broken].
func (f *FlowReport) broken() []string {
	var out []string
	for _, c := range []struct {
		n    int64
		what string
	}{
		{f.OutOfOrder, "workflow tasks run before a dependency succeeded"},
		{f.Stuck, "stuck workflows or batches"},
		{f.Lost, "workflow tasks lost"},
		{f.Duplicated, "workflow tasks with more than one job"},
		{f.NotSucceeded, "workflow or batch jobs that did not succeed"},
		{f.CallbacksBad, "batch callbacks not enqueued exactly once with the right counts"},
	} {
		if c.n > 0 {
			out = append(out, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	return out
}

// flowName and batchName name the n-th workflow and batch (from 1), so that an enqueue
// whose commit is in doubt can be looked up.
func flowName(n int) string  { return "chaos-flow-" + strconv.Itoa(n) }
func batchName(n int) string { return "chaos-batch-" + strconv.Itoa(n) }

// workflowCountSQL counts the workflows (and batches) of a name: 1 once its enqueue committed.
const workflowCountSQL = `SELECT count(*) FROM skiplock.workflows WHERE name = $1`

// runFlows enqueues the workflows and batches spread evenly over the window on the run's
// schedule (schedule.go), interleaved, each exactly once (an enqueue whose commit is in
// doubt is looked up by name first).
func (r *runner) runFlows(ctx context.Context, sched *schedule, fr *FlowReport) error {
	nf, nb := r.opts.Workflows, r.opts.Batches
	total := nf + nb
	window := sched.window()
	for i := range total {
		if err := sched.wait(ctx, window*time.Duration(i)/time.Duration(total)); err != nil {
			return err
		}
		// Batch k goes at every (total/nb)-th slot; workflows fill the others.
		var (
			name string
			do   func() error
		)
		if nb > 0 && i%(total/nb) == 0 && fr.batchEnqueued.Load() < int64(nb) {
			k := int(fr.batchEnqueued.Load()) + 1
			name = batchName(k)
			jobs := make([]skiplock.EnqueueParams, r.opts.BatchJobs)
			for j := range jobs {
				jobs[j] = skiplock.EnqueueParams{Args: audit.FlowArgs{Batch: k, Task: "job-" + strconv.Itoa(j)}}
			}
			do = func() error {
				_, err := r.client.EnqueueBatch(ctx, skiplock.Batch{Name: name, Jobs: jobs, Callback: audit.CallbackArgs{Batch: k}})
				return err
			}
			if err := r.enqueueOnce(ctx, name, do); err != nil {
				return err
			}
			fr.batchEnqueued.Add(1)
			continue
		}
		if fr.flowsEnqueued.Load() >= int64(nf) {
			continue
		}
		k := int(fr.flowsEnqueued.Load()) + 1
		name = flowName(k)
		wf := skiplock.Workflow{Name: name}
		for _, task := range slices.Sorted(maps.Keys(audit.FlowTasks)) {
			wf.Tasks = append(wf.Tasks, skiplock.WorkflowTask{Name: task, Args: audit.FlowArgs{Flow: k, Task: task},
				DependsOn: audit.FlowTasks[task]})
		}
		do = func() error { _, err := r.client.EnqueueWorkflow(ctx, wf); return err }
		if err := r.enqueueOnce(ctx, name, do); err != nil {
			return err
		}
		fr.flowsEnqueued.Add(1)
	}
	return nil
}

// enqueueOnce runs do, one transaction that writes the workflow called name, until it is
// known to have committed once.
func (r *runner) enqueueOnce(ctx context.Context, name string, do func() error) error {
	for {
		err := do()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var found int
		qerr := retryDB(ctx, func(ctx context.Context) error {
			return r.pool.QueryRow(ctx, workflowCountSQL, name).Scan(&found)
		})
		if qerr != nil {
			return fmt.Errorf("chaos: enqueue of %s failed (%v), and checking whether it committed failed: %w", name, err, qerr)
		}
		switch found {
		case 1:
			r.enq.note("%s: enqueue failed (%v) but had committed", name, err)
			return nil
		case 0:
			r.enq.note("%s: enqueue failed (%v) and had not committed; retried", name, err)
		default:
			return fmt.Errorf("chaos: %s is in %d workflow rows", name, found)
		}
	}
}

// flowJobsSQL lists the jobs of workflow tasks, batch jobs and callbacks, hot or archived.
const flowJobsSQL = `SELECT id, kind, status, attempts, coalesce(locked_by, ''), queue, finished_at,
	coalesce((payload->>'flow')::int, 0), coalesce((payload->>'batch_no')::int, 0), coalesce(payload->>'task', '')
FROM skiplock.jobs_archive WHERE kind IN ('chaos_flow', 'chaos_callback')
UNION ALL
SELECT id, kind, status, attempts, coalesce(locked_by, ''), queue, finished_at,
	coalesce((payload->>'flow')::int, 0), coalesce((payload->>'batch_no')::int, 0), coalesce(payload->>'task', '')
FROM skiplock.jobs WHERE kind IN ('chaos_flow', 'chaos_callback')`

// flowTaskStatesSQL lists every task of the run's workflows and batches that is not final.
const flowTaskStatesSQL = `SELECT w.name, t.name, t.state FROM skiplock.workflow_tasks t
JOIN skiplock.workflows w ON w.id = t.workflow_id WHERE t.state IN ('waiting', 'released')`

const callbacksSQL = `SELECT job_id, batch_no, succeeded, failed, dead, cancelled FROM chaos.callbacks`

// flowJob is a job of a workflow task, a batch job or a callback.
type flowJob struct {
	jobRow
	kind     string
	finished *time.Time
	flow     int
	batch    int
	task     string
}

// readFlowJobs reads the phase's jobs.
func (r *runner) readFlowJobs(ctx context.Context) ([]flowJob, error) {
	var jobs []flowJob
	err := retryDB(ctx, func(ctx context.Context) error {
		rows, err := r.pool.Query(ctx, flowJobsSQL)
		if err != nil {
			return err
		}
		jobs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (flowJob, error) {
			j := flowJob{jobRow: jobRow{seq: -1}}
			err := row.Scan(&j.id, &j.kind, &j.status, &j.attempts, &j.lockedBy, &j.queue, &j.finished, &j.flow, &j.batch, &j.task)
			return j, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: reading the workflow jobs: %w", err)
	}
	return jobs, nil
}

// checkFlows checks the phase's jobs against the executions (sorted by job, then start,
// their ends known) and the workflow tables.
func (r *runner) checkFlows(ctx context.Context, fr *FlowReport, jobs []flowJob, execs []*execution,
	example func(kind, format string, args ...any),
) error {
	fr.Workflows, fr.Batches = fr.flowsEnqueued.Load(), fr.batchEnqueued.Load()
	stuck := map[string]bool{}
	waiting := map[string]bool{}
	err := retryDB(ctx, func(ctx context.Context) error {
		rows, err := r.pool.Query(ctx, flowTaskStatesSQL)
		if err != nil {
			return err
		}
		var wf, task, state string
		_, err = pgx.ForEachRow(rows, []any{&wf, &task, &state}, func() error {
			stuck[wf] = true
			if state == "waiting" {
				waiting[wf+"/"+task] = true
			}
			example("stuck workflow", "%s: task %s is %s", wf, task, state)
			return nil
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("chaos: reading the workflow tasks: %w", err)
	}
	fr.Stuck = int64(len(stuck))
	// Callbacks: the counts each execution read.
	read := map[int64][]callbackCounts{}
	err = retryDB(ctx, func(ctx context.Context) error {
		clear(read)
		rows, err := r.pool.Query(ctx, callbacksSQL)
		if err != nil {
			return err
		}
		var id int64
		var b int
		var c callbackCounts
		_, err = pgx.ForEachRow(rows, []any{&id, &b, &c.S, &c.F, &c.D, &c.C}, func() error {
			read[id] = append(read[id], c)
			return nil
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("chaos: reading the callbacks: %w", err)
	}
	judgeFlows(fr, r.opts.BatchJobs, jobs, execs, waiting, read, example)
	return nil
}

// callbackCounts are the counts one callback execution read.
type callbackCounts struct{ S, F, D, C int }

// judgeFlows checks the phase's jobs against the executions (sorted by job, then start,
// their ends known), the tasks still waiting (by "workflow/task") and the counts each
// callback execution read (by callback job), and counts what it finds in fr, whose
// Workflows and Batches say which workflows and batches were enqueued.
func judgeFlows(fr *FlowReport, batchJobs int, jobs []flowJob, execs []*execution, waiting map[string]bool,
	read map[int64][]callbackCounts, example func(kind, format string, args ...any),
) {
	type key struct {
		flow, batch int
		task        string
	}
	byTask := map[key][]*flowJob{}
	for i := range jobs {
		j := &jobs[i]
		k := key{j.flow, j.batch, j.task}
		if j.kind == audit.CallbackKind {
			k.task = "callback"
		}
		byTask[k] = append(byTask[k], j)
		if j.status == "succeeded" {
			fr.TaskJobs++
		} else {
			fr.NotSucceeded++
			example("workflow job not succeeded", "job %d (%+v) is %s after %d attempts", j.id, k, j.status, j.attempts)
		}
	}
	// Every task has one job, unless it is still waiting (counted as stuck).
	one := func(k key, name string) *flowJob {
		switch js := byTask[k]; {
		case len(js) == 1:
			return js[0]
		case len(js) > 1:
			fr.Duplicated++
			example("workflow task with two jobs", "%s: task %s has %d jobs", name, k.task, len(js))
			return js[0]
		case !waiting[name+"/"+k.task]:
			fr.Lost++
			example("workflow task lost", "%s: task %s has no job and is not waiting", name, k.task)
		}
		return nil
	}
	execsOf := func(id int64) []*execution {
		lo, _ := slices.BinarySearchFunc(execs, id, func(e *execution, id int64) int { return cmp.Compare(e.job, id) })
		hi := lo
		for hi < len(execs) && execs[hi].job == id {
			hi++
		}
		return execs[lo:hi]
	}
	// after checks that every execution that did work of job j started after each of deps
	// had succeeded.
	after := func(name string, j *flowJob, deps []*flowJob) {
		for _, e := range execsOf(j.id) {
			if e.aborted {
				continue
			}
			for _, d := range deps {
				if d == nil || d.status != "succeeded" || d.finished == nil || e.start.Before(*d.finished) {
					fr.OutOfOrder++
					example("workflow order", "%s: %v of task %s started before dependency job %v succeeded", name, e, j.task, d)
				}
			}
		}
	}
	for n := 1; n <= int(fr.Workflows); n++ {
		name := flowName(n)
		tasks := map[string]*flowJob{}
		for task := range audit.FlowTasks {
			tasks[task] = one(key{flow: n, task: task}, name)
		}
		for task, deps := range audit.FlowTasks {
			if tasks[task] == nil {
				continue
			}
			var ds []*flowJob
			for _, d := range deps {
				ds = append(ds, tasks[d])
			}
			after(name, tasks[task], ds)
		}
	}
	want := callbackCounts{S: batchJobs}
	for n := 1; n <= int(fr.Batches); n++ {
		name := batchName(n)
		var deps []*flowJob
		for j := range batchJobs {
			deps = append(deps, one(key{batch: n, task: "job-" + strconv.Itoa(j)}, name))
		}
		cbs := byTask[key{batch: n, task: "callback"}]
		if len(cbs) != 1 {
			fr.CallbacksBad++
			example("batch callback", "%s: %d callback jobs", name, len(cbs))
			continue
		}
		cb := cbs[0]
		after(name, cb, deps)
		got := read[cb.id]
		fr.CallbackRuns += int64(len(got))
		bad := len(got) == 0
		for _, c := range got {
			bad = bad || c != want
		}
		if bad {
			fr.CallbacksBad++
			example("batch callback", "%s: callback job %d read counts %+v, want %+v", name, cb.id, got, want)
		}
	}
}
