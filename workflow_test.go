package skiplock_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// stepArgs is a workflow task of the tests: it records its start and end (database
// clock) in the audit table, sets an output, and fails permanently when told to.
type stepArgs struct {
	Fail bool `json:"fail,omitempty"`
}

func (stepArgs) Kind() string { return "step" }

// workflowSetup creates the audit table and a worker whose handler runs stepArgs.
func workflowSetup(t *testing.T) (*bundle, *skiplock.Worker) {
	t.Helper()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.wf_audit (
		job_id bigint, task text, deps jsonb,
		started timestamptz NOT NULL, finished timestamptz NOT NULL)`))
	require.NoError(t, err)
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[stepArgs]) error {
		var started time.Time
		if err := b.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&started); err != nil {
			return err
		}
		deps, err := b.client.DependencyOutputs(ctx, job.JobRow)
		if err != nil {
			return err
		}
		task := job.Metadata["skiplock_task"]
		if job.Args.Fail {
			return skiplock.Permanent(errors.New("step failed on purpose"))
		}
		if err := skiplock.SetOutput(ctx, map[string]string{"from": task}); err != nil {
			return err
		}
		_, err = b.pool.Exec(ctx, b.q(`INSERT INTO {s}.wf_audit VALUES ($1, $2, $3, $4, clock_timestamp())`),
			job.ID, task, deps, started)
		return err
	}))
	return b, w
}

// auditRow is one run of a task, as the audit table has it.
type auditRow struct {
	task              string
	deps              map[string]json.RawMessage
	started, finished time.Time
}

func readAudit(t *testing.T, b *bundle) map[string][]auditRow {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, b.q(`SELECT task, deps, started, finished FROM {s}.wf_audit`))
	require.NoError(t, err)
	out := map[string][]auditRow{}
	var r auditRow
	_, err = pgx.ForEachRow(rows, []any{&r.task, &r.deps, &r.started, &r.finished}, func() error {
		out[r.task] = append(out[r.task], r)
		return nil
	})
	require.NoError(t, err)
	return out
}

// waitStates waits until every task of workflow id is in a final state, and returns it.
func waitSettled(t *testing.T, b *bundle, id int64) *skiplock.WorkflowInfo {
	t.Helper()
	var info *skiplock.WorkflowInfo
	eventually(t, 30*time.Second, func() bool {
		var err error
		info, err = b.client.GetWorkflow(b.ctx, id)
		require.NoError(t, err)
		for _, task := range info.Tasks {
			if task.State == "waiting" || task.State == "released" {
				return false
			}
		}
		return true
	}, "workflow %d did not settle", id)
	return info
}

func states(info *skiplock.WorkflowInfo) map[string]string {
	out := map[string]string{}
	for _, t := range info.Tasks {
		out[t.Name] = t.State
	}
	return out
}

func TestWorkflow_DiamondRunsInOrder(t *testing.T) {
	t.Parallel()
	b, w := workflowSetup(t)
	info, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "diamond", Tasks: []skiplock.WorkflowTask{
		{Name: "d", Args: stepArgs{}, DependsOn: []string{"b", "c"}},
		{Name: "a", Args: stepArgs{}},
		{Name: "b", Args: stepArgs{}, DependsOn: []string{"a"}},
		{Name: "c", Args: stepArgs{}, DependsOn: []string{"a"}},
	}})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": "released", "b": "waiting", "c": "waiting", "d": "waiting"}, states(info))
	// Only the root is a job before anything ran.
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs`))

	runWorker(t, w)
	got := waitSettled(t, b, info.ID)
	assert.Equal(t, map[string]string{"a": "succeeded", "b": "succeeded", "c": "succeeded", "d": "succeeded"}, states(got))
	assert.Equal(t, []string{"b", "c"}, got.Task("d").DependsOn)

	audit := readAudit(t, b)
	for _, name := range []string{"a", "b", "c", "d"} {
		require.Len(t, audit[name], 1, "task %s ran once", name)
	}
	a, bb, c, d := audit["a"][0], audit["b"][0], audit["c"][0], audit["d"][0]
	assert.False(t, bb.started.Before(a.finished), "b started before a finished")
	assert.False(t, c.started.Before(a.finished), "c started before a finished")
	assert.False(t, d.started.Before(bb.finished), "d started before b finished")
	assert.False(t, d.started.Before(c.finished), "d started before c finished")
	// d read the outputs of its dependencies, and only theirs.
	assert.JSONEq(t, `{"from":"b"}`, string(d.deps["b"]))
	assert.JSONEq(t, `{"from":"c"}`, string(d.deps["c"]))
	assert.Len(t, d.deps, 2)
	assert.Empty(t, a.deps)
}

