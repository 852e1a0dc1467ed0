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
	return slices.Concat(
		migrateCommands(), // migrate up, down, status
		[]*command{migrateSQLCommand()},
		inspectCommands(), // stats, workers, get, dead
		[]*command{requeueCommand()},
		controlCommands(), // pause, resume, periodic
		[]*command{cancelCommand(), updateCommand()},
		workflowCommands(), // workflow show, cancel, retry
		durableCommands(),  // steps, signal, fork
		[]*command{limitsCommand(), uiCommand(), versionCommand(), helpCommand()},
	)
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

// helpCommand is `skiplock help`.
func helpCommand() *command {
	return &command{
		name:    "help",
		args:    "[command]",
		summary: "print this usage, or a command's",
		help:    "Prints the usage, or the usage of the named command.",
		maxArgs: 2,
		run:     cmdHelp,
	}
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
