package ui_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/ui"
)

// stepArgs is the args of the workflow tasks these tests enqueue.
type stepArgs struct{}

func (stepArgs) Kind() string { return "step" }

// hostileName would run script, break out of an attribute, or walk a URL if a page
// printed it raw.
const hostileName = `"><script>alert(1)</script><a href="../jobs/1/delete?x=`

// enqueueWorkflow writes a workflow: root -> hostileName -> leaf, and root -> side.
func (b *bundle) enqueueWorkflow() *skiplock.WorkflowInfo {
	b.t.Helper()
	info, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "<b>nightly</b>", Tasks: []skiplock.WorkflowTask{
		{Name: "root", Args: stepArgs{}},
		{Name: hostileName, Args: stepArgs{}, DependsOn: []string{"root"}},
		{Name: "side", Args: stepArgs{}, DependsOn: []string{"root"}},
		{Name: "leaf", Args: stepArgs{}, DependsOn: []string{hostileName}},
	}})
	require.NoError(b.t, err)
	return info
}

func TestWorkflowPage_ShowsTasksByDepthAndEscapesNames(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	info := b.enqueueWorkflow()
	page := "/workflows/" + strconv.FormatInt(info.ID, 10)

	r := b.get(page)
	require.Equal(t, http.StatusOK, r.code, r.body)
	// The hostile names render as text: no markup of theirs reaches the page.
	assert.NotContains(t, r.body, "<script>alert(1)</script>")
	assert.NotContains(t, r.body, "<b>nightly</b>")
	assert.Contains(t, r.body, "&lt;script&gt;alert(1)&lt;/script&gt;")
	assert.Contains(t, r.body, "&lt;b&gt;nightly&lt;/b&gt;")
	// Links between tasks go to numbered anchors: no name is in an id or a URL.
	assert.NotContains(t, r.body, `href="../jobs/1/delete`)
	assert.NotContains(t, r.body, `id="task-%`)
	// leaf links to its dependency hostileName, whose anchor is its place in name order.
	got, err := b.client.GetWorkflow(b.ctx, info.ID)
	require.NoError(t, err)
	hostileAt := -1
	for i, task := range got.Tasks {
		if task.Name == hostileName {
			hostileAt = i
		}
	}
	require.GreaterOrEqual(t, hostileAt, 0)
	assert.Contains(t, r.body, `id="task-`+strconv.Itoa(hostileAt)+`"`)
	assert.Contains(t, r.body, `<a href="#task-`+strconv.Itoa(hostileAt)+`"><code>&#34;&gt;&lt;script&gt;`)

	// Depths: root 0; hostileName and side 1; leaf 2. Each band holds its tasks.
	bands := map[string]string{}
	for _, part := range strings.Split(r.body, `<div class="layer" data-depth="`)[1:] {
		d, rest, _ := strings.Cut(part, `"`)
		bands[d] = rest
	}
	require.Len(t, bands, 3)
	assert.Contains(t, bands["0"], `data-task="root"`)
	assert.Contains(t, bands["1"], `data-task="side"`)
	assert.Contains(t, bands["1"], "&lt;script&gt;")
	assert.Contains(t, bands["2"], `data-task="leaf"`)
	// The released root links to its job, with its state's colour; the others wait.
	assert.Contains(t, bands["0"], `<a href="/jobs/`+strconv.FormatInt(info.Task("root").JobID, 10)+`">`)
	assert.Contains(t, bands["0"], `class="badge st-queued" data-state>released`)
	assert.Contains(t, bands["2"], `class="badge st-waiting" data-state>waiting`)
	assert.Contains(t, r.body, `data-action="cancel-workflow"`)
	assert.NotContains(t, r.body, `data-action="retry-workflow"`, "nothing failed: no retry button")

	// The list shows it, newest first, with its name escaped and its counts.
	newer, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "newer", Tasks: []skiplock.WorkflowTask{{Name: "only", Args: stepArgs{}}}})
	require.NoError(t, err)
	r = b.get("/workflows")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.NotContains(t, r.body, "<b>nightly</b>")
	iNew := strings.Index(r.body, `data-workflow="`+strconv.FormatInt(newer.ID, 10)+`"`)
	iOld := strings.Index(r.body, `data-workflow="`+strconv.FormatInt(info.ID, 10)+`"`)
	require.True(t, iNew > 0 && iOld > 0, r.body)
	assert.Less(t, iNew, iOld, "newest first")

	assert.Equal(t, http.StatusNotFound, b.get("/workflows/987654321").code)
	assert.Equal(t, http.StatusBadRequest, b.get("/workflows/x").code)
	assert.Equal(t, http.StatusBadRequest, b.get("/workflows/-1").code)
}

