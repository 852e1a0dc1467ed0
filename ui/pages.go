package ui

// This file holds the list pages (queues and their live fragment, jobs, dead and failed,
// periodic, workers) and the queue and dead-page actions.

import (
	"cmp"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/ui/internal/query"
)

// statuses are the job states in the order the pages show them.
var statuses = []skiplock.JobStatus{
	skiplock.StatusQueued, skiplock.StatusRunning, skiplock.StatusSucceeded,
	skiplock.StatusFailed, skiplock.StatusDead, skiplock.StatusCancelled,
}

// queueRow is one queue of the queues page.
type queueRow struct {
	Name      string
	Counts    []statusCount
	OldestDue time.Duration
	LastHour  int64
	Spark     string // the polyline points of the last hour's sparkline
	Info      *QueueInfo
	Running   int64
	// Overrunning counts its running jobs whose handlers run past their timeout
	// (skiplock.QueueStats.Overrunning).
	Overrunning int64
}

type statusCount struct {
	Status string
	N      int64
}

// queuesView is the data of the queues page and of its live fragment.
type queuesView struct {
	Queues []queueRow
	Totals []statusCount
	Stuck  int64 // dead + failed
	// Overrunning counts the running jobs whose handlers run past their timeout.
	Overrunning int64
	LastHour    int64
	// FailedLastHour counts the jobs that ended dead or failed in the last hour.
	FailedLastHour int64
	FailRate       string // FailedLastHour over all the jobs that ended in the hour
	Plot           plot
	HasInfo        bool // a QueueSource is configured: show limits and paused state
	CanControl     bool // and it can pause and resume
	InfoErr        string
	Hidden         int    // queues beyond maxQueuesShown
	Sort           string // the column the queues are sorted by: "" (name) or a key of queueSorts
	Refresh        int64  // milliseconds between live updates; 0 for none
	RefreshText    string // the same, for people
	At             time.Time
}

// queueSorts are the columns the queues table sorts by (?sort=), largest first; ties and
// the default go by name.
var queueSorts = map[string]func(queueRow) int64{
	"queued":   func(q queueRow) int64 { return q.count(skiplock.StatusQueued) },
	"running":  func(q queueRow) int64 { return q.count(skiplock.StatusRunning) },
	"failed":   func(q queueRow) int64 { return q.count(skiplock.StatusFailed) },
	"dead":     func(q queueRow) int64 { return q.count(skiplock.StatusDead) },
	"oldest":   func(q queueRow) int64 { return int64(q.OldestDue) },
	"lasthour": func(q queueRow) int64 { return q.LastHour },
}

func (q queueRow) count(st skiplock.JobStatus) int64 {
	for _, c := range q.Counts {
		if c.Status == string(st) {
			return c.N
		}
	}
	return 0
}

