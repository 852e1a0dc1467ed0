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