func TestWorkflowPage_CancelAndRetry(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	info := b.enqueueWorkflow()
	page := "/workflows/" + strconv.FormatInt(info.ID, 10)

	// Without a CSRF token the action is refused and nothing changes.
	r := b.post(page+"/cancel", url.Values{})
	assert.Equal(t, http.StatusForbidden, r.code)
	assert.Equal(t, "queued", b.status(info.Task("root").JobID))

	r = b.act(page, page+"/cancel", nil)
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	r = b.get(r.location)
	assert.Contains(t, r.body, "Cancelled 4 tasks")
	assert.Equal(t, "cancelled", b.status(info.Task("root").JobID))
	assert.Equal(t, 4, b.count(`SELECT count(*) FROM {s}.workflow_tasks WHERE workflow_id = $1 AND state = 'cancelled'`, info.ID))
	assert.Contains(t, r.body, `data-action="retry-workflow"`)
	assert.NotContains(t, r.body, `data-action="cancel-workflow"`)

	r = b.act(page, page+"/retry", nil)
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.Contains(t, b.get(r.location).body, "Put 4 tasks back")
	got, err := b.client.GetWorkflow(b.ctx, info.ID)
	require.NoError(t, err)
	assert.Equal(t, "released", got.Task("root").State)
	assert.Equal(t, "queued", b.status(got.Task("root").JobID))
	assert.Equal(t, "waiting", got.Task(hostileName).State)

	// The audit page names the action and the workflow.
	audit := b.get("/audit").body
	assert.Contains(t, audit, "retry workflow")
	assert.Contains(t, audit, "workflow "+strconv.FormatInt(info.ID, 10))

	r = b.act(page, "/workflows/987654321/cancel", nil)
	assert.Equal(t, http.StatusNotFound, r.code)
}

func TestWorkflowPage_ReadOnlyHidesAndRefusesActions(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{ReadOnly: true})
	info := b.enqueueWorkflow()
	page := "/workflows/" + strconv.FormatInt(info.ID, 10)
	r := b.get(page)
	require.Equal(t, http.StatusOK, r.code)
	assert.NotContains(t, r.body, "data-action=")

	token := b.csrf(page)
	for _, action := range []string{page + "/cancel", page + "/retry"} {
		r := b.post(action, url.Values{"csrf": {token}})
		assert.Equal(t, http.StatusForbidden, r.code, action)
		assert.Contains(t, r.body, "read-only")
	}
	assert.Equal(t, "queued", b.status(info.Task("root").JobID))
	assert.Equal(t, 3, b.count(`SELECT count(*) FROM {s}.workflow_tasks WHERE workflow_id = $1 AND state = 'waiting'`, info.ID))
}