func TestWorkflow_FailedDependencyPolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy skiplock.OnFailure
		want   map[string]string
	}{
		{skiplock.CancelDependents, map[string]string{"a": "failed", "b": "cancelled", "c": "cancelled", "side": "succeeded"}},
		{skiplock.RunDependents, map[string]string{"a": "failed", "b": "succeeded", "c": "succeeded", "side": "succeeded"}},
	} {
		t.Run(fmt.Sprint(tc.policy), func(t *testing.T) {
			t.Parallel()
			b, w := workflowSetup(t)
			info, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "f", OnFailure: tc.policy, Tasks: []skiplock.WorkflowTask{
				{Name: "a", Args: stepArgs{Fail: true}},
				{Name: "b", Args: stepArgs{}, DependsOn: []string{"a"}},
				{Name: "c", Args: stepArgs{}, DependsOn: []string{"b", "side"}},
				{Name: "side", Args: stepArgs{}},
			}})
			require.NoError(t, err)
			runWorker(t, w)
			got := waitSettled(t, b, info.ID)
			assert.Equal(t, tc.want, states(got))
			audit := readAudit(t, b)
			for name, st := range tc.want {
				want := 0
				if st == "succeeded" {
					want = 1
				}
				assert.Len(t, audit[name], want, "runs of %s", name)
			}
			if tc.policy == skiplock.CancelDependents {
				// Cancelled dependents never became jobs.
				assert.Zero(t, got.Task("b").JobID)
				assert.Zero(t, got.Task("c").JobID)
				assert.Equal(t, 2, b.count(t, `SELECT count(*) FROM {s}.jobs`)+b.count(t, `SELECT count(*) FROM {s}.jobs_archive`))
			}
		})
	}
}

func TestWorkflow_RefusedAtEnqueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		name  string
		tasks []skiplock.WorkflowTask
		msg   string
	}{
		{"cycle", []skiplock.WorkflowTask{
			{Name: "a", Args: stepArgs{}, DependsOn: []string{"c"}},
			{Name: "b", Args: stepArgs{}, DependsOn: []string{"a"}},
			{Name: "c", Args: stepArgs{}, DependsOn: []string{"b"}},
			{Name: "root", Args: stepArgs{}},
		}, "cycle"},
		{"self", []skiplock.WorkflowTask{{Name: "a", Args: stepArgs{}, DependsOn: []string{"a"}}}, "depends on itself"},
		{"unknown", []skiplock.WorkflowTask{{Name: "a", Args: stepArgs{}, DependsOn: []string{"nope"}}}, `depends on "nope"`},
		{"duplicate", []skiplock.WorkflowTask{{Name: "a", Args: stepArgs{}}, {Name: "a", Args: stepArgs{}}}, "used twice"},
		{"empty", nil, "0 tasks"},
		{"nil args", []skiplock.WorkflowTask{{Name: "a"}}, `task "a"`},
		{"unique", []skiplock.WorkflowTask{{Name: "a", Args: stepArgs{}, Options: &skiplock.EnqueueOptions{UniqueKey: "k"}}}, "UniqueKey"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "w", Tasks: tc.tasks})
			require.ErrorIs(t, err, skiplock.ErrInvalidWorkflow)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.workflows`))
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs`))
}

