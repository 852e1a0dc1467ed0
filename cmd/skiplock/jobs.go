package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/skiplock/skiplock"
)

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
