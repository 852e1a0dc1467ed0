// Package sqlenqueue_test runs the examples of docs/sql-enqueue.md written in other
// languages — python/enqueue.py (psycopg 3) and node/enqueue.js (node-postgres) — against
// a migrated schema, and a Go worker on the jobs they enqueued through <schema>.enqueue.
//
// An example runs when its interpreter is on the machine. One that is missing fails the
// run, with how to install it, when SKIPLOCK_SQL_EXAMPLES asks for it ("python", "node",
// or both, comma-separated); otherwise the test says in its log that it did not run. An
// interpreter without its library (psycopg, pg) always fails, with the command to
// install it: scripts/ensure-env.sh --sql-examples (make test) installs Debian's
// python3-psycopg, and the Node test runs `npm ci` in a temporary directory.
package sqlenqueue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// summary is the JSON line each example prints last.
type summary struct {
	ID             int64 `json:"id"`
	Duplicate      bool  `json:"duplicate"`
	Again          int64 `json:"again"`
	AgainDuplicate bool  `json:"again_duplicate"`
	RolledBack     int64 `json:"rolled_back"`
	Refused        struct {
		SQLState string `json:"sqlstate"`
		Column   string `json:"column"`
	} `json:"refused"`
}

type sendEmail struct {
	OrderID int64  `json:"order_id"`
	To      string `json:"to"`
}

func (sendEmail) Kind() string { return "send_email" }

// asked reports whether SKIPLOCK_SQL_EXAMPLES asks for the example of lang.
func asked(lang string) bool {
	return slices.Contains(strings.Split(os.Getenv("SKIPLOCK_SQL_EXAMPLES"), ","), lang)
}

// missing fails the test when lang's example was asked for, and otherwise logs that it
// did not run; either way it says how to install what is missing.
func missing(t *testing.T, lang, what, install string) {
	t.Helper()
	if asked(lang) {
		t.Fatalf("SKIPLOCK_SQL_EXAMPLES asks for the %s example, but %s: %s", lang, what, install)
	}
	t.Logf("the %s example did not run: %s (%s; SKIPLOCK_SQL_EXAMPLES=%s makes this a failure)", lang, what, install, lang)
}

func TestExamples_PythonEnqueuesJobsAGoWorkerRuns(t *testing.T) {
	t.Parallel()
	const install = "apt-get install python3-psycopg (Debian, Ubuntu; scripts/ensure-env.sh --sql-examples does it), or pip install 'psycopg[binary]'"
	var tried []string
	for _, py := range []string{os.Getenv("SKIPLOCK_PYTHON"), "python3", "/usr/bin/python3"} {
		if py == "" {
			continue
		}
		path, err := exec.LookPath(py)
		if err != nil || slices.Contains(tried, path) {
			continue
		}
		tried = append(tried, path)
		if exec.Command(path, "-c", "import psycopg").Run() == nil {
			runExample(t, "", path, "python/enqueue.py")
			return
		}
	}
	if len(tried) == 0 {
		missing(t, "python", "no python3 is on this machine", "install python3 and "+install)
		return
	}
	t.Fatalf("the Python example needs psycopg 3, which none of %v imports: %s; or set SKIPLOCK_PYTHON to an interpreter that has it", tried, install)
}

func TestExamples_NodeEnqueuesJobsAGoWorkerRuns(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		missing(t, "node", "no node is on this machine", "apt-get install nodejs npm")
		return
	}
	npm, err := exec.LookPath("npm")
	require.NoError(t, err, "the Node example needs npm to install pg: apt-get install npm")
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "enqueue.js"} {
		b, err := os.ReadFile(filepath.Join("node", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "npm ci of examples/sql-enqueue/node (it needs the npm registry): %s", out)
	runExample(t, dir, node, "enqueue.js")
}

// runExample runs interpreter on script (in dir, or examples/sql-enqueue when empty)
// against a migrated schema of the test's own, checks what the script says it did
// against the database, and has a Go worker run the job it enqueued.
func runExample(t *testing.T, dir, interpreter, script string) {
	t.Helper()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	require.NoError(t, skiplock.Migrate(t.Context(), pool, skiplock.MigrateConfig{Schema: schema}))
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if dir != "" {
		script = filepath.Join(dir, script)
	}
	cmd := exec.CommandContext(ctx, interpreter, script)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+pgtest.URL(t), "SKIPLOCK_SCHEMA="+schema)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "%s %s: %s%s", interpreter, script, stdout.String(), stderr.String())
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var s summary
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &s), "the last line of %s: %s", script, stdout.String())

	assert.False(t, s.Duplicate, "the first enqueue inserted")
	assert.Equal(t, s.ID, s.Again, "the same key again returned the holder")
	assert.True(t, s.AgainDuplicate)
	assert.Equal(t, "22023", s.Refused.SQLState)
	assert.Equal(t, "queue", s.Refused.Column, "the refused input's error names the argument")
	_, err = client.Get(t.Context(), s.RolledBack)
	assert.ErrorIs(t, err, skiplock.ErrJobNotFound, "the rolled-back enqueue left no job")
	var jobs int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM `+pgx.Identifier{schema, "jobs"}.Sanitize()).Scan(&jobs))
	assert.Equal(t, 1, jobs, "one job: the duplicate, the rollback and the refused input wrote nothing")

	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgconn/internal/bgreader.(*BGReader).bgRead"))
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{Queues: map[string]skiplock.QueueConfig{"email": {MaxWorkers: 1}}, SweepInterval: -1})
	require.NoError(t, err)
	ran := make(chan *skiplock.Job[sendEmail], 1)
	require.NoError(t, skiplock.Handle(w, func(_ context.Context, j *skiplock.Job[sendEmail]) error {
		ran <- j
		return nil
	}))
	runCtx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() {
		stop()
		require.NoError(t, <-done)
	}()
	select {
	case j := <-ran:
		assert.Equal(t, s.ID, j.ID)
		assert.NotZero(t, j.Args.OrderID)
		assert.Contains(t, j.Args.To, "@example.com")
		assert.NotEmpty(t, j.Metadata["from"], "the metadata the example set")
	case <-time.After(30 * time.Second):
		t.Fatalf("the Go worker did not run the job %s enqueued", script)
	}
}
