package ui

import (
	"crypto/hmac"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Flash messages are chosen by a code in the redirect's query, never taken as text from
// it, and shown only with the redirect's signature of the codes and counts, so a link
// cannot make the page say something the handler did not.
var flashes = map[string]string{
	"requeued":      "Requeued %s.",
	"runnow":        "The job is due now; a worker will pick it up at once.",
	"edited":        "Updated the job.",
	"argsretried":   "Gave the job its edited args and requeued it.",
	"notedited":     "Not changed: a worker started the job first.",
	"cancelled":     "Cancelled the job.",
	"cancelledmany": "Cancelled %s.",
	"runnowmany":    "Made %s due now.",
	"deleted":       "Deleted %s.",
	"running":       "Not deleted: the job is running. Cancel it first, then delete it.",
	"skipped":       "%s changed state meanwhile and were left alone.",
	"paused":        "Paused the queue.",
	"limitsset":     "Set the queue's limits: every worker applies them within seconds.",
	"limitsreset":   "Dropped the queue's limits: each worker applies the ones it declares.",
	"resumed":       "Resumed the queue.",
	"periodicrun":   "The schedule's next occurrence is due now: a worker declaring it enqueues its job within about a second.",
	"periodicon":    "Enabled the schedule: its missed occurrences follow its misfire policy.",
	"periodicoff":   "Disabled the schedule: no worker enqueues its occurrences until it is enabled.",
	"unchanged":     "Nothing to do: the job is not in a state this action applies to.",
	// The workflow actions count tasks (flashText says "task" for a wf code).
	"wfcancelled": "Cancelled %s: the workflow's tasks that had not started.",
	"wfretried":   "Put %s back: the workflow's failed, dead and cancelled tasks.",
	"wfunchanged": "Nothing to do: no task of the workflow is in a state this action applies to.",
	"budget":      "The action stopped at its time limit before reaching every job: run it again for the rest.",
}

// flashMessage is the message of r's done codes when the handler's redirect signed them
// (flashSig): a link cannot make a page report an action, nor change its counts.
func (h *Handler) flashMessage(r *http.Request) string {
	q := r.URL.Query()
	if q.Get("done") == "" || !hmac.Equal([]byte(q.Get(flashSigParam)), []byte(h.flashSig(q))) {
		return ""
	}
	return flashText(q)
}

// flashSigParam is the query parameter of a redirect's flash signature.
const flashSigParam = "fs"

// flashSig signs the done codes of q and their counts under the handler's key.
func (h *Handler) flashSig(q url.Values) string {
	var b strings.Builder
	b.WriteString("flash|" + q.Get("done"))
	for _, code := range strings.Split(q.Get("done"), ",") {
		b.WriteString("|" + q.Get("n_"+code))
	}
	return mac(h.csrfKey, b.String())
}

// flashText is the message of the done codes of q.
func flashText(q url.Values) string {
	var parts []string
	for _, code := range strings.Split(q.Get("done"), ",") {
		f, ok := flashes[code]
		if !ok {
			continue
		}
		if strings.Contains(f, "%s") {
			n, _ := strconv.Atoi(q.Get("n_" + code))
			what := "job"
			if strings.HasPrefix(code, "wf") {
				what = "task"
			}
			f = fmt.Sprintf(f, plural(n, what))
		}
		parts = append(parts, f)
	}
	return strings.Join(parts, " ")
}
