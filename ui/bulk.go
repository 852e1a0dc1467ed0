package ui

// This file holds the bulk actions by filter of the jobs and dead pages ("cancel all
// 100,000 matching", "requeue all …"), confirmed on a page that shows the count, then
// run in bounded batches; and the actions on the rows selected on the jobs page.

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/ui/internal/query"
)

// Bulk limits.
const (
	// bulkBatch is how many jobs one statement of a bulk action changes: each batch is its
	// own short transaction, so a bulk action never holds a lock on 100,000 rows.
	bulkBatch = 1000
	// bulkBudget bounds the time one bulk request works (or Config.QueryTimeout, when
	// shorter); what it did not reach is left as it was, and the page says to run it again.
	bulkBudget = 20 * time.Second
)

// bulkActions are the actions a bulk request may take on the jobs of each status; ""
// is the dead page's default, dead and failed jobs.
var bulkActions = map[skiplock.JobStatus][]string{
	"":                     {"requeue", "delete"},
	skiplock.StatusDead:    {"requeue", "delete"},
	skiplock.StatusFailed:  {"requeue", "delete"},
	skiplock.StatusQueued:  {"runnow", "cancel", "delete"},
	skiplock.StatusRunning: {"cancel"},
}

// bulkWords are each action's button verb, its past tense (a flash code) and what it
// does, for the confirmation page.
var bulkWords = map[string]struct{ Verb, Done, Does string }{
	"requeue": {"Requeue", "requeued", "puts back in their queues, with their attempts reset,"},
	"delete":  {"Delete", "deleted", "deletes"},
	"cancel":  {"Cancel", "cancelledmany", "cancels (they will not run)"},
	"runnow":  {"Run now", "runnowmany", "makes due at once (workers take them at their next poll; a job that waits for the jobs it depends on keeps waiting)"},
}

// bulkPages are the two pages with bulk actions: the statuses each filters by, and
// whether its bulk actions need one.
var bulkPages = map[string]struct {
	statuses   []skiplock.JobStatus
	needStatus bool
}{
	"dead": {stuckStatuses, false},
	"jobs": {[]skiplock.JobStatus{skiplock.StatusQueued, skiplock.StatusRunning, skiplock.StatusDead, skiplock.StatusFailed}, true},
}

// bulkView is the data of the confirmation page.
type bulkView struct {
	Filter  query.Filter
	Action  string // a key of bulkWords
	Verb    string
	Does    string
	Page    string // "dead" or "jobs": where the form posts and Back leads
	Danger  bool   // the action cannot be undone
	Count   int64
	Batches int64
	Back    string
}

// bulkFilter reads the filter and action of a bulk request from page ("dead" or "jobs").
func bulkFilter(q url.Values, page string) (f query.Filter, action, msg string) {
	bp := bulkPages[page]
	f, msg = parseFilter(q, bp.statuses)
	if msg != "" {
		return f, "", msg
	}
	if f.Search != "" {
		return f, "", "A bulk action takes a status, queue and kind filter, not a search."
	}
	if bp.needStatus && f.Status == "" {
		return f, "", "A bulk action on the jobs page takes a status: queued, running, dead or failed."
	}
	action = q.Get("action")
	if !slices.Contains(bulkActions[f.Status], action) {
		return f, "", "Unknown action for these jobs: use one of " + joinWords(bulkActions[f.Status]) + "."
	}
	return f, action, ""
}

// dangerous says whether action cannot be undone (cancel, delete).
func dangerous(action string) bool { return action == "cancel" || action == "delete" }

func joinWords(ws []string) string {
	out := ""
	for i, w := range ws {
		switch {
		case i == 0:
		case i == len(ws)-1:
			out += " or "
		default:
			out += ", "
		}
		out += w
	}
	return out
}

func (h *Handler) deadBulkPage(w http.ResponseWriter, r *http.Request)   { h.bulkPage(w, r, "dead") }
func (h *Handler) jobsBulkPage(w http.ResponseWriter, r *http.Request)   { h.bulkPage(w, r, "jobs") }
func (h *Handler) deadBulkAction(w http.ResponseWriter, r *http.Request) { h.bulkAction(w, r, "dead") }
func (h *Handler) jobsBulkAction(w http.ResponseWriter, r *http.Request) { h.bulkAction(w, r, "jobs") }

// bulkPage shows how many jobs the bulk action would take, and asks to confirm.
func (h *Handler) bulkPage(w http.ResponseWriter, r *http.Request, page string) {
	f, action, msg := bulkFilter(r.URL.Query(), page)
	if msg != "" {
		h.refuse(w, r, http.StatusBadRequest, msg)
		return
	}
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	n, err := h.db.Bulk.Count(ctx, f)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	words := bulkWords[action]
	if action == "cancel" && f.Status == skiplock.StatusRunning {
		words.Does = "cancels (each handler is told through its context; its result is ignored)"
	}
	v := &bulkView{Filter: f, Action: action, Verb: words.Verb, Does: words.Does, Page: page, Count: n, Danger: dangerous(action),
		Batches: (n + bulkBatch - 1) / bulkBatch, Back: h.prefix + "/" + page + "?" + filterQuery(f, 0).Encode()}
	h.render(w, r, "bulk", "Confirm", page, v)
}