// A database error inside EnqueueWorkflowTx leaves the caller's transaction usable, and
// a rollback of the caller's transaction leaves no workflow.
func TestWorkflow_EnqueueTxNeverAbortsCallersTx(t *testing.T) {
	t.Parallel()
	b := setup(t)
	missing, err := skiplock.NewClient(b.pool, skiplock.Config{Schema: b.schema + "_missing", Logger: testLogger()})
	require.NoError(t, err)
	wf := skiplock.Workflow{Name: "w", Tasks: []skiplock.WorkflowTask{{Name: "a", Args: stepArgs{}}}}

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = missing.EnqueueWorkflowTx(b.ctx, tx, wf)
	require.ErrorIs(t, err, skiplock.ErrNotMigrated)
	info, err := b.client.EnqueueWorkflowTx(b.ctx, tx, wf) // the tx still works
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1`, info.Tasks[0].JobID))

	tx, err = b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = b.client.EnqueueWorkflowTx(b.ctx, tx, wf)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(b.ctx))
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.workflows`))
}

// A dependent is released by the transaction that records its dependency's success: a
// test transaction holds the dependent's task row, so the worker's completion waits
// inside its transaction after recording the success. Meanwhile no snapshot shows the
// success without the release; the waiting backend is killed (its transaction rolls
// back and the worker writes it again), and once the row is free both commit together.
func TestWorkflow_ReleaseCommitsWithTheSuccess(t *testing.T) {
	t.Parallel()
	b, w := workflowSetup(t)
	info, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "kill", Tasks: []skiplock.WorkflowTask{
		{Name: "a", Args: stepArgs{}},
		{Name: "b", Args: stepArgs{}, DependsOn: []string{"a"}},
	}})
	require.NoError(t, err)
	aID := info.Task("a").JobID
	require.NotZero(t, aID)
	require.Zero(t, info.Task("b").JobID, "b waits: no job yet")

	lock, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(b.ctx) }()
	_, err = lock.Exec(b.ctx, b.q(`SELECT 1 FROM {s}.workflow_tasks WHERE workflow_id = $1 AND name = 'b' FOR UPDATE`), info.ID)
	require.NoError(t, err)

	// invariant: in one snapshot, a's success is visible only with b's job.
	const invariant = `SELECT EXISTS (SELECT 1 FROM {s}.jobs_archive WHERE id = $1)
		AND NOT EXISTS (SELECT 1 FROM {s}.jobs WHERE id <> $1)
		AND NOT EXISTS (SELECT 1 FROM {s}.jobs_archive WHERE id <> $1)`
	var mu sync.Mutex
	violations := 0
	check := func() {
		var bad bool
		require.NoError(t, b.pool.QueryRow(b.ctx, b.q(invariant), aID).Scan(&bad))
		if bad {
			mu.Lock()
			violations++
			mu.Unlock()
		}
	}

	runWorker(t, w)
	// The completion's transaction waits on the lock: a ran, its success is written but
	// not committed.
	var pid int
	eventually(t, 30*time.Second, func() bool {
		check()
		err := b.pool.QueryRow(b.ctx, `SELECT pid FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%workflow_tasks%' AND datname = current_database()
				AND query LIKE '%`+b.schema+`%' LIMIT 1`).Scan(&pid)
		return err == nil
	}, "the completion transaction never waited on the task row")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND status = 'running'`, aID),
		"a's success is not visible before its transaction commits")
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id <> $1`, aID), "b is not a job yet")

	// Kill the completion's backend: its transaction rolls back, the success and the
	// release with it; the worker writes both again.
	var killed bool
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&killed))
	require.True(t, killed)
	check()
	require.NoError(t, lock.Rollback(b.ctx))

	got := waitSettled(t, b, info.ID)
	check()
	assert.Equal(t, map[string]string{"a": "succeeded", "b": "succeeded"}, states(got))
	assert.Equal(t, 0, violations, "a snapshot showed a's success without b's release")
	audit := readAudit(t, b)
	assert.Len(t, audit["a"], 1)
	assert.Len(t, audit["b"], 1)
}

