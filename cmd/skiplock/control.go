package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/skiplock/skiplock"
)

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

// cmdPeriodic lists the periodic schedules.
func cmdPeriodic(ctx context.Context, a *app, o *options) error {
	return errors.New("periodic: not yet")
}
