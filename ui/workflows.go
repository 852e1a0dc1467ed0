package ui

// This file holds the workflow pages: the newest workflows with their task counts, and
// one workflow's tasks laid out by depth (a task's depth is the longest chain of
// dependencies above it), with its actions cancel and retry.

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/skiplock/skiplock/ui/internal/query"
)

const (
	// maxWorkflowsListed bounds the workflows page: the newest ones.
	maxWorkflowsListed = 50
	// maxTasksShown bounds the tasks one workflow page reads and lays out (a batch may
	// hold 100,000): the first ones in name order. The counts above the table cover them all.
	maxTasksShown = 2000
	// maxDepsShown bounds the dependencies listed (and laid out by) per task, the first
	// ones in name order (a task may depend on thousands); the page says how many more.
	maxDepsShown = 20
)

func (h *Handler) workflowsPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	list, err := h.db.Workflows.List(ctx, maxWorkflowsListed)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.render(w, r, "workflows", "Workflows", "workflows", map[string]any{"Rows": list, "Max": maxWorkflowsListed})
}

// taskStates are the states a task shows, each with its badge class.
var taskStates = map[string]string{
	"waiting": "st-waiting", "released": "st-queued", "succeeded": "st-succeeded",
	"failed": "st-failed", "dead": "st-dead", "cancelled": "st-cancelled",
}

// workflowView is the data of the workflow page.
type workflowView struct {
	WF        query.WorkflowHead
	OnFailure string
	Layers    []layer
	Counts    []field // state: count, in taskStates order
	Cut       int64   // tasks left out of the layout past maxTasksShown
	MaxShown  int     // maxTasksShown
	CanCancel bool
	CanRetry  bool
}

// layer is the tasks of one depth.
type layer struct {
	Depth int
	Tasks []taskView
}

type taskView struct {
	Name      string
	Anchor    int // the task's place in name order: its element id is task-<Anchor>
	State     string
	Class     string
	JobID     int64
	DependsOn []depView
	MoreDeps  int64 // dependencies past maxDepsShown, not listed
}

// depView is a dependency, with the anchor of its task (-1 when not laid out).
type depView struct {
	Name   string
	Anchor int
}

