// This file holds workflows and their enqueue: DAGs of jobs written in one statement
// ([Client.EnqueueWorkflow], [Client.EnqueueWorkflowTx]), checked first (cycles, unknown
// names). Inspecting and steering them is in workflowadmin.go, batches with a callback in
// workflowbatch.go, what releases a task when its dependencies finish in
// workflowsettle.go; the design is in docs/workflows.md.

package skiplock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/internal/settle"
)

// ErrInvalidWorkflow is matched (errors.Is) by every error that refuses a workflow or a
// batch before anything is written: a cycle, an unknown or repeated name, a bad task.
var ErrInvalidWorkflow = errors.New("skiplock: invalid workflow")

// ErrWorkflowNotFound is returned for a workflow id that does not exist.
var ErrWorkflowNotFound = errors.New("skiplock: workflow not found")

// maxWorkflowTasks bounds the tasks of one workflow or batch (one statement writes them).
const maxWorkflowTasks = 100_000

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

func (p OnFailure) sql() string {
	if p == RunDependents {
		return "run"
	}
	return "cancel"
}

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
	var info *WorkflowInfo
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var err error
		info, err = c.EnqueueWorkflowTx(ctx, tx, wf)
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
// call aborts tx. One statement writes the whole workflow.
//
// Jobs of workflow tasks must be run by workers of a release that knows workflows: an
// older worker records their outcomes without releasing their dependents.
func (c *Client) EnqueueWorkflowTx(ctx context.Context, tx DBTX, wf Workflow) (*WorkflowInfo, error) {
	if tx == nil {
		return nil, errors.New("skiplock: EnqueueWorkflowTx: tx is nil")
	}
	p, err := c.planWorkflow(wf)
	if err != nil {
		return nil, err
	}
	return c.writeWorkflow(ctx, tx, p)
}

// workflowPlan is a checked workflow, as statement arguments.
type workflowPlan struct {
	name, onFailure string
	policy          OnFailure
	names           []string
	waiting         []int32
	queue, kind     []string
	payload, meta   []string
	priority        []int16
	runAt           []*time.Time
	maxAttempts     []int32
	timeoutMs       []*int64
	partition       []*string
	parents, childs []string
	dueQueues       []string // queues of tasks due at once, for the wake-up
}

// planWorkflow checks wf and prepares each task's job. It writes nothing.
func (c *Client) planWorkflow(wf Workflow) (*workflowPlan, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidWorkflow}, a...)...)
	}
	if wf.Name == "" || len(wf.Name) > 255 || !validText(wf.Name) {
		return nil, bad("name %q: 1-255 bytes of UTF-8 without NUL", truncate(wf.Name, 40))
	}
	if wf.OnFailure != CancelDependents && wf.OnFailure != RunDependents {
		return nil, bad("OnFailure %d: use CancelDependents or RunDependents", wf.OnFailure)
	}
	if len(wf.Tasks) == 0 || len(wf.Tasks) > maxWorkflowTasks {
		return nil, bad("%d tasks: a workflow has 1-%d", len(wf.Tasks), maxWorkflowTasks)
	}
	index := make(map[string]int, len(wf.Tasks))
	for i, t := range wf.Tasks {
		if t.Name == "" || len(t.Name) > 255 || !validText(t.Name) {
			return nil, bad("task name %q: 1-255 bytes of UTF-8 without NUL", truncate(t.Name, 40))
		}
		if _, dup := index[t.Name]; dup {
			return nil, bad("task name %q is used twice", t.Name)
		}
		index[t.Name] = i
	}
	p := &workflowPlan{name: wf.Name, onFailure: wf.OnFailure.sql(), policy: wf.OnFailure}
	due := map[string]bool{}
	for _, t := range wf.Tasks {
		seen := map[string]bool{}
		for _, d := range t.DependsOn {
			if _, ok := index[d]; !ok {
				return nil, bad("task %q depends on %q, which is not a task of the workflow", t.Name, d)
			}
			if d == t.Name {
				return nil, bad("task %q depends on itself", t.Name)
			}
			if seen[d] {
				continue
			}
			seen[d] = true
			p.parents, p.childs = append(p.parents, d), append(p.childs, t.Name)
		}
		if t.Options != nil && (t.Options.UniqueKey != "" || t.Options.Unique != nil) {
			return nil, bad("task %q: UniqueKey and Unique are not supported on workflow tasks", t.Name)
		}
		j, err := c.prepare(t.Args, t.Options)
		if err != nil {
			return nil, fmt.Errorf("%w: task %q: %w", ErrInvalidWorkflow, t.Name, err)
		}
		if err := j.encodeMetadata(); err != nil {
			return nil, fmt.Errorf("%w: task %q: %w", ErrInvalidWorkflow, t.Name, err)
		}
		p.names = append(p.names, t.Name)
		p.waiting = append(p.waiting, int32(len(seen)))
		p.queue, p.kind = append(p.queue, j.queue), append(p.kind, j.kind)
		p.payload, p.meta = append(p.payload, string(j.payload)), append(p.meta, j.metadataText())
		p.priority, p.runAt = append(p.priority, j.priority), append(p.runAt, j.runAt)
		p.maxAttempts, p.timeoutMs = append(p.maxAttempts, j.maxAttempts), append(p.timeoutMs, j.timeoutMs)
		p.partition = append(p.partition, j.partitionKey)
		if len(seen) == 0 && j.dueNow() && !due[j.queue] {
			due[j.queue] = true
			p.dueQueues = append(p.dueQueues, j.queue)
		}
	}
	if cyc := findCycle(wf.Tasks, index); cyc != nil {
		return nil, bad("the dependencies form a cycle: %v", cyc)
	}
	return p, nil
}

