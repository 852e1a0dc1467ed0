package skiplock_test

// This file holds the test of DependencyOutputs once a dependency's job row is gone
// (issue 41, docs/ownership.md §9).

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

type outputStepArgs struct {
	Name string `json:"name"`
}

func (outputStepArgs) Kind() string { return "output_step" }

// A task reads its dependencies' outputs after the archived row of one of them was
// purged (the sweeper's retention purge deletes it; here a DELETE does what it does).
// DependencyOutputs says so with ErrDependencyOutputGone, naming that dependency, and
// still returns the other's output. Before, the purged dependency mapped to nil, as if it
// had set no output.
func TestWorkflow_DependencyOutputsOfAPurgedDependencyIsAnError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[outputStepArgs]) error {
		return skiplock.SetOutput(ctx, job.Args)
	}))
	// c waits on a queue no worker serves, so that it is still to run after the purge.
	info, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "purged", Tasks: []skiplock.WorkflowTask{
		{Name: "a", Args: outputStepArgs{Name: "a"}},
		{Name: "b", Args: outputStepArgs{Name: "b"}},
		{Name: "c", Args: outputStepArgs{Name: "c"}, DependsOn: []string{"a", "b"},
			Options: &skiplock.EnqueueOptions{Queue: "later"}},
	}})
	require.NoError(t, err)
	runWorker(t, w)
	var c int64
	eventually(t, 30*time.Second, func() bool {
		got, err := b.client.GetWorkflow(b.ctx, info.ID)
		require.NoError(t, err)
		c = got.Task("c").JobID
		return c != 0
	}, "c was released")
	cRow, err := b.client.Get(b.ctx, c)
	require.NoError(t, err)

	outs, err := b.client.DependencyOutputs(b.ctx, cRow)
	require.NoError(t, err, "both rows are in the archive")
	assert.JSONEq(t, `{"name":"a"}`, string(outs["a"]))

	got, err := b.client.GetWorkflow(b.ctx, info.ID)
	require.NoError(t, err)
	n, err := b.pool.Exec(b.ctx, b.q(`DELETE FROM {s}.jobs_archive WHERE id = $1`), got.Task("a").JobID)
	require.NoError(t, err)
	require.EqualValues(t, 1, n.RowsAffected(), "a's archived row")
	outs, err = b.client.DependencyOutputs(b.ctx, cRow)
	require.ErrorIs(t, err, skiplock.ErrDependencyOutputGone)
	assert.Contains(t, err.Error(), `"a"`)
	assert.NotContains(t, outs, "a", "a purged dependency's output")
	assert.JSONEq(t, `{"name":"b"}`, string(outs["b"]), "the other dependency's output")
}

// DependencyOutputs of a nil row returns an error, as every other bad input does.
// Before, it panicked on a nil pointer.
func TestWorkflow_DependencyOutputsOfANilRowIsAnError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var outs map[string]json.RawMessage
	var err error
	require.NotPanics(t, func() { outs, err = b.client.DependencyOutputs(b.ctx, nil) })
	require.Error(t, err)
	assert.Contains(t, err.Error(), "row is nil")
	assert.Nil(t, outs)
}

// A dead task's job outlives its workflow: dead jobs are kept (DeadRetention 0, the
// default) while the sweeper deletes a workflow whose tasks all ended past
// ArchiveRetention. Requeued then, the task runs without its workflow, and
// DependencyOutputs cannot know its dependencies: it says so with
// ErrDependencyOutputGone (and ErrWorkflowNotFound). Before, it returned an empty map
// and no error, as for a task without dependencies, and the handler went on without
// the outputs it needed.
func TestWorkflow_DependencyOutputsOfATaskWhoseWorkflowIsPurgedIsAnError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[outputStepArgs]) error {
		return skiplock.SetOutput(ctx, job.Args)
	}))
	// b waits on a queue no worker serves; the test ends it dead.
	info, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "outlived", Tasks: []skiplock.WorkflowTask{
		{Name: "a", Args: outputStepArgs{Name: "a"}},
		{Name: "root", Args: outputStepArgs{Name: "root"}, Options: &skiplock.EnqueueOptions{Queue: "later"}},
		{Name: "b", Args: outputStepArgs{Name: "b"}, DependsOn: []string{"a"}, Options: &skiplock.EnqueueOptions{Queue: "later"}},
	}})
	require.NoError(t, err)
	stop := runWorker(t, w)
	var bJob int64
	eventually(t, 30*time.Second, func() bool {
		got, err := b.client.GetWorkflow(b.ctx, info.ID)
		require.NoError(t, err)
		bJob = got.Task("b").JobID
		return bJob != 0
	}, "b was released")
	stop()
	root := info.Task("root").JobID
	bRow, err := b.client.Get(b.ctx, bJob)
	require.NoError(t, err)
	outs, err := b.client.DependencyOutputs(b.ctx, bRow)
	require.NoError(t, err)
	assert.JSONEq(t, `{"name":"a"}`, string(outs["a"]))

	// b and root die (a week ago), a succeeded a week ago: the workflow is past retention.
	_, err = b.pool.Exec(b.ctx, b.q(`
		WITH t AS (UPDATE {s}.workflow_tasks SET state = 'dead' WHERE job_id = ANY ($1))
		UPDATE {s}.jobs SET status = 'dead', finished_at = now() - interval '8 days' WHERE id = ANY ($1)`), []int64{bJob, root})
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs_archive SET finished_at = now() - interval '8 days' WHERE id = $1`), info.Task("a").JobID)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.workflows SET created_at = now() - interval '9 days' WHERE id = $1`), info.ID)
	require.NoError(t, err)
	s, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{Logger: testLogger()})
	require.NoError(t, err)
	res, err := s.Sweep(b.ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), res.PurgedWorkflows)

	req, err := b.client.Requeue(b.ctx, skiplock.RequeueFilter{IDs: []int64{bJob, root}})
	require.NoError(t, err)
	require.Equal(t, int64(2), req.Requeued, "dead jobs are kept")
	bRow, err = b.client.Get(b.ctx, bJob)
	require.NoError(t, err)
	outs, err = b.client.DependencyOutputs(b.ctx, bRow)
	require.ErrorIs(t, err, skiplock.ErrDependencyOutputGone, "b's dependencies are unknown, got %v", outs)
	require.ErrorIs(t, err, skiplock.ErrWorkflowNotFound)
	assert.Empty(t, outs)
	// So is a task that had none: whether it had any is unknown too.
	rootRow, err := b.client.Get(b.ctx, root)
	require.NoError(t, err)
	_, err = b.client.DependencyOutputs(b.ctx, rootRow)
	require.ErrorIs(t, err, skiplock.ErrDependencyOutputGone)
}
