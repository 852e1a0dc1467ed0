package ui

// This file holds the job page's durable part (docs/durable.md): the steps the job
// recorded (name, kind, status, result size, duration, attempt) and the signals sent to
// it. The job page asks for it with one call (jobpage.go) and shows it through the
// "jobsteps" template (templates/jobsteps.html).

import (
	"context"
	"strconv"
	"time"

	"github.com/skiplock/skiplock/ui/internal/query"
)

const (
	// maxShownStepResult bounds the result of a step, and the payload of a signal, shown
	// on the page (and read: the text is cut by the query).
	maxShownStepResult = 4 << 10
	// maxShownStepEnds bounds the steps the page reads and shows: the first ones and
	// the newest ones, this many of each; the page says how many are between them.
	maxShownStepEnds = 100
	// maxShownSignals bounds the signals the page reads and shows: the newest ones (a
	// job may be sent any number); the page says how many older ones it left out.
	maxShownSignals = 200
)

// durableView is the job page's steps and signals; nil when the job has none.
type durableView struct {
	Steps        []stepRow
	StepsTotal   int64
	StepsCut     int64 // steps between the first and the newest shown, not shown
	CutAt        int   // the index in Steps of the first step after them
	Signals      []signalRow
	SignalsTotal int64
	SignalsCut   int64  // older signals not shown
	Err          string // the steps could not be read: said on the page, which shows the rest
}

// stepRow is one recorded step, as shown.
type stepRow struct {
	Seq      int
	Name     string
	Kind     string
	Status   string
	Size     string // the result's size, "1.2 KiB"
	Duration time.Duration
	Attempt  string // "copied" for a step Fork copied
	WakeAt   time.Time
	Result   string // the result, pretty and cut at maxShownStepResult
}

// signalRow is one signal sent to the job, as shown.
type signalRow struct {
	ID       int64
	Name     string
	SentAt   time.Time
	Consumed string // "step 3", or "" while no wait took it
	Payload  string
}

// jobSteps reads job id's steps and signals for its page: the first and the newest
// maxShownStepEnds steps, the newest maxShownSignals signals, each result and payload cut
// at maxShownStepResult, and how many there are. It returns nil when the job has
// neither, and a view saying why when they cannot be read (the page shows the rest).
func (h *Handler) jobSteps(ctx context.Context, id int64) *durableView {
	v := &durableView{}
	steps, total, err := h.db.Durable.Steps(ctx, id, maxShownStepEnds, maxShownStepResult)
	var sigs []query.Signal
	if err == nil {
		v.StepsTotal = total
		sigs, v.SignalsTotal, err = h.db.Durable.Signals(ctx, id, maxShownSignals, maxShownStepResult)
	}
	if err != nil {
		return &durableView{Err: "The job's steps could not be read: " + err.Error()}
	}
	if len(steps) == 0 && len(sigs) == 0 {
		return nil
	}
	if v.StepsCut = v.StepsTotal - int64(len(steps)); v.StepsCut > 0 {
		v.CutAt = maxShownStepEnds
	}
	v.SignalsCut = max(v.SignalsTotal-int64(len(sigs)), 0)
	for _, s := range steps {
		r := stepRow{Seq: s.Seq, Name: s.Name, Kind: s.Kind, Status: s.Status, Size: byteSize(s.ResultBytes),
			Attempt: strconv.Itoa(s.Attempt)}
		if s.FinishedAt != nil {
			r.Duration = s.FinishedAt.Sub(s.StartedAt)
		}
		if s.Attempt == 0 {
			r.Attempt = "copied"
		}
		if s.WakeAt != nil && s.WakeAt.Year() < 9999 {
			r.WakeAt = *s.WakeAt
		}
		if s.Result != "" {
			r.Result = shownText(s.Result, s.ResultBytes)
		}
		v.Steps = append(v.Steps, r)
	}
	for _, s := range sigs {
		r := signalRow{ID: s.ID, Name: s.Name, SentAt: s.SentAt}
		if s.ConsumedSeq != nil {
			r.Consumed = "step " + strconv.Itoa(*s.ConsumedSeq)
		}
		r.Payload = shownText(s.Payload, s.PayloadBytes)
		v.Signals = append(v.Signals, r)
	}
	return v
}

// shownText is the JSON text of a result or payload as the page shows it: indented, and
// cut at maxShownStepResult with a mark when that or the query (size is the whole
// text's, in bytes) cut it.
func shownText(text string, size int) string {
	s, cut := prettyJSON([]byte(text), maxShownStepResult) // once cut by the query, not JSON: as read
	if cut || size > len(text) {
		s += " …"
	}
	return s
}

// byteSize says n bytes shortly: "812 B", "1.2 KiB", "3.4 MiB".
func byteSize(n int) string {
	switch {
	case n < 1<<10:
		return strconv.Itoa(n) + " B"
	case n < 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	default:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	}
}
