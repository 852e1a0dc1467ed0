// This file holds the enqueue of workflows: DAGs of jobs, checked first (cycles, unknown
// names) and written in one statement.

package enqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/internal/settle"
)

// MaxWorkflowTasks bounds the tasks of one workflow or batch (one statement writes them).
const MaxWorkflowTasks = 100_000

// OnFailure says what a dependency that ends failed, dead or cancelled does to the tasks
// that depend on it: the root package's OnFailure.
type OnFailure int

// The policies of OnFailure, as the root package's constants of the same names.
const (
	CancelDependents OnFailure = iota
	RunDependents
)

func (p OnFailure) sql() string {
	if p == RunDependents {
		return "run"
	}
	return "cancel"
}

// WorkflowSpec is a workflow to check and plan: the root package's Workflow, without the
// tasks' args and options, which the planner's prepare function turns into jobs.
type WorkflowSpec struct {
	Name      string
	OnFailure OnFailure
	Tasks     []TaskSpec
}

// TaskSpec is one task of a [WorkflowSpec].
type TaskSpec struct {
	Name      string
	DependsOn []string
	// Unique says the task's options set UniqueKey or Unique, which tasks refuse.
	Unique bool
}

// WorkflowInfo describes a workflow as written: the root package's WorkflowInfo.
type WorkflowInfo struct {
	ID        int64
	Name      string
	OnFailure OnFailure
	CreatedAt time.Time
	Tasks     []TaskInfo // in name order
}

// TaskInfo is one task of a [WorkflowInfo]: the root package's WorkflowTaskInfo, field for
// field.
type TaskInfo struct {
	Name      string
	JobID     int64 // 0 until the task is released
	DependsOn []string
	State     string // "waiting", "released", "succeeded", "failed", "dead" or "cancelled"
}

// WorkflowPlan is a checked workflow, as statement arguments.
type WorkflowPlan struct {
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

// PlanWorkflow checks wf and prepares each task's job with prepare, which returns the job
// of task i. It writes nothing.
func PlanWorkflow(wf WorkflowSpec, prepare func(i int) (Job, error)) (*WorkflowPlan, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidWorkflow}, a...)...)
	}
	if wf.Name == "" || len(wf.Name) > 255 || !ValidText(wf.Name) {
		return nil, bad("name %q: 1-255 bytes of UTF-8 without NUL", Truncate(wf.Name, 40))
	}
	if wf.OnFailure != CancelDependents && wf.OnFailure != RunDependents {
		return nil, bad("OnFailure %d: use CancelDependents or RunDependents", wf.OnFailure)
	}
	if len(wf.Tasks) == 0 || len(wf.Tasks) > MaxWorkflowTasks {
		return nil, bad("%d tasks: a workflow has 1-%d", len(wf.Tasks), MaxWorkflowTasks)
	}
	index := make(map[string]int, len(wf.Tasks))
	for i, t := range wf.Tasks {
		if t.Name == "" || len(t.Name) > 255 || !ValidText(t.Name) {
			return nil, bad("task name %q: 1-255 bytes of UTF-8 without NUL", Truncate(t.Name, 40))
		}
		if _, dup := index[t.Name]; dup {
			return nil, bad("task name %q is used twice", t.Name)
		}
		index[t.Name] = i
	}
	p := &WorkflowPlan{name: wf.Name, onFailure: wf.OnFailure.sql(), policy: wf.OnFailure}
	due := map[string]bool{}
	for i, t := range wf.Tasks {
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
		if t.Unique {
			return nil, bad("task %q: UniqueKey and Unique are not supported on workflow tasks", t.Name)
		}
		j, err := prepare(i)
		if err != nil {
			return nil, fmt.Errorf("%w: task %q: %w", ErrInvalidWorkflow, t.Name, err)
		}
		if err := j.encodeMetadata(); err != nil {
			return nil, fmt.Errorf("%w: task %q: %w", ErrInvalidWorkflow, t.Name, err)
		}
		if j.ConcurrencyKeys != nil {
			return nil, bad("task %q: ConcurrencyKeys are not supported on workflow tasks (PartitionKey is)", t.Name)
		}
		p.names = append(p.names, t.Name)
		p.waiting = append(p.waiting, int32(len(seen)))
		p.queue, p.kind = append(p.queue, j.Queue), append(p.kind, j.Kind)
		p.payload, p.meta = append(p.payload, string(j.Payload)), append(p.meta, j.metadataText())
		p.priority, p.runAt = append(p.priority, j.Priority), append(p.runAt, j.RunAt)
		p.maxAttempts, p.timeoutMs = append(p.maxAttempts, j.MaxAttempts), append(p.timeoutMs, j.TimeoutMs)
		p.partition = append(p.partition, j.PartitionKey)
		if len(seen) == 0 && j.dueNow() && !due[j.Queue] {
			due[j.Queue] = true
			p.dueQueues = append(p.dueQueues, j.Queue)
		}
	}
	if cyc := findCycle(wf.Tasks, index); cyc != nil {
		return nil, bad("the dependencies form a cycle: %v", cyc)
	}
	return p, nil
}

// findCycle returns the names of one cycle of tasks (the first repeated at the end), or
// nil when the tasks form a DAG. Iterative depth-first search: no recursion depth limit.
func findCycle(tasks []TaskSpec, index map[string]int) []string {
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

// Workflows writes workflows on one schema.
type Workflows struct {
	schema  string
	channel string // the wake-ups' channel
	enqueue string // enqueueWorkflowSQL, rendered for schema
}

func newWorkflows(schema, channel string) *Workflows {
	return &Workflows{schema: schema, channel: channel, enqueue: pgutil.Render(schema, enqueueWorkflowSQL)}
}

// WriteWorkflow writes p through db, inside a savepoint so that an error leaves the
// caller's transaction usable and holding none of the workflow's rows.
func (w *Workflows) WriteWorkflow(ctx context.Context, db jobtype.DBTX, p *WorkflowPlan) (*WorkflowInfo, error) {
	var info *WorkflowInfo
	err := pgutil.InSavepoint(ctx, db, "skiplock_workflow", func() (err error) {
		info, err = w.insertWorkflow(ctx, db, p)
		return err
	})
	if err != nil {
		return nil, wrapErr(w.schema, "enqueue workflow", err)
	}
	return info, nil
}

// insertWorkflow runs enqueueWorkflowSQL and the wake-up (delivered at commit).
func (w *Workflows) insertWorkflow(ctx context.Context, db jobtype.DBTX, p *WorkflowPlan) (*WorkflowInfo, error) {
	rows, err := db.Query(ctx, w.enqueue, p.name, p.onFailure, p.names, p.waiting,
		p.queue, p.kind, p.payload, p.priority, p.runAt, p.maxAttempts, p.timeoutMs, p.meta, p.partition,
		p.parents, p.childs, w.channel, p.dueQueues)
	if err != nil {
		return nil, err
	}
	info := &WorkflowInfo{Name: p.name, OnFailure: p.policy}
	var t TaskInfo
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
