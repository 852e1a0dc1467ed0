package ui

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Flash messages are chosen by a code in the redirect's query, never taken as text from
// it, so a link cannot make the page say something the handler did not.
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

func flashMessage(r *http.Request) string { return flashText(r.URL.Query()) }

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