func (h *Handler) queuesView(r *http.Request) (*queuesView, error) {
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	stats, at, err := h.db.Stats.Read(ctx)
	if err != nil {
		return nil, err
	}
	anyFailed := false
	for _, s := range stats {
		anyFailed = anyFailed || s.FinishedLastHour[skiplock.StatusDead]+s.FinishedLastHour[skiplock.StatusFailed] > 0
	}
	tp, err := h.db.Hour.Read(ctx, anyFailed)
	if err != nil {
		return nil, err
	}
	v := &queuesView{At: at}
	if h.cfg.RefreshInterval > 0 {
		v.Refresh, v.RefreshText = h.cfg.RefreshInterval.Milliseconds(), shortDuration(h.cfg.RefreshInterval)
	}
	var infos map[string]QueueInfo
	if h.cfg.Queues != nil {
		v.HasInfo = true
		_, v.CanControl = h.cfg.Queues.(QueueController)
		v.CanControl = v.CanControl && !h.cfg.ReadOnly
		if infos, err = h.cfg.Queues.QueueInfo(ctx); err != nil {
			v.InfoErr = err.Error()
		}
	}
	byName := map[string]*queueRow{}
	row := func(name string) *queueRow {
		if q := byName[name]; q != nil {
			return q
		}
		q := &queueRow{Name: name}
		byName[name] = q
		return q
	}
	totals := map[skiplock.JobStatus]int64{}
	for _, s := range stats {
		q := row(s.Queue)
		q.OldestDue = s.OldestDue
		for _, st := range statuses {
			q.Counts = append(q.Counts, statusCount{string(st), s.Counts[st]})
			totals[st] += s.Counts[st]
		}
		q.Running = s.Counts[skiplock.StatusRunning]
		q.Overrunning = s.Overrunning
		v.Overrunning += s.Overrunning
	}
	for name, series := range tp.ByQueue {
		q := row(name)
		for _, n := range series {
			q.LastHour += n
		}
		q.Spark = sparkline(series[:])
	}
	for name := range infos {
		row(name)
	}
	for _, q := range byName {
		if q.Counts == nil {
			for _, st := range statuses {
				q.Counts = append(q.Counts, statusCount{string(st), 0})
			}
		}
		if info, ok := infos[q.Name]; ok {
			q.Info = &info
		} else if v.HasInfo {
			q.Info = &QueueInfo{}
		}
		v.Queues = append(v.Queues, *q)
	}
	v.Sort = r.URL.Query().Get("sort")
	by, ok := queueSorts[v.Sort]
	if !ok {
		v.Sort, by = "", nil
	}
	slices.SortFunc(v.Queues, func(a, b queueRow) int {
		if by != nil {
			if x, y := by(a), by(b); x != y {
				return cmp.Compare(y, x) // the biggest backlog, the oldest due job first
			}
		}
		return strings.Compare(a.Name, b.Name)
	})
	if len(v.Queues) > maxQueuesShown {
		v.Hidden = len(v.Queues) - maxQueuesShown
		v.Queues = v.Queues[:maxQueuesShown]
	}
	for _, st := range statuses {
		v.Totals = append(v.Totals, statusCount{string(st), totals[st]})
	}
	v.Stuck = totals[skiplock.StatusDead] + totals[skiplock.StatusFailed]
	for _, n := range tp.Total {
		v.LastHour += n
	}
	for _, n := range tp.Fails {
		v.FailedLastHour += n
	}
	v.FailRate = percent(v.FailedLastHour, v.FailedLastHour+v.LastHour)
	v.Plot = barPlot(tp.Total[:], tp.Fails[:], tp.First)
	return v, nil
}

