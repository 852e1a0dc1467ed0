package browsertest

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/ui"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "write the queues page screenshot to docs/ui-queues.png")

// screenshotPath is docs/dashboard.md's screenshot, relative to this package.
const screenshotPath = "../../docs/ui-queues.png"

// chromium returns the browser to drive, failing the test with how to install it.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SKIPLOCK_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("SKIPLOCK_CHROMIUM=%s: %v: point it at a Chromium or Chrome binary, or unset it and "+
				"install Debian's chromium (apt-get update && apt-get install -y chromium)", p, err)
		}
		return p
	}
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	t.Fatal("the dashboard's browser test needs Chromium and found none at /usr/bin/chromium: " +
		"install Debian's package (apt-get update && apt-get install -y chromium; scripts/ensure-env.sh does it " +
		"when apt-get may be used), or point SKIPLOCK_CHROMIUM at a Chromium or Chrome binary")
	return ""
}

// pgxDB runs the fixture's SQL with the schema put in for {s}.
type pgxDB struct {
	t      *testing.T
	schema string
	exec   func(ctx context.Context, sql string, args ...any) error
	query  func(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	row    func(ctx context.Context, sql string, args ...any) pgx.Row
}

func (d *pgxDB) q(sql string) string {
	return strings.ReplaceAll(sql, "{s}", pgx.Identifier{d.schema}.Sanitize())
}

func (d *pgxDB) mustExec(sql string, args ...any) {
	d.t.Helper()
	require.NoError(d.t, d.exec(context.Background(), d.q(sql), args...))
}

// counts returns the jobs table's counts by queue and status.
func (d *pgxDB) counts() map[string]map[string]int {
	d.t.Helper()
	rows, err := d.query(context.Background(), d.q(`SELECT queue, status, count(*) FROM {s}.jobs GROUP BY 1, 2`))
	require.NoError(d.t, err)
	out := map[string]map[string]int{}
	var q, s string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&q, &s, &n}, func() error {
		if out[q] == nil {
			out[q] = map[string]int{}
		}
		out[q][s] = n
		return nil
	})
	require.NoError(d.t, err)
	return out
}

func (d *pgxDB) status(id int64) string {
	d.t.Helper()
	var s string
	require.NoError(d.t, d.row(context.Background(), d.q(`SELECT status FROM {s}.jobs WHERE id = $1`), id).Scan(&s))
	return s
}

// seed fills the schema with what an operator would see on a busy afternoon.
func seed(t *testing.T, d *pgxDB) (deadID int64) {
	t.Helper()
	// An hour of finished jobs, a few hundred a minute with a bump in the middle.
	d.mustExec(`
		INSERT INTO {s}.jobs (queue, kind, payload, status, attempts, run_at)
		SELECT CASE WHEN g % 3 = 0 THEN 'thumbnails' WHEN g % 3 = 1 THEN 'emails' ELSE 'reports' END,
			'work', '{}', 'succeeded', 1,
			now() - make_interval(secs => (g % 3600) + 1)
		FROM generate_series(1, 9000) g
		WHERE random() < 0.55 + 0.4 * sin(((g % 3600) / 3600.0) * pi() * 2.2)`)
	d.mustExec(`
		WITH moved AS (DELETE FROM {s}.jobs WHERE status = 'succeeded' RETURNING *)
		INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
			created_at, finished_at)
		SELECT id, queue, kind, payload, status, priority, run_at, attempts, max_attempts, run_at, run_at FROM moved`)
	// The hot table: queued, scheduled, running, failed and dead jobs.
	d.mustExec(`INSERT INTO {s}.jobs (queue, kind, payload) SELECT 'emails', 'send_confirmation', jsonb_build_object('order_id', g) FROM generate_series(1, 37) g`)
	d.mustExec(`INSERT INTO {s}.jobs (queue, kind, payload) SELECT 'thumbnails', 'thumbnail', jsonb_build_object('image_id', g) FROM generate_series(1, 212) g`)
	d.mustExec(`INSERT INTO {s}.jobs (queue, kind, payload, run_at) SELECT 'reports', 'nightly_report', '{}', now() + interval '3 hours' FROM generate_series(1, 4)`)
	d.mustExec(`UPDATE {s}.jobs SET run_at = now() - interval '95 seconds' WHERE id = (SELECT min(id) FROM {s}.jobs WHERE queue = 'emails')`)
	d.mustExec(`INSERT INTO {s}.jobs (queue, kind, payload, status, attempts, locked_at, locked_by)
		SELECT 'thumbnails', 'thumbnail', jsonb_build_object('image_id', 1000 + g), 'running', 1, now(), 'worker-a'
		FROM generate_series(1, 8) g`)
	d.mustExec(`INSERT INTO {s}.jobs (queue, kind, payload, status, attempts, last_error, finished_at)
		VALUES ('reports', 'nightly_report', '{"day":"2026-11-30"}', 'failed', 1, 'permanent: report template missing', now())`)
	err := d.row(context.Background(), d.q(`
		INSERT INTO {s}.jobs (queue, kind, payload, status, attempts, max_attempts, last_error, errors, finished_at)
		VALUES ('emails', 'sync_inventory', '{"sku":"SKU-42"}', 'dead', 3, 3, 'inventory service timed out',
			'[{"attempt":1,"at":"2026-12-01T10:00:00Z","error":"inventory service timed out"},
			  {"attempt":2,"at":"2026-12-01T10:00:02Z","error":"panic: nil map\n\ngoroutine 12 [running]:\nmain.sync(...)"},
			  {"attempt":3,"at":"2026-12-01T10:00:06Z","error":"inventory service timed out"}]', now())
		RETURNING id`)).Scan(&deadID)
	require.NoError(t, err)
	return deadID
}

