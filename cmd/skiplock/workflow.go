// This file holds the workflow commands: show a workflow's tasks, cancel what has not
// started, and retry its failed tasks, through the library's GetWorkflow,
// CancelWorkflow and RetryWorkflow.

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/skiplock/skiplock"
)

// workflowCommands returns the "workflow" group's subcommands.
func workflowCommands() []*command {
	return []*command{
		{
			name:    "workflow show",
			args:    "[--json] ID",
			summary: "show a workflow's tasks: state, dependencies, job",
			help: "Prints the tasks of workflow ID in name order: the task's state (waiting, released,\n" +
				"succeeded, failed, dead or cancelled), the tasks it depends on, and its job id (\"-\"\n" +
				"until the task is released). A missing workflow is an error (exit status 1).",
			flags: func(fs *flag.FlagSet, o *options) {
				fs.BoolVar(&o.json, "json", false, "print JSON instead of a table")
			},
			maxArgs: 1,
			check:   checkWorkflowID("workflow show"),
			run:     cmdWorkflowShow,
		},
		{
			name:    "workflow cancel",
			args:    "ID",
			summary: "cancel a workflow's tasks that have not started",
			help: "Cancels every task of workflow ID that has not started: tasks waiting for their\n" +
				"dependencies and queued jobs. Running tasks finish; the tasks that depend on them\n" +
				"are cancelled with the rest. Prints how many tasks it cancelled.",
			maxArgs: 1,
			check:   checkWorkflowID("workflow cancel"),
			run:     cmdWorkflowCancel,
		},
		{
			name:    "workflow retry",
			args:    "ID",
			summary: "run a workflow's failed, dead and cancelled tasks again",
			help: "Puts the failed, dead and cancelled tasks of workflow ID back: their jobs are queued\n" +
				"again with their attempts reset, and tasks cancelled before they ran wait again for\n" +
				"their dependencies. Prints how many tasks it put back.",
			maxArgs: 1,
			check:   checkWorkflowID("workflow retry"),
			run:     cmdWorkflowRetry,
		},
	}
}

// checkWorkflowID makes sure cmd was given one workflow id, a positive number.
func checkWorkflowID(cmd string) func(o *options) error {
	return func(o *options) error {
		if len(o.args) != 1 {
			return usagef(cmd, "%s: give the workflow id, as in 'skiplock %s 42'", cmd, cmd)
		}
		id, err := strconv.ParseInt(o.args[0], 10, 64)
		if err != nil || id <= 0 {
			return usagef(cmd, "%s: the workflow id must be a positive number, got %q", cmd, o.args[0])
		}
		o.id = id
		return nil
	}
}

// workflowJSON is `workflow show --json`.
type workflowJSON struct {
	ID        int64              `json:"id"`
	Name      string             `json:"name"`
	OnFailure string             `json:"on_failure"`
	CreatedAt time.Time          `json:"created_at"`
	Tasks     []workflowTaskJSON `json:"tasks"`
}

// workflowTaskJSON is one task of workflowJSON; job_id is null until the task is released.
type workflowTaskJSON struct {
	Name      string   `json:"name"`
	State     string   `json:"state"`
	DependsOn []string `json:"depends_on"`
	JobID     *int64   `json:"job_id"`
}

// workflowNotFound turns the library's not-found error into the command's message.
func (a *app) workflowNotFound(cmd string, id int64, err error) error {
	if errors.Is(err, skiplock.ErrWorkflowNotFound) {
		return fmt.Errorf("%s: workflow %d not found in schema %q", cmd, id, a.schema)
	}
	return a.notMigratedHint(err)
}

// cmdWorkflowShow prints a workflow's tasks.
func cmdWorkflowShow(ctx context.Context, a *app, o *options) error {
	client, pool, err := a.connect(ctx, "workflow show")
	if err != nil {
		return err
	}
	defer pool.Close()
	info, err := client.GetWorkflow(ctx, o.id)
	if err != nil {
		return a.workflowNotFound("workflow show", o.id, err)
	}
	policy := "cancel"
	if info.OnFailure == skiplock.RunDependents {
		policy = "run"
	}
	if o.json {
		out := workflowJSON{ID: info.ID, Name: info.Name, OnFailure: policy, CreatedAt: info.CreatedAt,
			Tasks: make([]workflowTaskJSON, 0, len(info.Tasks))}
		for _, t := range info.Tasks {
			j := workflowTaskJSON{Name: t.Name, State: t.State, DependsOn: t.DependsOn}
			if j.DependsOn == nil {
				j.DependsOn = []string{}
			}
			if t.JobID != 0 {
				j.JobID = &t.JobID
			}
			out.Tasks = append(out.Tasks, j)
		}
		return writeJSON(a.stdout, out)
	}
	fmt.Fprintf(a.stdout, "workflow %d %q (on failure: %s dependents), created %s\n\n",
		info.ID, info.Name, policy, info.CreatedAt.UTC().Format(time.RFC3339))
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "TASK\tSTATE\tJOB\tDEPENDS ON\n")
	for _, t := range info.Tasks {
		job, deps := "-", "-"
		if t.JobID != 0 {
			job = strconv.FormatInt(t.JobID, 10)
		}
		if len(t.DependsOn) > 0 {
			quoted := make([]string, len(t.DependsOn))
			for i, d := range t.DependsOn {
				quoted[i] = strconv.Quote(d)
			}
			deps = strings.Join(quoted, ",")
		}
		// Task names are the application's strings: quoted, so that tabs, newlines
		// and terminal escapes in them print as text.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", strconv.Quote(t.Name), t.State, job, deps)
	}
	return tw.Flush()
}

// cmdWorkflowCancel cancels a workflow's tasks that have not started.
func cmdWorkflowCancel(ctx context.Context, a *app, o *options) error {
	client, pool, err := a.connect(ctx, "workflow cancel")
	if err != nil {
		return err
	}
	defer pool.Close()
	// GetWorkflow first, so that a missing id is an error rather than "0 cancelled".
	if _, err := client.GetWorkflow(ctx, o.id); err != nil {
		return a.workflowNotFound("workflow cancel", o.id, err)
	}
	n, err := client.CancelWorkflow(ctx, o.id)
	if err != nil {
		return a.notMigratedHint(err)
	}
	_, err = fmt.Fprintf(a.stdout, "workflow %d: %d %s cancelled\n", o.id, n, plural(int64(n), "task", "tasks"))
	return err
}

// cmdWorkflowRetry puts a workflow's failed tasks back.
func cmdWorkflowRetry(ctx context.Context, a *app, o *options) error {
	client, pool, err := a.connect(ctx, "workflow retry")
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := client.GetWorkflow(ctx, o.id); err != nil {
		return a.workflowNotFound("workflow retry", o.id, err)
	}
	n, err := client.RetryWorkflow(ctx, o.id)
	if err != nil {
		return a.notMigratedHint(err)
	}
	_, err = fmt.Fprintf(a.stdout, "workflow %d: %d %s put back\n", o.id, n, plural(int64(n), "task", "tasks"))
	return err
}
