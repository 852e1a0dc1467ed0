package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Limits of the cluster tools.
const (
	// readyTimeout bounds how long a start or restart may take before the cluster accepts
	// connections.
	readyTimeout = 30 * time.Second
	// stopTimeout bounds how long pg_ctl waits for a fast shutdown.
	stopTimeout = 60 * time.Second
	// startAttempts is how many free ports StartCluster tries when it picks the port itself
	// and another process takes it first.
	startAttempts = 3
	// maxSocketPath is the longest unix socket path Linux accepts (sun_path minus its NUL).
	maxSocketPath = 107
	// defaultMaxConnections leaves room for many parallel tests, each with its own pool.
	defaultMaxConnections = 200
)

// Layout of a cluster directory.
const (
	dataSubdir   = "data"
	logFileName  = "postgres.log"
	confFileName = "pgtest.conf" // included from postgresql.conf, rewritten on every start
)

// Cluster is a throwaway PostgreSQL cluster owned by its caller, made by [StartCluster]. It
// listens on 127.0.0.1 only, trusts the user "postgres" without a password, and keeps its
// data, log and unix socket in [Cluster.Dir].
//
// Methods must not be called concurrently with [Cluster.Restart] or [Cluster.Stop]; the fields
// are read-only.
type Cluster struct {
	// Dir holds the whole cluster: the data directory, the server log and the unix socket.
	Dir string
	// DataDir is the data directory (PGDATA), Dir/data.
	DataDir string
	// LogFile is the server log, Dir/postgres.log. Its tail is quoted in start errors.
	LogFile string
	// Port is the TCP port the server listens on at 127.0.0.1.
	Port int
	// BinDir holds the initdb, pg_ctl and postgres that run the cluster, all of one version.
	BinDir string

	runAs *osUser  // the unprivileged user the server runs as; nil when not root
	env   []string // ClusterOptions.Env
}

// ClusterOptions configures [StartCluster]. The zero value is a valid configuration.
type ClusterOptions struct {
	// Port is the TCP port on 127.0.0.1. Zero picks a free port (retrying with another one
	// if a different process takes it first). Defaults to 0.
	Port int
	// Settings are extra postgresql.conf parameters, such as {"wal_level": "logical"}. They
	// override pgtest's own (listen_addresses, port, unix_socket_directories,
	// max_connections=200). Nil means none.
	Settings map[string]string
	// Env are extra environment variables ("NAME=value") for initdb, pg_ctl and so the
	// server, on every start and restart: [FakeClock.Env] runs the server under
	// libfaketime. Nil means none.
	Env []string
}

// settingName is what a postgresql.conf parameter name may look like (custom ones have a dot).
var settingName = regexp.MustCompile(`^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$`)

