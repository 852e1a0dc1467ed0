package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/skiplock/skiplock"
)

// inspectCommands returns the commands that show what the queues hold: stats, workers,
// get and dead.
func inspectCommands() []*command {
	return []*command{
		{
			name:    "stats",
			args:    "[--json]",
			summary: "jobs by queue and status, the oldest due job's age, jobs finished lately",
			help: "Counts the jobs of each queue by status and shows how long the oldest due, queued job\n" +
				"has waited, and how many jobs finished (the archive included) in the last minute and\n" +
				"hour, with the rate per second over the last minute.",
			flags: func(fs *flag.FlagSet, o *options) {
				fs.BoolVar(&o.json, "json", false, "print JSON instead of a table")
			},
			run: cmdStats,
		},
		{
			name:    "workers",
			args:    "[--json]",
			summary: "registered workers, their queues, which one leads the maintenance",
			help: "Lists the workers table: every running worker keeps a row there, renewed every few\n" +
				"seconds, and deletes it when it stops; a worker that died stays listed as not alive\n" +
				"for about a minute. LEADER marks the one that runs the fleet's maintenance (the\n" +
				"sweep, the archive purge, the vacuum check).",
			flags: func(fs *flag.FlagSet, o *options) {
				fs.BoolVar(&o.json, "json", false, "print JSON instead of a table")
			},
			run: cmdWorkers,
		},
		{
			name:    "get",
			args:    "--id N [--json]",
			summary: "show one job: state, args, metadata, progress, output, last error",
			help: "Shows one job, from the jobs table or the archive: its state, args and metadata, the\n" +
				"progress its handler last recorded, its output, and its last error. --json prints\n" +
				"everything, the error history included. A missing job is an error (exit status 1).",
			flags: func(fs *flag.FlagSet, o *options) {
				fs.Int64Var(&o.id, "id", 0, "the `id` of the job")
				fs.BoolVar(&o.json, "json", false, "print JSON instead of a list")
			},
			check: func(o *options) error {
				if o.id <= 0 {
					return usagef("get", "get: --id must be a job id (a positive number)")
				}
				return nil
			},
			run: cmdGet,
		},
		{
			name:    "dead",
			args:    "[--status dead|failed] [--queue Q] [--kind K] [--limit N] [--json]",
			summary: "list dead and failed jobs, oldest first, with their last errors",
			help: "Lists jobs that ended dead (attempts exhausted) or failed (a permanent error), oldest\n" +
				"first, with the first line of their last error. --json prints whole errors and the\n" +
				"error history.",
			flags: func(fs *flag.FlagSet, o *options) {
				fs.StringVar(&o.status, "status", "", "list only jobs of status `S`, dead or failed; default both")
				fs.StringVar(&o.queue, "queue", "", "only jobs of queue `Q`")
				fs.StringVar(&o.kind, "kind", "", "only jobs of kind `K`")
				fs.IntVar(&o.limit, "limit", defaultListLimit, "list at most `N` jobs")
				fs.BoolVar(&o.json, "json", false, "print JSON instead of a table")
			},
			check: checkDead,
			run:   cmdDead,
		},
	}
}

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

// queueStatsJSON is one queue of `stats --json`. Counts has every status, zeros included;
// the finished maps have only the statuses with jobs.
type queueStatsJSON struct {
	Queue              string           `json:"queue"`
	Counts             map[string]int64 `json:"counts"`
	Scheduled          int64            `json:"scheduled"`
	Overrunning        int64            `json:"overrunning"`
	OldestDueSeconds   float64          `json:"oldest_due_seconds"`
	FinishedLastMinute map[string]int64 `json:"finished_last_minute"`
	FinishedLastHour   map[string]int64 `json:"finished_last_hour"`
	Paused             bool             `json:"paused"`
	PausedAt           *time.Time       `json:"paused_at,omitempty"`
}

