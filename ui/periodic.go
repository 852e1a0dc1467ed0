package ui

import "net/http"

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
	h.render(w, r, "periodic", "Periodic", "periodic", s)
}
