// This file holds `skiplock logs`: the records a job's handler logged through
// skiplock.Logger, per attempt.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/skiplock/skiplock"
)

// logsCommand returns the logs command.
func logsCommand() *command {
	return &command{
		name:    "logs",
		args:    "[--json] ID | --id N [--json]",
		summary: "show the records a job's handler logged (skiplock.Logger), per attempt",
		help: "Prints the records the job's handler logged through skiplock.Logger, oldest first: the\n" +
			"attempt, the time, the level, the message and the attributes as JSON. Each attempt keeps\n" +
			"at most 1,000 records or 64 KiB; a last warning record says how many were dropped. A\n" +
			"job that logged nothing prints nothing; a missing job is an error (exit status 1).",
		maxArgs: 1,
		flags: func(fs *flag.FlagSet, o *options) {
			fs.Int64Var(&o.id, "id", 0, "the `id` of the job")
			fs.BoolVar(&o.json, "json", false, "print JSON instead of a table")
		},
		check: func(o *options) error {
			if o.id != 0 && len(o.args) == 1 {
				return usagef("logs", "logs: give the job's id once: --id %d or %q, not both", o.id, o.args[0])
			}
			if o.id == 0 && len(o.args) == 1 {
				id, err := strconv.ParseInt(o.args[0], 10, 64)
				if err != nil {
					return usagef("logs", "logs: %q is not a job id (a positive number)", o.args[0])
				}
				o.id = id
			}
			if o.id <= 0 {
				return usagef("logs", "logs: give the job's id (a positive number)")
			}
			return nil
		},
		run: cmdLogs,
	}
}

// logJSON is one record as `logs --json` prints it.
type logJSON struct {
	Attempt int             `json:"attempt"`
	Seq     int             `json:"seq"`
	At      time.Time       `json:"at"`
	Level   string          `json:"level"`
	Message string          `json:"message"`
	Attrs   json.RawMessage `json:"attrs,omitempty"`
}

// cmdLogs prints a job's log records.
func cmdLogs(ctx context.Context, a *app, o *options) error {
	client, pool, err := a.connect(ctx, "logs")
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := client.Get(ctx, o.id); errors.Is(err, skiplock.ErrJobNotFound) {
		return fmt.Errorf("logs: job %d not found in schema %q", o.id, a.schema)
	} else if err != nil {
		return a.notMigratedHint(err)
	}
	recs, err := client.Logs(ctx, o.id)
	if err != nil {
		return a.notMigratedHint(err)
	}
	if o.json {
		out := make([]logJSON, len(recs))
		for i, r := range recs {
			out[i] = logJSON{Attempt: r.Attempt, Seq: r.Seq, At: r.At, Level: r.Level.String(), Message: r.Message, Attrs: r.Attrs}
		}
		return writeJSON(a.stdout, out)
	}
	if len(recs) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ATTEMPT\tTIME\tLEVEL\tMESSAGE\tATTRS")
	for _, r := range recs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", r.Attempt, r.At.UTC().Format(time.RFC3339Nano), r.Level,
			cell(r.Message, 200), cell(string(r.Attrs), 400))
	}
	return tw.Flush()
}
