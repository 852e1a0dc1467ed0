package ui

// This file holds the "Logs" section of the job page: the records the job's handler
// logged through skiplock.Logger (Client.Logs), grouped by attempt, newest attempt first.
// The template (templates/joblogs.html) escapes every message and attribute.

import (
	"context"
	"log/slog"
	"strconv"
	"time"
)

// jobLogsTemplate is the template file of the section, parsed with every page's
// (templates.go); the job page calls it as {{template "joblogs" .Logs}}.
const jobLogsTemplate = "templates/joblogs.html"

// maxShownLogRecords bounds the records the page shows per job; the CLI
// (skiplock logs ID) shows them all.
const maxShownLogRecords = 2000

// logsView is the data of the Logs section.
type logsView struct {
	Attempts []logAttempt // newest first
	Total    int64
	Cut      bool // more than maxShownLogRecords: the oldest are left out
	Shown    int
	Command  string
}

// logAttempt is one attempt's records, oldest first.
type logAttempt struct {
	Attempt int
	Records []logLine
}

// logLine is one record as the page shows it.
type logLine struct {
	At      time.Time
	Level   string
	Class   string // lv-<level> for the colour
	Message string
	Attrs   string
}

// jobLogs reads the Logs section of job id.
func (h *Handler) jobLogs(ctx context.Context, id int64) (*logsView, error) {
	recs, err := h.client.Logs(ctx, id)
	if err != nil {
		return nil, err
	}
	v := &logsView{Total: int64(len(recs)), Command: "skiplock logs " + strconv.FormatInt(id, 10)}
	if len(recs) > maxShownLogRecords {
		recs, v.Cut = recs[len(recs)-maxShownLogRecords:], true
	}
	v.Shown = len(recs)
	for _, r := range recs {
		if n := len(v.Attempts); n == 0 || v.Attempts[n-1].Attempt != r.Attempt {
			v.Attempts = append(v.Attempts, logAttempt{Attempt: r.Attempt})
		}
		a := &v.Attempts[len(v.Attempts)-1]
		level := r.Level.String()
		a.Records = append(a.Records, logLine{At: r.At, Level: level, Class: levelClass(r.Level), Message: r.Message, Attrs: string(r.Attrs)})
	}
	for i, j := 0, len(v.Attempts)-1; i < j; i, j = i+1, j-1 {
		v.Attempts[i], v.Attempts[j] = v.Attempts[j], v.Attempts[i]
	}
	return v, nil
}

// levelClass is the CSS class of a level: lv-debug, lv-info, lv-warn or lv-error.
func levelClass(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return "lv-error"
	case l >= slog.LevelWarn:
		return "lv-warn"
	case l >= slog.LevelInfo:
		return "lv-info"
	}
	return "lv-debug"
}
