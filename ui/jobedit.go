// This file holds the job page's edit of a job that has not started: reschedule it,
// change its priority (Client.Update), atomic against a worker's claim; and the retry of
// a dead or failed job with edited args.

package ui

import (
	"encoding/json"
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

// rawArgs are args given as JSON text for a job of kind: what the retry with edited args
// hands Client.Update (which checks the kind is the job's).
type rawArgs struct {
	kind string
	raw  json.RawMessage
}

func (a rawArgs) Kind() string                 { return a.kind }
func (a rawArgs) MarshalJSON() ([]byte, error) { return a.raw, nil }

// retryWithArgs gives a dead or failed job the args of the form's "args" (a JSON object)
// and requeues it (Client.Update, then Client.Requeue): each refuses a job that left
// dead or failed meanwhile, so a job a worker runs is never edited.
func (h *Handler) retryWithArgs(w http.ResponseWriter, r *http.Request) {
	id, ok := h.jobID(w, r)
	if !ok {
		return
	}
	text := strings.TrimSpace(r.PostFormValue("args"))
	if !json.Valid([]byte(text)) || !strings.HasPrefix(text, "{") {
		h.refuse(w, r, http.StatusBadRequest, "Args are a JSON object, such as {\"order_id\": 42}: nothing was changed.")
		return
	}
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	job, err := h.client.Get(ctx, id)
	switch {
	case errors.Is(err, skiplock.ErrJobNotFound):
		h.refuse(w, r, http.StatusNotFound, "No job "+strconv.FormatInt(id, 10)+".")
		return
	case err != nil:
		h.fail(w, r, err)
		return
	}
	if _, sealed := skiplock.SealedKey(job.Payload); sealed {
		h.refuse(w, r, http.StatusBadRequest, "The job's args are encrypted: edit them with Client.Update, which seals them.")
		return
	}
	if job.Status != skiplock.StatusDead && job.Status != skiplock.StatusFailed {
		h.refuse(w, r, http.StatusConflict, "Only a dead or failed job is retried with edited args: this one is "+string(job.Status)+".")
		return
	}
	_, err = h.client.Update(ctx, id, skiplock.JobUpdate{Args: rawArgs{kind: job.Kind, raw: json.RawMessage(text)}})
	switch {
	case errors.Is(err, skiplock.ErrJobRunning), errors.Is(err, skiplock.ErrJobFinished), errors.Is(err, skiplock.ErrJobNotFound):
		h.redirect(w, r, "/jobs/"+strconv.FormatInt(id, 10), url.Values{"done": {"unchanged"}})
		return
	case errors.Is(err, skiplock.ErrInvalidOptions):
		h.refuse(w, r, http.StatusBadRequest, "The args were refused: "+strings.TrimPrefix(err.Error(), "skiplock: ")+".")
		return
	case err != nil:
		h.fail(w, r, err)
		return
	}
	res, err := h.client.Requeue(ctx, skiplock.RequeueFilter{IDs: []int64{id}})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.redirect(w, r, "/jobs/"+strconv.FormatInt(id, 10), url.Values{"done": {"argsretried"}, "n_requeued": {strconv.FormatInt(res.Requeued, 10)}})
}
