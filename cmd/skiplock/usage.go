package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// commands lists every command in the order the usage shows them. It is a function, not
// a variable, because help looks commands up.
func commands() []*command {
	cs := []*command{
		{
			name:    "migrate up",
			args:    "[--target N]",
			summary: "apply pending migrations (up to version N; default: all)",
			help: "Applies the schema migrations the schema lacks, in one transaction under an advisory\n" +
				"lock, so several processes may run it at once. It creates the schema if needed.",
			flags: func(fs *flag.FlagSet, o *options) {
				fs.IntVar(&o.target, "target", 0, "stop at version `N`; 0 means the latest")
			},
			check: func(o *options) error {
				if o.target < 0 {
					return usagef("migrate up", "migrate up: --target must be 0 (latest) or a version, got %d", o.target)
				}
				return nil
			},
			run: cmdMigrateUp,
		},
		{
			name:    "migrate down",
			args:    "--target N | --target 0 --yes",
			summary: "revert migrations down to version N (0, the default, needs --yes)",
			help: "Reverts applied migrations, newest first, down to version N. Version 0 reverts all of\n" +
				"them: that drops skiplock's tables and every job in them, so it needs --yes.",
			flags: func(fs *flag.FlagSet, o *options) {
				fs.IntVar(&o.target, "target", 0, "keep version `N` and revert the ones after it; 0 reverts every migration")
				fs.BoolVar(&o.yes, "yes", false, "confirm reverting to version 0, which drops every job")
			},
			check: func(o *options) error {
				if o.target < 0 {
					return usagef("migrate down", "migrate down: --target must be a version (0 or more), got %d", o.target)
				}
				if o.target == 0 && !o.yes {
					return usagef("migrate down", "migrate down to version 0 drops skiplock's tables and every job in them: "+
						"pass --yes to confirm, or --target N to keep version N")
				}
				return nil
			},
			run: cmdMigrateDown,
		},
		{
			name:    "migrate status",
			summary: "show the current, latest and applied versions",
			help:    "Shows which migrations the schema has and whether any are pending.",
			run:     cmdMigrateStatus,
		},
		{
			name:    "migrate sql",
			args:    "[--format plain|golang-migrate|goose|atlas] [--out DIR]",
			summary: "print the migrations as SQL files for your migration tool, the schema written in",
			help: "Prints skiplock's migrations as plain SQL, every object qualified with --schema (quoted;\n" +
				"no search_path), each file ending with the row skiplock records in <schema>.schema_migrations,\n" +
				"so that Migrate, CheckSchema and workers see the versions applied. --format lays them\n" +
				"out for golang-migrate (NNN_skiplock_name.up.sql and .down.sql), goose (one file with\n" +
				"-- +goose Up and Down) or atlas (up files; run `atlas migrate hash`); plain (the default)\n" +
				"prints the up files. --out writes the files to a directory; without it they go to stdout.\n" +
				"Keep them in a directory (and version table) of their own: their numbers are skiplock's.\n" +
				"Needs no database.",
			flags: func(fs *flag.FlagSet, o *options) {
				fs.StringVar(&o.sqlFormat, "format", formatPlain, "`layout`: plain, golang-migrate, goose or atlas")
				fs.StringVar(&o.out, "out", "", "write the files to directory `DIR` instead of printing them")
			},
			check: func(o *options) error {
				if !slices.Contains(sqlFormats, o.sqlFormat) {
					return usagef("migrate sql", "migrate sql: --format %q: use one of %s", o.sqlFormat, strings.Join(sqlFormats, ", "))
				}
				return nil
			},
			run: cmdMigrateSQL,
		},
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
		{
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
		},
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
			args:    "[--json]",
			summary: "list periodic schedules with their last and next run",
			help: "Lists the periodic schedules workers declared: schedule, whether still active (declared\n" +
				"by a running worker), the last occurrence enqueued and its job, and the next run.",
			flags: func(fs *flag.FlagSet, o *options) {
				fs.BoolVar(&o.json, "json", false, "print JSON instead of a table")
			},
			run: cmdPeriodic,
		},
		{
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
		},
		limitsCommand(),
		uiCommand(),
		{
			name:    "version",
			summary: "print the build's version",
			help:    "Prints the version of the build and of Go. It needs no database.",
			run:     cmdVersion,
		},
		{
			name:    "help",
			args:    "[command]",
			summary: "print this usage, or a command's",
			help:    "Prints the usage, or the usage of the named command.",
			maxArgs: 2,
			run:     cmdHelp,
		},
	}
	// The workflow group goes before limits, after the job commands.
	at := slices.IndexFunc(cs, func(c *command) bool { return c.name == "limits" })
	return slices.Insert(cs, at, workflowCommands()...)
}