func TestWorkflow_CancelAndRetry(t *testing.T) {
	t.Parallel()
	b, w := workflowSetup(t)
	info, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "cr", Tasks: []skiplock.WorkflowTask{
		{Name: "a", Args: stepArgs{}},
		{Name: "b", Args: stepArgs{}, DependsOn: []string{"a"}},
	}})
	require.NoError(t, err)
	n, err := b.client.CancelWorkflow(b.ctx, info.ID)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	got, err := b.client.GetWorkflow(b.ctx, info.ID)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": "cancelled", "b": "cancelled"}, states(got))

	n, err = b.client.RetryWorkflow(b.ctx, info.ID)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	runWorker(t, w)
	got = waitSettled(t, b, info.ID)
	assert.Equal(t, map[string]string{"a": "succeeded", "b": "succeeded"}, states(got))

	_, err = b.client.GetWorkflow(b.ctx, info.ID+1000)
	require.ErrorIs(t, err, skiplock.ErrWorkflowNotFound)
}

// batchArgs is a job of the batch test: every tenth fails permanently.
type batchArgs struct {
	N int `json:"n"`
}

func (batchArgs) Kind() string { return "batch_member" }

type batchDone struct{}

func (batchDone) Kind() string { return "batch_done" }

func TestBatch_CallbackOnceWithCountsAcrossWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.cb_audit (job_id bigint, counts jsonb)`))
	require.NoError(t, err)
	const n, workers = 1000, 4
	jobs := make([]skiplock.EnqueueParams, n)
	for i := range jobs {
		jobs[i] = skiplock.EnqueueParams{Args: batchArgs{N: i}}
	}
	info, err := b.client.EnqueueBatch(b.ctx, skiplock.Batch{Name: "thousand", Jobs: jobs, Callback: batchDone{}})
	require.NoError(t, err)
	require.Len(t, info.Tasks, n+1)

	for i := range workers {
		w := newWorker(t, b, skiplock.WorkerConfig{ID: "w" + strconv.Itoa(i), PollInterval: 50 * time.Millisecond,
			SweepInterval: -1, Logger: testLogger(), Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 8}}})
		require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[batchArgs]) error {
			if job.Args.N%10 == 0 {
				return skiplock.Permanent(errors.New("every tenth fails"))
			}
			return nil
		}))
		require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[batchDone]) error {
			counts, ok := skiplock.BatchCountsOf(job.JobRow)
			if !ok {
				return errors.New("not a batch callback")
			}
			_, err := b.pool.Exec(ctx, b.q(`INSERT INTO {s}.cb_audit VALUES ($1, $2)`), job.ID, counts)
			return err
		}))
		runWorker(t, w)
	}
	eventually(t, 60*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.cb_audit`) > 0
	}, "the callback never ran")
	got := waitSettled(t, b, info.ID)
	assert.Equal(t, "succeeded", got.Task("callback").State)
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.cb_audit`), "the callback ran once")
	var counts skiplock.BatchCounts
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT counts FROM {s}.cb_audit`)).Scan(&counts))
	assert.Equal(t, skiplock.BatchCounts{Succeeded: 900, Failed: 100}, counts)
}

