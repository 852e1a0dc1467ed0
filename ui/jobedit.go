// This file holds the job page's edit of a job that has not started: reschedule it,
// change its priority (Client.Update), atomic against a worker's claim.

package ui

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
)

// editTimeLayout is the form's run_at: an <input type="datetime-local"> value, read as UTC.
const editTimeLayout = "2006-01-02T15:04"

// editJob reschedules a job (run_at, UTC) and/or changes its priority: the form's
// "run_at" and "priority" fields, each left unchanged when empty.
func (h *Handler) editJob(w http.ResponseWriter, r *http.Request) {
	id, ok := h.jobID(w, r)
	if !ok {
		return
	}
	var u skiplock.JobUpdate
	if s := strings.TrimSpace(r.PostFormValue("run_at")); s != "" {
		t, err := time.ParseInLocation(editTimeLayout, s, time.UTC)
		if err != nil {
			h.refuse(w, r, http.StatusBadRequest, "Run at is a date and time, YYYY-MM-DDTHH:MM (UTC).")
			return
		}
		u.RunAt = t
	}
	if s := strings.TrimSpace(r.PostFormValue("priority")); s != "" {
		p, err := strconv.Atoi(s)
		if err != nil || p < skiplock.MinPriority || p > skiplock.MaxPriority {
			h.refuse(w, r, http.StatusBadRequest, "Priority is a whole number from -32768 to 32767.")
			return
		}
		u.Priority = &p
	}
	if u.RunAt.IsZero() && u.Priority == nil {
		h.refuse(w, r, http.StatusBadRequest, "Give a new run at or priority.")
		return
	}
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	_, err := h.client.Update(ctx, id, u)
	done := "edited"
	switch {
	case errors.Is(err, skiplock.ErrJobNotFound):
		h.refuse(w, r, http.StatusNotFound, "No job "+strconv.FormatInt(id, 10)+".")
		return
	case errors.Is(err, skiplock.ErrJobRunning):
		done = "notedited"
	case errors.Is(err, skiplock.ErrJobFinished):
		done = "unchanged"
	case errors.Is(err, skiplock.ErrInvalidOptions):
		h.refuse(w, r, http.StatusBadRequest, "The change was refused: "+strings.TrimPrefix(err.Error(), "skiplock: ")+".")
		return
	case err != nil:
		h.fail(w, r, err)
		return
	}
	h.redirect(w, r, "/jobs/"+strconv.FormatInt(id, 10), url.Values{"done": {done}})
}