// findCommand returns the command called name, or nil.
func findCommand(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

const globalUsage = `Global flags, accepted before the command and after it:
  --database-url URL   the PostgreSQL connection string; defaults to $DATABASE_URL
  --schema NAME        the schema holding skiplock's tables; defaults to "skiplock"
  --timeout D          the time limit of the whole command; defaults to 30s
`

// printUsage writes the tool's usage: commands, global flags, exit statuses.
func (a *app) printUsage(w io.Writer) {
	fmt.Fprint(w, "skiplock is the operator tool of the skiplock job queue.\n\n"+
		"Usage:\n  skiplock [global flags] <command> [command flags]\n\nCommands:\n")
	printCommandList(w, commands())
	fmt.Fprint(w, "\n"+globalUsage+"\n"+
		"Exit status: 0 done; 1 the operation failed (database error, job not found, timeout);\n"+
		"2 usage error (unknown command or flag, bad or missing value, no database URL).\n\n"+
		"Run 'skiplock help <command>' for a command's flags.\n")
}

// printGroupUsage writes the usage of the commands under group, such as "migrate".
func (a *app) printGroupUsage(w io.Writer, group string) {
	var cs []*command
	for _, c := range commands() {
		if strings.HasPrefix(c.name, group+" ") {
			cs = append(cs, c)
		}
	}
	fmt.Fprintf(w, "Usage: skiplock %s <subcommand> [flags]\n\nSubcommands:\n", group)
	printCommandList(w, cs)
	fmt.Fprintf(w, "\nRun 'skiplock help %s <subcommand>' for a subcommand's flags.\n", group)
}

// synopsisWidth is the column where the command list's summaries start.
const synopsisWidth = 32

func printCommandList(w io.Writer, cs []*command) {
	for _, c := range cs {
		synopsis := c.name
		if c.args != "" {
			synopsis += " " + c.args
		}
		if len(synopsis) > synopsisWidth-4 { // too long to share a line with its summary
			fmt.Fprintf(w, "  %s\n  %-*s%s\n", synopsis, synopsisWidth-2, "", c.summary)
		} else {
			fmt.Fprintf(w, "  %-*s%s\n", synopsisWidth-2, synopsis, c.summary)
		}
	}
}

// printCommandUsage writes one command's synopsis, explanation and flags.
func (a *app) printCommandUsage(w io.Writer, c *command) {
	fmt.Fprintf(w, "Usage: skiplock %s", c.name)
	if c.args != "" {
		fmt.Fprintf(w, " %s", c.args)
	}
	fmt.Fprintf(w, "\n\n%s\n", c.help)
	if c.flags != nil {
		fs := newFlagSet(c.name)
		c.flags(fs, &options{})
		fmt.Fprint(w, "\nFlags:\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fs.VisitAll(func(f *flag.Flag) {
			typ, usage := flag.UnquoteUsage(f)
			def := ""
			if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
				def = fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprintf(tw, "  --%s %s\t%s%s\n", f.Name, typ, usage, def)
		})
		tw.Flush()
	}
	fmt.Fprint(w, "\n"+globalUsage)
}

// commandGroups names the commands that take a subcommand, with the subcommands' names.
var commandGroups = map[string]string{
	"migrate":  "up, down, status or sql",
	"workflow": "show, cancel or retry",
}

// cmdHelp prints the usage, or the usage of the command named in its arguments.
func cmdHelp(_ context.Context, a *app, o *options) error {
	name := strings.Join(o.args, " ")
	switch {
	case name == "":
		a.printUsage(a.stdout)
	case commandGroups[name] != "":
		a.printGroupUsage(a.stdout, name)
	default:
		cmd := findCommand(name)
		if cmd == nil {
			return usagef("", "help: unknown command %q", name)
		}
		a.printCommandUsage(a.stdout, cmd)
	}
	return nil
}
