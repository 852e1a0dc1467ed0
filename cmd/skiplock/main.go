package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
)

// Exit statuses.
const (
	exitOK    = 0 // the command did its work
	exitFail  = 1 // the operation failed: database error, not found, timeout
	exitUsage = 2 // bad or missing flags, unknown command
)

const (
	// defaultTimeout bounds a whole command unless --timeout says otherwise.
	defaultTimeout = 30 * time.Second
	// connectTimeout bounds opening the connection when the URL sets no connect_timeout, so
	// an unreachable server fails fast even with a long --timeout.
	connectTimeout = 5 * time.Second
	// maxConns is the pool size: every command runs its statements one after another.
	maxConns = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// commandGroups names the commands that take a subcommand, with the subcommands' names.
var commandGroups = map[string]string{
	"migrate":  "up, down, status or sql",
	"workflow": "show, cancel or retry",
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

// app is one invocation of the command: its outputs and its global flags.
type app struct {
	stdout, stderr io.Writer
	getenv         func(string) string

	dbURL   string
	schema  string
	timeout time.Duration
}

// usageError is a mistake on the command line: exit status 2.
type usageError struct {
	cmd string // the command whose usage to point to; empty for the top level
	msg string
}

func (e *usageError) Error() string { return e.msg }

func usagef(cmd, format string, args ...any) error {
	return &usageError{cmd: cmd, msg: fmt.Sprintf(format, args...)}
}

// errHelpShown says the usage was printed on request: exit status 0.
var errHelpShown = errors.New("help shown")

// errUsageShown says the usage was printed to stderr as the whole answer: exit status 2.
var errUsageShown = errors.New("usage shown")

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

// newFlagSet returns a flag set that reports errors to its caller and prints nothing itself.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// globalFlags defines the global flags on fs, with the given defaults.
func (a *app) globalFlags(fs *flag.FlagSet, dbURL, schema string, timeout time.Duration) {
	fs.StringVar(&a.dbURL, "database-url", dbURL, "the PostgreSQL connection string; defaults to $DATABASE_URL")
	fs.StringVar(&a.schema, "schema", schema, `the schema holding skiplock's tables; defaults to "skiplock"`)
	fs.DurationVar(&a.timeout, "timeout", timeout, "the time limit of the whole command; defaults to 30s")
}

// connect opens a pool on --database-url and a client on --schema, and checks that the
// database answers. The caller closes the returned pool.
func (a *app) connect(ctx context.Context, cmdName string) (*skiplock.Client, *pgxpool.Pool, error) {
	if a.dbURL == "" {
		return nil, nil, usagef(cmdName, "no database given: set --database-url or DATABASE_URL (for example postgres://user:password@localhost:5432/app)")
	}
	cfg, err := pgxpool.ParseConfig(a.dbURL)
	if err != nil {
		// pgx leaves the password out of its parse errors.
		return nil, nil, usagef(cmdName, "the database URL from --database-url / DATABASE_URL is invalid: %v", err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg) // connects lazily
	if err != nil {
		return nil, nil, fmt.Errorf("cannot set up a connection pool: %w", err)
	}
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: a.schema})
	if err != nil {
		pool.Close()
		if errors.Is(err, skiplock.ErrInvalidSchema) {
			return nil, nil, usagef(cmdName, "--schema: %v", strings.TrimPrefix(err.Error(), "skiplock: "))
		}
		return nil, nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.ConnConfig.ConnectTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		limit := fmt.Sprintf("the connect timeout of %s", cfg.ConnConfig.ConnectTimeout)
		if ctx.Err() != nil {
			limit = fmt.Sprintf("--timeout %s", a.timeout)
		}
		return nil, nil, newReachError(cfg, limit, err)
	}
	return client, pool, nil
}

// reachError is a failed first connection. Its message names the server but never the
// password, and says what to check.
type reachError struct {
	msg string
	err error
}

func (e *reachError) Error() string { return e.msg }
func (e *reachError) Unwrap() error { return e.err }

// newReachError explains err, the failure of the first connection to the server of cfg;
// limit names the time limit that applied.
func newReachError(cfg *pgxpool.Config, limit string, err error) error {
	where := cfg.ConnConfig.Host
	if !strings.HasPrefix(where, "/") {
		where = net.JoinHostPort(where, fmt.Sprint(cfg.ConnConfig.Port))
	}
	const hint = "(check --database-url / DATABASE_URL)"
	var msg string
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr):
		// The server answered and refused: bad password, unknown database or user.
		msg = fmt.Sprintf("the database at %s refused the connection as user %q to database %q: %v %s",
			where, cfg.ConnConfig.User, cfg.ConnConfig.Database, pgErr, hint)
	case errors.Is(err, context.DeadlineExceeded):
		msg = fmt.Sprintf("cannot reach the database at %s: no answer within %s %s", where, limit, hint)
	case errors.Is(err, context.Canceled):
		msg = fmt.Sprintf("connecting to the database at %s: interrupted", where)
	default:
		msg = fmt.Sprintf("cannot reach the database at %s: %s %s", where, oneLine(err), hint)
	}
	return &reachError{msg: msg, err: err}
}

// oneLine shortens a connection error to one line: the network error when there is one
// (pgx reports each attempt, such as TLS then plain text, on lines of their own).
func oneLine(err error) string {
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return opErr.Error()
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return dnsErr.Error()
	}
	var lines []string
	for l := range strings.Lines(err.Error()) {
		if l = strings.TrimSpace(l); l != "" && !slices.Contains(lines, l) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, " ")
}

// notMigratedHint turns the library's "not migrated" error into the command to run.
func (a *app) notMigratedHint(err error) error {
	if !errors.Is(err, skiplock.ErrNotMigrated) {
		return err
	}
	return fmt.Errorf("schema %q is not migrated: run '%s migrate up' first", a.schema, a.selfWithSchema())
}

// selfWithSchema is how to invoke this tool on the same schema, for hints.
func (a *app) selfWithSchema() string {
	if a.schema == skiplock.DefaultSchema {
		return "skiplock"
	}
	return "skiplock --schema " + a.schema
}

// cmdVersion prints the skiplock module's version from the build info, and the Go version.
func cmdVersion(_ context.Context, a *app, _ *options) error {
	bi, _ := debug.ReadBuildInfo() // nil without build info: buildVersion says (devel)
	_, err := fmt.Fprintf(a.stdout, "skiplock %s (%s)\n", buildVersion(bi), runtime.Version())
	return err
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
