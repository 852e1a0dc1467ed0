package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/skiplock/skiplock"
)

// requeueCommand is `skiplock requeue`.
func requeueCommand() *command {
	return &command{
		name:    "requeue",
		args:    "[--id 1,2,3] [--kind K] [--queue Q]",
		summary: "put dead and failed jobs back in the queue, attempts reset",
		help: "Moves dead and failed jobs back to queued, due now, with their attempts reset; their\n" +
			"error history stays. Give at least one filter; a job must match all given filters.",
		flags: func(fs *flag.FlagSet, o *options) {
			fs.Var(&o.ids, "id", "only the jobs with these `ids`: comma-separated, or the flag repeated")
			fs.StringVar(&o.kind, "kind", "", "only jobs of kind `K`")
			fs.StringVar(&o.queue, "queue", "", "only jobs of queue `Q`")
		},
		check: checkRequeue,
		run:   cmdRequeue,
	}
}

// cancelCommand is `skiplock cancel`.
func cancelCommand() *command {
	return &command{
		name:    "cancel",
		args:    "--id N",
		summary: "cancel a queued or running job",
		help: "Cancels a job: a queued job will not run; a running job's handler is told through its\n" +
			"context at once (at its worker's next heartbeat if the message is lost), and its\n" +
			"result is ignored. A job already\n" +
			"finished is left as it is. A missing job is an error (exit status 1).",
		flags: func(fs *flag.FlagSet, o *options) {
			fs.Int64Var(&o.id, "id", 0, "the `id` of the job")
		},
		check: func(o *options) error {
			if o.id <= 0 {
				return usagef("cancel", "cancel: --id must be a job id (a positive number)")
			}
			return nil
		},
		run: cmdCancel,
	}
}

// checkRequeue makes sure requeue has at least one filter: it never requeues everything.
func checkRequeue(o *options) error {
	if len(o.ids) == 0 && o.kind == "" && o.queue == "" {
		return usagef("requeue", "requeue: give --id, --kind or --queue (a job must match all given)")
	}
	return nil
}

// cmdRequeue moves the matching dead and failed jobs back to queued.
func cmdRequeue(ctx context.Context, a *app, o *options) error {
	client, pool, err := a.connect(ctx, "requeue")
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := client.Requeue(ctx, skiplock.RequeueFilter{IDs: o.ids, Kind: o.kind, Queue: o.queue})
	if errors.Is(err, skiplock.ErrInvalidQueue) {
		return usagef("requeue", "requeue: --queue: %s", strings.TrimPrefix(err.Error(), "skiplock: "))
	}
	if err != nil {
		return a.notMigratedHint(err)
	}
	n, skipped := res.Requeued, res.Skipped
	switch {
	case n == 0 && skipped == 0:
		_, err = fmt.Fprintln(a.stdout, "requeued 0 jobs: no dead or failed job matched")
	case skipped == 0:
		_, err = fmt.Fprintf(a.stdout, "requeued %d %s\n", n, plural(n, "job", "jobs"))
	default:
		_, err = fmt.Fprintf(a.stdout, "requeued %d %s, skipped %d: their unique key is held by an active job or by a newer job requeued instead\n",
			n, plural(n, "job", "jobs"), skipped)
	}
	return err
}

// cmdCancel cancels one job and prints the status it ends up in.
func cmdCancel(ctx context.Context, a *app, o *options) error {
	client, pool, err := a.connect(ctx, "cancel")
	if err != nil {
		return err
	}
	defer pool.Close()
	job, err := client.Cancel(ctx, o.id)
	if errors.Is(err, skiplock.ErrJobNotFound) {
		return fmt.Errorf("cancel: job %d not found in schema %q", o.id, a.schema)
	}
	if err != nil {
		return a.notMigratedHint(err)
	}
	switch {
	case job.Status != skiplock.StatusCancelled:
		_, err = fmt.Fprintf(a.stdout, "job %d is already %s: left unchanged\n", job.ID, job.Status)
	case job.LockedBy != "":
		_, err = fmt.Fprintf(a.stdout, "job %d cancelled (it was running on %s, which is told to stop it at once)\n", job.ID, job.LockedBy)
	default:
		_, err = fmt.Fprintf(a.stdout, "job %d cancelled\n", job.ID)
	}
	return err
}
