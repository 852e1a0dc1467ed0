package ui

// This file holds the job page: a job's facts, timeline, args, extra columns and attempt
// history, and its actions retry now, cancel and delete.

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/skiplock/skiplock"
)

// jobView is the data of the job page.
type jobView struct {
	Job       *skiplock.JobRow
	Args      string
	ArgsCut   bool
	Other     []field
	Attempts  []attempt
	CanRetry  bool
	RetryWhat string // "Requeue" or "Run now"
	// CanEdit: the job has not started (or may run again), so it can be rescheduled or
	// given another priority (jobedit.go); RunAtValue is its run_at for the form, UTC.
	CanEdit    bool
	RunAtValue string
	CanCancel  bool
	CanDelete  bool
	Running    bool
	Timeline   []event      // the job's life, oldest first
	Durable    *durableView // its steps and signals (jobsteps.go); nil: none
}

// event is one line of a job's timeline.
type event struct {
	At     time.Time
	What   string // "created", "attempt 2 failed", "running", ...
	Worker string
	Detail string // the error's first line, or what comes next
	Class  string // st-<status> for the badge colour
}

type field struct {
	Name, Value string
}

type attempt struct {
	Attempt string
	At      string
	Error   string
	Other   []field
}

func (h *Handler) jobPage(w http.ResponseWriter, r *http.Request) {
	id, ok := h.jobID(w, r)
	if !ok {
		return
	}
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	job, err := h.client.Get(ctx, id)
	if errors.Is(err, skiplock.ErrJobNotFound) {
		h.refuse(w, r, http.StatusNotFound, "No job "+strconv.FormatInt(id, 10)+": it never existed, was deleted, or left the archive after its retention.")
		return
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	extras, err := h.db.Jobs.Extras(ctx, id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	v := &jobView{Job: job, Running: job.Status == skiplock.StatusRunning}
	if key, ok := skiplock.SealedKey(job.Payload); ok {
		v.Args = "(encrypted with key " + key + ")" // escaped by the template
	} else {
		v.Args, v.ArgsCut = prettyJSON(job.Payload, maxShownPayload)
	}
	for _, k := range sortedKeys(extras.Other) {
		s, _ := prettyJSON(extras.Other[k], maxShownPayload)
		v.Other = append(v.Other, field{k, s})
	}
	for i := len(extras.Errors) - 1; i >= 0; i-- { // newest first
		e := extras.Errors[i]
		a := attempt{Attempt: jsonText(e["attempt"]), At: jsonText(e["at"]), Error: jsonText(e["error"])}
		for _, k := range sortedKeys(e) {
			if k != "attempt" && k != "at" && k != "error" {
				a.Other = append(a.Other, field{k, jsonText(e[k])})
			}
		}
		v.Attempts = append(v.Attempts, a)
	}
	v.Timeline = timeline(job, extras.Errors)
	v.Durable = h.jobSteps(ctx, id)
	if !h.cfg.ReadOnly {
		switch job.Status {
		case skiplock.StatusDead, skiplock.StatusFailed:
			v.CanRetry, v.RetryWhat = true, "Retry now"
		case skiplock.StatusQueued:
			v.CanRetry, v.RetryWhat = job.RunAt.After(time.Now()), "Run now"
		}
		v.CanCancel = job.Status == skiplock.StatusQueued || job.Status == skiplock.StatusRunning
		v.CanEdit = job.Status == skiplock.StatusQueued || job.Status == skiplock.StatusDead || job.Status == skiplock.StatusFailed
		v.RunAtValue = job.RunAt.UTC().Format(editTimeLayout)
		v.CanDelete = !v.Running
	}
	h.render(w, r, "job", "Job "+strconv.FormatInt(id, 10), "jobs", v)
}

// timeline lays a job's life out from its row and its error history: created, each
// failed attempt (when it ended, on which worker, its error's first line; the history
// keeps the last 10), and where it is now. The row keeps no start time per attempt, so
// no attempt's duration is shown.
func timeline(job *skiplock.JobRow, history []map[string]any) []event {
	evs := []event{{At: job.CreatedAt, What: "created", Detail: "in queue " + job.Queue, Class: "st-queued"}}
	for _, e := range history {
		ev := event{What: "attempt " + jsonText(e["attempt"]) + " failed", Class: "st-failed"}
		if at, err := time.Parse(time.RFC3339Nano, jsonText(e["at"])); err == nil {
			ev.At = at
		}
		ev.Worker = jsonText(e["worker"])
		ev.Detail, _, _ = strings.Cut(jsonText(e["error"]), "\n")
		evs = append(evs, ev)
	}
	switch job.Status {
	case skiplock.StatusRunning:
		evs = append(evs, event{At: job.LockedAt, What: "attempt " + strconv.Itoa(job.Attempts) + " running",
			Worker: job.LockedBy, Detail: "last heartbeat", Class: "st-running"})
	case skiplock.StatusQueued:
		what := "due"
		if job.RunAt.After(time.Now()) {
			what = "next attempt due"
		}
		evs = append(evs, event{At: job.RunAt, What: what, Detail: "waiting for a worker", Class: "st-queued"})
	default:
		evs = append(evs, event{At: job.FinishedAt, What: string(job.Status), Worker: job.LockedBy, Class: "st-" + string(job.Status)})
	}
	return evs
}

// retryJob requeues a dead or failed job (attempts reset), or makes a queued job that
// waits for a later run_at due now.
func (h *Handler) retryJob(w http.ResponseWriter, r *http.Request) {
	id, ok := h.jobID(w, r)
	if !ok {
		return
	}
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	res, err := h.client.Requeue(ctx, skiplock.RequeueFilter{IDs: []int64{id}})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	done := url.Values{"done": {"requeued"}, "n_requeued": {"1"}}
	if res.Requeued == 0 {
		// A queued job: due now, its queue's workers woken at once (Client.Update).
		_, err := h.client.Update(ctx, id, skiplock.JobUpdate{RunNow: true})
		switch {
		case err == nil:
			done = url.Values{"done": {"runnow"}}
		case errors.Is(err, skiplock.ErrJobRunning), errors.Is(err, skiplock.ErrJobFinished), errors.Is(err, skiplock.ErrJobNotFound):
			done = url.Values{"done": {"unchanged"}}
		default:
			h.fail(w, r, err)
			return
		}
	}
	h.redirect(w, r, "/jobs/"+strconv.FormatInt(id, 10), done)
}

func (h *Handler) cancelJob(w http.ResponseWriter, r *http.Request) {
	id, ok := h.jobID(w, r)
	if !ok {
		return
	}
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	job, err := h.client.Cancel(ctx, id)
	if errors.Is(err, skiplock.ErrJobNotFound) {
		h.refuse(w, r, http.StatusNotFound, "No job "+strconv.FormatInt(id, 10)+".")
		return
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	done := "cancelled"
	if job.Status != skiplock.StatusCancelled {
		done = "unchanged"
	}
	h.redirect(w, r, "/jobs/"+strconv.FormatInt(id, 10), url.Values{"done": {done}})
}

// deleteJob deletes a job that is not running, from the hot table or the archive.
func (h *Handler) deleteJob(w http.ResponseWriter, r *http.Request) {
	id, ok := h.jobID(w, r)
	if !ok {
		return
	}
	ctx, cancel := h.queryCtx(r)
	defer cancel()
	res, err := h.db.Jobs.Delete(ctx, []int64{id})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	switch {
	case len(res.Running) > 0:
		h.redirect(w, r, "/jobs/"+strconv.FormatInt(id, 10), url.Values{"done": {"running"}})
	case len(res.Deleted) == 0:
		h.refuse(w, r, http.StatusNotFound, "No job "+strconv.FormatInt(id, 10)+".")
	default:
		h.redirect(w, r, "/jobs", url.Values{"done": {"deleted"}, "n_deleted": {"1"}})
	}
}

// jobID reads the {id} of the path, answering a bad one.
func (h *Handler) jobID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		h.refuse(w, r, http.StatusBadRequest, "A job id is a positive number.")
		return 0, false
	}
	return id, true
}

// prettyJSON indents raw JSON, cut at limit bytes.
func prettyJSON(raw []byte, limit int) (string, bool) {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		buf.Reset()
		buf.Write(raw)
	}
	s := buf.String()
	if len(s) > limit {
		cut := limit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return s[:cut], true
	}
	return s, false
}

// jsonText shows a decoded JSON value: strings as they are, the rest as JSON.
func jsonText(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
