package ui

// This file holds the queues page, its live fragment, and the pause and resume actions.

import (
	"cmp"
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/ui/internal/query"
)

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
	// ShowSucceeded: some succeeded job is kept in the jobs table (CompletionKeep); when
	// none is (the archive holds them: "last hour" counts them), the always-zero
	// Succeeded column is left out.
	ShowSucceeded bool
	CanControl    bool // and it can pause and resume
	InfoErr       string
	Hidden        int    // queues beyond maxQueuesShown
	Sort          string // the column the queues are sorted by: "" (name) or a key of queueSorts
	Refresh       int64  // milliseconds between live updates; 0 for none
	RefreshText   string // the same, for people
	At            time.Time
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

// queuesView reads the queue counts, the last hour's throughput and the QueueSource's
// settings, and lays them out sorted by the request's ?sort=.
func (h *Handler) queuesView(r *http.Request) (*queuesView, error) {
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	stats, at, err := h.db.Stats.Read(ctx)
	if err != nil {
		return nil, err
	}
	tp, err := h.db.Hour.Read(ctx, anyFailed(stats))
	if err != nil {
		return nil, err
	}
	v := &queuesView{At: at}
	if h.cfg.RefreshInterval > 0 {
		v.Refresh, v.RefreshText = h.cfg.RefreshInterval.Milliseconds(), shortDuration(h.cfg.RefreshInterval)
	}
	infos := h.queueInfos(ctx, v)
	totals := v.addQueues(stats, tp, infos)
	v.sortQueues(r.URL.Query().Get("sort"))
	v.summarize(totals, tp)
	for _, t := range v.Totals {
		v.ShowSucceeded = v.ShowSucceeded || (t.Status == string(skiplock.StatusSucceeded) && t.N > 0)
	}
	return v, nil
}

// anyFailed says whether stats count a job that failed for good (dead or failed) in the
// last hour.
func anyFailed(stats []skiplock.QueueStats) bool {
	for _, s := range stats {
		if s.FinishedLastHour[skiplock.StatusDead]+s.FinishedLastHour[skiplock.StatusFailed] > 0 {
			return true
		}
	}
	return false
}

// queueInfos returns the settings of the configured QueueSource, if any, and says in v
// that the page shows them (and their buttons, when the source can pause and the
// dashboard is not read-only). An error is kept in v.InfoErr for the page to show.
func (h *Handler) queueInfos(ctx context.Context, v *queuesView) map[string]QueueInfo {
	if h.cfg.Queues == nil {
		return nil
	}
	v.HasInfo = true
	_, v.CanControl = h.cfg.Queues.(QueueController)
	v.CanControl = v.CanControl && !h.cfg.ReadOnly
	infos, err := h.cfg.Queues.QueueInfo(ctx)
	if err != nil {
		v.InfoErr = err.Error()
	}
	return infos
}

// addQueues lays out a row per queue that has jobs, jobs finished in the last hour, or
// settings, and returns the jobs of every queue counted by status.
func (v *queuesView) addQueues(stats []skiplock.QueueStats, tp *query.Hour, infos map[string]QueueInfo) map[skiplock.JobStatus]int64 {
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
	return totals
}

// sortQueues sorts the rows by the column key of queueSorts (by name for any other) and
// keeps the first maxQueuesShown.
func (v *queuesView) sortQueues(key string) {
	v.Sort = key
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
}

// sortedBy is the column the queues are sorted by, for the headers' links.
func (v *queuesView) sortedBy() string {
	if v == nil {
		return ""
	}
	return v.Sort
}

// summarize fills in the totals over all queues and the last hour's plot.
func (v *queuesView) summarize(totals map[skiplock.JobStatus]int64, tp *query.Hour) {
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
	h.renderTemplate(w, r, http.StatusOK, "queues", "live", "", "", v)
}

func (h *Handler) pauseQueue(w http.ResponseWriter, r *http.Request)  { h.queueAction(w, r, true) }
func (h *Handler) resumeQueue(w http.ResponseWriter, r *http.Request) { h.queueAction(w, r, false) }

// queueAction pauses or resumes the queue named by the form's "queue" field (or, from the
// forms of earlier versions' pages, the path), by its exact name: one the library refuses
// but the table holds (written by SQL or an older version) too.
func (h *Handler) queueAction(w http.ResponseWriter, r *http.Request, pause bool) {
	ctl, ok := h.cfg.Queues.(QueueController)
	if !ok {
		h.refuse(w, r, http.StatusNotFound, "Pausing queues is not available: no queue controller is configured.")
		return
	}
	queue := r.PathValue("queue")
	if queue == "" {
		queue = r.PostFormValue("queue")
	}
	if !validFilter(queue) {
		h.refuse(w, r, http.StatusBadRequest, "Bad queue name.")
		return
	}
	if n := utf8.RuneCountInString(queue); n == 0 || n > maxQueueName {
		h.refuse(w, r, http.StatusNotFound, "No queue has that name: a queue's name is 1 to 64 characters.")
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
