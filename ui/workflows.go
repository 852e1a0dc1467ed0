package ui

// This file holds the workflow pages: the newest workflows with their task counts, and
// one workflow's tasks laid out by depth (a task's depth is the longest chain of
// dependencies above it), with its actions cancel and retry.

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/skiplock/skiplock"
)

const (
	// maxWorkflowsListed bounds the workflows page: the newest ones.
	maxWorkflowsListed = 50
	// maxTasksShown bounds the tasks one workflow page lays out (a batch may hold
	// 100,000); the counts above the table cover them all.
	maxTasksShown = 2000
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
	WF        *skiplock.WorkflowInfo
	OnFailure string
	Layers    []layer
	Counts    []field // state: count, in taskStates order
	Cut       int     // tasks left out of the layout past maxTasksShown
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
}

// depView is a dependency, with the anchor of its task (-1 when not laid out).
type depView struct {
	Name   string
	Anchor int
}

func (h *Handler) workflowPage(w http.ResponseWriter, r *http.Request) {
	id, ok := h.workflowID(w, r)
	if !ok {
		return
	}
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	info, err := h.client.GetWorkflow(ctx, id)
	if errors.Is(err, skiplock.ErrWorkflowNotFound) {
		h.refuse(w, r, http.StatusNotFound, "No workflow "+strconv.FormatInt(id, 10)+": it never existed, or was deleted after its tasks finished.")
		return
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	v := &workflowView{WF: info, OnFailure: "cancel dependents"}
	if info.OnFailure == skiplock.RunDependents {
		v.OnFailure = "run dependents"
	}
	counts := map[string]int{}
	for _, t := range info.Tasks {
		counts[t.State]++
	}
	for _, s := range []string{"waiting", "released", "succeeded", "failed", "dead", "cancelled"} {
		if counts[s] > 0 {
			v.Counts = append(v.Counts, field{s, strconv.Itoa(counts[s])})
		}
	}
	depth := taskDepths(info.Tasks)
	shown := info.Tasks
	if len(shown) > maxTasksShown {
		v.Cut = len(shown) - maxTasksShown
		shown = shown[:maxTasksShown]
	}
	// Links between tasks go to numbered anchors, so no task name is ever part of an
	// element id or a URL fragment.
	anchor := make(map[string]int, len(shown))
	for i, t := range shown {
		anchor[t.Name] = i
	}
	for i, t := range shown {
		d := depth[t.Name]
		for len(v.Layers) <= d {
			v.Layers = append(v.Layers, layer{Depth: len(v.Layers)})
		}
		class, ok := taskStates[t.State]
		if !ok {
			class = "st-cancelled"
		}
		tv := taskView{Name: t.Name, Anchor: i, State: t.State, Class: class, JobID: t.JobID}
		for _, p := range t.DependsOn {
			a, ok := anchor[p]
			if !ok {
				a = -1
			}
			tv.DependsOn = append(tv.DependsOn, depView{Name: p, Anchor: a})
		}
		v.Layers[d].Tasks = append(v.Layers[d].Tasks, tv)
	}
	if !h.cfg.ReadOnly {
		v.CanCancel = counts["waiting"]+counts["released"] > 0
		v.CanRetry = counts["failed"]+counts["dead"]+counts["cancelled"] > 0
	}
	h.render(w, r, "workflow", "Workflow "+strconv.FormatInt(id, 10), "workflows", v)
}

// taskDepths returns each task's depth: 0 for a task without dependencies, else one
// more than its deepest dependency. The enqueue refuses cycles; a dependency missing
// from tasks counts as depth 0, and the walk stops after len(tasks) rounds whatever
// the graph, so a bad row cannot loop the page.
func taskDepths(tasks []skiplock.WorkflowTaskInfo) map[string]int {
	depth := make(map[string]int, len(tasks))
	for range len(tasks) {
		changed := false
		for _, t := range tasks {
			d := 0
			for _, p := range t.DependsOn {
				d = max(d, depth[p]+1)
			}
			if d > depth[t.Name] && d <= len(tasks) {
				depth[t.Name] = d
				changed = true
			}
		}
		if !changed {
			break
		}
	}
	return depth
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
	if _, err := h.client.GetWorkflow(ctx, id); errors.Is(err, skiplock.ErrWorkflowNotFound) {
		h.refuse(w, r, http.StatusNotFound, "No workflow "+strconv.FormatInt(id, 10)+".")
		return
	} else if err != nil {
		h.fail(w, r, err)
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
