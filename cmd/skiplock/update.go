// This file holds `skiplock update`: editing a job before it starts (run now,
// reschedule, change its priority or queue), through Client.Update.

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
)

// editOptions are the flags of `skiplock update`.
type editOptions struct {
	runNow   bool
	runAt    string // RFC 3339
	priority string // empty: unchanged
}

// updateCommand is `skiplock update`.
func updateCommand() *command {
	return &command{
		name:    "update",
		args:    "--id N [--run-now | --run-at T] [--priority P] [--queue Q]",
		summary: "edit a job before it starts: run now, reschedule, priority, queue",
		help: "Edits a queued (or scheduled) job, or a dead or failed one, atomically against a\n" +
			"worker claiming it: either the edit lands first and the job runs edited, or the\n" +
			"job has started and nothing changes (exit status 1). Give at least one change.",
		flags: func(fs *flag.FlagSet, o *options) {
			fs.Int64Var(&o.id, "id", 0, "the `id` of the job")
			fs.BoolVar(&o.edit.runNow, "run-now", false, "make the job due now")
			fs.StringVar(&o.edit.runAt, "run-at", "", "make the job due at `T` (RFC 3339, e.g. 2030-01-02T15:04:05Z)")
			fs.StringVar(&o.edit.priority, "priority", "", "set the job's priority to `P` (higher runs first)")
			fs.StringVar(&o.queue, "queue", "", "move the job to queue `Q`")
		},
		check: checkUpdate,
		run:   cmdUpdate,
	}
}

// checkUpdate makes sure update names a job and at least one change.
func checkUpdate(o *options) error {
	if o.id <= 0 {
		return usagef("update", "update: --id must be a job id (a positive number)")
	}
	e := o.edit
	if !e.runNow && e.runAt == "" && e.priority == "" && o.queue == "" {
		return usagef("update", "update: give --run-now, --run-at, --priority or --queue")
	}
	if e.runNow && e.runAt != "" {
		return usagef("update", "update: give --run-now or --run-at, not both")
	}
	_, err := o.jobUpdate()
	return err
}

// jobUpdate turns the flags into the edit.
func (o *options) jobUpdate() (skiplock.JobUpdate, error) {
	u := skiplock.JobUpdate{RunNow: o.edit.runNow, Queue: o.queue}
	if o.edit.runAt != "" {
		t, err := time.Parse(time.RFC3339, o.edit.runAt)
		if err != nil {
			return u, usagef("update", "update: --run-at %q: use RFC 3339, e.g. 2030-01-02T15:04:05Z", o.edit.runAt)
		}
		u.RunAt = t
	}
	if o.edit.priority != "" {
		var p int
		if _, err := fmt.Sscanf(o.edit.priority, "%d", &p); err != nil || fmt.Sprint(p) != o.edit.priority {
			return u, usagef("update", "update: --priority %q: must be a whole number", o.edit.priority)
		}
		u.Priority = &p
	}
	return u, nil
}

// cmdUpdate edits one job and prints what it is now.
func cmdUpdate(ctx context.Context, a *app, o *options) error {
	u, err := o.jobUpdate()
	if err != nil {
		return err
	}
	client, pool, err := a.connect(ctx, "update")
	if err != nil {
		return err
	}
	defer pool.Close()
	job, err := client.Update(ctx, o.id, u)
	switch {
	case errors.Is(err, skiplock.ErrJobNotFound):
		return fmt.Errorf("update: job %d not found in schema %q", o.id, a.schema)
	case errors.Is(err, skiplock.ErrJobRunning), errors.Is(err, skiplock.ErrJobFinished):
		return fmt.Errorf("update: job %d is %s: left unchanged", o.id, job.Status)
	case errors.Is(err, skiplock.ErrInvalidOptions), errors.Is(err, skiplock.ErrInvalidQueue):
		return usagef("update", "update: %s", strings.TrimPrefix(err.Error(), "skiplock: "))
	case err != nil:
		return a.notMigratedHint(err)
	}
	_, err = fmt.Fprintf(a.stdout, "job %d updated: %s, queue %s, priority %d, due %s\n",
		job.ID, job.Status, job.Queue, job.Priority, job.RunAt.UTC().Format(time.RFC3339))
	return err
}