// workflowPage shows a workflow: its tasks counted by state (one aggregate over all of
// them), and the first maxTasksShown in name order laid out by depth, each with its first
// maxDepsShown dependencies. Nothing it does grows faster than the tasks and edges of
// the workflow, and what it reads and renders is bounded by those two constants.
func (h *Handler) workflowPage(w http.ResponseWriter, r *http.Request) {
	id, ok := h.workflowID(w, r)
	if !ok {
		return
	}
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	head, found, err := h.db.Workflows.Head(ctx, id)
	if err == nil && !found {
		h.refuse(w, r, http.StatusNotFound, "No workflow "+strconv.FormatInt(id, 10)+": it never existed, or was deleted after its tasks finished.")
		return
	}
	var tasks []query.WorkflowTask
	if err == nil {
		tasks, err = h.db.Workflows.Tasks(ctx, id, maxTasksShown, maxDepsShown)
	}
	var depth []int
	if err == nil {
		depth, err = taskDepths(ctx, tasks)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	v := &workflowView{WF: head, OnFailure: "cancel dependents", MaxShown: maxTasksShown, Cut: max(head.Tasks-int64(len(tasks)), 0)}
	if head.OnFailure == "run" {
		v.OnFailure = "run dependents"
	}
	for _, c := range []struct {
		state string
		n     int64
	}{{"waiting", head.Waiting}, {"released", head.Released}, {"succeeded", head.Succeeded},
		{"failed", head.Failed}, {"dead", head.Dead}, {"cancelled", head.Cancelled}} {
		if c.n > 0 {
			v.Counts = append(v.Counts, field{c.state, strconv.FormatInt(c.n, 10)})
		}
	}
	// Links between tasks go to numbered anchors, so no task name is ever part of an
	// element id or a URL fragment.
	anchor := make(map[string]int, len(tasks))
	for i, t := range tasks {
		anchor[t.Name] = i
	}
	for i, t := range tasks {
		d := depth[i]
		for len(v.Layers) <= d {
			v.Layers = append(v.Layers, layer{Depth: len(v.Layers)})
		}
		class, ok := taskStates[t.State]
		if !ok {
			class = "st-cancelled"
		}
		tv := taskView{Name: t.Name, Anchor: i, State: t.State, Class: class, JobID: t.JobID,
			MoreDeps: max(t.Deps-int64(len(t.DependsOn)), 0)}
		for _, p := range t.DependsOn {
			a, ok := anchor[p]
			if !ok {
				a = -1
			}
			tv.DependsOn = append(tv.DependsOn, depView{Name: p, Anchor: a})
		}
		v.Layers[d].Tasks = append(v.Layers[d].Tasks, tv)
	}
	// A band no laid-out task sits in (depth 0, when every laid-out task has a
	// dependency that is not) is left out.
	v.Layers = slices.DeleteFunc(v.Layers, func(l layer) bool { return len(l.Tasks) == 0 })
	if !h.cfg.ReadOnly {
		v.CanCancel = head.Waiting+head.Released > 0
		v.CanRetry = head.Failed+head.Dead+head.Cancelled > 0
	}
	h.render(w, r, "workflow", "Workflow "+strconv.FormatInt(id, 10), "workflows", v)
}

// taskDepths returns the depth of each of tasks, by index: 0 for a task without
// dependencies, else one more than its deepest dependency; a dependency not among tasks
// (not laid out) counts as depth 0. It is a depth-first walk with each task's depth
// memoized and its own stack (no recursion): linear in the tasks and their listed
// dependencies, whatever their order. The enqueue refuses cycles; an edge that closes one
// (a row written by hand) is not followed, so a bad row cannot loop the page. It stops
// with ctx's error when ctx ends.
func taskDepths(ctx context.Context, tasks []query.WorkflowTask) ([]int, error) {
	index := make(map[string]int, len(tasks))
	for i, t := range tasks {
		index[t.Name] = i
	}
	const (
		unseen = iota
		open   // on the walk's stack
		done   // its depth is final
	)
	state := make([]uint8, len(tasks))
	depth := make([]int, len(tasks))
	type frame struct{ task, next int } // next: the index in DependsOn to look at next
	var stack []frame
	steps := 0
	for root := range tasks {
		if state[root] != unseen {
			continue
		}
		state[root] = open
		stack = append(stack[:0], frame{task: root})
		for len(stack) > 0 {
			if steps++; steps%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
			}
			f := &stack[len(stack)-1]
			if deps := tasks[f.task].DependsOn; f.next < len(deps) {
				p, ok := index[deps[f.next]]
				f.next++
				switch {
				case !ok:
					depth[f.task] = max(depth[f.task], 1)
				case state[p] == done:
					depth[f.task] = max(depth[f.task], depth[p]+1)
				case state[p] == unseen:
					state[p] = open
					stack = append(stack, frame{task: p})
				} // open: the edge closes a cycle, and is not followed
				continue
			}
			state[f.task] = done
			stack = stack[:len(stack)-1]
			if len(stack) > 0 {
				child := stack[len(stack)-1].task
				depth[child] = max(depth[child], depth[f.task]+1)
			}
		}
	}
	return depth, nil
}

// cancelWorkflow cancels the workflow's tasks that have not started.
func (h *Handler) cancelWorkflow(w http.ResponseWriter, r *http.Request) {
	h.workflowAction(w, r, "wfcancelled", h.client.CancelWorkflow)
}

// retryWorkflow puts the workflow's failed, dead and cancelled tasks back.
func (h *Handler) retryWorkflow(w http.ResponseWriter, r *http.Request) {
	h.workflowAction(w, r, "wfretried", h.client.RetryWorkflow)
}

func (h *Handler) workflowAction(w http.ResponseWriter, r *http.Request, done string,
	act func(ctx context.Context, id int64) (int, error)) {
	id, ok := h.workflowID(w, r)
	if !ok {
		return
	}
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	if _, found, err := h.db.Workflows.Head(ctx, id); err != nil {
		h.fail(w, r, err)
		return
	} else if !found {
		h.refuse(w, r, http.StatusNotFound, "No workflow "+strconv.FormatInt(id, 10)+".")
		return
	}
	n, err := act(ctx, id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if n == 0 {
		done = "wfunchanged"
	}
	h.redirect(w, r, "/workflows/"+strconv.FormatInt(id, 10), url.Values{"done": {done}, "n_" + done: {strconv.Itoa(n)}})
}

// workflowID reads the {id} of the path, answering a bad one.
func (h *Handler) workflowID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		h.refuse(w, r, http.StatusBadRequest, "A workflow id is a positive number.")
		return 0, false
	}
	return id, true
}
