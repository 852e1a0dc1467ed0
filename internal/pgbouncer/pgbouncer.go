// Package pgbouncer starts a throwaway PgBouncer in front of a test database, so that tests
// can run skiplock through a transaction-pooling connection pooler the way production
// setups do.
//
// [Start] finds the pgbouncer binary (PATH, then /usr/sbin/pgbouncer); when it is missing
// and the process runs as root, it installs it once with apt-get. Otherwise the test fails
// with the command to run: a test that needs PgBouncer never skips.
//
// PgBouncer refuses to run as root, so when the tests run as root it runs as the user
// "postgres" (or "nobody"), with its configuration in a directory of its own under
// [os.TempDir].
package pgbouncer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Limits of Start.
const (
	// installTimeout bounds apt-get when pgbouncer is missing.
	installTimeout = 5 * time.Minute
	// readyTimeout bounds how long a started pgbouncer may take to accept a query.
	readyTimeout = 15 * time.Second
	// startAttempts is how many free ports Start tries when another process takes one first.
	startAttempts = 3
	// stopTimeout bounds the wait for pgbouncer to exit after SIGTERM before it is killed.
	stopTimeout = 10 * time.Second
)

// InstallHint is the message a test fails with when pgbouncer is missing and cannot be
// installed.
const InstallHint = "install pgbouncer: apt-get install -y pgbouncer"

// debianPath is where Debian and Ubuntu install pgbouncer (not on a non-root PATH).
const debianPath = "/usr/sbin/pgbouncer"

// Options configures [Start]. The zero value is a valid configuration.
type Options struct {
	// PoolMode is pgbouncer's pool_mode: "transaction", "session" or "statement".
	// Defaults to "transaction".
	PoolMode string
	// PoolSize is the number of server connections per user and database
	// (default_pool_size). Defaults to 20.
	PoolSize int
	// Settings are extra lines for the [pgbouncer] section, such as
	// {"max_prepared_statements": "100"}; they override Start's own. Nil means none.
	Settings map[string]string
}

// Bouncer is a running pgbouncer, stopped when the test that started it ends.
type Bouncer struct {
	// Port is the TCP port pgbouncer listens on at 127.0.0.1.
	Port int
	// Dir holds pgbouncer.ini and userlist.txt.
	Dir string
	// Version is what `pgbouncer --version` printed first, e.g. "PgBouncer 1.18.0".
	Version string

	database, user string
	cmd            *exec.Cmd
	output         *syncBuffer
	exited         chan struct{}
}

// URL returns a connection string to the test database through pgbouncer, with the extra
// query parameters in params (for example "default_query_exec_mode=cache_describe"), which may be
// empty.
func (b *Bouncer) URL(params string) string {
	u := url.URL{
		Scheme: "postgres",
		User:   url.User(b.user),
		Host:   net.JoinHostPort("127.0.0.1", strconv.Itoa(b.Port)),
		Path:   "/" + b.database,
	}
	q := "sslmode=disable&connect_timeout=5"
	if params != "" {
		q += "&" + params
	}
	u.RawQuery = q
	return u.String()
}

// Log returns what pgbouncer has logged so far (it logs to stderr), for failure messages.
func (b *Bouncer) Log() string { return b.output.String() }

