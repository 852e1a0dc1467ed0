package ui_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/ui"
)

// bundle is what setup hands a test: a migrated schema of its own, a client on it, and
// the dashboard served on a loopback httptest server.
type bundle struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	client *skiplock.Client
	schema string
	srv    *httptest.Server
	h      *ui.Handler  // the handler srv serves
	http   *http.Client // keeps cookies, does not follow redirects
}

// setup migrates a fresh schema and serves a Handler for it configured by cfg (its Client
// is filled in).
func setup(t *testing.T, cfg ui.Config) *bundle {
	t.Helper()
	b := newBundle(t)
	b.serve(cfg)
	return b
}

func newBundle(t *testing.T) *bundle {
	t.Helper()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	require.NoError(t, skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}))
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Logger: quietLogger()})
	require.NoError(t, err)
	return &bundle{t: t, ctx: ctx, pool: pool, client: client, schema: schema}
}

// serve starts the handler for cfg on a loopback server whose clients are this machine's
// users (TrustLoopback), as with `skiplock ui --trust-loopback`.
func (b *bundle) serve(cfg ui.Config) {
	b.t.Helper()
	cfg.Client = b.client
	cfg.TrustLoopback = true
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	h, err := ui.New(cfg)
	require.NoError(b.t, err)
	b.h = h
	var handler http.Handler = h
	if cfg.Prefix != "" {
		mux := http.NewServeMux()
		mux.Handle(cfg.Prefix+"/", h)
		handler = mux
	}
	b.srv = httptest.NewServer(handler)
	b.t.Cleanup(b.srv.Close)
	b.http = newHTTPClient(b.t)
}

func newHTTPClient(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{
		Jar:           jar,
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// response is a read answer.
type response struct {
	code     int
	body     string
	location string
	header   http.Header
}

func (b *bundle) do(req *http.Request) response {
	b.t.Helper()
	resp, err := b.http.Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	return response{code: resp.StatusCode, body: string(body), location: resp.Header.Get("Location"), header: resp.Header}
}

// get fetches path (under the server's root) with the bundle's cookies.
func (b *bundle) get(path string) response {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.srv.URL+path, nil)
	require.NoError(b.t, err)
	return b.do(req)
}

// post submits form to path as a browser form would, from the same origin.
func (b *bundle) post(path string, form url.Values) response {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+path, strings.NewReader(form.Encode()))
	require.NoError(b.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	return b.do(req)
}

var csrfRE = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`)

// csrf loads page and returns the CSRF token of its forms (the cookie it is bound to
// stays in the bundle's jar).
func (b *bundle) csrf(page string) string {
	b.t.Helper()
	r := b.get(page)
	require.Equal(b.t, http.StatusOK, r.code, r.body)
	m := csrfRE.FindStringSubmatch(r.body)
	require.NotNil(b.t, m, "no csrf token on %s", page)
	return m[1]
}

// act posts an action form with a valid CSRF token taken from page.
func (b *bundle) act(page, action string, form url.Values) response {
	b.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	form.Set("csrf", b.csrf(page))
	return b.post(action, form)
}

// job is a row to insert directly, in any state.
type job struct {
	queue, kind, status string
	payload             string // JSON; "{}" when empty
	attempts            int
	lastError           string
	errorsJSON          string        // the error history, as JSON; empty for none
	runIn               time.Duration // run_at is now() plus this
}

// insert writes j into the jobs table and returns its id.
func (b *bundle) insert(j job) int64 {
	b.t.Helper()
	if j.queue == "" {
		j.queue = "default"
	}
	if j.kind == "" {
		j.kind = "email"
	}
	if j.status == "" {
		j.status = "queued"
	}
	if j.payload == "" {
		j.payload = "{}"
	}
	var id int64
	err := b.pool.QueryRow(b.ctx, b.q(`
		INSERT INTO {s}.jobs (queue, kind, payload, status, attempts, last_error, errors, locked_by, locked_at, run_at, finished_at)
		VALUES ($1, $2, $3::jsonb, $4, $5, nullif($6, ''), nullif($7, '')::jsonb,
			CASE WHEN $4 = 'running' THEN 'worker-1' END,
			CASE WHEN $4 = 'running' THEN now() END,
			now() + make_interval(secs => $8),
			CASE WHEN $4 IN ('succeeded', 'failed', 'dead', 'cancelled') THEN now() END)
		RETURNING id`),
		j.queue, j.kind, j.payload, j.status, j.attempts, j.lastError, j.errorsJSON, j.runIn.Seconds()).Scan(&id)
	require.NoError(b.t, err)
	return id
}

// archive moves job id to the archive as succeeded, finished finishedAgo before now.
func (b *bundle) archive(id int64, finishedAgo time.Duration) {
	b.t.Helper()
	_, err := b.pool.Exec(b.ctx, b.q(`
		WITH d AS (DELETE FROM {s}.jobs WHERE id = $1 RETURNING *)
		INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
			locked_by, last_error, errors, unique_key, created_at, finished_at)
		SELECT id, queue, kind, payload, 'succeeded', priority, run_at, greatest(attempts, 1), max_attempts,
			locked_by, last_error, errors, unique_key, created_at, now() - make_interval(secs => $2)
		FROM d`), id, finishedAgo.Seconds())
	require.NoError(b.t, err)
}

// status returns a job's status, or "" when it is in neither table.
func (b *bundle) status(id int64) string {
	b.t.Helper()
	var s string
	err := b.pool.QueryRow(b.ctx, b.q(`
		SELECT status FROM {s}.jobs WHERE id = $1
		UNION ALL SELECT status FROM {s}.jobs_archive WHERE id = $1`), id).Scan(&s)
	if err == pgx.ErrNoRows {
		return ""
	}
	require.NoError(b.t, err)
	return s
}

func (b *bundle) count(query string, args ...any) int {
	b.t.Helper()
	var n int
	require.NoError(b.t, b.pool.QueryRow(b.ctx, b.q(query), args...).Scan(&n))
	return n
}

// q puts the test schema, quoted, where a query says {s}.
func (b *bundle) q(query string) string {
	return strings.ReplaceAll(query, "{s}", pgx.Identifier{b.schema}.Sanitize())
}

// rowCounter is a pgx tracer that counts the statements a pool runs and the rows they
// return or change.
type rowCounter struct{ statements, rows atomic.Int64 }

func (c *rowCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (c *rowCounter) TraceQueryEnd(_ context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	c.statements.Add(1)
	c.rows.Add(d.CommandTag.RowsAffected())
}

// countRows puts the bundle's client on a pool of its own whose statements and rows are
// counted; serve after it, so the handler uses that client.
func (b *bundle) countRows() *rowCounter {
	b.t.Helper()
	rc := &rowCounter{}
	cfg, err := pgxpool.ParseConfig(b.pool.Config().ConnString())
	require.NoError(b.t, err)
	cfg.ConnConfig.Tracer = rc
	traced, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(b.t, err)
	b.t.Cleanup(traced.Close)
	b.client, err = skiplock.NewClient(traced, skiplock.Config{Schema: b.schema, Logger: quietLogger()})
	require.NoError(b.t, err)
	return rc
}