// TestBrowser_QueuesLiveCountsAndRequeueADeadJob drives the dashboard in headless
// Chromium: the queues page shows the database's counts and updates itself when they
// change, and a dead job opened from the dead page is requeued by its button.
func TestBrowser_QueuesLiveCountsAndRequeueADeadJob(t *testing.T) {
	browser := chromium(t)
	ctx := context.Background()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	require.NoError(t, skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}))
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	require.NoError(t, err)
	d := &pgxDB{t: t, schema: schema,
		exec: func(ctx context.Context, sql string, args ...any) error {
			_, err := pool.Exec(ctx, sql, args...)
			return err
		},
		query: pool.Query, row: pool.QueryRow}
	deadID := seed(t, d)

	h, err := ui.New(ui.Config{Client: client, TrustLoopback: true, RefreshInterval: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(browser),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	bctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()

	// 1. The queues page shows the counts the database holds.
	require.NoError(t, chromedp.Do(bctx,
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(srv.URL+"/queues"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-queue="thumbnails"]`)),
	))
	shown, err := chromedp.Run(bctx, chromedp.Evaluate[map[string]map[string]string](`(() => {
		const out = {};
		for (const tr of document.querySelectorAll("tr[data-queue]")) {
			const q = out[tr.dataset.queue] = {};
			for (const td of tr.querySelectorAll("td[data-status]")) q[td.dataset.status] = td.innerText.replace(/\D/g, "");
		}
		return out;
	})()`))
	require.NoError(t, err)
	want := d.counts()
	require.Len(t, shown, 3, "queues shown: %v", shown)
	for queue, byStatus := range shown {
		for _, st := range []string{"queued", "running", "failed", "dead", "cancelled"} {
			assert.Equal(t, strconv.Itoa(want[queue][st]), byStatus[st], "queue %s, status %s: the page shows what the database holds", queue, st)
		}
		assert.NotContains(t, byStatus, "succeeded", "succeeded jobs are archived: no always-zero column")
	}
	bars, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("svg.plot rect.bar").length`))
	require.NoError(t, err)
	assert.Equal(t, 60, bars, "one bar per minute of the last hour")

	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")), "the screenshot is a PNG")
	out := filepath.Join(t.TempDir(), "ui-queues.png")
	if *updateScreenshot {
		out = screenshotPath
	}
	require.NoError(t, os.WriteFile(out, png, 0o644))
	t.Logf("screenshot: %s (%d bytes)", out, len(png))

	// 2. It updates itself, without a reload, when the database changes.
	require.NoError(t, chromedp.Do(bctx, chromedp.Evaluate[chromedp.Void](`window.__sameDocument = true`)))
	d.mustExec(`INSERT INTO {s}.jobs (queue, kind) SELECT 'emails', 'send_confirmation' FROM generate_series(1, 5)`)
	wantQueued := strconv.Itoa(d.counts()["emails"]["queued"])
	got, err := chromedp.Run(bctx, chromedp.Poll[string](
		`(() => { const td = document.querySelector('tr[data-queue="emails"] td[data-status="queued"]');
			return td && td.dataset.count === `+strconv.Quote(wantQueued)+` ? td.dataset.count : false; })()`,
		chromedp.WithPollingTimeout(20*time.Second)))
	require.NoError(t, err, "the queued count did not update to %s", wantQueued)
	assert.Equal(t, wantQueued, got)
	same, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`window.__sameDocument === true`))
	require.NoError(t, err)
	assert.True(t, same, "the page updated in place, not by a reload")

	// 3. Open the dead job from the dead page and requeue it.
	jobRow := fmt.Sprintf(`tr[data-job="%d"]`, deadID)
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Click(chromedp.CSS(`header nav a[href="/dead"]`)),
		chromedp.WaitVisible(chromedp.CSS(jobRow)),
	))
	reviewShot(t, bctx, "dead")
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Click(chromedp.CSS(jobRow+` td.num a`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-job-status]`)),
	))
	reviewShot(t, bctx, "job")
	status, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`[data-job-status]`)))
	require.NoError(t, err)
	assert.Equal(t, "dead", status)
	history, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`details.attempt`)))
	require.NoError(t, err)
	assert.Contains(t, history, "inventory service timed out")

	require.NoError(t, chromedp.Do(bctx,
		chromedp.Click(chromedp.CSS(`button[data-action="retry"]`)),
		chromedp.WaitVisible(chromedp.CSS(`p.flash`)),
	))
	status, err = chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`[data-job-status]`)))
	require.NoError(t, err)
	assert.Equal(t, "queued", status, "the page shows the job queued")
	flash, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`p.flash`)))
	require.NoError(t, err)
	assert.Equal(t, "Requeued 1 job.", flash)
	assert.Equal(t, "queued", d.status(deadID), "the database holds the job queued")

	if os.Getenv("SKIPLOCK_UI_SHOTS") != "" {
		require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/jobs"), chromedp.WaitVisible(chromedp.CSS(`table.jobs`))))
		reviewShot(t, bctx, "jobs")
	}
}

// reviewShot saves a screenshot of the current page as $SKIPLOCK_UI_SHOTS/<name>.png, for
// a person to look at; without the variable it does nothing.
func reviewShot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("SKIPLOCK_UI_SHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
}
