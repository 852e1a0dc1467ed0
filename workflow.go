// This file holds workflows and their enqueue: DAGs of jobs written in one statement
// ([Client.EnqueueWorkflow], [Client.EnqueueWorkflowTx]), checked first (cycles, unknown
// names), and sequences ([Client.EnqueueSequence]) and batches with a callback
// ([Client.EnqueueBatch]), which are workflows too.
// Inspecting and steering them is in workflowadmin.go, what releases a task when its
// dependencies finish in internal/settle, the planning and the statement in
// internal/enqueue; the design is in docs/workflows.md.

package skiplock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/enqueue"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/settle"
)

// ErrInvalidWorkflow is matched (errors.Is) by every error that refuses a workflow or a
// batch before anything is written: a cycle, an unknown or repeated name, a bad task.
var ErrInvalidWorkflow = enqueue.ErrInvalidWorkflow

// ErrWorkflowNotFound is returned for a workflow id that does not exist.
var ErrWorkflowNotFound = errors.New("skiplock: workflow not found")

// ErrTaskJobGone is matched by the error of [Client.RetryWorkflow] when some of the
// workflow's failed, dead or cancelled tasks cannot run again because their jobs are
// gone from the jobs table (deleted, or purged by retention). RetryWorkflow returns it
// with the count of the tasks it did put back; the message names the tasks it left,
// and those that stay cancelled because they depend on them.
var ErrTaskJobGone = errors.New("skiplock: a workflow task's job is gone: the task cannot run again")

// maxWorkflowTasks bounds the tasks of one workflow or batch (one statement writes them).
const maxWorkflowTasks = enqueue.MaxWorkflowTasks

// OnFailure says what a dependency that ends failed, dead or cancelled does to the tasks
// that depend on it.
type OnFailure int

const (
	// CancelDependents cancels every task that depends on it, directly or not (default).
	CancelDependents OnFailure = iota
	// RunDependents counts it as settled: its dependents run once all their
	// dependencies have finished, however they ended.
	RunDependents
)

// WorkflowTask is one job of a [Workflow].
type WorkflowTask struct {
	// Name identifies the task within its workflow (1-255 bytes, unique).
	Name string
	// Args are the job's args, as for [Client.Enqueue].
	Args JobArgs
	// Options are the job's options (nil: defaults). UniqueKey and Unique are refused:
	// a task is unique by its workflow and name.
	Options *EnqueueOptions
	// DependsOn names the tasks that must succeed before this one runs.
	DependsOn []string
}

// Workflow is a DAG of tasks for [Client.EnqueueWorkflow].
type Workflow struct {
	// Name describes the workflow (1-255 bytes); it need not be unique.
	Name string
	// OnFailure is the policy for a dependency that does not succeed. Defaults to
	// [CancelDependents].
	OnFailure OnFailure
	// Tasks are the workflow's tasks, at least one.
	Tasks []WorkflowTask
	// Deadline is the deadline of every task that sets none of its own
	// ([EnqueueOptions].Deadline): no task's attempt starts after it, a running one is
	// cancelled at it. A task that reaches it ends failed, and its dependents go as
	// OnFailure says. Zero means none.
	Deadline time.Time
}

// WorkflowInfo describes a workflow and the state of each of its tasks.
type WorkflowInfo struct {
	ID        int64              // the workflow's id, for GetWorkflow, CancelWorkflow, RetryWorkflow
	Name      string             // as enqueued
	OnFailure OnFailure          // as enqueued
	CreatedAt time.Time          // the enqueue's transaction time, by the database clock
	Tasks     []WorkflowTaskInfo // in name order
}

// WorkflowTaskInfo is one task of a [WorkflowInfo].
type WorkflowTaskInfo struct {
	Name      string   // the task's name (a sequence's tasks are numbered 1, 2, …)
	JobID     int64    // the task's job; 0 until the task is released
	DependsOn []string // in name order
	// State is "waiting" (its dependencies have not all settled; no job yet),
	// "released" (its job is queued or running), or how its job ended as the workflow
	// saw it: "succeeded", "failed", "dead" or "cancelled".
	State string
}