// A task that ends outside a worker's outcome batch — cancelled by id, or dead when the
// sweeper takes it back with no attempts left — settles its dependents in the same
// transaction.
func TestWorkflow_CancelOrReclaimSettlesDependents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	enqueue := func(policy skiplock.OnFailure) *skiplock.WorkflowInfo {
		info, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "x", OnFailure: policy, Tasks: []skiplock.WorkflowTask{
			{Name: "a", Args: stepArgs{}, Options: &skiplock.EnqueueOptions{MaxAttempts: 1}},
			{Name: "b", Args: stepArgs{}, DependsOn: []string{"a"}},
		}})
		require.NoError(t, err)
		return info
	}

	cancelled := enqueue(skiplock.CancelDependents)
	row, err := b.client.Cancel(b.ctx, cancelled.Task("a").JobID)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusCancelled, row.Status)

	// A worker claimed a's last attempt and died: its lease has ended.
	reclaimed := enqueue(skiplock.RunDependents)
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET status = 'running', attempts = 1, locked_by = 'gone',
		locked_at = now() - interval '2 seconds', lease_until = now() - interval '1 second' WHERE id = $1`),
		reclaimed.Task("a").JobID)
	require.NoError(t, err)
	s, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{Logger: testLogger()})
	require.NoError(t, err)
	res, err := s.Sweep(b.ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 1, res.Dead)

	got, err := b.client.GetWorkflow(b.ctx, cancelled.ID)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": "cancelled", "b": "cancelled"}, states(got))
	got, err = b.client.GetWorkflow(b.ctx, reclaimed.ID)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": "dead", "b": "released"}, states(got))
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND status = 'queued'`, got.Task("b").JobID))
}