func (h *Handler) queuesPage(w http.ResponseWriter, r *http.Request) {
	v, err := h.queuesView(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.render(w, r, "queues", "Queues", "queues", v)
}

// queuesLive is the fragment the queues page fetches to update itself in place.
func (h *Handler) queuesLive(w http.ResponseWriter, r *http.Request) {
	v, err := h.queuesView(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.renderTemplate(w, r, "queues", "live", "", "", v)
}

func (h *Handler) pauseQueue(w http.ResponseWriter, r *http.Request)  { h.queueAction(w, r, true) }
func (h *Handler) resumeQueue(w http.ResponseWriter, r *http.Request) { h.queueAction(w, r, false) }

func (h *Handler) queueAction(w http.ResponseWriter, r *http.Request, pause bool) {
	ctl, ok := h.cfg.Queues.(QueueController)
	if !ok {
		h.refuse(w, r, http.StatusNotFound, "Pausing queues is not available: no queue controller is configured.")
		return
	}
	queue := r.PathValue("queue")
	if !validFilter(queue) {
		h.refuse(w, r, http.StatusBadRequest, "Bad queue name.")
		return
	}
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	var err error
	done := "resumed"
	if pause {
		err, done = ctl.PauseQueue(ctx, queue), "paused"
	} else {
		err = ctl.ResumeQueue(ctx, queue)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.redirect(w, r, "/queues", url.Values{"done": {done}})
}

// link is a labelled URL.
type link struct{ Label, URL string }

// jobsView is the data of the jobs page.
type jobsView struct {
	Further  []link // per-status lists that look further for the jobs no index reaches
	Filter   query.Filter
	Statuses []skiplock.JobStatus
	Page     query.Page
	NextURL  string
	FirstURL string
}

func (h *Handler) jobsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if s := strings.TrimSpace(q.Get("id")); s != "" {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			h.refuse(w, r, http.StatusBadRequest, "A job id is a positive number.")
			return
		}
		h.redirect(w, r, "/jobs/"+strconv.FormatInt(id, 10), nil)
		return
	}
	f, msg := parseFilter(q, statuses)
	if msg != "" {
		h.refuse(w, r, http.StatusBadRequest, msg)
		return
	}
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	page, err := h.db.Lists.Jobs(ctx, f)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	v := &jobsView{Filter: f, Statuses: statuses, Page: page}
	if page.Unindexed > 0 {
		for _, st := range page.Windowed {
			g := f
			g.Status, g.Before = st, 0
			v.Further = append(v.Further, link{string(st), h.prefix + "/jobs?" + filterQuery(g, 0).Encode()})
		}
	}
	if page.Next > 0 {
		v.NextURL = h.prefix + "/jobs?" + filterQuery(f, page.Next).Encode()
	}
	if f.Before > 0 {
		v.FirstURL = h.prefix + "/jobs?" + filterQuery(f, 0).Encode()
	}
	h.render(w, r, "jobs", "Jobs", "jobs", v)
}

// parseFilter reads and bounds the list filters of a query; msg says what is wrong.
func parseFilter(q url.Values, allowed []skiplock.JobStatus) (f query.Filter, msg string) {
	f.Limit = DefaultPageSize
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return f, "limit is a positive number."
		}
		f.Limit = min(n, MaxPageSize)
	}
	if s := q.Get("before"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return f, "before is a job id."
		}
		f.Before = n
	}
	if s := q.Get("status"); s != "" {
		if !slices.Contains(allowed, skiplock.JobStatus(s)) {
			return f, "Unknown status."
		}
		f.Status = skiplock.JobStatus(s)
	}
	f.Queue, f.Kind = strings.TrimSpace(q.Get("queue")), strings.TrimSpace(q.Get("kind"))
	f.Search = strings.TrimSpace(q.Get("q"))
	if !validFilter(f.Queue) || !validFilter(f.Kind) || !validFilter(f.Search) {
		return f, "A queue, kind or search filter is at most 255 bytes of text."
	}
	return f, ""
}

