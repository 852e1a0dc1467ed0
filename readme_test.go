package skiplock_test

// A test of the README's quickstart as a user meets it: copied into an empty module,
// built and run against a database of its own.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// readmeQuickstart returns the first Go block after "## Quickstart" in README.md.
func readmeQuickstart(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(readme), "\n## Quickstart\n")
	require.True(t, ok, "README has a Quickstart section")
	_, after, ok = strings.Cut(after, "```go\n")
	require.True(t, ok, "the Quickstart has a Go block")
	code, _, ok := strings.Cut(after, "\n```\n")
	require.True(t, ok)
	return code + "\n"
}

// TestReadme_QuickstartRunsWithoutWarning builds the README's quickstart, as written, in
// a module of its own that requires this checkout, and runs it on a fresh database (the
// quickstart uses the default schema): its job must run, and it must log no warning or
// error — about the pool or anything else. (Its info lines, worker started and the like,
// are fine.)
func TestReadme_QuickstartRunsWithoutWarning(t *testing.T) {
	t.Parallel()
	code := readmeQuickstart(t)
	require.Contains(t, code, "package main")
	root, err := filepath.Abs(".")
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(code), 0o644))
	// The module requires what this checkout's go.mod requires, as `go get` would write
	// it, so the build needs nothing the module cache lacks (GOPROXY=off: no network).
	rootMod, err := os.ReadFile("go.mod")
	require.NoError(t, err)
	_, reqs, ok := strings.Cut(string(rootMod), "\nrequire ")
	require.True(t, ok)
	gomod := "module quickstart\n\ngo 1.26.0\n\nrequire github.com/skiplock/skiplock v0.0.0\n\nrequire " + reqs +
		"\nreplace github.com/skiplock/skiplock => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	sum, err := os.ReadFile("go.sum")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(dir, "quickstart")
	build := exec.CommandContext(ctx, "go", "build", "-mod=mod", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building the README quickstart:\n%s", out)

	// A database of its own: the quickstart migrates the default schema.
	base := pgtest.URL(t)
	admin, err := pgx.Connect(ctx, base)
	require.NoError(t, err)
	defer admin.Close(context.WithoutCancel(ctx))
	var b [4]byte
	_, _ = rand.Read(b[:])
	db := "readme_quickstart_" + hex.EncodeToString(b[:])
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		// A connection of its own: admin is closed by then.
		c, err := pgx.Connect(context.Background(), base)
		if err != nil {
			t.Errorf("dropping database %s: %v", db, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping database %s: %v", db, err)
		}
	})
	u, err := url.Parse(base)
	require.NoError(t, err)
	u.Path = "/" + db
	dbURL := u.String()

	var logs lockedBuffer // written by exec's copying goroutine while the test reads it
	run := exec.CommandContext(ctx, bin)
	run.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
	run.Stdout, run.Stderr = &logs, &logs
	require.NoError(t, run.Start())
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = run.Process.Kill()
			<-exited
		}
	}()

	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(ctx))
	eventually(t, 2*time.Minute, func() bool {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM skiplock.jobs_archive WHERE kind = 'send_confirmation' AND status = 'succeeded'`).Scan(&n)
		if err == nil && n == 1 {
			return true
		}
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("the quickstart exited (%v) before its job ran:\n%s", err, logs.String())
		default:
		}
		return false
	}, "the quickstart's job did not run:\n%s", &logs)
	// SIGTERM, as a deploy sends: a graceful stop, exit status 0.
	require.NoError(t, run.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		stopped = true
		require.NoError(t, err, "the quickstart's exit on SIGTERM:\n%s", logs.String())
	case <-time.After(time.Minute):
		t.Fatalf("the quickstart did not exit within a minute of SIGTERM:\n%s", logs.String())
	}

	assert.Contains(t, logs.String(), "confirmation for order 42 sent")
	// The worker's info lines the README names: started, leading the maintenance.
	assert.Contains(t, logs.String(), "skiplock: worker started")
	assert.Contains(t, logs.String(), "skiplock: this process now leads the fleet's maintenance")
	assert.Contains(t, logs.String(), "skiplock: worker stopped")
	assert.Contains(t, logs.String(), " stopped\n", "Run returned nil and main went on")
	for l := range strings.Lines(logs.String()) {
		// slog's default handler writes "date time LEVEL message".
		f := strings.Fields(l)
		if len(f) >= 3 && (f[2] == "WARN" || f[2] == "ERROR") {
			t.Errorf("the quickstart logged: %s", l)
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
