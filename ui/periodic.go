package ui

// This file holds the periodic page: the schedules of Config.Periodic, and, when it is a
// PeriodicController, its run now, enable and disable actions.

import (
	"errors"
	"net/http"
	"net/url"
	"unicode/utf8"

	"github.com/skiplock/skiplock"
)

// periodicView is the data of the periodic page.
type periodicView struct {
	Schedules  []Schedule
	CanControl bool // a PeriodicController, and not read-only: show the buttons
}

// periodicPage lists the schedules of Config.Periodic.
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
	_, ctl := h.cfg.Periodic.(PeriodicController)
	h.render(w, r, "periodic", "Periodic", "periodic", &periodicView{Schedules: s, CanControl: ctl && !h.cfg.ReadOnly})
}

// maxPeriodicName bounds a schedule's name (the periodic table's check).
const maxPeriodicName = 128

func (h *Handler) runPeriodic(w http.ResponseWriter, r *http.Request) { h.periodicAction(w, r, "run") }
func (h *Handler) enablePeriodic(w http.ResponseWriter, r *http.Request) {
	h.periodicAction(w, r, "enable")
}
func (h *Handler) disablePeriodic(w http.ResponseWriter, r *http.Request) {
	h.periodicAction(w, r, "disable")
}

// periodicAction runs, enables or disables the schedule named by the form's "name".
func (h *Handler) periodicAction(w http.ResponseWriter, r *http.Request, what string) {
	ctl, ok := h.cfg.Periodic.(PeriodicController)
	if !ok {
		h.refuse(w, r, http.StatusNotFound, "Periodic controls are not available: Config.Periodic is not a PeriodicController (use ui.NewClientControl).")
		return
	}
	name := r.PostFormValue("name")
	if name == "" || !utf8.ValidString(name) || utf8.RuneCountInString(name) > maxPeriodicName {
		h.refuse(w, r, http.StatusBadRequest, "A schedule's name is 1 to 128 characters.")
		return
	}
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	var err error
	done := map[string]string{"run": "periodicrun", "enable": "periodicon", "disable": "periodicoff"}[what]
	switch what {
	case "run":
		err = ctl.RunPeriodicNow(ctx, name)
	default:
		err = ctl.SetPeriodicEnabled(ctx, name, what == "enable")
	}
	if errors.Is(err, skiplock.ErrPeriodicNotFound) {
		h.refuse(w, r, http.StatusNotFound, "No such schedule"+map[bool]string{true: " enabled: enable it first.", false: "."}[what == "run"])
		return
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.redirect(w, r, "/periodic", url.Values{"done": {done}})
}
