package ui

// This file holds the bulk actions by filter on the dead page: "requeue all 100,000
// matching", confirmed on a page that shows the count, then run in bounded batches.

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock"
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

// bulkPickSQL takes the next batch of dead and failed jobs matching the filter ({where},
// rendered like exactWindowSQL's, with queue and kind as $3 and $4), in id order from the
// cursor $1: jobs a batch left alone (a requeue skipped for its unique key) are not
// picked again.
const bulkPickSQL = `SELECT id FROM {s}.jobs WHERE {where} AND id > $1 ORDER BY id LIMIT $2`

// bulkCountSQL counts the jobs a bulk action would take, through jobs_stuck_idx.
const bulkCountSQL = `SELECT count(*) FROM {s}.jobs WHERE {where}`

// bulkStatements renders bulkPickSQL and bulkCountSQL for one filter shape.
func bulkStatements(schema string, key exactKey) (pick, count string) {
	s := pgx.Identifier{schema}.Sanitize()
	pred := "status IN ('dead', 'failed')"
	if key.status != "stuck" {
		pred = "status = '" + key.status + "'" // one of exactStatuses, never the request's text
	}
	where := func(n int) string {
		w := pred
		if key.queue {
			n++
			w += " AND queue = $" + strconv.Itoa(n)
		}
		if key.kind {
			n++
			w += " AND kind = $" + strconv.Itoa(n)
		}
		return w
	}
	r := func(t, w string) string {
		return strings.ReplaceAll(strings.ReplaceAll(t, "{s}", s), "{where}", w)
	}
	return r(bulkPickSQL, where(2)), r(bulkCountSQL, where(0))
}

// bulkView is the data of the confirmation page.
type bulkView struct {
	Filter  listFilter
	Action  string // "requeue" or "delete"
	Count   int64
	Batches int64
	Back    string
}

// bulkFilter reads the filter and action of a bulk request.
func bulkFilter(q url.Values) (listFilter, string, exactKey, string) {
	f, msg := parseFilter(q, stuckStatuses)
	if msg != "" {
		return f, "", exactKey{}, msg
	}
	if f.Search != "" {
		return f, "", exactKey{}, "A bulk action takes a status, queue and kind filter, not a search."
	}
	action := q.Get("action")
	if action != "requeue" && action != "delete" {
		return f, "", exactKey{}, "Unknown action: use requeue or delete."
	}
	key := exactKey{status: "stuck", queue: f.Queue != "", kind: f.Kind != ""}
	if f.Status != "" {
		key.status = string(f.Status)
	}
	return f, action, key, ""
}

func filterArgs(f listFilter) []any {
	var args []any
	if f.Queue != "" {
		args = append(args, f.Queue)
	}
	if f.Kind != "" {
		args = append(args, f.Kind)
	}
	return args
}

// bulkPage shows how many jobs the bulk action would take, and asks to confirm.
func (h *Handler) bulkPage(w http.ResponseWriter, r *http.Request) {
	f, action, key, msg := bulkFilter(r.URL.Query())
	if msg != "" {
		h.refuse(w, r, http.StatusBadRequest, msg)
		return
	}
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	_, count := bulkStatements(h.client.Schema(), key)
	var n int64
	if err := h.pool.QueryRow(ctx, count, append([]any{pgx.QueryExecModeExec}, filterArgs(f)...)...).Scan(&n); err != nil {
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
	f, action, key, msg := bulkFilter(r.PostForm)
	if msg != "" {
		h.refuse(w, r, http.StatusBadRequest, msg)
		return
	}
	confirmed, err := strconv.ParseInt(r.PostFormValue("count"), 10, 64)
	if err != nil || confirmed < 0 {
		h.refuse(w, r, http.StatusBadRequest, "The confirmed count is missing: open the confirmation page again.")
		return
	}
	pick, _ := bulkStatements(h.client.Schema(), key)
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
		rows, err := h.pool.Query(bctx, pick, append([]any{pgx.QueryExecModeExec, after, n}, filterArgs(f)...)...)
		var ids []int64
		if err == nil {
			ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		}
		if err == nil && len(ids) > 0 {
			after, seen = ids[len(ids)-1], seen+int64(len(ids))
			switch action {
			case "requeue":
				var res skiplock.RequeueResult
				res, err = h.client.Requeue(bctx, skiplock.RequeueFilter{IDs: ids})
				done, skipped = done+res.Requeued, skipped+int64(len(ids))-res.Requeued
			case "delete":
				var deleted []int64
				if rows, err = h.pool.Query(bctx, h.sql.deleteStuck, ids); err == nil {
					deleted, err = pgx.CollectRows(rows, pgx.RowTo[int64])
				}
				done, skipped = done+int64(len(deleted)), skipped+int64(len(ids)-len(deleted))
			}
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
		"done", done, "skipped", skipped, "remote", r.RemoteAddr)
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
