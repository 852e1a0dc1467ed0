package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/skiplock/skiplock"
)

// statuses are the job states in the order stats shows them.
var statuses = []skiplock.JobStatus{
	skiplock.StatusQueued, skiplock.StatusRunning, skiplock.StatusSucceeded,
	skiplock.StatusFailed, skiplock.StatusDead, skiplock.StatusCancelled,
}

const (
	// defaultListLimit is how many jobs dead lists unless --limit says otherwise.
	defaultListLimit = 100
	// maxErrorWidth is how many characters of a last error the dead table shows.
	maxErrorWidth = 80
)

// queueStatsJSON is one queue of `stats --json`. Counts has every status, zeros included.
type queueStatsJSON struct {
	Queue            string           `json:"queue"`
	Counts           map[string]int64 `json:"counts"`
	OldestDueSeconds float64          `json:"oldest_due_seconds"`
	Paused           bool             `json:"paused"`
	PausedAt         *time.Time       `json:"paused_at,omitempty"`
}

// cmdStats prints job counts by queue and status, and each queue's oldest due job's age.
func cmdStats(ctx context.Context, a *app, o *options) error {
	client, pool, err := a.connect(ctx, "stats")
	if err != nil {
		return err
	}
	defer pool.Close()
	stats, err := client.Stats(ctx)
	if err != nil {
		return a.notMigratedHint(err)
	}
	if o.json {
		out := make([]queueStatsJSON, 0, len(stats))
		for _, s := range stats {
			q := queueStatsJSON{Queue: s.Queue, Counts: map[string]int64{}, OldestDueSeconds: s.OldestDue.Seconds(), Paused: s.Paused}
			if s.Paused {
				q.PausedAt = &s.PausedAt
			}
			for _, st := range statuses {
				q.Counts[string(st)] = s.Counts[st]
			}
			out = append(out, q)
		}
		return writeJSON(a.stdout, out)
	}
	if len(stats) == 0 {
		_, err := fmt.Fprintf(a.stdout, "no jobs in schema %q\n", a.schema)
		return err
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "QUEUE")
	for _, st := range statuses {
		fmt.Fprintf(tw, "\t%s", strings.ToUpper(string(st)))
	}
	fmt.Fprint(tw, "\tOLDEST DUE\tPAUSED\n")
	total := skiplock.QueueStats{Queue: "(all)", Counts: map[skiplock.JobStatus]int64{}}
	for _, s := range stats {
		writeStatsRow(tw, s)
		for st, n := range s.Counts {
			total.Counts[st] += n
		}
		total.OldestDue = max(total.OldestDue, s.OldestDue)
	}
	if len(stats) > 1 {
		writeStatsRow(tw, total)
	}
	return tw.Flush()
}

func writeStatsRow(w io.Writer, s skiplock.QueueStats) {
	fmt.Fprint(w, s.Queue)
	for _, st := range statuses {
		fmt.Fprintf(w, "\t%d", s.Counts[st])
	}
	paused := "-"
	if s.Paused {
		paused = "since " + s.PausedAt.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "\t%s\t%s\n", formatAge(s.OldestDue), paused)
}

// formatAge shows a wait in whole seconds, or milliseconds when under a second; "-" for none.
func formatAge(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// checkDead validates the flags of dead.
func checkDead(o *options) error {
	switch skiplock.JobStatus(o.status) {
	case "", skiplock.StatusDead, skiplock.StatusFailed:
	default:
		return usagef("dead", "dead: --status must be dead or failed (or left out for both), got %q", o.status)
	}
	if o.limit < 1 {
		return usagef("dead", "dead: --limit must be at least 1, got %d", o.limit)
	}
	return nil
}

// deadJobJSON is one job of `dead --json`: the whole last error and the error history.
type deadJobJSON struct {
	ID          int64                   `json:"id"`
	Kind        string                  `json:"kind"`
	Queue       string                  `json:"queue"`
	Status      string                  `json:"status"`
	Attempts    int                     `json:"attempts"`
	MaxAttempts int                     `json:"max_attempts"`
	CreatedAt   time.Time               `json:"created_at"`
	FinishedAt  *time.Time              `json:"finished_at"`
	LastError   string                  `json:"last_error"`
	Errors      []skiplock.AttemptError `json:"errors"`
}

// cmdDead lists dead and failed jobs with the first line of their last error.
func cmdDead(ctx context.Context, a *app, o *options) error {
	client, pool, err := a.connect(ctx, "dead")
	if err != nil {
		return err
	}
	defer pool.Close()
	want := []skiplock.JobStatus{skiplock.StatusDead, skiplock.StatusFailed}
	if o.status != "" {
		want = []skiplock.JobStatus{skiplock.JobStatus(o.status)}
	}
	// List takes one status: list each, then keep the oldest --limit of the union.
	var jobs []*skiplock.JobRow
	for _, st := range want {
		js, err := client.List(ctx, skiplock.ListParams{Status: st, Queue: o.queue, Kind: o.kind, Limit: o.limit})
		if err != nil {
			return a.notMigratedHint(err)
		}
		jobs = append(jobs, js...)
	}
	slices.SortFunc(jobs, func(x, y *skiplock.JobRow) int { return cmp.Compare(x.ID, y.ID) })
	if len(jobs) > o.limit {
		jobs = jobs[:o.limit]
	}

	if o.json {
		out := make([]deadJobJSON, 0, len(jobs))
		for _, j := range jobs {
			dj := deadJobJSON{ID: j.ID, Kind: j.Kind, Queue: j.Queue, Status: string(j.Status),
				Attempts: j.Attempts, MaxAttempts: j.MaxAttempts, CreatedAt: j.CreatedAt,
				LastError: j.LastError, Errors: j.Errors}
			if dj.Errors == nil {
				dj.Errors = []skiplock.AttemptError{}
			}
			if !j.FinishedAt.IsZero() {
				t := j.FinishedAt
				dj.FinishedAt = &t
			}
			out = append(out, dj)
		}
		return writeJSON(a.stdout, out)
	}
	if len(jobs) == 0 {
		_, err := fmt.Fprintf(a.stdout, "no %s jobs%s\n", strings.Join(statusNames(want), " or "), filterText(o))
		return err
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "ID\tKIND\tQUEUE\tSTATUS\tATTEMPTS\tFINISHED\tLAST ERROR\n")
	for _, j := range jobs {
		finished := "-"
		if !j.FinishedAt.IsZero() {
			finished = j.FinishedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", j.ID, cell(j.Kind, 40), j.Queue, j.Status,
			j.Attempts, j.MaxAttempts, finished, cell(firstLine(j.LastError), maxErrorWidth))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(jobs) == o.limit {
		_, err := fmt.Fprintf(a.stdout, "(the oldest %d shown; there may be more: raise --limit)\n", o.limit)
		return err
	}
	return nil
}

func statusNames(ss []skiplock.JobStatus) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}

// filterText describes the --queue and --kind filters for a "no jobs" message.
func filterText(o *options) string {
	var parts []string
	if o.queue != "" {
		parts = append(parts, fmt.Sprintf("queue %q", o.queue))
	}
	if o.kind != "" {
		parts = append(parts, fmt.Sprintf("kind %q", o.kind))
	}
	if len(parts) == 0 {
		return ""
	}
	return " with " + strings.Join(parts, " and ")
}

// firstLine returns s up to its first line break.
func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(line)
}

// cell makes s fit one table cell: no tabs or control characters, at most n characters.
func cell(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
