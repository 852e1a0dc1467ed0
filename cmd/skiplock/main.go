package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/skiplock/skiplock"
)

// Exit statuses.
const (
	exitOK    = 0 // the command did its work
	exitFail  = 1 // the operation failed: database error, not found, timeout
	exitUsage = 2 // bad or missing flags, unknown command
)

// defaultTimeout bounds a whole command unless --timeout says otherwise.
const defaultTimeout = 30 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line args (without the program name), writing results to
// stdout and messages to stderr, and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runEnv(ctx, args, os.Getenv, stdout, stderr)
}

// runEnv is run with the environment read through getenv, so tests control it.
func runEnv(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr, getenv: getenv}
	return a.report(a.main(ctx, args))
}

// report prints err, if any, and returns the exit status for it.
func (a *app) report(err error) int {
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, errHelpShown):
		return exitOK
	case errors.Is(err, errUsageShown):
		return exitUsage
	case errors.As(err, &ue):
		fmt.Fprintf(a.stderr, "skiplock: %s\n", ue.msg)
		help := "skiplock help"
		if ue.cmd != "" {
			help += " " + ue.cmd
		}
		fmt.Fprintf(a.stderr, "Run '%s' for usage.\n", help)
		return exitUsage
	default:
		fmt.Fprintf(a.stderr, "skiplock: %s\n", strings.TrimPrefix(err.Error(), "skiplock: "))
		return exitFail
	}
}

// main parses the global flags and runs the command.
func (a *app) main(ctx context.Context, args []string) error {
	fs := newFlagSet("skiplock")
	a.globalFlags(fs, a.getenv("DATABASE_URL"), skiplock.DefaultSchema, defaultTimeout)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			a.printUsage(a.stdout)
			return errHelpShown
		}
		return usagef("", "%v", err)
	}
	rest := fs.Args()
	if len(rest) == 0 {
		a.printUsage(a.stderr)
		return errUsageShown
	}
	name, rest := rest[0], rest[1:]
	if subs, ok := commandGroups[name]; ok {
		if len(rest) == 0 {
			return usagef(name, "%s needs a subcommand: %s", name, subs)
		}
		switch rest[0] {
		case "-h", "-help", "--help":
			a.printGroupUsage(a.stdout, name)
			return errHelpShown
		}
		name, rest = name+" "+rest[0], rest[1:]
	}
	cmd := findCommand(name)
	if cmd == nil {
		if group, sub, ok := strings.Cut(name, " "); ok && commandGroups[group] != "" {
			return usagef(group, "%s: unknown subcommand %q: use %s", group, sub, commandGroups[group])
		}
		return usagef("", "unknown command %q", name)
	}
	return a.runCommand(ctx, cmd, rest)
}

// runCommand parses a command's flags, checks the global ones and runs it within --timeout.
func (a *app) runCommand(ctx context.Context, cmd *command, args []string) error {
	var o options
	fs := newFlagSet("skiplock " + cmd.name)
	if cmd.flags != nil {
		cmd.flags(fs, &o)
	}
	// The global flags are accepted after the command too; their current values (from
	// before the command) are the defaults, so nothing given earlier is lost.
	a.globalFlags(fs, a.dbURL, a.schema, a.timeout)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			a.printCommandUsage(a.stdout, cmd)
			return errHelpShown
		}
		return usagef(cmd.name, "%s: %v", cmd.name, err)
	}
	o.args = fs.Args()
	if len(o.args) > cmd.maxArgs {
		return usagef(cmd.name, "%s: unexpected argument %q", cmd.name, o.args[cmd.maxArgs])
	}
	if a.timeout <= 0 {
		return usagef(cmd.name, "--timeout must be positive, got %s", a.timeout)
	}
	if cmd.check != nil {
		if err := cmd.check(&o); err != nil {
			return err
		}
	}
	if !cmd.serve {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.timeout)
		defer cancel()
	}
	err := cmd.run(ctx, a, &o)
	var ue *usageError
	var re *reachError
	if err != nil && ctx.Err() != nil && !errors.As(err, &ue) && !errors.As(err, &re) {
		// The error itself is then mostly "context deadline exceeded": say what happened.
		what := "interrupted"
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			what = fmt.Sprintf("gave up after --timeout %s: the database did not answer in time; raise --timeout or look for a lock held elsewhere", a.timeout)
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return fmt.Errorf("%s: %s", cmd.name, what)
		}
		return fmt.Errorf("%s: %s: %s", cmd.name, what, strings.TrimPrefix(err.Error(), "skiplock: "))
	}
	return err
}
