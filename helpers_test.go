package skiplock_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// bundle is what setup hands a test: a migrated schema of its own and a client on it.
type bundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	client *skiplock.Client
	schema string
}

// setup migrates a fresh schema and returns a client for it.
func setup(t *testing.T) *bundle {
	t.Helper()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	require.NoError(t, skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}))
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Logger: testLogger()})
	require.NoError(t, err)
	return &bundle{ctx: ctx, pool: pool, client: client, schema: schema}
}

// newPool opens another pool on the test database, closed at cleanup.
func newPool(t *testing.T, maxConns int32) *pgxpool.Pool {
	t.Helper()
	return newPoolWith(t, func(cfg *pgxpool.Config) {
		if maxConns > 0 {
			cfg.MaxConns = maxConns
		}
	})
}

// newPoolWith is newPool with its configuration changed by configure first (a tracer, a
// query mode); the test's cleanup closes it.
func newPoolWith(t *testing.T, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	configure(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func testLogger() *slog.Logger {
	if os.Getenv("SKIPLOCK_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// count runs a count(*) query against the test's schema; {s} is replaced by the schema.
func (b *bundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(query), args...).Scan(&n))
	return n
}

// text runs a query that returns one text value against the test's schema, for a failing
// assertion's message.
func (b *bundle) text(t *testing.T, query string, args ...any) string {
	t.Helper()
	var s string
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(query), args...).Scan(&s))
	return s
}

// q puts the test schema into a query written with {s}.
func (b *bundle) q(query string) string {
	out := ""
	for i := 0; i < len(query); i++ {
		if i+3 <= len(query) && query[i:i+3] == "{s}" {
			out += `"` + b.schema + `"`
			i += 2
			continue
		}
		out += string(query[i])
	}
	return out
}

// pollTick is how often eventually and holdsFor check their condition.
const pollTick = 10 * time.Millisecond

// eventually polls cond (a database check) until it holds or the timeout passes. Unlike
// require.Eventually, it calls cond on the test's goroutine, so cond may use require.
func eventually(t *testing.T, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(pollTick)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s: "+msg, append([]any{timeout}, args...)...)
		}
		<-tick.C
	}
}

// holdsFor checks, every tick for the whole window, what check asserts (with require):
// that something which must not happen does not.
func holdsFor(t *testing.T, window, tick time.Duration, check func()) {
	t.Helper()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for end := time.Now().Add(window); time.Now().Before(end); <-ticker.C {
		check()
	}
}

// Job kinds used by the tests.

type noopArgs struct {
	N int `json:"n"`
}

func (noopArgs) Kind() string { return "noop" }

type emailArgs struct {
	OrderID int64  `json:"order_id"`
	To      string `json:"to"`
}

func (emailArgs) Kind() string { return "send_email" }

// waitStatus waits up to timeout for job id to reach status, and fails with msg if it
// does not.
func waitStatus(t *testing.T, b *bundle, id int64, status skiplock.JobStatus, timeout time.Duration, msg string, args ...any) {
	t.Helper()
	eventually(t, timeout, func() bool {
		j, err := b.client.Get(b.ctx, id)
		require.NoError(t, err)
		return j.Status == status
	}, msg, args...)
}

// forKeepingModes runs f as a parallel subtest for each completion mode that keeps the
// job's row after its success, so its output and progress stay readable: archive, keep.
func forKeepingModes(t *testing.T, f func(t *testing.T, mode skiplock.Completion)) {
	t.Helper()
	for name, mode := range map[string]skiplock.Completion{"archive": skiplock.CompletionArchive, "keep": skiplock.CompletionKeep} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, mode)
		})
	}
}

// work stands for a handler's work of length d: it returns after d, or when ctx ends
// first, as a handler that respects its context does.
func work(ctx context.Context, d time.Duration) { pgutil.Sleep(ctx, d) }

// ignorePgxReader leaves out of the goroutine-leak checks pgx's background reader of an
// open connection: pgx starts it on a connection whose write took over 15 ms (a loaded
// machine) and it stays blocked reading until the connection's next message or close.
// The connection belongs to the test's pool, which is still open when the check runs;
// the goroutine is not one of skiplock's.
var ignorePgxReader = goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgconn/internal/bgreader.(*BGReader).bgRead")

// logCapture is a slog.Handler that keeps every record at Warn and above, as its message
// followed by its attributes (key=value), for tests that check what a worker warned of.
type logCapture struct {
	mu    sync.Mutex
	lines []string
}

func (c *logCapture) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (c *logCapture) Handle(_ context.Context, r slog.Record) error {
	line := r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.Key + "=" + a.Value.String()
		return true
	})
	c.mu.Lock()
	c.lines = append(c.lines, line)
	c.mu.Unlock()
	return nil
}
func (c *logCapture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *logCapture) WithGroup(string) slog.Handler      { return c }

// find returns the first kept line that contains every one of parts, or "".
func (c *logCapture) find(parts ...string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
next:
	for _, l := range c.lines {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue next
			}
		}
		return l
	}
	return ""
}

// atOnce counts the handlers running at once (running) and the most seen (most).
type atOnce struct{ running, most atomic.Int32 }

// enter counts one more handler running and returns the call that counts it out.
func (a *atOnce) enter() (leave func()) {
	n := a.running.Add(1)
	for m := a.most.Load(); n > m && !a.most.CompareAndSwap(m, n); m = a.most.Load() {
	}
	return func() { a.running.Add(-1) }
}
