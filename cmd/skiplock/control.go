package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/skiplock/skiplock"
)

// controlCommands returns the commands on queues and schedules: pause, resume and periodic.
func controlCommands() []*command {
	return []*command{
		{
			name:    "pause",
			args:    "QUEUE",
			summary: "stop workers claiming from a queue (running jobs finish)",
			help: "Pauses QUEUE: every worker stops claiming its jobs within about 100ms (within one poll\n" +
				"interval if its listener is down). Running jobs finish; enqueueing still works. The\n" +
				"pause is stored, so workers started later see it, until 'skiplock resume QUEUE'.",
			maxArgs: 1,
			check:   checkQueueArg("pause"),
			run:     cmdPause,
		},
		{
			name:    "resume",
			args:    "QUEUE",
			summary: "let workers claim from a paused queue again",
			help:    "Ends the pause of QUEUE: workers claim its jobs again at once.",
			maxArgs: 1,
			check:   checkQueueArg("resume"),
			run:     cmdResume,
		},
		{
			name:    "periodic",
			args:    "[--json] | enable NAME | disable NAME | run NAME",
			summary: "list periodic schedules; enable, disable or run one now",
			help: "Lists the periodic schedules workers declared: schedule, whether still active (declared\n" +
				"by a running worker, and not disabled), the last occurrence enqueued and its job, and the\n" +
				"next run. 'periodic disable NAME' stops every worker enqueueing its occurrences until\n" +
				"'periodic enable NAME' (then its misfire policy decides what it missed); 'periodic run\n" +
				"NAME' makes its next occurrence due now (its later ones keep their times).",
			flags: func(fs *flag.FlagSet, o *options) {
				fs.BoolVar(&o.json, "json", false, "print JSON instead of a table")
			},
			maxArgs: 2,
			check:   checkPeriodicArgs,
			run:     cmdPeriodic,
		},
	}
}

// checkQueueArg makes sure cmd was given exactly one queue name.
func checkQueueArg(cmd string) func(o *options) error {
	return func(o *options) error {
		if len(o.args) != 1 {
			return usagef(cmd, "%s: give the queue name, as in 'skiplock %s QUEUE'", cmd, cmd)
		}
		return nil
	}
}

// cmdPause pauses the queue named by the argument.
func cmdPause(ctx context.Context, a *app, o *options) error {
	return a.setPaused(ctx, "pause", o.args[0], true)
}

// cmdResume resumes the queue named by the argument.
func cmdResume(ctx context.Context, a *app, o *options) error {
	return a.setPaused(ctx, "resume", o.args[0], false)
}

func (a *app) setPaused(ctx context.Context, cmd, queue string, pause bool) error {
	client, pool, err := a.connect(ctx, cmd)
	if err != nil {
		return err
	}
	defer pool.Close()
	if pause {
		err = client.PauseQueue(ctx, queue)
	} else {
		err = client.ResumeQueue(ctx, queue)
	}
	if errors.Is(err, skiplock.ErrInvalidQueue) {
		return usagef(cmd, "%s: %s", cmd, strings.TrimPrefix(err.Error(), "skiplock: "))
	}
	if err != nil {
		return a.notMigratedHint(err)
	}
	if pause {
		_, err = fmt.Fprintf(a.stdout, "queue %q paused: workers stop claiming its jobs; running jobs finish\n", queue)
	} else {
		_, err = fmt.Fprintf(a.stdout, "queue %q resumed\n", queue)
	}
	return err
}

// periodicJSON is one schedule of `periodic --json`.
type periodicJSON struct {
	Name       string     `json:"name"`
	Kind       string     `json:"kind"`
	Queue      string     `json:"queue"`
	Schedule   string     `json:"schedule"`
	Misfire    string     `json:"misfire"`
	Active     bool       `json:"active"`
	Disabled   bool       `json:"disabled"`
	LastRunAt  *time.Time `json:"last_run_at"`
	LastJobID  *int64     `json:"last_job_id"`
	NextRunAt  time.Time  `json:"next_run_at"`
	DeclaredAt time.Time  `json:"declared_at"`
}

// checkPeriodicArgs allows no argument (the list) or an action and a schedule's name.
func checkPeriodicArgs(o *options) error {
	switch {
	case len(o.args) == 0:
		return nil
	case len(o.args) == 2 && (o.args[0] == "enable" || o.args[0] == "disable" || o.args[0] == "run"):
		return nil
	}
	return usagef("periodic", "periodic: give no argument to list the schedules, or enable, disable or run and a schedule's name, as in 'skiplock periodic run nightly'")
}

// periodicAction enables, disables or runs now the schedule o.args[1].
func periodicAction(ctx context.Context, a *app, client *skiplock.Client, o *options) error {
	action, name := o.args[0], o.args[1]
	var err error
	done := map[string]string{"enable": "enabled", "disable": "disabled: no worker enqueues its occurrences until it is enabled",
		"run": "due now: a worker declaring it enqueues its job within about a second"}[action]
	if action == "run" {
		err = client.RunPeriodicNow(ctx, name)
	} else {
		err = client.SetPeriodicEnabled(ctx, name, action == "enable")
	}
	if errors.Is(err, skiplock.ErrPeriodicNotFound) {
		return fmt.Errorf("periodic %s: %w", action, err)
	}
	if err != nil {
		return a.notMigratedHint(err)
	}
	_, err = fmt.Fprintf(a.stdout, "periodic schedule %q %s\n", name, done)
	return err
}

// cmdPeriodic lists the periodic schedules with their last and next run, or runs the
// action its arguments name.
func cmdPeriodic(ctx context.Context, a *app, o *options) error {
	client, pool, err := a.connect(ctx, "periodic")
	if err != nil {
		return err
	}
	defer pool.Close()
	if len(o.args) == 2 {
		return periodicAction(ctx, a, client, o)
	}
	list, err := client.ListPeriodic(ctx)
	if err != nil {
		return a.notMigratedHint(err)
	}
	if o.json {
		out := make([]periodicJSON, 0, len(list))
		for _, p := range list {
			j := periodicJSON{Name: p.Name, Kind: p.Kind, Queue: p.Queue, Schedule: p.Schedule, Misfire: p.Misfire,
				Active: p.Active, Disabled: p.Disabled, NextRunAt: p.NextRunAt, DeclaredAt: p.DeclaredAt}
			if !p.LastRunAt.IsZero() {
				j.LastRunAt, j.LastJobID = &p.LastRunAt, &p.LastJobID
			}
			out = append(out, j)
		}
		return writeJSON(a.stdout, out)
	}
	if len(list) == 0 {
		_, err := fmt.Fprintf(a.stdout, "no periodic schedules in schema %q: workers declare them in WorkerConfig.PeriodicJobs\n", a.schema)
		return err
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "NAME\tKIND\tQUEUE\tSCHEDULE\tMISFIRE\tACTIVE\tLAST RUN\tLAST JOB\tNEXT RUN\n")
	for _, p := range list {
		last, job, next, active := "-", "-", "-", "no"
		if !p.LastRunAt.IsZero() {
			last = p.LastRunAt.UTC().Format(time.RFC3339)
			if p.LastJobID != 0 {
				job = fmt.Sprint(p.LastJobID)
			}
		}
		switch {
		case p.Disabled:
			active = "disabled"
		case p.Active:
			active = "yes"
			next = p.NextRunAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, p.Kind, p.Queue,
			p.Schedule, p.Misfire, active, last, job, next)
	}
	return tw.Flush()
}