// Task returns the task named name, or nil.
func (w *WorkflowInfo) Task(name string) *WorkflowTaskInfo {
	for i := range w.Tasks {
		if w.Tasks[i].Name == name {
			return &w.Tasks[i]
		}
	}
	return nil
}

// EnqueueWorkflow writes wf in a transaction of its own and returns it once committed.
// See [Client.EnqueueWorkflowTx].
func (c *Client) EnqueueWorkflow(ctx context.Context, wf Workflow) (*WorkflowInfo, error) {
	return c.enqueueWorkflow(ctx, wf, "")
}

// enqueueWorkflow writes wf in a transaction of its own (writeWorkflow; callback names a
// batch's callback task, or is empty).
func (c *Client) enqueueWorkflow(ctx context.Context, wf Workflow, callback string) (*WorkflowInfo, error) {
	var info *WorkflowInfo
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var err error
		info, err = c.writeWorkflow(ctx, tx, wf, callback)
		return err
	})
	if err != nil {
		return nil, err
	}
	return info, nil
}

// EnqueueWorkflowTx writes wf inside the caller's transaction tx: its tasks without
// dependencies become jobs at once (workers hear of them at commit), the others wait in
// the workflow's tables and become jobs when their last dependency succeeds, in the
// transaction that records that success. A cycle, an unknown dependency, a repeated name
// or bad args are refused before anything is written, with an error that matches
// [ErrInvalidWorkflow]; a database error is confined to a savepoint, so no error of this
// call aborts tx (but a ctx that ends while the statement runs makes pgx close the
// connection, and tx ends with it). One statement writes the whole workflow.
//
// Jobs of workflow tasks must be run by workers of a release that knows workflows: an
// older worker records their outcomes without releasing their dependents.
func (c *Client) EnqueueWorkflowTx(ctx context.Context, tx DBTX, wf Workflow) (*WorkflowInfo, error) {
	return c.writeWorkflow(ctx, tx, wf, "")
}

// writeWorkflow writes wf in tx; callback, when not empty, names the task that is a
// batch's callback (EnqueueBatch), which is marked so for the settle statement.
func (c *Client) writeWorkflow(ctx context.Context, tx DBTX, wf Workflow, callback string) (*WorkflowInfo, error) {
	if tx == nil {
		return nil, errors.New("skiplock: EnqueueWorkflowTx: tx is nil")
	}
	p, err := c.planWorkflow(wf, callback)
	if err != nil {
		return nil, err
	}
	info, err := c.enq.WriteWorkflow(ctx, tx, p)
	if err != nil {
		return nil, err
	}
	return workflowInfo(info), nil
}

// planWorkflow checks wf and prepares each task's job (see [enqueue.PlanWorkflow]). It
// writes nothing.
func (c *Client) planWorkflow(wf Workflow, callback string) (*enqueue.WorkflowPlan, error) {
	spec := enqueue.WorkflowSpec{Name: wf.Name, OnFailure: enqueue.OnFailure(wf.OnFailure), Tasks: make([]enqueue.TaskSpec, len(wf.Tasks))}
	for i, t := range wf.Tasks {
		unique := t.Options != nil && (t.Options.UniqueKey != "" || t.Options.Unique != nil)
		spec.Tasks[i] = enqueue.TaskSpec{Name: t.Name, DependsOn: t.DependsOn, Unique: unique}
	}
	return enqueue.PlanWorkflow(spec, func(i int) (enqueue.Job, error) {
		j, err := c.prepare(wf.Tasks[i].Args, wf.Tasks[i].Options)
		if _, own := j.Meta[jobtype.MetaDeadline]; err == nil && !own {
			err = setDeadline(&j, wf.Deadline)
		}
		if err == nil {
			err = j.Seal(c.maxBytes)
		}
		if err == nil && callback != "" && wf.Tasks[i].Name == callback {
			// The batch's callback: the settle statement counts the batch into it. The key
			// is reserved (prepare refuses it from the caller), so only a batch sets it.
			j.Meta = maps.Clone(j.Meta)
			if j.Meta == nil {
				j.Meta = map[string]string{}
			}
			j.Meta[settle.MetaBatch] = batchCallbackTask
		}
		return j, err
	})
}

