package ui

import (
	"net/http"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/ui/internal/query"
)

// workersView is the data of the workers page.
type workersView struct {
	Workers []skiplock.WorkerInfo
	Running []query.RunningJob
	More    bool // more running jobs than query.MaxRunningShown
}

// RefreshSeconds makes the workers page reload itself, as Sidekiq's Busy page does: the
// running jobs and their progress move.
func (workersView) RefreshSeconds() int { return workersRefresh }

// workersRefresh is how often, in seconds, the workers page reloads itself.
const workersRefresh = 5

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