// findCycle returns the names of one cycle of tasks (the first repeated at the end), or
// nil when the tasks form a DAG. Iterative depth-first search: no recursion depth limit.
func findCycle(tasks []WorkflowTask, index map[string]int) []string {
	const (
		unseen = iota
		open
		closed
	)
	state := make([]int, len(tasks))
	type frame struct{ task, next int }
	for root := range tasks {
		if state[root] != unseen {
			continue
		}
		stack := []frame{{root, 0}}
		state[root] = open
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			deps := tasks[top.task].DependsOn
			if top.next == len(deps) {
				state[top.task] = closed
				stack = stack[:len(stack)-1]
				continue
			}
			d := index[deps[top.next]]
			top.next++
			switch state[d] {
			case open:
				var cyc []string
				for i := len(stack) - 1; i >= 0; i-- {
					cyc = append(cyc, tasks[stack[i].task].Name)
					if stack[i].task == d {
						break
					}
				}
				return append(cyc, tasks[d].Name)
			case unseen:
				state[d] = open
				stack = append(stack, frame{d, 0})
			}
		}
	}
	return nil
}

// enqueueWorkflowSQL writes a workflow in one statement: its row, the jobs of the tasks
// that wait for nothing, its tasks (with those jobs' ids), its edges, and the wake-up of
// the queues $17 on channel $16 (delivered at commit). The jobs go first so that the
// tasks are inserted with their job ids: a later UPDATE of the new task rows (mapJobsSQL,
// as the settler must) cost a statement, and its cached generic plan, made while the
// table was small, scanned the whole table once it had grown (without fresh statistics:
// 3.9 ms a workflow at 50,000 tasks). The tasks' metadata names their workflow and task,
// which is how a worker knows a job is a task (isTask) and how a task finds its
// dependencies.
const enqueueWorkflowSQL = `WITH wf AS (
	INSERT INTO {s}.workflows (name, on_failure) VALUES ($1, $2) RETURNING id, created_at
),
u AS (
	SELECT wf.id AS workflow_id, u.name, u.waiting, u.queue, u.kind, u.payload::jsonb AS payload,
		u.priority, u.run_at, u.max_attempts, u.timeout_ms,
		u.metadata::jsonb || jsonb_build_object('` + settle.MetaWorkflow + `', wf.id::text, '` + settle.MetaTask + `', u.name) AS metadata,
		u.partition_key
	FROM wf, unnest($3::text[], $4::int[], $5::text[], $6::text[], $7::text[], $8::smallint[],
		$9::timestamptz[], $10::int[], $11::bigint[], $12::text[], $13::text[])
		AS u(name, waiting, queue, kind, payload, priority, run_at, max_attempts, timeout_ms, metadata, partition_key)
),
j AS (
	INSERT INTO {s}.jobs (queue, kind, payload, priority, run_at, max_attempts, timeout_ms, metadata, partition_key)
	SELECT queue, kind, payload, priority, coalesce(run_at, now()), max_attempts, timeout_ms,
		metadata, partition_key
	FROM u WHERE waiting = 0
	RETURNING id, metadata ->> '` + settle.MetaTask + `' AS task, queue
),
t AS (
	INSERT INTO {s}.workflow_tasks (workflow_id, name, job_id, state, waiting, queue, kind, payload,
		priority, run_at, max_attempts, timeout_ms, metadata, partition_key)
	SELECT u.workflow_id, u.name, j.id, CASE WHEN u.waiting = 0 THEN 'released' ELSE 'waiting' END,
		u.waiting, u.queue, u.kind, u.payload, u.priority, u.run_at, u.max_attempts, u.timeout_ms,
		u.metadata, u.partition_key
	FROM u LEFT JOIN j ON j.task = u.name
	RETURNING name, state, job_id
),
e AS (
	INSERT INTO {s}.workflow_edges (workflow_id, parent, child)
	SELECT wf.id, x.parent, x.child FROM wf, unnest($14::text[], $15::text[]) AS x(parent, child)
),
n AS (
	SELECT count(pg_notify($16, d.queue)) AS n
	FROM (SELECT DISTINCT queue FROM j WHERE queue = ANY ($17::text[])) d
)
SELECT wf.id, wf.created_at, t.name, coalesce(t.job_id, 0), t.state
FROM wf CROSS JOIN n CROSS JOIN t ORDER BY t.name`

