package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/migrations"
)

// migrationVersions returns the versions of the embedded migrations, ascending, so that
// tests follow the migrations this build holds.
func migrationVersions(t *testing.T) []int {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.up.sql")
	require.NoError(t, err)
	var vs []int
	for _, n := range names {
		v, err := strconv.Atoi(strings.SplitN(n, "_", 2)[0])
		require.NoError(t, err, n)
		vs = append(vs, v)
	}
	slices.Sort(vs)
	return vs
}

// unreachableURL names a port nothing listens on (port 1 needs root to bind).
const unreachableURL = "postgres://postgres@127.0.0.1:1/x?sslmode=disable"

// result is what one run of the command gave.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", r.code, r.stdout, r.stderr)
}

// cli runs the command in-process with env as its whole environment.
func cli(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runEnv(context.Background(), args, func(k string) string { return env[k] }, &stdout, &stderr)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// fixture is a schema of the test's own on the test database, and a pool to inspect it.
type fixture struct {
	t      *testing.T
	url    string
	schema string
	pool   *pgxpool.Pool
}

// newFixture returns a fresh, empty schema; migrated says whether to run `migrate up` on it.
func newFixture(t *testing.T, migrated bool) *fixture {
	t.Helper()
	f := &fixture{t: t, url: pgtest.URL(t), schema: pgtest.Schema(t), pool: pgtest.Pool(t)}
	if migrated {
		r := f.run("migrate", "up")
		require.Equal(t, 0, r.code, r)
	}
	return f
}

// run runs the command against the fixture's database and schema, given as global flags.
func (f *fixture) run(args ...string) result {
	f.t.Helper()
	return cli(f.t, nil, append([]string{"--database-url", f.url, "--schema", f.schema}, args...)...)
}

// job is a row to insert directly, in any state.
type job struct {
	queue, kind, status string
	attempts            int
	lastError           string
	errorsJSON          string        // the error history, as JSON; empty for none
	lockedBy            string        // for running jobs
	runAgo              time.Duration // run_at is this long before now(); negative: in the future
	uniqueKey           string
}

// insert writes j into the fixture's jobs table and returns its id.
func (f *fixture) insert(j job) int64 {
	f.t.Helper()
	if j.queue == "" {
		j.queue = "default"
	}
	if j.kind == "" {
		j.kind = "email"
	}
	if j.status == "" {
		j.status = "queued"
	}
	var id int64
	err := f.pool.QueryRow(context.Background(), `
		INSERT INTO `+pgx.Identifier{f.schema, "jobs"}.Sanitize()+`
			(queue, kind, status, attempts, max_attempts, last_error, errors, locked_by, locked_at, run_at, finished_at, unique_key)
		VALUES ($1, $2, $3, $4, 20, nullif($5, ''), nullif($6, '')::jsonb, nullif($7, ''),
			CASE WHEN $3 = 'running' THEN now() END,
			now() - make_interval(secs => $8),
			CASE WHEN $3 IN ('succeeded', 'failed', 'dead', 'cancelled') THEN now() END,
			nullif($9, ''))
		RETURNING id`,
		j.queue, j.kind, j.status, j.attempts, j.lastError, j.errorsJSON, j.lockedBy, j.runAgo.Seconds(), j.uniqueKey).Scan(&id)
	require.NoError(f.t, err)
	return id
}

// state returns a job's status and attempts as stored.
func (f *fixture) state(id int64) (string, int) {
	f.t.Helper()
	var status string
	var attempts int
	err := f.pool.QueryRow(context.Background(),
		`SELECT status, attempts FROM `+pgx.Identifier{f.schema, "jobs"}.Sanitize()+` WHERE id = $1`, id).Scan(&status, &attempts)
	require.NoError(f.t, err)
	return status, attempts
}

// tableExists reports whether the fixture's schema has the table.
func (f *fixture) tableExists(table string) bool {
	f.t.Helper()
	var ok bool
	err := f.pool.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`,
		pgx.Identifier{f.schema, table}.Sanitize()).Scan(&ok)
	require.NoError(f.t, err)
	return ok
}

// row returns the fields of the output line whose first field is first.
func row(t *testing.T, out, first string) []string {
	t.Helper()
	for line := range strings.Lines(out) {
		if fs := strings.Fields(line); len(fs) > 0 && fs[0] == first {
			return fs
		}
	}
	t.Fatalf("no line starting with %q in:\n%s", first, out)
	return nil
}

func id(n int64) string { return strconv.FormatInt(n, 10) }

func TestHelp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want []string // in stdout
	}{
		{"help command", []string{"help"}, []string{"Usage:", "migrate up", "migrate down", "migrate status", "stats", "dead", "requeue", "cancel", "version", "--database-url", "--schema", "--timeout", "Exit status"}},
		{"-h", []string{"-h"}, []string{"Usage:", "Commands:"}},
		{"--help", []string{"--help"}, []string{"Usage:", "Commands:"}},
		{"help of a command", []string{"help", "requeue"}, []string{"Usage: skiplock requeue", "--id ids", "--kind K", "--queue Q"}},
		{"-h after a command", []string{"dead", "-h"}, []string{"Usage: skiplock dead", "--status S", "--limit N", "--json"}},
		{"help of migrate", []string{"help", "migrate"}, []string{"Usage: skiplock migrate <subcommand>", "migrate up", "migrate down", "migrate status"}},
		{"migrate -h", []string{"migrate", "-h"}, []string{"Usage: skiplock migrate <subcommand>"}},
		{"help of a subcommand", []string{"help", "migrate", "down"}, []string{"Usage: skiplock migrate down", "--yes", "--target N"}},
		{"-h after a subcommand", []string{"migrate", "up", "-h"}, []string{"Usage: skiplock migrate up"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := cli(t, nil, tt.args...)
			require.Equal(t, 0, r.code, r)
			for _, w := range tt.want {
				assert.Contains(t, r.stdout, w)
			}
			assert.Empty(t, r.stderr)
		})
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := cli(t, nil, "version")
	require.Equal(t, 0, r.code, r)
	assert.Regexp(t, `^skiplock \S+( [0-9a-f]+(\+dirty)?)? \(go[^)]+\)\n$`, r.stdout)
}

func TestNoCommand_PrintsUsageAndExits2(t *testing.T) {
	t.Parallel()
	r := cli(t, nil)
	require.Equal(t, 2, r.code, r)
	assert.Contains(t, r.stderr, "Usage:")
	assert.Contains(t, r.stderr, "Commands:")
	assert.Empty(t, r.stdout)
}

// TestUsageErrors checks that every mistake on the command line exits 2 with a message,
// before any connection: the database URL given points at a port nothing listens on, and
// reaching it would exit 1.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"unknown command", []string{"explode"}, `unknown command "explode"`},
		{"unknown global flag", []string{"--frobnicate", "stats"}, "flag provided but not defined: -frobnicate"},
		{"unknown command flag", []string{"stats", "--all"}, "stats: flag provided but not defined: -all"},
		{"bad bool value", []string{"stats", "--json=maybe"}, `invalid boolean value "maybe" for -json`},
		{"unexpected argument", []string{"stats", "now"}, `stats: unexpected argument "now"`},
		{"bad timeout", []string{"--timeout", "soon", "stats"}, `invalid value "soon" for flag -timeout`},
		{"zero timeout", []string{"--timeout", "0s", "stats"}, "--timeout must be positive"},
		{"migrate without subcommand", []string{"migrate"}, "migrate needs a subcommand: up, down, status or sql"},
		{"migrate unknown subcommand", []string{"migrate", "sideways"}, `migrate: unknown subcommand "sideways"`},
		{"migrate up negative target", []string{"migrate", "up", "--target", "-1"}, "--target must be 0 (latest) or a version"},
		{"migrate down to 0 without --yes", []string{"migrate", "down"}, "drops skiplock's tables and every job in them: pass --yes"},
		{"migrate down explicit 0 without --yes", []string{"migrate", "down", "--target", "0"}, "pass --yes"},
		{"migrate down negative target", []string{"migrate", "down", "--target", "-2", "--yes"}, "--target must be a version"},
		{"dead bad status", []string{"dead", "--status", "queued"}, `--status must be dead or failed`},
		{"dead zero limit", []string{"dead", "--limit", "0"}, "--limit must be at least 1"},
		{"dead bad limit", []string{"dead", "--limit", "many"}, `invalid value "many" for flag -limit`},
		{"requeue without filter", []string{"requeue"}, "requeue: give --id, --kind or --queue"},
		{"requeue bad id", []string{"requeue", "--id", "1,x"}, `"x" is not a job id`},
		{"requeue negative id", []string{"requeue", "--id", "-4"}, `"-4" is not a job id`},
		{"requeue empty id in list", []string{"requeue", "--id", "1,,2"}, `"" is not a job id`},
		{"cancel without id", []string{"cancel"}, "cancel: --id must be a job id"},
		{"cancel bad id", []string{"cancel", "--id", "seven"}, `invalid value "seven" for flag -id`},
		{"help of unknown command", []string{"help", "explode"}, `help: unknown command "explode"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := cli(t, nil, append([]string{"--database-url", unreachableURL}, tt.args...)...)
			require.Equal(t, 2, r.code, r)
			assert.Contains(t, r.stderr, tt.want)
			assert.Contains(t, r.stderr, "Run 'skiplock help")
			assert.Empty(t, r.stdout)
		})
	}
}