// bulkAction runs a confirmed bulk action in batches of bulkBatch, each its own
// statement, for at most bulkBudget (or QueryTimeout), and on no more jobs than the
// confirmation showed.
func (h *Handler) bulkAction(w http.ResponseWriter, r *http.Request, page string) {
	if err := r.ParseForm(); err != nil {
		h.refuse(w, r, http.StatusBadRequest, "Bad form.")
		return
	}
	f, action, msg := bulkFilter(r.PostForm, page)
	if msg != "" {
		h.refuse(w, r, http.StatusBadRequest, msg)
		return
	}
	confirmed, err := strconv.ParseInt(r.PostFormValue("count"), 10, 64)
	if err != nil || confirmed < 0 {
		h.refuse(w, r, http.StatusBadRequest, "The confirmed count is missing: open the confirmation page again.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), min(bulkBudget, h.cfg.QueryTimeout))
	defer cancel()
	var (
		after          int64
		done, skipped  int64
		seen           int64
		stoppedByClock bool
	)
	for seen < confirmed {
		if ctx.Err() != nil {
			stoppedByClock = true
			break
		}
		bctx, bcancel := context.WithTimeout(ctx, h.cfg.QueryTimeout)
		n := min(bulkBatch, confirmed-seen)
		ids, err := h.db.Bulk.Pick(bctx, f, after, n)
		if err == nil && len(ids) > 0 {
			after, seen = ids[len(ids)-1], seen+int64(len(ids))
			var d, s int64
			d, s, err = h.applyBulk(bctx, action, f.Status, ids)
			done, skipped = done+d, skipped+s
		}
		bcancel()
		if err != nil {
			if ctx.Err() != nil && r.Context().Err() == nil {
				stoppedByClock = true
				break
			}
			h.fail(w, r, err)
			return
		}
		if len(ids) == 0 {
			break
		}
	}
	h.log.Info("skiplock ui: bulk action", "action", action, "status", f.Status, "queue", f.Queue, "kind", f.Kind,
		"done", done, "skipped", skipped, "remote", h.clientAddr(r))
	ret := bulkDone(filterQuery(f, 0), action, done, skipped)
	if stoppedByClock {
		ret.Set("done", ret.Get("done")+",budget")
	}
	h.redirect(w, r, "/"+page, ret)
}

// bulkDone sets the flash codes of an action that changed done jobs and left skipped
// alone in ret, and returns it.
func bulkDone(ret url.Values, action string, done, skipped int64) url.Values {
	past := bulkWords[action].Done
	ret.Set("done", past)
	ret.Set("n_"+past, strconv.FormatInt(done, 10))
	if skipped > 0 {
		ret.Set("done", past+",skipped")
		ret.Set("n_skipped", strconv.FormatInt(skipped, 10))
	}
	return ret
}

// applyBulk runs action on one batch of ids of status (the filter's; "" for dead and
// failed), and counts the jobs it changed and those it left alone (no longer in the
// status, or, for a requeue, their unique key is held; a delete leaves workflow tasks).
func (h *Handler) applyBulk(ctx context.Context, action string, status skiplock.JobStatus, ids []int64) (done, skipped int64, err error) {
	var n int64
	switch {
	case action == "requeue":
		var res skiplock.RequeueResult
		res, err = h.client.Requeue(ctx, skiplock.RequeueFilter{IDs: ids})
		n = res.Requeued
	case action == "delete" && status == skiplock.StatusQueued:
		n, err = h.db.Bulk.DeleteQueued(ctx, ids)
	case action == "delete":
		var deleted []int64
		deleted, err = h.db.Jobs.DeleteStuck(ctx, ids)
		n = int64(len(deleted))
	case action == "cancel":
		n, err = h.cancelBatch(ctx, status, ids)
	case action == "runnow":
		n, err = h.db.Bulk.RunNow(ctx, ids)
	}
	if err != nil {
		return n, 0, err // the batch's other jobs were not reached: not counted as skipped
	}
	return n, int64(len(ids)) - n, nil
}

// cancelBatch cancels the jobs of ids still in status (queued or running): the queued
// ones in one statement, the running ones and the queued workflow tasks (whose
// workflows must settle) through Client.Cancel, one by one.
func (h *Handler) cancelBatch(ctx context.Context, status skiplock.JobStatus, ids []int64) (int64, error) {
	var (
		n   int64
		one []int64
		err error
	)
	if status == skiplock.StatusQueued {
		n, one, err = h.db.Bulk.CancelQueued(ctx, ids)
	} else {
		one, err = h.db.Bulk.Still(ctx, ids, status)
	}
	if err != nil {
		return n, err
	}
	for _, id := range one {
		row, err := h.client.Cancel(ctx, id)
		if errors.Is(err, skiplock.ErrJobNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return n, err
		}
		if row.Status == skiplock.StatusCancelled {
			n++
		}
	}
	return n, nil
}

// jobsSelected runs the action of the jobs page's form on the selected rows, which the
// list shows filtered by a status of bulkActions: only jobs still in that status change.
func (h *Handler) jobsSelected(w http.ResponseWriter, r *http.Request) {
	ids, msg := parseIDs(r.PostForm["id"])
	if msg != "" {
		h.refuse(w, r, http.StatusBadRequest, msg)
		return
	}
	f, msg := parseFilter(r.PostForm, bulkPages["jobs"].statuses)
	action := r.PostFormValue("action")
	if msg == "" && (f.Status == "" || !slices.Contains(bulkActions[f.Status], action)) {
		msg = "Unknown action for these jobs: list them by status (queued, running, dead or failed) and use its buttons."
	}
	if msg != "" {
		h.refuse(w, r, http.StatusBadRequest, msg)
		return
	}
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	done, skipped, err := h.applyBulk(ctx, action, f.Status, ids)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if r.PostFormValue("back") == "workers" { // the workers page's running jobs (a fixed path: no redirect to a form's URL)
		h.redirect(w, r, "/workers", bulkDone(url.Values{}, action, done, skipped))
		return
	}
	h.redirect(w, r, "/jobs", bulkDone(filterQuery(f, 0), action, done, skipped))
}