// StartCluster creates a PostgreSQL cluster in dir (made if missing) with initdb and starts it
// with pg_ctl, listening on 127.0.0.1:opts.Port with its unix socket in dir. It returns when
// the server accepts connections. If dir already holds a cluster made by StartCluster, initdb
// is skipped and that cluster is started again with opts.
//
// The binaries come from the directory of the pg_ctl that [FindBin] finds. When the process
// runs as root, initdb and the server run as the user "postgres" (or "nobody"), dir is chowned
// to that user, and every parent of dir must let that user through (mode 0755 does), or
// StartCluster fails saying which directory blocks it.
//
// The caller owns the cluster: it keeps running after the caller's process exits until
// [Cluster.Stop] is called. It costs an initdb (about a second) and a server with
// max_connections=200.
func StartCluster(ctx context.Context, dir string, opts ClusterOptions) (*Cluster, error) {
	if opts.Port < 0 || opts.Port > 65535 {
		return nil, fmt.Errorf("pgtest: port %d is invalid: use 1-65535, or 0 to pick a free port", opts.Port)
	}
	for k := range opts.Settings {
		if !settingName.MatchString(k) {
			return nil, fmt.Errorf("pgtest: setting name %q is invalid: use a postgresql.conf parameter name such as wal_level", k)
		}
	}
	binDir, err := serverBinDir()
	if err != nil {
		return nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("pgtest: cluster directory: %w", err)
	}
	if n := len(dir) + len("/.s.PGSQL.65535"); n > maxSocketPath {
		return nil, fmt.Errorf("pgtest: cluster directory %s is too long for a unix socket path (%d > %d bytes): use a shorter directory, e.g. under /tmp", dir, n, maxSocketPath)
	}
	runAs, err := unprivilegedUser()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("pgtest: cannot create cluster directory: %w", err)
	}
	if runAs != nil {
		if err := checkReachable(dir, runAs); err != nil {
			return nil, err
		}
		if err := os.Chown(dir, runAs.uid, runAs.gid); err != nil {
			return nil, fmt.Errorf("pgtest: cannot hand %s to user %s, who runs the server because postgres refuses root: %w", dir, runAs.name, err)
		}
	}
	c := &Cluster{
		Dir:     dir,
		DataDir: filepath.Join(dir, dataSubdir),
		LogFile: filepath.Join(dir, logFileName),
		BinDir:  binDir,
		runAs:   runAs,
		env:     opts.Env,
	}

	switch _, err := os.Stat(filepath.Join(c.DataDir, "PG_VERSION")); {
	case errors.Is(err, fs.ErrNotExist):
		if err := c.initdb(ctx); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, fmt.Errorf("pgtest: cannot inspect %s: %w", c.DataDir, err)
	}

	for attempt := 1; ; attempt++ {
		c.Port = opts.Port
		if c.Port == 0 {
			if c.Port, err = freePort(); err != nil {
				return nil, err
			}
		}
		if err := c.writeConf(opts.Settings); err != nil {
			return nil, err
		}
		logStart := c.logSize()
		err := c.pgctl(ctx, "start", "-w", "-t", seconds(readyTimeout), "-l", c.LogFile)
		if err == nil {
			break
		}
		log := c.logSince(logStart)
		if opts.Port == 0 && attempt < startAttempts && strings.Contains(log, "could not bind") {
			continue // another process took the free port between our check and the bind
		}
		return nil, fmt.Errorf("pgtest: cannot start the cluster in %s: %w\nserver log:\n%s", dir, err, lastLines(log, 20))
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// URL returns the connection string of the cluster's "postgres" database as user postgres,
// e.g. postgres://postgres@127.0.0.1:5433/postgres?sslmode=disable.
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.Port)
}

// Restart restarts the server with pg_ctl restart -m fast (sessions are disconnected, open
// transactions roll back, committed data stays) and returns once it accepts connections again.
// It also starts a server that was stopped or killed.
func (c *Cluster) Restart(ctx context.Context) error {
	logStart := c.logSize()
	// -l again: without it the new postmaster would write to pg_ctl's output, which we read.
	if err := c.pgctl(ctx, "restart", "-m", "fast", "-w", "-t", seconds(readyTimeout), "-l", c.LogFile); err != nil {
		return fmt.Errorf("pgtest: cannot restart the cluster in %s: %w\nserver log:\n%s", c.Dir, err, lastLines(c.logSince(logStart), 20))
	}
	return c.waitReady(ctx)
}

// Stop stops the server with pg_ctl stop -m fast and waits until it has exited. Stopping a
// cluster that is not running does nothing, except that the postmaster.pid a killed
// postmaster left behind is removed (so that nothing signals that pid later). The directory
// stays; the caller removes it if it wants to.
func (c *Cluster) Stop(ctx context.Context) error {
	pid := c.PID()
	if pid == 0 {
		return nil
	}
	if !alive(pid) {
		if err := os.Remove(filepath.Join(c.DataDir, "postmaster.pid")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("pgtest: cannot remove the stale postmaster.pid of the killed cluster in %s: %w", c.Dir, err)
		}
		return nil
	}
	if err := c.pgctl(ctx, "stop", "-m", "fast", "-w", "-t", seconds(stopTimeout)); err != nil {
		return fmt.Errorf("pgtest: cannot stop the cluster in %s: %w (if the postmaster was killed, remove %s or call Restart)", c.Dir, err, filepath.Join(c.DataDir, "postmaster.pid"))
	}
	return nil
}