func TestDatabaseURL(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)

	t.Run("missing is a usage error", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{{"stats"}, {"migrate", "status"}, {"cancel", "--id", "1"}} {
			r := cli(t, nil, args...)
			require.Equal(t, 2, r.code, r)
			assert.Contains(t, r.stderr, "no database given: set --database-url or DATABASE_URL")
		}
	})
	t.Run("from DATABASE_URL", func(t *testing.T) {
		t.Parallel()
		schema := pgtest.Schema(t)
		r := cli(t, map[string]string{"DATABASE_URL": url}, "--schema", schema, "migrate", "status")
		require.Equal(t, 0, r.code, r)
		assert.Contains(t, r.stdout, schema)
	})
	t.Run("flag overrides DATABASE_URL", func(t *testing.T) {
		t.Parallel()
		schema := pgtest.Schema(t)
		r := cli(t, map[string]string{"DATABASE_URL": unreachableURL}, "--database-url", url, "--schema", schema, "migrate", "status")
		require.Equal(t, 0, r.code, r)
	})
	t.Run("invalid is a usage error without the password", func(t *testing.T) {
		t.Parallel()
		r := cli(t, nil, "--database-url", "postgres://admin:hunter2@[::1", "stats")
		require.Equal(t, 2, r.code, r)
		assert.Contains(t, r.stderr, "the database URL from --database-url / DATABASE_URL is invalid")
		assert.NotContains(t, r.stderr, "hunter2")
	})
	t.Run("an invalid keyword/value string prints nothing of itself", func(t *testing.T) {
		t.Parallel()
		// pgx's parse error quotes the string with its passwords masked on a best-effort
		// basis: spaces around "=" or an unterminated quote left them readable.
		for _, dsn := range []string{
			"host=127.0.0.1 password = hunter2 bogus",
			"host=127.0.0.1 password='hunter 2",
			"host=127.0.0.1 sslmode=bogus password = hunter2",
		} {
			r := cli(t, nil, "--database-url", dsn, "stats")
			require.Equal(t, 2, r.code, r)
			assert.Contains(t, r.stderr, "the database URL from --database-url / DATABASE_URL is invalid", dsn)
			assert.NotContains(t, r.stderr, "hunter", dsn)
			assert.NotContains(t, r.stderr, "127.0.0.1", dsn)
		}
	})
	t.Run("an unencoded @ in the password is a usage error without the password", func(t *testing.T) {
		t.Parallel()
		for _, cmd := range [][]string{{"stats"}, {"migrate", "status"}, {"ui", "--trust-loopback"}} {
			r := cli(t, nil, append([]string{"--database-url", "postgres://u:p@s3cret@127.0.0.1:5432/postgres"}, cmd...)...)
			require.Equal(t, 2, r.code, "%v: %v", cmd, r)
			assert.Contains(t, r.stderr, `write an "@" in the user name or password as %40`, cmd)
			assert.NotContains(t, r.stderr, "s3cret", cmd)
		}
	})
	t.Run("global flags after the command", func(t *testing.T) {
		t.Parallel()
		schema := pgtest.Schema(t)
		r := cli(t, nil, "migrate", "status", "--database-url", url, "--schema", schema)
		require.Equal(t, 0, r.code, r)
		assert.Contains(t, r.stdout, schema)
	})
	t.Run("invalid schema is a usage error", func(t *testing.T) {
		t.Parallel()
		r := cli(t, nil, "--database-url", url, "--schema", "Robert'); DROP TABLE jobs;--", "stats")
		require.Equal(t, 2, r.code, r)
		assert.Contains(t, r.stderr, "--schema: invalid schema name")
		for _, args := range [][]string{{"--database-url", url, "--schema", "pg_jobs", "migrate", "up"}, {"--schema", "pg_jobs", "migrate", "sql"}} {
			r = cli(t, nil, args...)
			require.Equal(t, 2, r.code, "a schema name Postgres keeps for itself: %v", r)
			assert.Contains(t, r.stderr, `not starting with "pg_"`)
		}
	})
}

func TestUnreachableDatabase(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"migrate", "up"}, {"migrate", "down", "--yes"}, {"migrate", "status"}, {"stats"}, {"dead"},
		{"requeue", "--kind", "email"}, {"cancel", "--id", "1"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			r := cli(t, nil, append([]string{"--database-url", "postgres://postgres:hunter2@127.0.0.1:1/x"}, args...)...)
			require.Equal(t, 1, r.code, r)
			assert.Contains(t, r.stderr, "skiplock: cannot reach the database at 127.0.0.1:1: ")
			assert.Contains(t, r.stderr, "connection refused")
			assert.Contains(t, r.stderr, "(check --database-url / DATABASE_URL)")
			assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %s", r.stderr)
			assert.NotContains(t, r.stderr, "hunter2")
			assert.Empty(t, r.stdout)
		})
	}
}

