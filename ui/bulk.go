package ui

// This file holds the bulk actions by filter on the dead page: "requeue all 100,000
// matching", confirmed on a page that shows the count, then run in bounded batches.

import (
	"context"
	"net/http"
	"net/url"
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

// bulkView is the data of the confirmation page.
type bulkView struct {
	Filter  query.Filter
	Action  string // "requeue" or "delete"
	Count   int64
	Batches int64
	Back    string
}

// bulkFilter reads the filter and action of a bulk request.
func bulkFilter(q url.Values) (f query.Filter, action, msg string) {
	f, msg = parseFilter(q, stuckStatuses)
	if msg != "" {
		return f, "", msg
	}
	if f.Search != "" {
		return f, "", "A bulk action takes a status, queue and kind filter, not a search."
	}
	action = q.Get("action")
	if action != "requeue" && action != "delete" {
		return f, "", "Unknown action: use requeue or delete."
	}
	return f, action, ""
}

// bulkPage shows how many jobs the bulk action would take, and asks to confirm.
func (h *Handler) bulkPage(w http.ResponseWriter, r *http.Request) {
	f, action, msg := bulkFilter(r.URL.Query())
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
	v := &bulkView{Filter: f, Action: action, Count: n, Batches: (n + bulkBatch - 1) / bulkBatch,
		Back: h.prefix + "/dead?" + filterQuery(f, 0).Encode()}
	h.render(w, r, "bulk", "Confirm", "dead", v)
}

// bulkAction runs a confirmed bulk action in batches of bulkBatch, each its own
// statement, for at most bulkBudget (or QueryTimeout), and on no more jobs than the
// confirmation showed.
func (h *Handler) bulkAction(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		h.refuse(w, r, http.StatusBadRequest, "Bad form.")
		return
	}
	f, action, msg := bulkFilter(r.PostForm)
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
			d, s, err = h.applyBulk(bctx, action, ids)
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
	ret := filterQuery(f, 0)
	past := map[string]string{"requeue": "requeued", "delete": "deleted"}[action]
	ret.Set("done", past)
	ret.Set("n_"+past, strconv.FormatInt(done, 10))
	if skipped > 0 {
		ret.Set("done", past+",skipped")
		ret.Set("n_skipped", strconv.FormatInt(skipped, 10))
	}
	if stoppedByClock {
		ret.Set("done", ret.Get("done")+",budget")
	}
	h.redirect(w, r, "/dead", ret)
}

// applyBulk runs action on one batch of ids, and counts the jobs it changed and those it
// left alone (no longer dead or failed, or, for a requeue, their unique key is held).
func (h *Handler) applyBulk(ctx context.Context, action string, ids []int64) (done, skipped int64, err error) {
	switch action {
	case "requeue":
		res, err := h.client.Requeue(ctx, skiplock.RequeueFilter{IDs: ids})
		return res.Requeued, int64(len(ids)) - res.Requeued, err
	case "delete":
		deleted, err := h.db.Jobs.DeleteStuck(ctx, ids)
		return int64(len(deleted)), int64(len(ids) - len(deleted)), err
	}
	return 0, 0, nil
}
