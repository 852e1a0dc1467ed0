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
	"github.com/skiplock/skiplock/ui/internal/query"
)

// jobView is the data of the job page.
type jobView struct {
	Job     *skiplock.JobRow
	Args    string
	ArgsCut bool
	// Metadata are the metadata keys the enqueue gave; Internal the fields skiplock keeps
	// for itself (its reserved metadata keys, further columns such as the fence or the
	// lease), shown behind a toggle.
	Metadata []field
	Internal []field
	// Progress is the handler's last progress (Percent: its value as a percentage, when
	// in [0, 100]), Output its output, pretty-printed.
	Progress        *skiplock.Progress
	Percent         string
	Output          string
	ConcurrencyKeys string // the job's concurrency keys (EnqueueOptions.ConcurrencyKeys), as JSON
	// ReplacedAt and DebouncedAt are when a later unique enqueue last gave the job its
	// args (UniqueOpts.Replace) or pushed its run_at (Debounce); zero: never.
	ReplacedAt, DebouncedAt time.Time
	// EditedAt is when Client.Update (the dashboard's edits among them) last changed the
	// job; zero: never.
	EditedAt time.Time
	// EditArgs offers the retry with edited args (a dead or failed job, args readable and
	// small enough for a form); ArgsForm is its text.
	EditArgs  bool
	ArgsForm  string
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
	Logs       *logsView    // what the handler logged (joblogs.go)
	// Changes are the dashboard's actions on this job (edits, retries with edited args,
	// cancels), newest first, from the audit table.
	Changes []query.AuditEntry
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
	Attempt  string
	At       time.Time // when it ended; zero when the record has none
	Duration string    // from its start to its end, when the record holds both
	Worker   string
	Error    string
	Other    []field
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
	v.fields(job, extras.Other)
	v.Attempts = attempts(extras.Errors)
	v.Timeline = timeline(job, extras.Errors)
	v.Durable = h.jobSteps(ctx, id)
	if v.Changes, err = h.db.Audit.ForJob(ctx, id, maxJobChanges); err != nil {
		h.fail(w, r, err)
		return
	}
	if v.Logs, err = h.jobLogs(ctx, id); err != nil {
		h.fail(w, r, err)
		return
	}
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
		_, sealed := skiplock.SealedKey(job.Payload)
		v.EditArgs = (job.Status == skiplock.StatusDead || job.Status == skiplock.StatusFailed) && !sealed && !v.ArgsCut &&
			len(v.Args) < maxArgsForm
		v.ArgsForm = v.Args
	}
	h.render(w, r, "job", "Job "+strconv.FormatInt(id, 10), "jobs", v)
}

// maxJobChanges bounds the dashboard actions a job page lists.
const maxJobChanges = 20

// maxArgsForm bounds the args the retry with edited args offers in a form (a form is
// refused past 64 KiB).
const maxArgsForm = 48 << 10

// fields sorts the row's further columns (other, by name) into what the page shows:
// the metadata the enqueue gave, the progress and output formatted, the concurrency
// keys, and the rest (skiplock's reserved metadata keys and internal columns) as
// Internal.
func (v *jobView) fields(job *skiplock.JobRow, other map[string]json.RawMessage) {
	v.ReplacedAt, _ = time.Parse(time.RFC3339Nano, job.Metadata["skiplock_replaced_at"])
	v.DebouncedAt, _ = time.Parse(time.RFC3339Nano, job.Metadata["skiplock_debounced_at"])
	v.EditedAt, _ = time.Parse(time.RFC3339Nano, job.Metadata["skiplock_edited_at"])
	for _, k := range sortedKeys(job.Metadata) {
		f := field{k, job.Metadata[k]}
		if strings.HasPrefix(k, "skiplock_") {
			v.Internal = append(v.Internal, f)
		} else {
			v.Metadata = append(v.Metadata, f)
		}
	}
	v.Progress = job.Progress
	if p := job.Progress; p != nil && p.Value >= 0 && p.Value <= 100 { // a percentage, as the workers page reads it
		v.Percent = strconv.FormatFloat(p.Value, 'f', -1, 64) + "%"
	}
	if len(job.Output) > 0 {
		v.Output, _ = prettyJSON(job.Output, maxShownPayload)
	}
	for _, k := range sortedKeys(other) {
		s, _ := prettyJSON(other[k], maxShownPayload)
		switch k {
		case "metadata", "progress", "output":
			continue // shown above, from the row
		case "concurrency_keys":
			v.ConcurrencyKeys = s
			continue
		}
		v.Internal = append(v.Internal, field{k, s})
	}
}

// attempts lists the error history newest first: each attempt's end, its duration (from
// the start the record keeps, since this release), its worker and error.
func attempts(history []map[string]any) []attempt {
	var out []attempt
	for i := len(history) - 1; i >= 0; i-- {
		e := history[i]
		a := attempt{Attempt: jsonText(e["attempt"]), Error: jsonText(e["error"]), Worker: jsonText(e["worker"])}
		end, endErr := time.Parse(time.RFC3339Nano, jsonText(e["at"]))
		if endErr == nil {
			a.At = end
		}
		if start, err := time.Parse(time.RFC3339Nano, jsonText(e["started_at"])); err == nil && endErr == nil && !end.Before(start) {
			a.Duration = shortDuration(end.Sub(start))
		}
		for _, k := range sortedKeys(e) {
			if !slices.Contains([]string{"attempt", "at", "error", "worker", "started_at"}, k) {
				a.Other = append(a.Other, field{k, jsonText(e[k])})
			}
		}
		out = append(out, a)
	}
	return out
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