func TestDatabaseRefusesConnection(t *testing.T) {
	t.Parallel()
	// The test server, with a database that does not exist.
	dsn := pgtest.URL(t)
	if u, err := neturl.Parse(dsn); err == nil && u.Scheme != "" {
		u.Path = "/skiplock_no_such_database"
		dsn = u.String()
	} else {
		dsn += " dbname=skiplock_no_such_database" // the last value of a keyword wins
	}
	r := cli(t, nil, "--database-url", dsn, "stats")
	require.Equal(t, 1, r.code, r)
	assert.Contains(t, r.stderr, "refused the connection")
	assert.Contains(t, r.stderr, `database "skiplock_no_such_database"`)
	assert.Contains(t, r.stderr, "(check --database-url / DATABASE_URL)")
}

// silentServer accepts connections and never answers, like a server that hangs.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

func TestSilentDatabase_FailsWithinTheTimeout(t *testing.T) {
	t.Parallel()
	addr := silentServer(t)
	url := "postgres://postgres@" + addr + "/x"

	t.Run("--timeout", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		r := cli(t, nil, "--database-url", url, "--timeout", "300ms", "stats")
		elapsed := time.Since(start)
		require.Equal(t, 1, r.code, r)
		assert.Contains(t, r.stderr, "cannot reach the database at "+addr+": no answer within --timeout 300ms")
		assert.Less(t, elapsed, 3*time.Second)
	})
	t.Run("connect timeout", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		r := cli(t, nil, "--database-url", url, "--timeout", "1m", "migrate", "status")
		elapsed := time.Since(start)
		require.Equal(t, 1, r.code, r)
		assert.Contains(t, r.stderr, "no answer within the connect timeout of 5s")
		assert.Less(t, elapsed, 15*time.Second)
	})
}

