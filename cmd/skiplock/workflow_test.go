package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// stepJob is the args of the workflow tasks the tests enqueue.
type stepJob struct{}

func (stepJob) Kind() string { return "step" }

// hostileTask is a task name with a tab, a newline and a terminal escape in it.
const hostileTask = "evil\t\n\x1b[31mred"

// enqueueWorkflow writes a workflow a -> (b, hostileTask) on the fixture's schema.
func (f *fixture) enqueueWorkflow() *skiplock.WorkflowInfo {
	f.t.Helper()
	client, err := skiplock.NewClient(f.pool, skiplock.Config{Schema: f.schema})
	require.NoError(f.t, err)
	info, err := client.EnqueueWorkflow(context.Background(), skiplock.Workflow{Name: "nightly", Tasks: []skiplock.WorkflowTask{
		{Name: "a", Args: stepJob{}},
		{Name: "b", Args: stepJob{}, DependsOn: []string{"a"}},
		{Name: hostileTask, Args: stepJob{}, DependsOn: []string{"a"}},
	}})
	require.NoError(f.t, err)
	return info
}

func TestWorkflowShow(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	info := f.enqueueWorkflow()
	wid := strconv.FormatInt(info.ID, 10)

	r := f.run("workflow", "show", wid)
	require.Equal(t, 0, r.code, r)
	assert.Contains(t, r.stdout, fmt.Sprintf("workflow %d \"nightly\" (on failure: cancel dependents)", info.ID))
	assert.Equal(t, []string{`"a"`, "released", id(info.Task("a").JobID), "-"}, row(t, r.stdout, `"a"`))
	assert.Equal(t, []string{`"b"`, "waiting", "-", `"a"`}, row(t, r.stdout, `"b"`))
	// The hostile name prints quoted: no raw tab, newline or escape reaches the terminal.
	assert.Contains(t, r.stdout, strconv.Quote(hostileTask))
	assert.NotContains(t, r.stdout, "\x1b")

	r = f.run("workflow", "show", "--json", wid)
	require.Equal(t, 0, r.code, r)
	var got workflowJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	assert.Equal(t, info.ID, got.ID)
	assert.Equal(t, "cancel", got.OnFailure)
	require.Len(t, got.Tasks, 3)
	byName := map[string]workflowTaskJSON{}
	for _, task := range got.Tasks {
		byName[task.Name] = task
	}
	require.NotNil(t, byName["a"].JobID)
	assert.Equal(t, info.Task("a").JobID, *byName["a"].JobID)
	assert.Equal(t, []string{}, byName["a"].DependsOn)
	assert.Nil(t, byName["b"].JobID)
	assert.Equal(t, "waiting", byName[hostileTask].State)
	assert.Equal(t, []string{"a"}, byName[hostileTask].DependsOn)

	r = f.run("workflow", "show", "987654321")
	require.Equal(t, 1, r.code, r)
	assert.Equal(t, fmt.Sprintf("skiplock: workflow show: workflow 987654321 not found in schema %q\n", f.schema), r.stderr)
	assert.Empty(t, r.stdout)
}

func TestWorkflowCancelAndRetry(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	info := f.enqueueWorkflow()
	wid := strconv.FormatInt(info.ID, 10)
	client, err := skiplock.NewClient(f.pool, skiplock.Config{Schema: f.schema})
	require.NoError(t, err)

	// a's job is queued and b, hostileTask wait: all three are cancelled.
	r := f.run("workflow", "cancel", wid)
	require.Equal(t, 0, r.code, r)
	assert.Equal(t, fmt.Sprintf("workflow %d: 3 tasks cancelled\n", info.ID), r.stdout)
	got, err := client.GetWorkflow(context.Background(), info.ID)
	require.NoError(t, err)
	for _, task := range got.Tasks {
		assert.Equal(t, "cancelled", task.State, task.Name)
	}
	status, _ := f.state(info.Task("a").JobID)
	assert.Equal(t, "cancelled", status)

	r = f.run("workflow", "retry", wid)
	require.Equal(t, 0, r.code, r)
	assert.Equal(t, fmt.Sprintf("workflow %d: 3 tasks put back\n", info.ID), r.stdout)
	got, err = client.GetWorkflow(context.Background(), info.ID)
	require.NoError(t, err)
	assert.Equal(t, "released", got.Task("a").State)
	assert.Equal(t, "waiting", got.Task("b").State)
	assert.Equal(t, "waiting", got.Task(hostileTask).State)
	status, _ = f.state(got.Task("a").JobID)
	assert.Equal(t, "queued", status)

	for _, cmd := range []string{"cancel", "retry"} {
		r = f.run("workflow", cmd, "987654321")
		require.Equal(t, 1, r.code, r)
		assert.Equal(t, fmt.Sprintf("skiplock: workflow %s: workflow 987654321 not found in schema %q\n", cmd, f.schema), r.stderr)
	}
}

func TestWorkflow_UsageErrors(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": unreachableURL}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"workflow"}, "skiplock: workflow needs a subcommand: show, cancel or retry\nRun 'skiplock help workflow' for usage.\n"},
		{[]string{"workflow", "drop", "1"}, "skiplock: workflow: unknown subcommand \"drop\": use show, cancel or retry\nRun 'skiplock help workflow' for usage.\n"},
		{[]string{"workflow", "show"}, "skiplock: workflow show: give the workflow id, as in 'skiplock workflow show 42'\nRun 'skiplock help workflow show' for usage.\n"},
		{[]string{"workflow", "cancel", "x"}, "skiplock: workflow cancel: the workflow id must be a positive number, got \"x\"\nRun 'skiplock help workflow cancel' for usage.\n"},
		{[]string{"workflow", "retry", "0"}, "skiplock: workflow retry: the workflow id must be a positive number, got \"0\"\nRun 'skiplock help workflow retry' for usage.\n"},
		{[]string{"workflow", "retry", "1", "2"}, "skiplock: workflow retry: unexpected argument \"2\"\nRun 'skiplock help workflow retry' for usage.\n"},
	} {
		r := cli(t, env, tc.args...)
		assert.Equal(t, 2, r.code, "%v: %s", tc.args, r)
		assert.Equal(t, tc.want, r.stderr, "%v", tc.args)
	}
	r := cli(t, env, "help", "workflow")
	require.Equal(t, 0, r.code, r)
	assert.Contains(t, r.stdout, "workflow show [--json] ID")
	assert.Contains(t, r.stdout, "workflow retry ID")
}