// workflowInfo returns the engine's description of a written workflow as a WorkflowInfo.
func workflowInfo(e *enqueue.WorkflowInfo) *WorkflowInfo {
	info := &WorkflowInfo{ID: e.ID, Name: e.Name, OnFailure: OnFailure(e.OnFailure), CreatedAt: e.CreatedAt,
		Tasks: make([]WorkflowTaskInfo, len(e.Tasks))}
	for i, t := range e.Tasks {
		info.Tasks[i] = WorkflowTaskInfo(t)
	}
	return info
}

// Sequences: jobs that share a key run one at a time in the order they were enqueued,
// each starting only once the previous one has finished. A key's jobs are a chain of
// tasks in a workflow of its own, released by the transaction that records the previous
// job's final outcome, or with [SequenceMoveOn] its first failed attempt.

// sequencePolicies names the policies as the metadata of a sequence task stores them
// (settle.MetaSequence), which the settle statement reads.
var sequencePolicies = map[SequencePolicy]string{SequenceHold: "hold", SequenceMoveOn: "move_on"}

// EnqueueSequence enqueues args as the next job of the sequence key, in a transaction of
// its own. See [Client.EnqueueSequenceTx].
func (c *Client) EnqueueSequence(ctx context.Context, key string, args JobArgs, opts *EnqueueOptions) (*WorkflowTaskInfo, error) {
	var info *WorkflowTaskInfo
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var err error
		info, err = c.EnqueueSequenceTx(ctx, tx, key, args, opts)
		return err
	})
	if err != nil {
		return nil, err
	}
	return info, nil
}

// EnqueueSequenceTx enqueues args, inside the caller's transaction tx, as the next job of
// the sequence key (1-255 bytes): it starts only once the job enqueued before it with the
// same key has finished — succeeded, or failed, dead or cancelled for good; while that
// one waits for a retry, the sequence holds. Jobs of one key therefore run one at a time,
// in the order their enqueues committed. With opts.SequenceOnFailure set to
// [SequenceMoveOn], this job's first failed attempt releases the next job instead, and
// its retries run out of order (see [SequenceMoveOn]). It returns the task: State "released" if it may
// run now (JobID is its job's id), "waiting" if it waits for the previous job (JobID 0).
//
// Enqueues of one key wait for each other: the key is locked until tx ends, and so is the
// recording of the outcome of the key's last job. No error of this call aborts tx (but a
// ctx that ends while a statement runs makes pgx close the connection, and tx ends with
// it).
func (c *Client) EnqueueSequenceTx(ctx context.Context, tx DBTX, key string, args JobArgs, opts *EnqueueOptions) (*WorkflowTaskInfo, error) {
	if tx == nil {
		return nil, errors.New("skiplock: EnqueueSequenceTx: tx is nil")
	}
	if key == "" || len(key) > 255 || !validText(key) {
		return nil, fmt.Errorf("%w: sequence key %q: 1-255 bytes of UTF-8 without NUL", ErrInvalidWorkflow, truncate(key, 40))
	}
	if opts != nil && (opts.UniqueKey != "" || opts.Unique != nil) {
		return nil, fmt.Errorf("%w: UniqueKey and Unique are not supported on sequence jobs", ErrInvalidWorkflow)
	}
	policy := SequenceHold
	if opts != nil {
		policy = opts.SequenceOnFailure
		o := *opts
		o.SequenceOnFailure = SequenceHold
		opts = &o
	}
	if _, ok := sequencePolicies[policy]; !ok {
		return nil, fmt.Errorf("%w: SequenceOnFailure %d: not a SequencePolicy", ErrInvalidOptions, policy)
	}
	j, err := c.prepare(args, opts)
	if err == nil {
		err = j.Seal(c.maxBytes)
	}
	if err != nil {
		return nil, err
	}
	info, err := c.enq.InsertSequence(ctx, tx, key, &j, sequencePolicies[policy])
	if err != nil {
		return nil, err
	}
	t := WorkflowTaskInfo(*info)
	return &t, nil
}

// Batches with a callback: N jobs and one callback job that is enqueued, exactly once,
// when all of them have finished (or succeeded), with the counts by outcome. A batch is a
// workflow whose callback task depends on every job of the batch; the counts are kept on
// the callback's task row by the statement that settles each job (internal/settle).