func TestTimeout_BlockedStatementGivesUp(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	ctx := context.Background()
	tx, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // ends the test's lock
	_, err = tx.Exec(ctx, `LOCK TABLE `+pgx.Identifier{f.schema, "jobs"}.Sanitize()+` IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	// The limit leaves room for the connection itself: under a loaded test run, opening
	// it has taken over 500 ms, and then the command rightly says it could not connect.
	r := f.run("--timeout", "3s", "stats")
	require.Equal(t, 1, r.code, r)
	assert.Equal(t, "skiplock: stats: gave up after --timeout 3s: the database did not answer in time; "+
		"raise --timeout or look for a lock held elsewhere\n", r.stderr)
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)

	r := f.run("migrate", "status")
	require.Equal(t, 0, r.code, r)
	assert.Equal(t, []string{"current:", "0"}, row(t, r.stdout, "current:"))
	assert.Equal(t, []string{"applied:", "none"}, row(t, r.stdout, "applied:"))
	assert.Contains(t, r.stdout, "not migrated: run 'skiplock --schema "+f.schema+" migrate up'")

	r = f.run("migrate", "up", "--target", "99")
	require.Equal(t, 2, r.code, r)
	assert.Contains(t, r.stderr, "--target 99 is beyond the latest version this build knows")
	assert.False(t, f.tableExists("jobs"))

	vs := migrationVersions(t)
	latest := strconv.Itoa(vs[len(vs)-1])
	applied := make([]string, len(vs))
	for i, v := range vs {
		applied[i] = strconv.Itoa(v)
	}
	r = f.run("migrate", "up")
	require.Equal(t, 0, r.code, r)
	assert.Contains(t, r.stdout, fmt.Sprintf("migrated schema %q from version 0 to %s", f.schema, latest))
	assert.True(t, f.tableExists("jobs"))
	assert.True(t, f.tableExists("jobs_archive"))

	r = f.run("migrate", "status")
	require.Equal(t, 0, r.code, r)
	assert.Equal(t, []string{"schema:", f.schema}, row(t, r.stdout, "schema:"))
	assert.Equal(t, []string{"current:", latest}, row(t, r.stdout, "current:"))
	assert.Equal(t, []string{"latest:", latest}, row(t, r.stdout, "latest:"))
	assert.Equal(t, "applied: "+strings.Join(applied, ", "), strings.Join(row(t, r.stdout, "applied:"), " "))
	assert.Contains(t, r.stdout, "up to date")

	r = f.run("migrate", "up")
	require.Equal(t, 0, r.code, r)
	assert.Contains(t, r.stdout, "nothing to apply")

	// A gap below the current version (migration 12 missing, as when a release adds a
	// migration between ones a schema already has) is applied and said so.
	_, err := f.pool.Exec(context.Background(), `DROP TABLE `+pgx.Identifier{f.schema, "ui_audit"}.Sanitize()+`;
		DELETE FROM `+pgx.Identifier{f.schema, "schema_migrations"}.Sanitize()+` WHERE version = 12`)
	require.NoError(t, err)
	r = f.run("migrate", "up")
	require.Equal(t, 0, r.code, r)
	assert.Contains(t, r.stdout, "applied migration(s) [12]")
	assert.NotContains(t, r.stdout, "nothing to apply")
	assert.True(t, f.tableExists("ui_audit"))

	jobID := f.insert(job{status: "dead"})

	r = f.run("migrate", "down")
	require.Equal(t, 2, r.code, r)
	assert.Contains(t, r.stderr, "pass --yes")
	assert.True(t, f.tableExists("jobs"), "refused down must leave the tables")
	status, _ := f.state(jobID)
	assert.Equal(t, "dead", status)

	r = f.run("migrate", "down", "--target", latest)
	require.Equal(t, 0, r.code, r)
	assert.Contains(t, r.stdout, "nothing to revert")
	assert.True(t, f.tableExists("jobs"))

	r = f.run("migrate", "down", "--yes")
	require.Equal(t, 0, r.code, r)
	assert.Contains(t, r.stdout, fmt.Sprintf("reverted schema %q from version %s to 0", f.schema, latest))
	assert.False(t, f.tableExists("jobs"))
	assert.False(t, f.tableExists("jobs_archive"))

	r = f.run("migrate", "status")
	require.Equal(t, 0, r.code, r)
	assert.Equal(t, []string{"current:", "0"}, row(t, r.stdout, "current:"))

	r = f.run("migrate", "up", "--target", "1")
	require.Equal(t, 0, r.code, r)
	assert.Contains(t, r.stdout, "from version 0 to 1")
	assert.True(t, f.tableExists("jobs"))
}

func TestStats(t *testing.T) {
	t.Parallel()

	t.Run("not migrated", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, false)
		r := f.run("stats")
		require.Equal(t, 1, r.code, r)
		assert.Contains(t, r.stderr, fmt.Sprintf("schema %q is not migrated: run 'skiplock --schema %s migrate up' first", f.schema, f.schema))
	})

	t.Run("no jobs", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, true)
		r := f.run("stats")
		require.Equal(t, 0, r.code, r)
		assert.Equal(t, fmt.Sprintf("no jobs in schema %q (none in the jobs table, none finished in the last hour)\n", f.schema), r.stdout)

		r = f.run("stats", "--json")
		require.Equal(t, 0, r.code, r)
		assert.JSONEq(t, "[]", r.stdout)
	})

	t.Run("counts and oldest due", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, true)
		f.insert(job{status: "queued", runAgo: 90 * time.Second})
		f.insert(job{status: "queued", runAgo: 10 * time.Second})
		f.insert(job{status: "queued", runAgo: -time.Hour}) // not due: not in the age
		f.insert(job{status: "running", lockedBy: "w1"})
		f.insert(job{status: "dead"})
		f.insert(job{status: "dead"})
		f.insert(job{queue: "mail", status: "failed"})
		f.insert(job{queue: "mail", status: "cancelled"})

		r := f.run("stats")
		require.Equal(t, 0, r.code, r)
		assert.Equal(t, []string{"QUEUE", "QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "DEAD", "CANCELLED", "OLDEST", "DUE",
			"FINISHED", "1M", "FINISHED", "1H", "PER", "SEC", "PAUSED"}, row(t, r.stdout, "QUEUE"))
		def := row(t, r.stdout, "default")
		assert.Equal(t, []string{"default", "3", "1", "0", "0", "2", "0"}, def[:7])
		age, err := time.ParseDuration(def[7])
		require.NoError(t, err)
		assert.GreaterOrEqual(t, age, 90*time.Second)
		assert.Less(t, age, 10*time.Minute)
		assert.Equal(t, []string{"2", "2", "0.03", "-"}, def[8:], "the dead jobs finished just now")
		assert.Equal(t, []string{"mail", "0", "0", "0", "1", "0", "1", "-", "2", "2", "0.03", "-"}, row(t, r.stdout, "mail"))
		assert.Equal(t, []string{"(all)", "3", "1", "0", "1", "2", "1", def[7], "4", "4", "0.07", "-"}, row(t, r.stdout, "(all)"))

		// The columns line up: every value starts where its header does.
		lines := strings.Split(r.stdout, "\n")
		assert.Equal(t, strings.Index(lines[0], "DEAD"), strings.Index(lines[1], "2 "), r.stdout)

		r = f.run("stats", "--json")
		require.Equal(t, 0, r.code, r)
		var got []queueStatsJSON
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
		require.Len(t, got, 2)
		assert.Equal(t, "default", got[0].Queue)
		assert.Equal(t, map[string]int64{"queued": 3, "running": 1, "succeeded": 0, "failed": 0, "dead": 2, "cancelled": 0}, got[0].Counts)
		assert.GreaterOrEqual(t, got[0].OldestDueSeconds, 90.0)
		assert.Equal(t, "mail", got[1].Queue)
		assert.Equal(t, map[string]int64{"queued": 0, "running": 0, "succeeded": 0, "failed": 1, "dead": 0, "cancelled": 1}, got[1].Counts)
		assert.Zero(t, got[1].OldestDueSeconds)
		assert.Equal(t, int64(1), got[0].Scheduled)
		assert.Equal(t, map[string]int64{"dead": 2}, got[0].FinishedLastHour)
	})

	t.Run("finished jobs from the archive", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, true)
		// Succeeded jobs in the archive: 3 a moment ago, 2 half an hour ago, 1 two hours ago.
		_, err := f.pool.Exec(context.Background(), `INSERT INTO `+pgx.Identifier{f.schema, "jobs_archive"}.Sanitize()+`
			(id, queue, kind, payload, status, priority, run_at, attempts, max_attempts, created_at, finished_at)
			SELECT i, 'default', 'email', '{}', 'succeeded', 0, now(), 1, 20, now(), now() - ago
			FROM unnest(ARRAY[1, 2, 3, 4, 5, 6], ARRAY['1 second', '2 seconds', '3 seconds', '30 minutes', '31 minutes', '2 hours']::interval[]) AS t(i, ago)`)
		require.NoError(t, err)
		r := f.run("stats")
		require.Equal(t, 0, r.code, r)
		assert.Equal(t, []string{"default", "0", "0", "0", "0", "0", "0", "-", "3", "5", "0.05", "-"}, row(t, r.stdout, "default"))

		r = f.run("stats", "--json")
		require.Equal(t, 0, r.code, r)
		var got []queueStatsJSON
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
		require.Len(t, got, 1)
		assert.Equal(t, map[string]int64{"succeeded": 3}, got[0].FinishedLastMinute)
		assert.Equal(t, map[string]int64{"succeeded": 5}, got[0].FinishedLastHour)
	})

	t.Run("pause and resume", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, true)
		f.insert(job{queue: "mail", status: "queued"})
		r := f.run("pause", "mail")
		require.Equal(t, 0, r.code, r)
		assert.Equal(t, "queue \"mail\" paused: workers stop claiming its jobs; running jobs finish\n", r.stdout)
		r = f.run("pause", "idle") // a queue without jobs shows too
		require.Equal(t, 0, r.code, r)

		r = f.run("stats")
		require.Equal(t, 0, r.code, r)
		mail := row(t, r.stdout, "mail")
		assert.Equal(t, []string{"mail", "1", "0", "0", "0", "0", "0"}, mail[:7])
		assert.Equal(t, "since", mail[len(mail)-2])
		idle := row(t, r.stdout, "idle")
		assert.Equal(t, "since", idle[len(idle)-2])
		r = f.run("stats", "--json")
		require.Equal(t, 0, r.code, r)
		var got []queueStatsJSON
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
		require.Len(t, got, 2)
		assert.True(t, got[0].Paused && got[1].Paused, r.stdout)
		assert.NotNil(t, got[0].PausedAt)

		r = f.run("resume", "mail")
		require.Equal(t, 0, r.code, r)
		assert.Equal(t, "queue \"mail\" resumed\n", r.stdout)
		r = f.run("stats")
		require.Equal(t, 0, r.code, r)
		mail = row(t, r.stdout, "mail")
		assert.Equal(t, "-", mail[len(mail)-1], "the PAUSED column")

		r = f.run("pause")
		require.Equal(t, 2, r.code, r)
		assert.Contains(t, r.stderr, "pause: give the queue name")
		r = f.run("resume", "Bad Queue")
		require.Equal(t, 2, r.code, r)
		assert.Contains(t, r.stderr, "invalid queue name")
	})
}

// A job whose args are encrypted (skiplock.Keyring) shows the key's id, not the
// ciphertext.
func TestGet_EncryptedArgsAreRedacted(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	ring, err := skiplock.NewKeyring("k1", map[string][]byte{"k1": make([]byte, 32)})
	require.NoError(t, err)
	sealed, err := ring.Seal("email", []byte(`{"to": "ann@example.com"}`))
	require.NoError(t, err)
	id := f.insert(job{status: "queued"})
	_, err = f.pool.Exec(context.Background(), `UPDATE `+pgx.Identifier{f.schema, "jobs"}.Sanitize()+` SET payload = $2 WHERE id = $1`, id, string(sealed))
	require.NoError(t, err)
	r := f.run("get", "--id", strconv.FormatInt(id, 10))
	require.Equal(t, 0, r.code, r)
	assert.Equal(t, []string{"args", "(encrypted", "with", "key", "k1)"}, row(t, r.stdout, "args"))
	assert.NotContains(t, r.stdout, `"ct"`)
	r = f.run("get", "--id", strconv.FormatInt(id, 10), "--json")
	require.Equal(t, 0, r.code, r)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	assert.Nil(t, got["args"])
	assert.Equal(t, "k1", got["args_encrypted_with"])
}

func TestGet(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	id := f.insert(job{status: "running", attempts: 1, lockedBy: "w1", lastError: "first try failed\nstack"})
	_, err := f.pool.Exec(context.Background(), `UPDATE `+pgx.Identifier{f.schema, "jobs"}.Sanitize()+`
		SET metadata = '{"traceparent": "00-abc-def-01", "tenant": "acme"}', progress = '{"value": 42.5, "message": "resizing"}',
			payload = '{"image": 7}' WHERE id = $1`, id)
	require.NoError(t, err)

	r := f.run("get", "--id", strconv.FormatInt(id, 10))
	require.Equal(t, 0, r.code, r)
	assert.Equal(t, []string{"status", "running"}, row(t, r.stdout, "status"))
	assert.Equal(t, []string{"progress", "42.5", "resizing"}, row(t, r.stdout, "progress"))
	assert.Equal(t, []string{"metadata", "tenant=acme"}, row(t, r.stdout, "metadata"))
	assert.Contains(t, r.stdout, "traceparent=00-abc-def-01")
	assert.Equal(t, []string{"args", `{"image":`, "7}"}, row(t, r.stdout, "args"))
	assert.Equal(t, []string{"last", "error", "first", "try", "failed"}, row(t, r.stdout, "last"))
	assert.NotContains(t, r.stdout, "output")

	// Output is stored with the success; a succeeded job is read from the archive.
	_, err = f.pool.Exec(context.Background(), `INSERT INTO `+pgx.Identifier{f.schema, "jobs_archive"}.Sanitize()+`
		(id, queue, kind, payload, status, priority, run_at, attempts, max_attempts, created_at, finished_at, output, progress)
		VALUES (1000, 'default', 'email', '{}', 'succeeded', 0, now(), 1, 20, now(), now(), '{"sent": true}', '{"value": 100}')`)
	require.NoError(t, err)
	r = f.run("get", "--id", "1000", "--json")
	require.Equal(t, 0, r.code, r)
	var got jobJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
	assert.Equal(t, "succeeded", got.Status)
	assert.JSONEq(t, `{"sent": true}`, string(got.Output))
	assert.Equal(t, &skiplock.Progress{Value: 100}, got.Progress)
	assert.Equal(t, map[string]string{}, got.Metadata)

	r = f.run("get", "--id", "987654321")
	require.Equal(t, 1, r.code, r)
	assert.Equal(t, fmt.Sprintf("skiplock: get: job 987654321 not found in schema %q\n", f.schema), r.stderr)
	r = f.run("get")
	require.Equal(t, 2, r.code, r)
}

func TestDead(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)

	r := f.run("dead")
	require.Equal(t, 0, r.code, r)
	assert.Equal(t, "no dead or failed jobs\n", r.stdout)

	long := "timeout talking to smtp.example.com: " + strings.Repeat("x", 200)
	d1 := f.insert(job{kind: "email", status: "dead", attempts: 20,
		lastError:  "smtp: 550 mailbox unavailable\n\tat send.go:42\n\tat worker.go:7",
		errorsJSON: `[{"attempt": 19, "at": "2026-01-02T03:04:05Z", "error": "smtp: 421 try later"}, {"attempt": 20, "at": "2026-01-02T03:05:05Z", "error": "smtp: 550 mailbox unavailable"}]`})
	f1 := f.insert(job{kind: "sms", queue: "mail", status: "failed", attempts: 1, lastError: "permanent: bad phone number"})
	d2 := f.insert(job{kind: "report", status: "dead", attempts: 20, lastError: long})
	f.insert(job{kind: "email", status: "queued"})
	f.insert(job{kind: "email", status: "cancelled", lastError: "cancelled by operator"})

	r = f.run("dead")
	require.Equal(t, 0, r.code, r)
	assert.Equal(t, []string{"ID", "KIND", "QUEUE", "STATUS", "ATTEMPTS", "FINISHED", "LAST", "ERROR"}, row(t, r.stdout, "ID"))
	line := row(t, r.stdout, id(d1))
	assert.Equal(t, []string{id(d1), "email", "default", "dead", "20/20"}, line[:5])
	_, err := time.Parse(time.RFC3339, line[5])
	assert.NoError(t, err, "finished_at %q", line[5])
	assert.Equal(t, "smtp: 550 mailbox unavailable", strings.Join(line[6:], " "))
	assert.NotContains(t, r.stdout, "send.go", "only the first line of the error")
	assert.Equal(t, []string{id(f1), "sms", "mail", "failed", "1/20"}, row(t, r.stdout, id(f1))[:5])
	assert.Contains(t, r.stdout, "permanent: bad phone number")
	assert.Contains(t, r.stdout, long[:60])
	assert.NotContains(t, r.stdout, long, "a long error is truncated")
	assert.Contains(t, r.stdout, "…")
	assert.Equal(t, 4, strings.Count(r.stdout, "\n"), "header and three jobs:\n%s", r.stdout)
	assert.NotContains(t, r.stdout, "cancelled")
	assert.Less(t, strings.Index(r.stdout, "\n"+id(d1)+" "), strings.Index(r.stdout, "\n"+id(d2)+" "), "oldest first")

	r = f.run("dead", "--status", "failed")
	require.Equal(t, 0, r.code, r)
	assert.Equal(t, 2, strings.Count(r.stdout, "\n"), r.stdout)
	row(t, r.stdout, id(f1))

	r = f.run("dead", "--queue", "default", "--kind", "report")
	require.Equal(t, 0, r.code, r)
	assert.Equal(t, 2, strings.Count(r.stdout, "\n"), r.stdout)
	row(t, r.stdout, id(d2))

	r = f.run("dead", "--kind", "nope")
	require.Equal(t, 0, r.code, r)
	assert.Equal(t, "no dead or failed jobs with kind \"nope\"\n", r.stdout)

	r = f.run("dead", "--limit", "2")
	require.Equal(t, 0, r.code, r)
	row(t, r.stdout, id(d1))
	row(t, r.stdout, id(f1))
	assert.NotContains(t, r.stdout, "report")
	assert.Contains(t, r.stdout, "(the oldest 2 shown; there may be more: raise --limit)")

	r = f.run("dead", "--json", "--status", "dead")
	require.Equal(t, 0, r.code, r)
	var got []deadJobJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
	require.Len(t, got, 2)
	assert.Equal(t, d1, got[0].ID)
	assert.Equal(t, "email", got[0].Kind)
	assert.Equal(t, "default", got[0].Queue)
	assert.Equal(t, "dead", got[0].Status)
	assert.Equal(t, 20, got[0].Attempts)
	assert.Equal(t, 20, got[0].MaxAttempts)
	assert.NotNil(t, got[0].FinishedAt)
	assert.Equal(t, "smtp: 550 mailbox unavailable\n\tat send.go:42\n\tat worker.go:7", got[0].LastError, "JSON has the whole error")
	require.Len(t, got[0].Errors, 2)
	assert.Equal(t, 19, got[0].Errors[0].Attempt)
	assert.Equal(t, "smtp: 421 try later", got[0].Errors[0].Error)
	assert.Equal(t, d2, got[1].ID)
	assert.Equal(t, long, got[1].LastError)
	assert.NotNil(t, got[1].Errors)
}

func TestRequeue(t *testing.T) {
	t.Parallel()

	t.Run("by id", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, true)
		a := f.insert(job{status: "dead", attempts: 20})
		b := f.insert(job{status: "failed", attempts: 3})
		c := f.insert(job{status: "dead", attempts: 20})
		q := f.insert(job{status: "queued", attempts: 2})

		r := f.run("requeue", "--id", id(a)+","+id(b), "--id", id(q))
		require.Equal(t, 0, r.code, r)
		assert.Equal(t, "requeued 2 jobs\n", r.stdout)
		for _, j := range []int64{a, b} {
			status, attempts := f.state(j)
			assert.Equal(t, "queued", status, "job %d", j)
			assert.Zero(t, attempts, "job %d", j)
		}
		status, attempts := f.state(c)
		assert.Equal(t, "dead", status, "not selected")
		assert.Equal(t, 20, attempts)
		status, attempts = f.state(q)
		assert.Equal(t, "queued", status, "a queued job is not touched")
		assert.Equal(t, 2, attempts)
	})

	t.Run("filters combine with AND", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, true)
		match := f.insert(job{kind: "email", queue: "mail", status: "dead", attempts: 20})
		otherKind := f.insert(job{kind: "sms", queue: "mail", status: "dead", attempts: 20})
		otherQueue := f.insert(job{kind: "email", queue: "default", status: "dead", attempts: 20})
		cancelled := f.insert(job{kind: "email", queue: "mail", status: "cancelled", attempts: 1})

		r := f.run("requeue", "--kind", "email", "--queue", "mail")
		require.Equal(t, 0, r.code, r)
		assert.Equal(t, "requeued 1 job\n", r.stdout)
		status, _ := f.state(match)
		assert.Equal(t, "queued", status)
		for _, j := range []int64{otherKind, otherQueue} {
			status, _ := f.state(j)
			assert.Equal(t, "dead", status, "job %d", j)
		}
		status, _ = f.state(cancelled)
		assert.Equal(t, "cancelled", status)

		r = f.run("requeue", "--queue", "mail")
		require.Equal(t, 0, r.code, r)
		assert.Equal(t, "requeued 1 job\n", r.stdout)
		status, _ = f.state(otherKind)
		assert.Equal(t, "queued", status)

		r = f.run("requeue", "--kind", "email")
		require.Equal(t, 0, r.code, r)
		assert.Equal(t, "requeued 1 job\n", r.stdout)
		status, _ = f.state(otherQueue)
		assert.Equal(t, "queued", status)

		r = f.run("requeue", "--kind", "email")
		require.Equal(t, 0, r.code, r)
		assert.Equal(t, "requeued 0 jobs: no dead or failed job matched\n", r.stdout)
	})

	t.Run("jobs sharing a unique key", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, true)
		// Two dead jobs share key k1: only the newer goes back. A dead job's key k2 is held
		// by a queued job: it stays dead. k3 is free.
		oldK1 := f.insert(job{status: "dead", attempts: 20, uniqueKey: "k1"})
		newK1 := f.insert(job{status: "dead", attempts: 20, uniqueKey: "k1"})
		heldK2 := f.insert(job{status: "dead", attempts: 20, uniqueKey: "k2"})
		f.insert(job{status: "queued", uniqueKey: "k2"})
		freeK3 := f.insert(job{status: "failed", attempts: 3, uniqueKey: "k3"})

		r := f.run("requeue", "--kind", "email")
		require.Equal(t, 0, r.code, r)
		assert.Equal(t, "requeued 2 jobs, skipped 2: their unique key is held by an active job or by a newer job requeued instead\n", r.stdout)
		for j, want := range map[int64]string{oldK1: "dead", newK1: "queued", heldK2: "dead", freeK3: "queued"} {
			status, _ := f.state(j)
			assert.Equal(t, want, status, "job %d", j)
		}
		r = f.run("requeue", "--kind", "email")
		require.Equal(t, 0, r.code, r)
		assert.Equal(t, "requeued 0 jobs, skipped 2: their unique key is held by an active job or by a newer job requeued instead\n", r.stdout)
	})

	t.Run("invalid queue", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, true)
		r := f.run("requeue", "--queue", "Not A Queue")
		require.Equal(t, 2, r.code, r)
		assert.Contains(t, r.stderr, `requeue: --queue: invalid queue name: "Not A Queue"`)
	})

	t.Run("not migrated", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, false)
		r := f.run("requeue", "--kind", "email")
		require.Equal(t, 1, r.code, r)
		assert.Contains(t, r.stderr, "is not migrated: run 'skiplock --schema "+f.schema+" migrate up' first")
	})
}

func TestPeriodic(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	r := f.run("periodic")
	require.Equal(t, 0, r.code, r)
	assert.Contains(t, r.stdout, "no periodic schedules in schema")

	_, err := f.pool.Exec(context.Background(), `INSERT INTO `+pgx.Identifier{f.schema, "periodic"}.Sanitize()+`
		(name, kind, queue, schedule, misfire, next_run_at, last_run_at, last_job_id, active, declared_at) VALUES
		('nightly', 'report', 'default', '0 3 * * *', 'run_once', '2030-01-02T03:00:00Z', '2030-01-01T03:00:00Z', 42, true, now()),
		('old', 'cleanup', 'maint', 'every 1h0m0s', 'skip', '2030-01-01T00:00:00Z', NULL, NULL, false, now() - interval '1 day')`)
	require.NoError(t, err)
	r = f.run("periodic")
	require.Equal(t, 0, r.code, r)
	assert.Equal(t, []string{"NAME", "KIND", "QUEUE", "SCHEDULE", "MISFIRE", "ACTIVE", "LAST", "RUN", "LAST", "JOB", "NEXT", "RUN"}, row(t, r.stdout, "NAME"))
	assert.Equal(t, []string{"nightly", "report", "default", "0", "3", "*", "*", "*", "run_once", "yes",
		"2030-01-01T03:00:00Z", "42", "2030-01-02T03:00:00Z"}, row(t, r.stdout, "nightly"))
	assert.Equal(t, []string{"old", "cleanup", "maint", "every", "1h0m0s", "skip", "no", "-", "-", "-"}, row(t, r.stdout, "old"))

	r = f.run("periodic", "--json")
	require.Equal(t, 0, r.code, r)
	var got []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
	require.Len(t, got, 2)
	assert.Equal(t, "nightly", got[0]["name"])
	assert.Equal(t, "2030-01-01T03:00:00Z", got[0]["last_run_at"])
	assert.Equal(t, 42.0, got[0]["last_job_id"])
	assert.Equal(t, false, got[1]["active"])
	assert.Nil(t, got[1]["last_run_at"])

	// disable, run (refused while disabled), enable, run.
	r = f.run("periodic", "disable", "nightly")
	require.Equal(t, 0, r.code, r)
	assert.Contains(t, r.stdout, `periodic schedule "nightly" disabled`)
	r = f.run("periodic")
	assert.Equal(t, "disabled", row(t, r.stdout, "nightly")[9])
	r = f.run("periodic", "run", "nightly")
	assert.NotEqual(t, 0, r.code, "a disabled schedule does not run now")
	assert.Contains(t, r.stderr, "periodic schedule not found")
	require.Equal(t, 0, f.run("periodic", "enable", "nightly").code)
	r = f.run("periodic", "run", "nightly")
	require.Equal(t, 0, r.code, r)
	var due bool
	require.NoError(t, f.pool.QueryRow(context.Background(), `SELECT next_run_at <= now() FROM `+pgx.Identifier{f.schema, "periodic"}.Sanitize()+` WHERE name = 'nightly'`).Scan(&due))
	assert.True(t, due, "its next occurrence is due now")
	assert.NotEqual(t, 0, f.run("periodic", "run").code, "a name is needed")
	assert.NotEqual(t, 0, f.run("periodic", "explode", "nightly").code)
	assert.NotEqual(t, 0, f.run("periodic", "enable", "nope").code)
}

func TestWorkers(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	r := f.run("workers")
	require.Equal(t, 0, r.code, r)
	assert.Contains(t, r.stdout, "no workers registered in schema")

	// Rows as running workers write them: one alive and leading, one that died a while ago.
	ctx := context.Background()
	_, err := f.pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{f.schema, "workers"}.Sanitize()+` (id, queues, started_at, expires_at) VALUES
		('host-a', '{default,emails}', '2030-01-01T00:00:00Z', now() + interval '10 seconds'),
		('host-b', '{default}', '2030-01-01T00:00:00Z', now() - interval '20 seconds');
		INSERT INTO `+pgx.Identifier{f.schema, "leader"}.Sanitize()+` (name, leader_id, elected_at, expires_at)
		VALUES ('maintenance', 'host-a', now(), now() + interval '5 seconds')`)
	require.NoError(t, err)
	r = f.run("workers")
	require.Equal(t, 0, r.code, r)
	assert.Equal(t, []string{"WORKER", "ALIVE", "LEADER", "STARTED", "QUEUES"}, row(t, r.stdout, "WORKER"))
	assert.Equal(t, []string{"host-a", "yes", "yes", "2030-01-01T00:00:00Z", "default,emails"}, row(t, r.stdout, "host-a"))
	assert.Equal(t, []string{"host-b", "no", "no", "2030-01-01T00:00:00Z", "default"}, row(t, r.stdout, "host-b"))

	r = f.run("workers", "--json")
	require.Equal(t, 0, r.code, r)
	var got []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
	require.Len(t, got, 2)
	assert.Equal(t, "host-a", got[0]["id"])
	assert.Equal(t, []any{"default", "emails"}, got[0]["queues"])
	assert.Equal(t, true, got[0]["leader"])
	assert.Equal(t, false, got[1]["alive"])
}

func TestCancel(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	queued := f.insert(job{status: "queued"})
	running := f.insert(job{status: "running", attempts: 1, lockedBy: "host-1/worker-7"})
	succeeded := f.insert(job{status: "succeeded", attempts: 1})

	r := f.run("cancel", "--id", id(queued))
	require.Equal(t, 0, r.code, r)
	assert.Equal(t, fmt.Sprintf("job %d cancelled\n", queued), r.stdout)
	status, _ := f.state(queued)
	assert.Equal(t, "cancelled", status)

	r = f.run("cancel", "--id", id(running))
	require.Equal(t, 0, r.code, r)
	assert.Contains(t, r.stdout, fmt.Sprintf("job %d cancelled (it was running on host-1/worker-7", running))
	status, _ = f.state(running)
	assert.Equal(t, "cancelled", status)

	r = f.run("cancel", "--id", id(succeeded))
	require.Equal(t, 0, r.code, r)
	assert.Equal(t, fmt.Sprintf("job %d is already succeeded: left unchanged\n", succeeded), r.stdout)
	status, _ = f.state(succeeded)
	assert.Equal(t, "succeeded", status)

	r = f.run("cancel", "--id", "987654321")
	require.Equal(t, 1, r.code, r)
	assert.Equal(t, fmt.Sprintf("skiplock: cancel: job 987654321 not found in schema %q\n", f.schema), r.stderr)
	assert.Empty(t, r.stdout)
}

func TestUpdate(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	queued := f.insert(job{status: "queued"})
	running := f.insert(job{status: "running", attempts: 1, lockedBy: "host-1/worker-7"})

	r := f.run("update", "--id", id(queued), "--run-at", "2030-01-02T15:04:05Z", "--priority", "3", "--queue", "reports")
	require.Equal(t, 0, r.code, r)
	assert.Equal(t, fmt.Sprintf("job %d updated: queued, queue reports, priority 3, due 2030-01-02T15:04:05Z\n", queued), r.stdout)
	r = f.run("update", "--id", id(queued), "--run-now")
	require.Equal(t, 0, r.code, r)
	assert.Contains(t, r.stdout, fmt.Sprintf("job %d updated: queued, queue reports, priority 3, due ", queued))
	assert.NotContains(t, r.stdout, "2030")

	r = f.run("update", "--id", id(running), "--priority", "1")
	require.Equal(t, 1, r.code, r)
	assert.Equal(t, fmt.Sprintf("skiplock: update: job %d is running: left unchanged\n", running), r.stderr)
	r = f.run("update", "--id", "987654321", "--run-now")
	require.Equal(t, 1, r.code, r)
	assert.Equal(t, fmt.Sprintf("skiplock: update: job 987654321 not found in schema %q\n", f.schema), r.stderr)

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"update", "--id", id(queued)}, "update: give --run-now, --run-at, --priority or --queue"},
		{[]string{"update", "--id", id(queued), "--run-now", "--run-at", "2030-01-02T15:04:05Z"}, "update: give --run-now or --run-at, not both"},
		{[]string{"update", "--id", id(queued), "--priority", "high"}, `update: --priority "high": must be a whole number`},
		{[]string{"update", "--id", id(queued), "--run-at", "tomorrow"}, `update: --run-at "tomorrow": use RFC 3339`},
		{[]string{"update", "--id", id(queued), "--queue", "Bad Queue"}, "update: invalid queue name"},
	} {
		r = f.run(c.args...)
		assert.Equal(t, 2, r.code, r)
		assert.Contains(t, r.stderr, c.want)
	}
	var queue string
	require.NoError(t, f.pool.QueryRow(context.Background(), `SELECT queue FROM "`+f.schema+`".jobs WHERE id = $1`, queued).Scan(&queue))
	assert.Equal(t, "reports", queue, "a refused update changed the job")
}

// TestBinary builds the command and runs it as a process: exit statuses, the streams
// messages go to, and DATABASE_URL from the real environment.
func TestBinary(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the go command must be on PATH to build the binary")
	bin := filepath.Join(t.TempDir(), "skiplock")
	out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	url := pgtest.URL(t)
	schema := pgtest.Schema(t)
	baseEnv := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") {
			baseEnv = append(baseEnv, kv)
		}
	}

	tests := []struct {
		name   string
		env    []string // added to the environment
		args   []string
		code   int
		stdout string // substring; empty: stdout must be empty
		stderr string // substring; empty: stderr must be empty
	}{
		{name: "no command", code: 2, stderr: "Usage:"},
		{name: "help", args: []string{"help"}, code: 0, stdout: "Commands:"},
		{name: "unknown command", args: []string{"frobnicate"}, code: 2, stderr: `skiplock: unknown command "frobnicate"`},
		{name: "bad flag", args: []string{"dead", "--limit", "-5"}, code: 2, stderr: "--limit must be at least 1"},
		{name: "no database", args: []string{"stats"}, code: 2, stderr: "set --database-url or DATABASE_URL"},
		{name: "unreachable", args: []string{"--database-url", unreachableURL, "stats"}, code: 1,
			stderr: "skiplock: cannot reach the database at 127.0.0.1:1"},
		{name: "unreachable from DATABASE_URL", env: []string{"DATABASE_URL=" + unreachableURL}, args: []string{"migrate", "status"},
			code: 1, stderr: "(check --database-url / DATABASE_URL)"},
		{name: "migrate with DATABASE_URL", env: []string{"DATABASE_URL=" + url}, args: []string{"--schema", schema, "migrate", "up"},
			code: 0, stdout: fmt.Sprintf("from version 0 to %d", slices.Max(migrationVersions(t)))},
		{name: "cancel missing job", env: []string{"DATABASE_URL=" + url}, args: []string{"--schema", schema, "cancel", "--id", "42"},
			code: 1, stderr: "job 42 not found"},
	}
	// Sequential: the migrate case must come before the cancel case.
	for _, tt := range tests {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, bin, tt.args...)
		cmd.Env = append(append([]string{}, baseEnv...), tt.env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		code := 0
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			code = exitErr.ExitCode()
		} else {
			require.NoError(t, err, tt.name)
		}
		r := result{code: code, stdout: stdout.String(), stderr: stderr.String()}
		assert.Equal(t, tt.code, r.code, "%s: %s", tt.name, r)
		if tt.stdout == "" {
			assert.Empty(t, r.stdout, tt.name)
		} else {
			assert.Contains(t, r.stdout, tt.stdout, tt.name)
		}
		if tt.stderr == "" {
			assert.Empty(t, r.stderr, tt.name)
		} else {
			assert.Contains(t, r.stderr, tt.stderr, tt.name)
		}
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)

	r := f.run("limits")
	require.Equal(t, 0, r.code, r)
	assert.Contains(t, r.stdout, "no limits set at run time")

	r = f.run("limits", "--queue", "emails", "--concurrency", "10", "--rate", "500", "--rate-period", "1m")
	require.Equal(t, 0, r.code, r)
	assert.Equal(t, "queue \"emails\": limits set on every worker\n", r.stdout)
	r = f.run("limits", "--queue", "reports", "--key-concurrency", "2", "--fair")
	require.Equal(t, 0, r.code, r)
	r = f.run("limits", "--queue", "tenants", "--key-rate", "10", "--key-rate-period", "2s")
	require.Equal(t, 0, r.code, r)
	r = f.run("limits", "--queue", "regions", "--key-limit", "region=50", "--key-limit", "tenant=2")
	require.Equal(t, 0, r.code, r)
	r = f.run("limits")
	require.Equal(t, 0, r.code, r)
	assert.Regexp(t, `emails\s+10\s+-\s+500/1m0s\s+-\s+false\s+-`, r.stdout)
	assert.Regexp(t, `reports\s+-\s+2\s+-\s+-\s+true`, r.stdout)
	assert.Regexp(t, `tenants\s+-\s+-\s+-\s+10/2s\s+false`, r.stdout)
	assert.Regexp(t, `regions\s+-\s+-\s+-\s+-\s+false\s+region=50,tenant=2`, r.stdout)
	var keyRate, keyPeriodMs int
	require.NoError(t, f.pool.QueryRow(context.Background(), `SELECT key_rate, key_rate_period_ms FROM `+
		pgx.Identifier{f.schema, "queue_limits"}.Sanitize()+` WHERE queue = 'tenants'`).Scan(&keyRate, &keyPeriodMs))
	assert.Equal(t, []int{10, 2000}, []int{keyRate, keyPeriodMs}, "the stored per-key rate")

	r = f.run("limits", "--queue", "emails", "--reset")
	require.Equal(t, 0, r.code, r)
	r = f.run("limits")
	assert.NotContains(t, r.stdout, "emails")

	for _, args := range [][]string{
		{"--concurrency", "3"},                     // no queue
		{"--queue", "q"},                           // nothing to do
		{"--queue", "q", "--reset", "--rate", "1"}, // both
		{"--queue", "q", "--none", "--fair"},       // both
		{"--queue", "q", "--concurrency", "-1"},    // negative
		{"--queue", "q", "--key-rate", "-1"},       // negative
		{"--queue", "q", "--key-limit", "region"},  // no limit
		{"--queue", "q", "--key-limit", "Bad=1"},   // bad dimension
		{"--queue", "q", "--key-limit", "region=0"},
		{"--queue", "not a queue", "--concurrency", "1"},
		{"--queue", "q", "--concurrency", "3", "--rate-period", "2s"},     // a period without its rate
		{"--queue", "q", "--concurrency", "3", "--key-rate-period", "2s"}, // the same per key
		{"--queue", "q", "--rate-period", "2s", "--key-rate", "5"},        // the other rate's period
	} {
		r = f.run(append([]string{"limits"}, args...)...)
		assert.Equal(t, 2, r.code, "%v: %v", args, r)
	}
	// A refused period changed nothing: q has no limits set.
	r = f.run("limits")
	require.Equal(t, 0, r.code, r)
	assert.NotRegexp(t, `(?m)^q\s`, r.stdout)
}
