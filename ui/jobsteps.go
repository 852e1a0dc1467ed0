package ui

// This file holds the job page's durable part (docs/durable.md): the steps the job
// recorded (name, kind, status, result size, duration, attempt) and the signals sent to
// it. The job page asks for it with one call (jobpage.go) and shows it through the
// "jobsteps" template (templates/jobsteps.html).

import (
	"context"
	"strconv"
	"time"

	"github.com/skiplock/skiplock"
)

// maxShownStepResult bounds the result of a step shown on the page.
const maxShownStepResult = 4 << 10

// durableView is the job page's steps and signals; nil when the job has none.
type durableView struct {
	Steps   []stepRow
	Signals []signalRow
	Err     string // the steps could not be read: said on the page, which shows the rest
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

// jobSteps reads job id's steps and signals for its page. It returns nil when the job
// has neither, and a view saying why when they cannot be read (the page shows the rest).
func (h *Handler) jobSteps(ctx context.Context, id int64) *durableView {
	steps, err := h.client.Steps(ctx, id)
	var sigs []skiplock.SignalInfo
	if err == nil {
		sigs, err = h.client.Signals(ctx, id)
	}
	if err != nil {
		return &durableView{Err: "The job's steps could not be read: " + err.Error()}
	}
	if len(steps) == 0 && len(sigs) == 0 {
		return nil
	}
	v := &durableView{}
	for _, s := range steps {
		r := stepRow{Seq: s.Seq, Name: s.Name, Kind: string(s.Kind), Status: s.Status, Size: byteSize(s.ResultBytes),
			Duration: s.Duration, Attempt: strconv.Itoa(s.Attempt)}
		if s.Attempt == 0 {
			r.Attempt = "copied"
		}
		if s.WakeAt != nil && s.WakeAt.Year() < 9999 {
			r.WakeAt = *s.WakeAt
		}
		if len(s.Result) > 0 {
			r.Result, _ = prettyJSON(s.Result, maxShownStepResult)
		}
		v.Steps = append(v.Steps, r)
	}
	for _, s := range sigs {
		r := signalRow{ID: s.ID, Name: s.Name, SentAt: s.SentAt}
		if s.ConsumedSeq != nil {
			r.Consumed = "step " + strconv.Itoa(*s.ConsumedSeq)
		}
		r.Payload, _ = prettyJSON(s.Payload, maxShownStepResult)
		v.Signals = append(v.Signals, r)
	}
	return v
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
