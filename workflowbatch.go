// This file holds batches with a callback: N jobs and one callback job that is enqueued,
// exactly once, when all of them have finished (or succeeded), with the counts by
// outcome. A batch is a workflow whose callback task depends on every job of the batch
// (workflow.go); the counts are kept on the callback's task row by the statement that
// settles each job (workflowsettle.go).

package skiplock

import (
	"context"
	"fmt"
	"maps"
	"strconv"

	"github.com/skiplock/skiplock/internal/settle"
)

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
	return c.EnqueueWorkflow(ctx, wf)
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
	return c.EnqueueWorkflowTx(ctx, tx, wf)
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
	var opts EnqueueOptions
	if b.CallbackOptions != nil {
		opts = *b.CallbackOptions
	}
	opts.Metadata = maps.Clone(opts.Metadata)
	if opts.Metadata == nil {
		opts.Metadata = map[string]string{}
	}
	opts.Metadata[settle.MetaBatch] = batchCallbackTask
	wf.Tasks = append(wf.Tasks, WorkflowTask{Name: batchCallbackTask, Args: b.Callback, Options: &opts, DependsOn: deps})
	return wf, nil
}