// Start starts a pgbouncer in front of the database of upstreamURL (a connection string pgx
// understands) and stops it when tb ends. Clients connect as upstreamURL's user to
// upstreamURL's database name on 127.0.0.1:[Bouncer.Port] without a password (auth_type
// trust); pgbouncer connects to the server with upstreamURL's host, port, user and password,
// without TLS. It fails tb when pgbouncer is missing and cannot be installed, or does not
// start. Starting one takes a few tens of milliseconds.
func Start(tb testing.TB, upstreamURL string, opts Options) *Bouncer {
	tb.Helper()
	bin, err := findOrInstall()
	if err != nil {
		tb.Fatal(err.Error())
	}
	up, err := pgconn.ParseConfig(upstreamURL)
	if err != nil {
		tb.Fatalf("pgbouncer: cannot parse the upstream connection string: %v", err)
	}
	if opts.PoolMode == "" {
		opts.PoolMode = "transaction"
	}
	if opts.PoolSize <= 0 {
		opts.PoolSize = 20
	}
	runAs, err := unprivilegedUser()
	if err != nil {
		tb.Fatal(err.Error())
	}
	dir, err := os.MkdirTemp("", "pgbouncer-")
	if err != nil {
		tb.Fatalf("pgbouncer: cannot create its directory: %v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := chownTo(dir, runAs); err != nil {
		tb.Fatal(err.Error())
	}
	b := &Bouncer{Dir: dir, database: up.Database, user: up.User, Version: version(bin)}

	var lastErr error
	for range startAttempts {
		port, err := freePort()
		if err != nil {
			tb.Fatal(err.Error())
		}
		b.Port = port
		if err := b.writeConfig(up, opts, runAs); err != nil {
			tb.Fatal(err.Error())
		}
		lastErr = b.start(bin, runAs)
		if lastErr == nil {
			tb.Cleanup(b.stop)
			return b
		}
		if !strings.Contains(lastErr.Error(), "in use") {
			break // not a port race: another try would fail the same way
		}
	}
	tb.Fatalf("pgbouncer: %v", lastErr)
	return nil
}

// writeConfig writes pgbouncer.ini and userlist.txt into b.Dir.
func (b *Bouncer) writeConfig(up *pgconn.Config, opts Options, runAs *osUser) error {
	// The database entry forces upstream's user and password: clients authenticate to
	// pgbouncer by trust, pgbouncer to the server with upstream's credentials.
	target := fmt.Sprintf("host=%s port=%d dbname=%s user=%s", iniValue(up.Host), up.Port, iniValue(up.Database), iniValue(up.User))
	if up.Password != "" {
		target += " password=" + iniValue(up.Password)
	}
	settings := map[string]string{
		"listen_addr":               "127.0.0.1",
		"listen_port":               strconv.Itoa(b.Port),
		"unix_socket_dir":           "",
		"auth_type":                 "trust",
		"auth_file":                 filepath.Join(b.Dir, "userlist.txt"),
		"pool_mode":                 opts.PoolMode,
		"default_pool_size":         strconv.Itoa(opts.PoolSize),
		"max_client_conn":           "1000",
		"pidfile":                   filepath.Join(b.Dir, "pgbouncer.pid"),
		"admin_users":               up.User,
		"server_tls_sslmode":        "disable",
		"server_login_retry":        "1",
		"log_connections":           "0",
		"log_disconnections":        "0",
		"ignore_startup_parameters": "extra_float_digits",
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	var ini bytes.Buffer
	ini.WriteString("[databases]\n")
	fmt.Fprintf(&ini, "%s = %s\n\n[pgbouncer]\n", iniKey(up.Database), target)
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		fmt.Fprintf(&ini, "%s = %s\n", k, settings[k])
	}
	userlist := fmt.Sprintf("%q %q\n", up.User, "")
	for name, body := range map[string][]byte{"pgbouncer.ini": ini.Bytes(), "userlist.txt": []byte(userlist)} {
		p := filepath.Join(b.Dir, name)
		if err := os.WriteFile(p, body, 0o600); err != nil {
			return fmt.Errorf("pgbouncer: cannot write %s: %w", p, err)
		}
		if err := chownTo(p, runAs); err != nil {
			return err
		}
	}
	return nil
}

// start runs pgbouncer in the foreground and waits until it answers a query.
func (b *Bouncer) start(bin string, runAs *osUser) error {
	b.output = &syncBuffer{}
	cmd := exec.Command(bin, filepath.Join(b.Dir, "pgbouncer.ini"))
	cmd.Dir = b.Dir
	cmd.Stdout = b.output
	cmd.Stderr = b.output
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	setUser(cmd, runAs)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cannot start %s: %w", bin, err)
	}
	b.cmd = cmd
	b.exited = make(chan struct{})
	go func() { _ = cmd.Wait(); close(b.exited) }()

	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		err := ping(ctx, b.URL(""))
		if err == nil {
			return nil
		}
		select {
		case <-b.exited:
			return fmt.Errorf("%s exited: %v\nits log:\n%s", bin, cmd.ProcessState, lastLines(b.output.String(), 20))
		case <-ctx.Done():
			b.stop()
			return fmt.Errorf("%s did not answer on port %d within %v: %v\nits log:\n%s", bin, b.Port, readyTimeout, err, lastLines(b.output.String(), 20))
		case <-poll.C:
		}
	}
}