// cmdStats prints job counts by queue and status, each queue's oldest due job's age, and
// the jobs finished in the last minute and hour (from the archive too), with the rate.
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
			q := queueStatsJSON{Queue: s.Queue, Counts: map[string]int64{}, Scheduled: s.Scheduled, Overrunning: s.Overrunning,
				OldestDueSeconds: s.OldestDue.Seconds(), FinishedLastMinute: map[string]int64{}, FinishedLastHour: map[string]int64{},
				Paused: s.Paused}
			if s.Paused {
				q.PausedAt = &s.PausedAt
			}
			for _, st := range statuses {
				q.Counts[string(st)] = s.Counts[st]
			}
			for st, n := range s.FinishedLastMinute {
				q.FinishedLastMinute[string(st)] = n
			}
			for st, n := range s.FinishedLastHour {
				q.FinishedLastHour[string(st)] = n
			}
			out = append(out, q)
		}
		return writeJSON(a.stdout, out)
	}
	if len(stats) == 0 {
		_, err := fmt.Fprintf(a.stdout, "no jobs in schema %q (none in the jobs table, none finished in the last hour)\n", a.schema)
		return err
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "QUEUE")
	for _, st := range statuses {
		fmt.Fprintf(tw, "\t%s", strings.ToUpper(string(st)))
	}
	fmt.Fprint(tw, "\tOLDEST DUE\tFINISHED 1M\tFINISHED 1H\tPER SEC\tPAUSED\n")
	total := skiplock.QueueStats{Queue: "(all)", Counts: map[skiplock.JobStatus]int64{},
		FinishedLastMinute: map[skiplock.JobStatus]int64{}, FinishedLastHour: map[skiplock.JobStatus]int64{}}
	for _, s := range stats {
		writeStatsRow(tw, s)
		for st, n := range s.Counts {
			total.Counts[st] += n
		}
		for st, n := range s.FinishedLastMinute {
			total.FinishedLastMinute[st] += n
		}
		for st, n := range s.FinishedLastHour {
			total.FinishedLastHour[st] += n
		}
		total.OldestDue = max(total.OldestDue, s.OldestDue)
	}
	if len(stats) > 1 {
		writeStatsRow(tw, total)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintln(a.stdout, "(FINISHED: jobs that reached a final state in the last minute / hour, archive included; PER SEC: over the last minute)")
	return err
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
	m1, h1 := sum(s.FinishedLastMinute), sum(s.FinishedLastHour)
	fmt.Fprintf(w, "\t%s\t%d\t%d\t%s\t%s\n", formatAge(s.OldestDue), m1, h1, formatRate(float64(m1)/60), paused)
}