func validFilter(s string) bool {
	return len(s) <= maxFilterLen && utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

func filterQuery(f query.Filter, before int64) url.Values {
	v := url.Values{}
	if f.Status != "" {
		v.Set("status", string(f.Status))
	}
	if f.Queue != "" {
		v.Set("queue", f.Queue)
	}
	if f.Kind != "" {
		v.Set("kind", f.Kind)
	}
	if f.Search != "" {
		v.Set("q", f.Search)
	}
	if f.Limit != DefaultPageSize {
		v.Set("limit", strconv.Itoa(f.Limit))
	}
	if before > 0 {
		v.Set("before", strconv.FormatInt(before, 10))
	}
	return v
}

// deadView is the data of the dead and failed page.
type deadView struct {
	Filter    query.Filter
	BulkQuery template.URL // the filter, encoded, for the links to the bulk actions
	Statuses  []skiplock.JobStatus
	Rows      []query.Row
	NextURL   string
	FirstURL  string
}

var stuckStatuses = []skiplock.JobStatus{skiplock.StatusDead, skiplock.StatusFailed}

func (h *Handler) deadPage(w http.ResponseWriter, r *http.Request) {
	f, msg := parseFilter(r.URL.Query(), stuckStatuses)
	if msg != "" {
		h.refuse(w, r, http.StatusBadRequest, msg)
		return
	}
	f.Search = "" // the dead page lists by status, queue and kind (its bulk actions take those)
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	rows, err := h.db.Lists.Stuck(ctx, f)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	bq := filterQuery(f, 0)
	bq.Del("limit")
	v := &deadView{Filter: f, Statuses: stuckStatuses, Rows: rows, BulkQuery: template.URL(bq.Encode())}
	if len(rows) == f.Limit {
		v.NextURL = h.prefix + "/dead?" + filterQuery(f, rows[len(rows)-1].ID).Encode()
	}
	if f.Before > 0 {
		v.FirstURL = h.prefix + "/dead?" + filterQuery(f, 0).Encode()
	}
	h.render(w, r, "dead", "Dead and failed", "dead", v)
}

// deadAction requeues or deletes the selected dead and failed jobs.
func (h *Handler) deadAction(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		h.refuse(w, r, http.StatusBadRequest, "Bad form.")
		return
	}
	ids, msg := parseIDs(r.PostForm["id"])
	if msg != "" {
		h.refuse(w, r, http.StatusBadRequest, msg)
		return
	}
	back, _ := parseFilter(r.PostForm, stuckStatuses)
	ret := filterQuery(back, 0)
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	switch r.PostFormValue("action") {
	case "requeue":
		res, err := h.client.Requeue(ctx, skiplock.RequeueFilter{IDs: ids})
		if err != nil {
			h.fail(w, r, err)
			return
		}
		ret.Set("done", "requeued")
		ret.Set("n_requeued", strconv.FormatInt(res.Requeued, 10))
		// Skipped: not dead or failed any more, or their unique key is held.
		if skipped := len(ids) - int(res.Requeued); skipped > 0 {
			ret.Set("done", "requeued,skipped")
			ret.Set("n_skipped", strconv.Itoa(skipped))
		}
	case "delete":
		deleted, err := h.db.Jobs.DeleteStuck(ctx, ids)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		n := len(deleted)
		ret.Set("done", "deleted")
		ret.Set("n_deleted", strconv.Itoa(n))
		if skipped := len(ids) - n; skipped > 0 {
			ret.Set("done", "deleted,skipped")
			ret.Set("n_skipped", strconv.Itoa(skipped))
		}
	default:
		h.refuse(w, r, http.StatusBadRequest, "Unknown action: use requeue or delete.")
		return
	}
	h.redirect(w, r, "/dead", ret)
}

// parseIDs reads the selected job ids of a form: 1 to MaxActionIDs positive numbers.
func parseIDs(vals []string) ([]int64, string) {
	if len(vals) == 0 {
		return nil, "Select at least one job."
	}
	if len(vals) > MaxActionIDs {
		return nil, "Select at most " + strconv.Itoa(MaxActionIDs) + " jobs at a time."
	}
	ids := make([]int64, 0, len(vals))
	for _, s := range vals {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			return nil, "A job id is a positive number."
		}
		ids = append(ids, id)
	}
	return ids, ""
}

func (h *Handler) periodicPage(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Periodic == nil {
		h.refuse(w, r, http.StatusNotFound, "No periodic schedules are configured for this dashboard.")
		return
	}
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	s, err := h.cfg.Periodic.Schedules(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.render(w, r, "periodic", "Periodic", "periodic", s)
}

// workersView is the data of the workers page.
type workersView struct {
	Workers []skiplock.WorkerInfo
	Running []query.RunningJob
	More    bool // more running jobs than query.MaxRunningShown
}

// workersPage lists the workers registered in the schema (Client.Workers): their queues,
// whether each is alive, and which one leads the fleet's maintenance.
func (h *Handler) workersPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	ws, err := h.cfg.Client.Workers(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	running, err := h.db.Running.List(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	v := workersView{Workers: ws, Running: running}
	if len(running) > query.MaxRunningShown {
		v.Running, v.More = running[:query.MaxRunningShown], true
	}
	h.render(w, r, "workers", "Workers", "workers", v)
}

// redirect sends the browser to path under the prefix after an action (303: the next
// request is a GET, and reloading it repeats nothing).
func (h *Handler) redirect(w http.ResponseWriter, r *http.Request, path string, q url.Values) {
	u := h.prefix + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	http.Redirect(w, r, u, http.StatusSeeOther)
}