// A workflow of 12,000 tasks in one chain, named so that name order is the reverse of
// the chain's (the root sorts last), is counted whole and laid out at most 2,000 deep,
// reading the page's tasks only and computing their depths in one walk: well inside a
// second, where reading every task and relaxing depths a round per link took seconds.
func TestWorkflowPage_ALongChainIsCountedWholeAndLaidOutBounded(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	const n = 12000
	var id int64
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`WITH w AS (INSERT INTO {s}.workflows (name) VALUES ('chain') RETURNING id),
		t AS (INSERT INTO {s}.workflow_tasks (workflow_id, name, state, waiting, queue, kind, payload, priority, max_attempts, metadata)
			SELECT w.id, lpad(($1 - 1 - g)::text, 6, '0'),
				CASE WHEN g < 10 THEN 'succeeded' WHEN g = 10 THEN 'released' ELSE 'waiting' END,
				CASE WHEN g <= 10 THEN 0 ELSE 1 END, 'default', 'step', '{}', 0, 3, '{}'
			FROM w, generate_series(0, $1 - 1) g),
		e AS (INSERT INTO {s}.workflow_edges (workflow_id, parent, child)
			SELECT w.id, lpad(($1 - g)::text, 6, '0'), lpad(($1 - 1 - g)::text, 6, '0')
			FROM w, generate_series(1, $1 - 1) g)
		SELECT id FROM w`), n).Scan(&id))
	rc := b.countRows()
	b.serve(ui.Config{})

	start := time.Now()
	r := b.get("/workflows/" + strconv.FormatInt(id, 10))
	took := time.Since(start)
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Less(t, took, 3*time.Second, "the page is bounded: the old one took over 5 s here")
	assert.Contains(t, r.body, `<dt>Tasks</dt><dd>12000 · `, "the count covers every task")
	assert.Contains(t, r.body, `st-waiting">waiting</span> 11989`)
	assert.Contains(t, r.body, `st-released">released</span> 1`)
	assert.Contains(t, r.body, `st-succeeded">succeeded</span> 10`)
	assert.Contains(t, r.body, `data-cut="10000"`, "the page says how many it left out")
	assert.Equal(t, 2000, strings.Count(r.body, `<div class="task" `), "at most 2,000 laid out")
	// The laid-out tasks are the first 2,000 by name, the chain's last links: 001999,
	// whose dependency is not laid out, sits at depth 1 and 000000 at depth 2000.
	assert.False(t, strings.Contains(r.body, `data-depth="0"`), "no empty band")
	assert.Contains(t, r.body, `<div class="layer" data-depth="1">`+"\n"+`    <span class="depth">depth 1</span>`+"\n"+`    <div class="task" id="task-1999" data-task="001999">`)
	assert.Contains(t, r.body, `<div class="layer" data-depth="2000">`+"\n"+`    <span class="depth">depth 2000</span>`+"\n"+`    <div class="task" id="task-0" data-task="000000">`)
	assert.LessOrEqual(t, rc.rows.Load(), int64(2001), "the page reads the tasks it lays out and one row of counts")
	assert.LessOrEqual(t, rc.statements.Load(), int64(3))
}

// A task's dependencies past the first 20 are counted, not listed.
func TestWorkflowPage_ManyDependenciesAreCountedNotListed(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	tasks := []skiplock.WorkflowTask{}
	var deps []string
	for i := range 30 {
		name := fmt.Sprintf("p%02d", i)
		tasks = append(tasks, skiplock.WorkflowTask{Name: name, Args: stepArgs{}})
		deps = append(deps, name)
	}
	tasks = append(tasks, skiplock.WorkflowTask{Name: "sink", Args: stepArgs{}, DependsOn: deps})
	info, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "fan-in", Tasks: tasks})
	require.NoError(t, err)
	r := b.get("/workflows/" + strconv.FormatInt(info.ID, 10))
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, `data-more-deps="10"`)
	assert.Contains(t, r.body, `<code>p19</code>`)
	assert.Contains(t, r.body, `href="#task-19"`)
	assert.False(t, strings.Contains(r.body, `href="#task-20"`), "past the first 20 by name")
	assert.Contains(t, r.body, `<div class="layer" data-depth="1">`+"\n"+`    <span class="depth">depth 1</span>`+"\n"+`    <div class="task" id="task-30" data-task="sink">`)
}