// PID returns the process id of the postmaster as recorded in postmaster.pid, or 0 when the
// file is missing (the server is stopped). After the postmaster is killed the file, and so
// PID, still names the dead process until the next start.
func (c *Cluster) PID() int {
	b, err := os.ReadFile(filepath.Join(c.DataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0
	}
	return pid
}

// initdb creates the data directory: trust auth for user postgres, UTF8 and the C locale (so
// that sorting and messages do not depend on the machine), no fsync of the new files (they
// only matter if the OS crashes during the test run).
func (c *Cluster) initdb(ctx context.Context) error {
	err := c.run(ctx, "initdb", "-D", c.DataDir, "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	if err != nil {
		return fmt.Errorf("pgtest: initdb failed in %s: %w", c.Dir, err)
	}
	conf, err := os.OpenFile(filepath.Join(c.DataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgtest: cannot extend postgresql.conf: %w", err)
	}
	_, err = fmt.Fprintf(conf, "\n# Added by pgtest.StartCluster.\ninclude_if_exists = '%s'\n", confFileName)
	if cerr := conf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pgtest: cannot extend postgresql.conf: %w", err)
	}
	return nil
}

// writeConf writes the settings of this start into the file postgresql.conf includes. Later
// lines win, so opts come after pgtest's defaults.
func (c *Cluster) writeConf(settings map[string]string) error {
	var b bytes.Buffer
	b.WriteString("# Written by pgtest.StartCluster on every start.\n")
	fmt.Fprintf(&b, "listen_addresses = '127.0.0.1'\n")
	fmt.Fprintf(&b, "port = %d\n", c.Port)
	fmt.Fprintf(&b, "unix_socket_directories = %s\n", confQuote(c.Dir))
	fmt.Fprintf(&b, "max_connections = %d\n", defaultMaxConnections)
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, confQuote(settings[k]))
	}
	path := filepath.Join(c.DataDir, confFileName)
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		return fmt.Errorf("pgtest: cannot write %s: %w", path, err)
	}
	if c.runAs != nil {
		if err := os.Chown(path, c.runAs.uid, c.runAs.gid); err != nil {
			return fmt.Errorf("pgtest: cannot hand %s to user %s: %w", path, c.runAs.name, err)
		}
	}
	return nil
}

// confQuote quotes a postgresql.conf value; any value may be quoted, numbers included.
func confQuote(v string) string {
	v = strings.ReplaceAll(v, `\`, `\\`)
	v = strings.ReplaceAll(v, `'`, `''`)
	return "'" + v + "'"
}

// waitReady connects with pgx until the server answers, for at most readyTimeout.
func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for {
		err := ping(ctx, c.URL())
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtest: the cluster in %s did not accept connections on port %d within %v: %w; see %s", c.Dir, c.Port, readyTimeout, err, c.LogFile)
		case <-poll.C:
		}
	}
}

// pgctl runs pg_ctl on the data directory, silently (-s): only errors are printed.
func (c *Cluster) pgctl(ctx context.Context, action string, args ...string) error {
	return c.run(ctx, "pg_ctl", append([]string{action, "-s", "-D", c.DataDir}, args...)...)
}

// run runs one of the server binaries in c.Dir, as the unprivileged user when we are root.
func (c *Cluster) run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, name), args...)
	cmd.Dir = c.Dir // the unprivileged user may not be able to enter our working directory
	cmd.Env = append(serverEnv(), c.env...)
	cmd.WaitDelay = 5 * time.Second
	if err := setUser(cmd, c.runAs, false); err != nil {
		return err
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// serverEnv is our environment without PG* variables (PGDATA, PGPORT, ... would redirect the
// tools) and with English messages.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_ALL=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

func (c *Cluster) logSize() int64 {
	fi, err := os.Stat(c.LogFile)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logSince returns what the server logged after offset from.
func (c *Cluster) logSince(from int64) string {
	b, err := os.ReadFile(c.LogFile)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", c.LogFile, err)
	}
	if from > int64(len(b)) {
		from = 0
	}
	return string(b[from:])
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func seconds(d time.Duration) string { return strconv.Itoa(int(d / time.Second)) }

// freePort asks the kernel for a free TCP port on 127.0.0.1. Another process may take it
// before the server binds it; StartCluster retries then.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: cannot find a free port on 127.0.0.1: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