// 200 five-task workflows on 4 workers: every task runs once, only after each of its
// dependencies finished, and none is left waiting.
func TestWorkflow_ManyWorkflowsAcrossWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.wf_audit (
		job_id bigint, task text, deps jsonb,
		started timestamptz NOT NULL, finished timestamptz NOT NULL)`))
	require.NoError(t, err)
	const workflows, workers = 200, 4
	ids := make([]int64, workflows)
	for i := range ids {
		info, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "five", Tasks: []skiplock.WorkflowTask{
			{Name: "a", Args: stepArgs{}},
			{Name: "b", Args: stepArgs{}, DependsOn: []string{"a"}},
			{Name: "c", Args: stepArgs{}, DependsOn: []string{"a"}},
			{Name: "d", Args: stepArgs{}, DependsOn: []string{"b", "c"}},
			{Name: "e", Args: stepArgs{}, DependsOn: []string{"a", "d"}},
		}})
		require.NoError(t, err)
		ids[i] = info.ID
	}
	for i := range workers {
		w := newWorker(t, b, skiplock.WorkerConfig{ID: "w" + strconv.Itoa(i), PollInterval: 50 * time.Millisecond,
			SweepInterval: -1, Logger: testLogger(), Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 8}}})
		require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[stepArgs]) error {
			_, err := b.pool.Exec(ctx, b.q(`INSERT INTO {s}.wf_audit VALUES ($1, $2, '{}', clock_timestamp(), clock_timestamp())`),
				job.ID, job.Metadata["skiplock_workflow"]+"/"+job.Metadata["skiplock_task"])
			return err
		}))
		runWorker(t, w)
	}
	eventually(t, 90*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.workflow_tasks WHERE state <> 'succeeded'`) == 0
	}, "workflows left unfinished")
	assert.Equal(t, workflows*5, b.count(t, `SELECT count(DISTINCT task) FROM {s}.wf_audit`))
	assert.Equal(t, workflows*5, b.count(t, `SELECT count(*) FROM {s}.wf_audit`), "a task ran twice")
	// No task started before one of its dependencies had finished.
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.workflow_edges e
		JOIN {s}.wf_audit p ON p.task = e.workflow_id || '/' || e.parent
		JOIN {s}.wf_audit c ON c.task = e.workflow_id || '/' || e.child
		WHERE c.started < p.finished`))
}

type flakyStep struct{}

func (flakyStep) Kind() string { return "flaky_step" }

// RetryWorkflow runs a failed task again and reopens the dependents its failure
// cancelled; a batch with OnlyOnSuccess cancels its callback when a job fails.
func TestWorkflow_RetryFailedTaskAndOnlyOnSuccessBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var healed atomic.Bool
	var callbacks atomic.Int64
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[flakyStep]) error {
		if !healed.Load() && job.Metadata["skiplock_task"] != "b" {
			return skiplock.Permanent(errors.New("not yet"))
		}
		return nil
	}))
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[batchDone]) error {
		callbacks.Add(1)
		return nil
	}))
	runWorker(t, w)

	wf, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "r", Tasks: []skiplock.WorkflowTask{
		{Name: "a", Args: flakyStep{}},
		{Name: "b", Args: flakyStep{}, DependsOn: []string{"a"}},
	}})
	require.NoError(t, err)
	batch, err := b.client.EnqueueBatch(b.ctx, skiplock.Batch{Name: "all or nothing", OnlyOnSuccess: true,
		Jobs: []skiplock.EnqueueParams{{Args: flakyStep{}}, {Args: flakyStep{}}}, Callback: batchDone{}})
	require.NoError(t, err)

	got := waitSettled(t, b, wf.ID)
	assert.Equal(t, map[string]string{"a": "failed", "b": "cancelled"}, states(got))
	gotBatch := waitSettled(t, b, batch.ID)
	assert.Equal(t, map[string]string{"job-0": "failed", "job-1": "failed", "callback": "cancelled"}, states(gotBatch))

	healed.Store(true)
	n, err := b.client.RetryWorkflow(b.ctx, wf.ID)
	require.NoError(t, err)
	assert.Equal(t, 2, n, "a requeued, b waiting again")
	got = waitSettled(t, b, wf.ID)
	assert.Equal(t, map[string]string{"a": "succeeded", "b": "succeeded"}, states(got))
	assert.Zero(t, callbacks.Load(), "the OnlyOnSuccess callback never ran")
}

// The batch's last completions are killed mid-transaction (their backend terminated while
// they wait on the callback's row): the callback still runs exactly once, with every job
// counted once.
func TestBatch_CallbackOnceWhenTheLastCompletionIsKilled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var callbacks atomic.Int64
	var counts atomic.Value
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[batchArgs]) error { return nil }))
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[batchDone]) error {
		c, _ := skiplock.BatchCountsOf(job.JobRow)
		counts.Store(c)
		callbacks.Add(1)
		return nil
	}))
	info, err := b.client.EnqueueBatch(b.ctx, skiplock.Batch{Name: "killed", Callback: batchDone{},
		Jobs: []skiplock.EnqueueParams{{Args: batchArgs{N: 1}}, {Args: batchArgs{N: 2}}, {Args: batchArgs{N: 3}}}})
	require.NoError(t, err)

	lock, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(b.ctx) }()
	_, err = lock.Exec(b.ctx, b.q(`SELECT 1 FROM {s}.workflow_tasks WHERE workflow_id = $1 AND name = 'callback' FOR UPDATE`), info.ID)
	require.NoError(t, err)
	runWorker(t, w)
	var pid int
	eventually(t, 30*time.Second, func() bool {
		err := b.pool.QueryRow(b.ctx, `SELECT pid FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%workflow_tasks%' AND datname = current_database()
				AND query LIKE '%`+b.schema+`%' LIMIT 1`).Scan(&pid)
		return err == nil
	}, "no completion waited on the callback's row")
	var killed bool
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&killed))
	require.True(t, killed)
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE kind = 'batch_done'`), "no callback before the commit")
	require.NoError(t, lock.Rollback(b.ctx))

	got := waitSettled(t, b, info.ID)
	assert.Equal(t, "succeeded", got.Task("callback").State)
	assert.Equal(t, int64(1), callbacks.Load())
	assert.Equal(t, skiplock.BatchCounts{Succeeded: 3}, counts.Load())
}

