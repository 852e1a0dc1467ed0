package ui

// This file holds the queues page, its live fragment, and the pause and resume actions.

import (
	"cmp"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
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