// stop ends pgbouncer with SIGTERM (immediate shutdown) and waits for it to exit.
func (b *Bouncer) stop() {
	select {
	case <-b.exited:
		return
	default:
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(stopTimeout):
		_ = b.cmd.Process.Kill()
		<-b.exited
	}
}

// ping connects to url and runs a query.
func ping(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var one int
	return conn.QueryRow(ctx, "select 1", pgx.QueryExecModeSimpleProtocol).Scan(&one)
}

// VersionAtLeast reports whether the pgbouncer that [Start] would run is version
// major.minor or later. It fails tb like Start when pgbouncer is missing.
func VersionAtLeast(tb testing.TB, major, minor int) bool {
	tb.Helper()
	bin, err := findOrInstall()
	if err != nil {
		tb.Fatal(err.Error())
	}
	line := version(bin) // "PgBouncer 1.18.0"
	_, num, _ := strings.Cut(line, " ")
	parts := strings.SplitN(num, ".", 3)
	if len(parts) < 2 {
		tb.Fatalf("pgbouncer: cannot read the version out of %q", line)
	}
	maj, err1 := strconv.Atoi(parts[0])
	mnr, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		tb.Fatalf("pgbouncer: cannot read the version out of %q", line)
	}
	return maj > major || maj == major && mnr >= minor
}

// installed makes findOrInstall install at most once per process.
var installed struct {
	once sync.Once
	err  error
}

// findOrInstall returns the path of pgbouncer, installing it with apt-get when it is
// missing and the process is root.
func findOrInstall() (string, error) {
	if p, err := find(); err == nil {
		return p, nil
	}
	if os.Geteuid() != 0 {
		return "", errors.New("pgbouncer not found on PATH or at " + debianPath + ": " + InstallHint)
	}
	installed.once.Do(func() { installed.err = aptInstall() })
	if installed.err != nil {
		return "", fmt.Errorf("pgbouncer not found and apt-get could not install it (%v): %s", installed.err, InstallHint)
	}
	p, err := find()
	if err != nil {
		return "", errors.New("pgbouncer still not found after apt-get install: " + InstallHint)
	}
	return p, nil
}

func find() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if fi, err := os.Stat(debianPath); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
		return debianPath, nil
	}
	return "", errors.New("not found")
}

// aptInstall runs apt-get install -y pgbouncer, and apt-get update first if the package
// is not known yet.
func aptInstall() error {
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	apt := func(args ...string) error {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("apt-get %s: %w: %s", strings.Join(args, " "), err, lastLines(string(out), 5))
		}
		return nil
	}
	if err := apt("install", "-y", "-qq", "pgbouncer"); err == nil {
		return nil
	}
	if err := apt("update", "-qq"); err != nil {
		return err
	}
	return apt("install", "-y", "-qq", "pgbouncer")
}

// version returns the first line of `pgbouncer --version`, or "" if it cannot run.
func version(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return ""
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(first)
}

// freePort asks the kernel for a free TCP port on 127.0.0.1; Start retries if another
// process takes it before pgbouncer binds it.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgbouncer: cannot find a free port on 127.0.0.1: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// iniValue quotes a value of a [databases] connection string when it needs it.
func iniValue(v string) string {
	if v != "" && !strings.ContainsAny(v, " '\\=") {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// iniKey quotes a database name used as a key of the [databases] section.
func iniKey(name string) string {
	if name != "" && strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == "" {
		return name
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// syncBuffer collects pgbouncer's output; the process writes while tests read.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p under the lock; it implements io.Writer.
func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// String returns what was written so far.
func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}