// A worker died holding a workflow task's last attempt. Whoever takes it back sends it
// dead and settles its dependent in the same transaction, never leaving it waiting: a
// process restarted with the dead one's id (it takes back its predecessor's jobs at
// start), or the sweeper once the job's lease passed and its owner's row is gone (pruned:
// a row's jobs are the other workers' to judge, not the sweeper's).
func TestWorkflow_ReclaimOfADeadWorkersLastAttemptSettlesDependents(t *testing.T) {
	t.Parallel()
	for _, by := range []string{"restart", "sweeper"} {
		t.Run(by, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			info, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "x", Tasks: []skiplock.WorkflowTask{
				{Name: "a", Args: stepArgs{}, Options: &skiplock.EnqueueOptions{MaxAttempts: 1}},
				{Name: "b", Args: stepArgs{}, DependsOn: []string{"a"}},
			}})
			require.NoError(t, err)
			lease := "now() + interval '1 hour'" // only the restarted process may take it
			if by == "restart" {
				// Its owner's row in the workers table has expired.
				_, err = b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.workers (id, queues, started_at, expires_at)
					VALUES ('gone', '{default}', now() - interval '1 minute', now() - interval '1 second')`))
				require.NoError(t, err)
			} else {
				lease = "now() - interval '1 second'" // and its owner has no row
			}
			_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET status = 'running', attempts = 1, locked_by = 'gone',
				locked_at = now() - interval '2 seconds', lease_until = `+lease+` WHERE id = $1`), info.Task("a").JobID)
			require.NoError(t, err)

			if by == "restart" {
				w, err := skiplock.NewWorker(b.client, skiplock.WorkerConfig{ID: "gone", SweepInterval: -1, Logger: testLogger()})
				require.NoError(t, err)
				require.NoError(t, skiplock.Handle(w, func(context.Context, *skiplock.Job[stepArgs]) error { return nil }))
				stop := runWorker(t, w)
				defer stop()
			} else {
				s, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{Logger: testLogger()})
				require.NoError(t, err)
				res, err := s.Sweep(b.ctx)
				require.NoError(t, err)
				assert.EqualValues(t, 1, res.Dead)
			}
			eventually(t, 30*time.Second, func() bool {
				got, err := b.client.GetWorkflow(b.ctx, info.ID)
				require.NoError(t, err)
				s := states(got)
				return s["a"] == "dead" && s["b"] == "cancelled"
			}, "a dead and b cancelled")
		})
	}
}

// An enqueued workflow wakes the workers of its root tasks' queues at commit, and a
// released task wakes them again: with an hourly poll, a two-task chain runs at once.
func TestWorkflow_EnqueueAndReleaseWakeTheWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ran := make(chan string, 4)
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: time.Hour, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[stepArgs]) error {
		ran <- job.Metadata["skiplock_task"]
		return nil
	}))
	runWorker(t, w)
	// Claims start once the listener listens and the worker's row is written.
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.workers`) == 1
	}, "the worker registered")
	info, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "wake", Tasks: []skiplock.WorkflowTask{
		{Name: "first", Args: stepArgs{}},
		{Name: "second", Args: stepArgs{}, DependsOn: []string{"first"}},
	}})
	require.NoError(t, err)
	require.NotZero(t, info.Task("first").JobID, "the root task has its job")
	assert.Zero(t, info.Task("second").JobID)
	for _, want := range []string{"first", "second"} {
		select {
		case got := <-ran:
			assert.Equal(t, want, got)
		case <-time.After(15 * time.Second):
			t.Fatalf("task %s did not run within 15 s: no wake-up (the poll is hourly)", want)
		}
	}
	got := waitSettled(t, b, info.ID)
	assert.Equal(t, map[string]string{"first": "succeeded", "second": "succeeded"}, states(got))
	// The tasks name their jobs: the root's at enqueue, the dependent's at its release.
	assert.Equal(t, 2, b.count(t, `SELECT count(*) FROM {s}.workflow_tasks WHERE job_id IS NOT NULL`))
}
