package browsertest

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/ui"
)

// queueShotPath is docs/dashboard.md's screenshot of the queue page.
const queueShotPath = "../../docs/ui-queue.png"

// fixture is a migrated schema, a client on it and the dashboard served for it.
type fixture struct {
	d      *pgxDB
	pool   *pgxpool.Pool
	client *skiplock.Client
	url    string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	require.NoError(t, skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}))
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	d := &pgxDB{t: t, schema: schema,
		exec: func(ctx context.Context, sql string, args ...any) error {
			_, err := pool.Exec(ctx, sql, args...)
			return err
		},
		query: pool.Query, row: pool.QueryRow}
	h, err := ui.New(ui.Config{Client: client, TrustLoopback: true, StatsMaxAge: -1, RefreshInterval: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &fixture{d: d, pool: pool, client: client, url: srv.URL}
}

// TestBrowser_BulkCancelOfAThousandMatchingQueuedJobs cancels every queued job of a
// queue from the jobs page, through its confirmation: the database holds them
// cancelled, and the other queue's jobs queued.
func TestBrowser_BulkCancelOfAThousandMatchingQueuedJobs(t *testing.T) {
	f := newFixture(t)
	f.d.mustExec(`INSERT INTO {s}.jobs (queue, kind, payload)
		SELECT CASE WHEN g <= 1000 THEN 'emails' ELSE 'reports' END, 'send_newsletter', jsonb_build_object('n', g)
		FROM generate_series(1, 1040) g`)
	bctx := newBrowser(t, 90*time.Second)

	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(f.url+"/jobs?status=queued&queue=emails"),
		chromedp.WaitVisible(chromedp.CSS(`a[data-action="bulk-cancel"]`)),
	))
	reviewShot(t, bctx, "jobs-bulk")
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Click(chromedp.CSS(`a[data-action="bulk-cancel"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-bulk-count]`)),
	))
	count, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector("[data-bulk-count]").dataset.bulkCount`))
	require.NoError(t, err)
	assert.Equal(t, "1000", count, "the confirmation shows how many jobs match")
	reviewShot(t, bctx, "bulk-cancel-confirm")
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Click(chromedp.CSS(`button[data-action="bulk-confirm"]`)),
		chromedp.WaitVisible(chromedp.CSS(`p.flash`)),
	))
	flash, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`p.flash`)))
	require.NoError(t, err)
	assert.Equal(t, "Cancelled 1000 jobs.", flash)
	counts := f.d.counts()
	assert.Equal(t, map[string]int{"cancelled": 1000}, counts["emails"], "the database holds every emails job cancelled")
	assert.Equal(t, map[string]int{"queued": 40}, counts["reports"], "and the other queue's jobs queued")
	var audit string
	require.NoError(t, f.d.row(context.Background(), f.d.q(`SELECT target || ' → ' || result FROM {s}.ui_audit WHERE action = 'cancel all matching'`)).Scan(&audit))
	assert.Equal(t, `status="queued" queue="emails" (confirmed 1000) → Cancelled 1000 jobs.`, audit)
}

type report struct {
	N int `json:"n"`
}

func (report) Kind() string { return "nightly_report" }

// TestBrowser_LimitSetOnThePageIsAppliedByAWorkerAndTheQueuePageChartsItsJobs sets a
// queue's concurrency to 1 on the limits page; a worker of 4 slots then runs the
// queue's 6 jobs one at a time (the database's record of their runs says so), and the
// queue page's wait chart plots them.
func TestBrowser_LimitSetOnThePageIsAppliedByAWorkerAndTheQueuePageChartsItsJobs(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// An hour of history for the charts: 40 jobs a minute whose wait grows and falls,
	// from 58 minutes ago (the test may cross a minute's end: all stay in the hour).
	f.d.mustExec(`INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
			created_at, finished_at, started_at)
		SELECT 1000000 + m * 100 + g, 'reports', CASE WHEN g % 4 = 0 THEN 'monthly_report' ELSE 'nightly_report' END, '{}', 'succeeded', 0,
			f - make_interval(secs => w + r), 1, 3, f - make_interval(secs => w + r), f, f - make_interval(secs => r)
		FROM generate_series(2, 59) m, generate_series(1, 40) g,
			LATERAL (SELECT date_trunc('minute', now()) - make_interval(mins => 60 - m) + make_interval(secs => g) AS f,
				(0.2 + 2.5 * (1 + sin(m / 9.0)) * (g % 7) / 7.0) AS w, (0.3 + (g % 5) * 0.15) AS r) x
		ORDER BY 1`)
	f.d.mustExec(`CREATE TABLE {s}.runs (job_id bigint, started timestamptz, ended timestamptz)`)
	for i := range 6 {
		_, err := f.client.Enqueue(ctx, report{N: i}, &skiplock.EnqueueOptions{Queue: "reports"})
		require.NoError(t, err)
	}
	bctx := newBrowser(t, 90*time.Second)

	// 1. Set the concurrency of the queue to 1 on the limits page.
	row := `tr[data-limits="reports"] `
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(f.url+"/limits"),
		chromedp.WaitVisible(chromedp.CSS(row+`input[name="concurrency"]`)),
		chromedp.SetValue(chromedp.CSS(row+`input[name="concurrency"]`), "1"),
		chromedp.Click(chromedp.CSS(row+`button[data-action="set-limits"]`)),
		chromedp.WaitVisible(chromedp.CSS(`p.flash`)),
	))
	shown, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('tr[data-limits="reports"] input[name="concurrency"]').value`))
	require.NoError(t, err)
	assert.Equal(t, "1", shown, "the page shows the limit set")
	set, err := f.client.QueueLimitsSet(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, set["reports"].Concurrency)

	// 2. A worker of 4 slots runs the queue's jobs one at a time; it leads the maintenance,
	// so it writes the timing rollup the queue page reads.
	w, err := skiplock.NewWorker(f.client, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: time.Second,
		Queues: map[string]skiplock.QueueConfig{"reports": {MaxWorkers: 4}}})
	require.NoError(t, err)
	run := f.d.q(`INSERT INTO {s}.runs VALUES ($1, $2, clock_timestamp())`)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[report]) error {
		started := time.Now()
		tick := time.NewTimer(100 * time.Millisecond)
		defer tick.Stop()
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		_, err := f.pool.Exec(ctx, run, job.ID, started)
		return err
	}))
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	archived := func() int {
		var n int
		require.NoError(t, f.d.row(ctx, f.d.q(`SELECT count(*) FROM {s}.jobs_archive WHERE id < 1000000`)).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return archived() == 6 }, 30*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, f.d.row(ctx, f.d.q(`SELECT count(*) FROM {s}.ui_timing_rollup_mark
			WHERE through >= date_trunc('minute', now()) - interval '1 minute' - (width - 1) * interval '1 minute'`)).Scan(&n))
		return n == 2
	}, 30*time.Second, 50*time.Millisecond, "the worker, leading, wrote the rollup up to the last minute that is over")
	stop()
	require.NoError(t, <-done)
	var overlaps int
	require.NoError(t, f.d.row(ctx, f.d.q(`SELECT count(*) FROM {s}.runs a JOIN {s}.runs o ON a.job_id < o.job_id
		AND a.started < o.ended AND o.started < a.ended`)).Scan(&overlaps))
	assert.Zero(t, overlaps, "two jobs of the queue ran at once under the limit of 1 set on the page")

	// 3. The queue page charts the wait of the hour, the worker's jobs in its last minute.
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(f.url+"/queues"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-queue="reports"] a[data-queue-page]`)),
		chromedp.Click(chromedp.CSS(`tr[data-queue="reports"] a[data-queue-page]`)),
		chromedp.WaitVisible(chromedp.CSS(`figure[data-chart="wait"] polyline.p95`)),
	))
	chart, err := chromedp.Run(bctx, chromedp.Evaluate[map[string]float64](`(() => {
		const fig = document.querySelector('figure[data-chart="wait"]');
		const box = fig.querySelector("svg").getBoundingClientRect();
		return {dots: fig.querySelectorAll("circle.dot").length, lines: fig.querySelectorAll("polyline").length,
			width: box.width, height: box.height};
	})()`))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, chart["dots"], 58.0, "a point per minute with jobs: %v", chart)
	assert.GreaterOrEqual(t, chart["lines"], 2.0, "p50 and p95 are drawn: %v", chart)
	assert.Greater(t, chart["width"], 600.0, "the chart is drawn at a readable size: %v", chart)
	jobs, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('table[data-timing="spans"] tbody tr:nth-child(2) td[data-jobs]').dataset.jobs`))
	require.NoError(t, err)
	assert.Equal(t, strconv.Itoa(58*40+6), jobs, "the hour counts the history and the worker's 6 jobs")
	behind, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.querySelector("[data-rollup-behind]") !== null`))
	require.NoError(t, err)
	assert.False(t, behind, "the page reads the rollup the worker wrote")

	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	if *updateScreenshot {
		require.NoError(t, os.WriteFile(queueShotPath, png, 0o644))
	}
	reviewShot(t, bctx, "queue")
}