// batchCallbackTask is the name of a batch's callback task; the jobs are "job-<i>".
const batchCallbackTask = "callback"

// Batch is a set of jobs with a callback job, for [Client.EnqueueBatch].
type Batch struct {
	// Name describes the batch (1-255 bytes).
	Name string
	// Jobs are the batch's jobs, at least one. UniqueKey and Unique are refused.
	Jobs []EnqueueParams
	// Callback is the job enqueued once every job of the batch has finished. Its
	// handler reads the counts with [BatchCountsOf].
	Callback JobArgs
	// CallbackOptions are the callback's options (nil: defaults).
	CallbackOptions *EnqueueOptions
	// OnlyOnSuccess enqueues the callback only if every job succeeded; if one ends
	// failed, dead or cancelled, the callback is cancelled instead. False (the default)
	// enqueues it when all have finished, however they ended.
	OnlyOnSuccess bool
}

// BatchCounts are the outcomes of a batch's jobs, as its callback sees them.
type BatchCounts struct {
	Succeeded, Failed, Dead, Cancelled int
}

// BatchCountsOf returns the counts a batch's callback job carries (in its metadata), and
// false for a job that is not a batch's callback.
func BatchCountsOf(row *JobRow) (BatchCounts, bool) {
	if row == nil || row.Metadata[settle.MetaBatch] != batchCallbackTask {
		return BatchCounts{}, false
	}
	n := func(k string) int { v, _ := strconv.Atoi(row.Metadata[k]); return v }
	return BatchCounts{Succeeded: n("skiplock_succeeded"), Failed: n("skiplock_failed"),
		Dead: n("skiplock_dead"), Cancelled: n("skiplock_cancelled")}, true
}

// EnqueueBatch writes b in a transaction of its own. See [Client.EnqueueBatchTx].
func (c *Client) EnqueueBatch(ctx context.Context, b Batch) (*WorkflowInfo, error) {
	wf, err := batchWorkflow(b)
	if err != nil {
		return nil, err
	}
	return c.enqueueWorkflow(ctx, wf, batchCallbackTask)
}

// EnqueueBatchTx writes b inside the caller's transaction tx, as [Client.EnqueueWorkflowTx]
// writes a workflow (one statement; no error aborts tx). The batch's jobs are tasks
// "job-0" … "job-<N-1>" of the returned workflow and its callback the task "callback".
// Each job's outcome is counted in the transaction that records it, once, and the
// statement that counts the last one enqueues the callback: exactly once, also when the
// last jobs finish on different workers at the same moment, and not at all until the
// outcome that completes the batch has committed.
func (c *Client) EnqueueBatchTx(ctx context.Context, tx DBTX, b Batch) (*WorkflowInfo, error) {
	wf, err := batchWorkflow(b)
	if err != nil {
		return nil, err
	}
	return c.writeWorkflow(ctx, tx, wf, batchCallbackTask)
}

// batchWorkflow turns b into its workflow.
func batchWorkflow(b Batch) (Workflow, error) {
	if len(b.Jobs) == 0 || len(b.Jobs) >= maxWorkflowTasks {
		return Workflow{}, fmt.Errorf("%w: a batch has 1-%d jobs, not %d", ErrInvalidWorkflow, maxWorkflowTasks-1, len(b.Jobs))
	}
	wf := Workflow{Name: b.Name, OnFailure: RunDependents, Tasks: make([]WorkflowTask, 0, len(b.Jobs)+1)}
	if b.OnlyOnSuccess {
		wf.OnFailure = CancelDependents
	}
	deps := make([]string, len(b.Jobs))
	for i, p := range b.Jobs {
		deps[i] = "job-" + strconv.Itoa(i)
		wf.Tasks = append(wf.Tasks, WorkflowTask{Name: deps[i], Args: p.Args, Options: p.Options})
	}
	wf.Tasks = append(wf.Tasks, WorkflowTask{Name: batchCallbackTask, Args: b.Callback, Options: b.CallbackOptions, DependsOn: deps})
	return wf, nil
}