// writeWorkflow writes p through db, inside a savepoint so that an error leaves the
// caller's transaction usable.
func (c *Client) writeWorkflow(ctx context.Context, db DBTX, p *workflowPlan) (*WorkflowInfo, error) {
	if _, err := db.Exec(ctx, `SAVEPOINT skiplock_workflow`); err != nil {
		return nil, c.wrapErr("enqueue workflow", err)
	}
	info, err := c.insertWorkflow(ctx, db, p)
	if err != nil {
		if _, rerr := db.Exec(ctx, `ROLLBACK TO SAVEPOINT skiplock_workflow`); rerr != nil {
			return nil, errors.Join(c.wrapErr("enqueue workflow", err), rerr)
		}
	}
	if _, rerr := db.Exec(ctx, `RELEASE SAVEPOINT skiplock_workflow`); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		return nil, c.wrapErr("enqueue workflow", err)
	}
	return info, nil
}

// workflowSQL holds the statements of EnqueueWorkflow and EnqueueSequence, rendered once
// for a Client's schema.
type workflowSQL struct {
	enqueue                                  string // enqueueWorkflowSQL
	seqLock, seqWorkflow, seqTail, seqInsert string // sequence.go
}

func newWorkflowSQL(schema string) workflowSQL {
	r := func(q string) string { return pgutil.Render(schema, q) }
	return workflowSQL{enqueue: r(enqueueWorkflowSQL),
		seqLock: r(seqLockSQL), seqWorkflow: r(seqWorkflowSQL), seqTail: r(seqTailSQL), seqInsert: r(seqInsertSQL)}
}

// insertWorkflow runs enqueueWorkflowSQL and the wake-up (delivered at commit).
func (c *Client) insertWorkflow(ctx context.Context, db DBTX, p *workflowPlan) (*WorkflowInfo, error) {
	rows, err := db.Query(ctx, c.wf.enqueue, p.name, p.onFailure, p.names, p.waiting,
		p.queue, p.kind, p.payload, p.priority, p.runAt, p.maxAttempts, p.timeoutMs, p.meta, p.partition,
		p.parents, p.childs, c.notify.Channel, p.dueQueues)
	if err != nil {
		return nil, err
	}
	info := &WorkflowInfo{Name: p.name, OnFailure: p.policy}
	var t WorkflowTaskInfo
	_, err = pgx.ForEachRow(rows, []any{&info.ID, &info.CreatedAt, &t.Name, &t.JobID, &t.State}, func() error {
		info.Tasks = append(info.Tasks, t)
		return nil
	})
	if err != nil {
		return nil, err
	}
	deps := map[string][]string{}
	for i, ch := range p.childs {
		deps[ch] = append(deps[ch], p.parents[i])
	}
	for i := range info.Tasks {
		info.Tasks[i].DependsOn = deps[info.Tasks[i].Name]
	}
	return info, nil
}