func sum(m map[skiplock.JobStatus]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
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

// formatRate shows jobs per second with the precision a reader needs.
func formatRate(r float64) string {
	switch {
	case r == 0:
		return "0"
	case r < 10:
		return fmt.Sprintf("%.2f", r)
	default:
		return fmt.Sprintf("%.0f", r)
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

// jobJSON is `get --json`: the whole job.
type jobJSON struct {
	ID          int64                   `json:"id"`
	Kind        string                  `json:"kind"`
	Queue       string                  `json:"queue"`
	Status      string                  `json:"status"`
	Priority    int                     `json:"priority"`
	Attempts    int                     `json:"attempts"`
	MaxAttempts int                     `json:"max_attempts"`
	RunAt       time.Time               `json:"run_at"`
	CreatedAt   time.Time               `json:"created_at"`
	LockedBy    string                  `json:"locked_by,omitempty"`
	FinishedAt  *time.Time              `json:"finished_at"`
	Args        json.RawMessage         `json:"args"`
	ArgsKey     string                  `json:"args_encrypted_with,omitempty"` // args null: sealed with this key
	Metadata    map[string]string       `json:"metadata"`
	Progress    *skiplock.Progress      `json:"progress"`
	Output      json.RawMessage         `json:"output"`
	LastError   string                  `json:"last_error,omitempty"`
	Errors      []skiplock.AttemptError `json:"errors"`
}

// cmdGet prints one job, from the jobs table or the archive: its state, args, metadata,
// progress, output and error history.
func cmdGet(ctx context.Context, a *app, o *options) error {
	client, pool, err := a.connect(ctx, "get")
	if err != nil {
		return err
	}
	defer pool.Close()
	j, err := client.Get(ctx, o.id)
	if errors.Is(err, skiplock.ErrJobNotFound) {
		return fmt.Errorf("get: job %d not found in schema %q", o.id, a.schema)
	}
	if err != nil {
		return a.notMigratedHint(err)
	}
	if o.json {
		out := jobJSON{ID: j.ID, Kind: j.Kind, Queue: j.Queue, Status: string(j.Status), Priority: j.Priority,
			Attempts: j.Attempts, MaxAttempts: j.MaxAttempts, RunAt: j.RunAt, CreatedAt: j.CreatedAt,
			LockedBy: j.LockedBy, Args: json.RawMessage(j.Payload), Metadata: j.Metadata, Progress: j.Progress,
			Output: j.Output, LastError: j.LastError, Errors: j.Errors}
		if !j.FinishedAt.IsZero() {
			t := j.FinishedAt
			out.FinishedAt = &t
		}
		if key, ok := skiplock.SealedKey(j.Payload); ok {
			out.Args, out.ArgsKey = nil, key // the ciphertext is of no use to a reader
		}
		if out.Metadata == nil {
			out.Metadata = map[string]string{}
		}
		if out.Errors == nil {
			out.Errors = []skiplock.AttemptError{}
		}
		return writeJSON(a.stdout, out)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	field := func(name, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{name}, args...)...)
	}
	field("id", "%d", j.ID)
	field("kind", "%s", cell(j.Kind, 200))
	field("queue", "%s", j.Queue)
	field("status", "%s", j.Status)
	field("attempts", "%d/%d", j.Attempts, j.MaxAttempts)
	field("priority", "%d", j.Priority)
	field("created", "%s", j.CreatedAt.UTC().Format(time.RFC3339))
	field("run at", "%s", j.RunAt.UTC().Format(time.RFC3339))
	if j.LockedBy != "" {
		field("worker", "%s", cell(j.LockedBy, 200))
	}
	if !j.FinishedAt.IsZero() {
		field("finished", "%s", j.FinishedAt.UTC().Format(time.RFC3339))
	}
	if key, ok := skiplock.SealedKey(j.Payload); ok {
		field("args", "(encrypted with key %s)", cell(key, 64))
	} else {
		field("args", "%s", cell(string(j.Payload), 200))
	}
	if len(j.Metadata) > 0 {
		keys := slices.Sorted(maps.Keys(j.Metadata))
		for i, k := range keys {
			name := ""
			if i == 0 {
				name = "metadata"
			}
			field(name, "%s=%s", cell(k, 60), cell(j.Metadata[k], 120))
		}
	}
	if j.Progress != nil {
		field("progress", "%s %s", strconv.FormatFloat(j.Progress.Value, 'g', -1, 64), cell(j.Progress.Message, 200))
	}
	if j.Output != nil {
		field("output", "%s", cell(string(j.Output), 200))
	}
	if j.LastError != "" {
		field("last error", "%s", cell(firstLine(j.LastError), 200))
	}
	return tw.Flush()
}

// workerJSON is one worker of `workers --json`.
type workerJSON struct {
	ID        string    `json:"id"`
	Queues    []string  `json:"queues"`
	StartedAt time.Time `json:"started_at"`
	ExpiresAt time.Time `json:"expires_at"`
	Alive     bool      `json:"alive"`
	Leader    bool      `json:"leader"`
}

// cmdWorkers prints the workers registered in the schema.
func cmdWorkers(ctx context.Context, a *app, o *options) error {
	client, pool, err := a.connect(ctx, "workers")
	if err != nil {
		return err
	}
	defer pool.Close()
	ws, err := client.Workers(ctx)
	if err != nil {
		return a.notMigratedHint(err)
	}
	if o.json {
		out := make([]workerJSON, 0, len(ws))
		for _, w := range ws {
			out = append(out, workerJSON(w))
		}
		return writeJSON(a.stdout, out)
	}
	if len(ws) == 0 {
		_, err := fmt.Fprintf(a.stdout, "no workers registered in schema %q\n", a.schema)
		return err
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "WORKER\tALIVE\tLEADER\tSTARTED\tQUEUES\n")
	for _, w := range ws {
		yes := func(b bool) string {
			if b {
				return "yes"
			}
			return "no"
		}
		queues := strings.Join(w.Queues, ",")
		if len(w.Queues) > 5 {
			queues = fmt.Sprintf("%s,… (%d)", strings.Join(w.Queues[:5], ","), len(w.Queues))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", w.ID, yes(w.Alive), yes(w.Leader), w.StartedAt.Format(time.RFC3339), queues)
	}
	return tw.Flush()
}
