// This file holds the commands on a job's durable records (docs/durable.md): list its
// steps and signals, send it a signal, and fork it from a step, through the library's
// Client.Steps, Client.Signals, Client.Signal and Client.Fork.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/skiplock/skiplock"
)

// durableCommands returns the commands on a job's steps and signals.
func durableCommands() []*command {
	return []*command{
		{
			name:    "steps",
			args:    "[--json] ID",
			summary: "list a durable job's steps and signals",
			help: "Prints the steps job ID recorded, in their order (seq, name, kind, status: done,\n" +
				"waiting or timed_out, result size, duration, the attempt that recorded it), then the\n" +
				"signals sent to it and the step that consumed each. An unknown job is an error (exit\n" +
				"status 1).",
			flags: func(fs *flag.FlagSet, o *options) {
				fs.BoolVar(&o.json, "json", false, "print JSON instead of tables")
			},
			maxArgs: 1,
			check:   checkJobArgs("steps", 1, "ID"),
			run:     cmdSteps,
		},
		{
			name:    "signal",
			args:    "ID NAME [JSON]",
			summary: "send a signal to a job (AwaitSignal)",
			help: "Sends the signal NAME to job ID with the payload JSON (default null): it is kept until\n" +
				"the job's AwaitSignal(NAME) takes it, and a job parked waiting for it runs at once.\n" +
				"A finished or unknown job is an error (exit status 1).",
			maxArgs: 3,
			check:   checkJobArgs("signal", 2, "ID NAME [JSON]"),
			run:     cmdSignal,
		},
		{
			name:    "fork",
			args:    "ID STEP",
			summary: "enqueue a job again from one of its steps",
			help: "Enqueues a new job with the args of job ID whose recorded steps before STEP are\n" +
				"copied: the new job replays them and runs STEP and the steps after it again. Job ID\n" +
				"is left as it is. Prints the new job's id.",
			maxArgs: 2,
			check:   checkJobArgs("fork", 2, "ID STEP"),
			run:     cmdFork,
		},
	}
}

// checkJobArgs makes sure cmd was given a job id and at least min arguments in all.
func checkJobArgs(cmd string, min int, synopsis string) func(o *options) error {
	return func(o *options) error {
		if len(o.args) < min {
			return usagef(cmd, "%s: give %s, as in 'skiplock %s %s'", cmd, synopsis, cmd, synopsis)
		}
		id, err := strconv.ParseInt(o.args[0], 10, 64)
		if err != nil || id <= 0 {
			return usagef(cmd, "%s: the job id must be a positive number, got %q", cmd, o.args[0])
		}
		o.id = id
		if cmd == "signal" && len(o.args) == 3 && !json.Valid([]byte(o.args[2])) {
			return usagef(cmd, "signal: the payload %q is not JSON (quote a string: '\"yes\"')", cell(o.args[2], 40))
		}
		return nil
	}
}

// stepsJSON is `steps --json`.
type stepsJSON struct {
	JobID   int64                 `json:"job_id"`
	Steps   []skiplock.StepInfo   `json:"steps"`
	Signals []skiplock.SignalInfo `json:"signals"`
}

// cmdSteps prints a job's steps and signals.
func cmdSteps(ctx context.Context, a *app, o *options) error {
	client, pool, err := a.connect(ctx, "steps")
	if err != nil {
		return err
	}
	defer pool.Close()
	steps, err := client.Steps(ctx, o.id)
	var sigs []skiplock.SignalInfo
	if err == nil {
		sigs, err = client.Signals(ctx, o.id)
	}
	if errors.Is(err, skiplock.ErrJobNotFound) {
		return fmt.Errorf("steps: job %d not found in schema %q", o.id, a.schema)
	}
	if err != nil {
		return a.notMigratedHint(err)
	}
	if o.json {
		return writeJSON(a.stdout, stepsJSON{JobID: o.id, Steps: steps, Signals: sigs})
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "job %d: %d %s\n", o.id, len(steps), plural(int64(len(steps)), "step", "steps"))
	if len(steps) > 0 {
		fmt.Fprintln(tw, "SEQ\tNAME\tKIND\tSTATUS\tRESULT\tDURATION\tATTEMPT\tWAKE")
	}
	for _, s := range steps {
		wake := "-"
		if s.WakeAt != nil && s.WakeAt.Year() < 9999 {
			wake = s.WakeAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d B\t%s\t%d\t%s\n", s.Seq, cell(strconv.Quote(s.Name), 80), s.Kind, s.Status,
			s.ResultBytes, s.Duration.Round(time.Microsecond), s.Attempt, wake)
	}
	fmt.Fprintf(tw, "%d %s\n", len(sigs), plural(int64(len(sigs)), "signal", "signals"))
	if len(sigs) > 0 {
		fmt.Fprintln(tw, "ID\tNAME\tSENT\tCONSUMED BY\tPAYLOAD")
	}
	for _, s := range sigs {
		by := "-"
		if s.ConsumedSeq != nil {
			by = "step " + strconv.Itoa(*s.ConsumedSeq)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", s.ID, cell(strconv.Quote(s.Name), 80), s.SentAt.UTC().Format(time.RFC3339),
			by, cell(string(s.Payload), 60))
	}
	return tw.Flush()
}

// cmdSignal sends a signal to a job.
func cmdSignal(ctx context.Context, a *app, o *options) error {
	client, pool, err := a.connect(ctx, "signal")
	if err != nil {
		return err
	}
	defer pool.Close()
	payload := json.RawMessage("null")
	if len(o.args) == 3 {
		payload = json.RawMessage(o.args[2])
	}
	name := o.args[1]
	err = client.Signal(ctx, o.id, name, payload)
	switch {
	case errors.Is(err, skiplock.ErrJobNotFound):
		return fmt.Errorf("signal: job %d not found in schema %q", o.id, a.schema)
	case errors.Is(err, skiplock.ErrJobFinished):
		return fmt.Errorf("signal: job %d has finished: no wait would read the signal", o.id)
	case errors.Is(err, skiplock.ErrInvalidStepName), errors.Is(err, skiplock.ErrInvalidPayload), errors.Is(err, skiplock.ErrPayloadTooLarge):
		return usagef("signal", "signal: %s", strings.TrimPrefix(err.Error(), "skiplock: "))
	case err != nil:
		return a.notMigratedHint(err)
	}
	_, err = fmt.Fprintf(a.stdout, "signal %s sent to job %d\n", cell(strconv.Quote(name), 80), o.id)
	return err
}

// cmdFork enqueues a job again from one of its steps.
func cmdFork(ctx context.Context, a *app, o *options) error {
	client, pool, err := a.connect(ctx, "fork")
	if err != nil {
		return err
	}
	defer pool.Close()
	step := o.args[1]
	job, err := client.Fork(ctx, o.id, step)
	switch {
	case errors.Is(err, skiplock.ErrJobNotFound):
		return fmt.Errorf("fork: job %d not found in schema %q", o.id, a.schema)
	case errors.Is(err, skiplock.ErrStepNotFound):
		return fmt.Errorf("fork: job %d recorded no step %s ('skiplock steps %d' lists them)", o.id, cell(strconv.Quote(step), 80), o.id)
	case errors.Is(err, skiplock.ErrInvalidStepName):
		return usagef("fork", "fork: %s", strings.TrimPrefix(err.Error(), "skiplock: "))
	case err != nil:
		return a.notMigratedHint(err)
	}
	_, err = fmt.Fprintf(a.stdout, "job %d forked from step %s: new job %d (%s, queue %s)\n",
		o.id, cell(strconv.Quote(step), 80), job.ID, job.Status, job.Queue)
	return err
}
