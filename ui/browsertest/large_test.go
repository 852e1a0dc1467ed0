package browsertest

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/ui"
)

// newBrowser starts headless Chromium for one test, bounded by timeout.
func newBrowser(t *testing.T, timeout time.Duration) context.Context {
	t.Helper()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium(t)),
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
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(cancelBrowser)
	bctx, cancel := context.WithTimeout(bctx, timeout)
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(bctx, chromedp.EmulateViewport(1280, 900)))
	return bctx
}

// ids returns the ids a query selects.
func (d *pgxDB) ids(sql string, args ...any) []string {
	d.t.Helper()
	rows, err := d.query(context.Background(), d.q(sql), args...)
	require.NoError(d.t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id int64
		require.NoError(d.t, rows.Scan(&id))
		out = append(out, strconv.FormatInt(id, 10))
	}
	require.NoError(d.t, rows.Err())
	return out
}

// listedIDs returns the job ids of the list on the current page, in order.
const listedIDs = `Array.from(document.querySelectorAll("tr[data-job]")).map(tr => tr.dataset.job)`

// TestBrowser_LargeTable follows the queues page's count links to jobs buried under
// 40,000 newer ones, runs a bulk requeue by filter through its confirmation, and checks
// that a 255-character kind leaves the Status column on screen.
func TestBrowser_LargeTable(t *testing.T) {
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

	// The oldest ids: the small mailers queue's 8 queued and 2 running jobs; then 2,500
	// dead mailers jobs among 40,000 queued default jobs; the newest, a dead job whose
	// kind is 255 characters long.
	d.mustExec(`INSERT INTO {s}.jobs (queue, kind, status, attempts, locked_at, locked_by)
		SELECT 'mailers', 'welcome_email', CASE WHEN g <= 2 THEN 'running' ELSE 'queued' END,
			CASE WHEN g <= 2 THEN 1 ELSE 0 END, CASE WHEN g <= 2 THEN now() END, CASE WHEN g <= 2 THEN 'worker-a' END
		FROM generate_series(1, 10) g`)
	d.mustExec(`INSERT INTO {s}.jobs (queue, kind, status, attempts, last_error, finished_at)
		SELECT CASE WHEN g % 17 = 0 THEN 'mailers' ELSE 'default' END, 'bulk_import',
			CASE WHEN g % 17 = 0 THEN 'dead' ELSE 'queued' END, CASE WHEN g % 17 = 0 THEN 3 ELSE 0 END,
			CASE WHEN g % 17 = 0 THEN 'smtp: 421 try again later' END, CASE WHEN g % 17 = 0 THEN now() END
		FROM generate_series(1, 42500) g`)
	longKind := "billing.reconcile." + strings.Repeat("x", 255-len("billing.reconcile."))
	d.mustExec(`INSERT INTO {s}.jobs (queue, kind, status, attempts, last_error, finished_at)
		VALUES ('reports', $1, 'dead', 3, 'boom', now())`, longKind)
	d.mustExec(`ANALYZE {s}.jobs`)

	h, err := ui.New(ui.Config{Client: client, TrustLoopback: true, StatsMaxAge: -1, RefreshInterval: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	bctx := newBrowser(t, 120*time.Second)

	// 1. The running and queued count links of the small queue list its jobs.
	for _, status := range []string{"running", "queued"} {
		cell := `tr[data-queue="mailers"] td[data-status="` + status + `"] a`
		require.NoError(t, chromedp.Do(bctx,
			chromedp.Navigate(srv.URL+"/queues"),
			chromedp.WaitVisible(chromedp.CSS(cell)),
			chromedp.Click(chromedp.CSS(cell)),
			chromedp.WaitVisible(chromedp.CSS(`table.jobs`)),
		))
		want := d.ids(`SELECT id FROM {s}.jobs WHERE queue = 'mailers' AND status = $1 ORDER BY id DESC`, status)
		got, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](listedIDs))
		require.NoError(t, err)
		assert.Equal(t, want, got, "the %s link lists the queue's %s jobs, under 42,500 newer ones", status, status)
		reviewShot(t, bctx, "large-"+status)
	}

	// The queue's own link (any status) starts with its newest jobs of every status.
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/queues"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-queue="mailers"] td a`)),
		chromedp.Click(chromedp.CSS(`tr[data-queue="mailers"] td a`)),
		chromedp.WaitVisible(chromedp.CSS(`table.jobs`)),
	))
	got, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](listedIDs))
	require.NoError(t, err)
	assert.Equal(t, d.ids(`SELECT id FROM {s}.jobs WHERE queue = 'mailers' ORDER BY id DESC LIMIT 50`), got,
		"the queue link lists the queue's newest jobs")

	// 2. A 255-character kind is cut with an ellipsis; Status stays on screen.
	for _, page := range []string{"/dead", "/jobs"} {
		require.NoError(t, chromedp.Do(bctx,
			chromedp.Navigate(srv.URL+page),
			chromedp.WaitVisible(chromedp.CSS(`tr[data-job]`)),
		))
		geo, err := chromedp.Run(bctx, chromedp.Evaluate[map[string]float64](`(() => {
			const tr = document.querySelector("tr[data-job]");
			const kind = tr.querySelector("td[title]");
			const st = tr.querySelector("td[data-col=status]").getBoundingClientRect();
			return {statusRight: st.right, statusWidth: st.width, width: window.innerWidth,
				docWidth: document.documentElement.scrollWidth, kindCut: kind.scrollWidth > kind.clientWidth ? 1 : 0,
				titleLen: kind.title.length};
		})()`))
		require.NoError(t, err)
		assert.LessOrEqual(t, geo["statusRight"], geo["width"], "%s: the Status column is on screen: %v", page, geo)
		assert.Greater(t, geo["statusWidth"], 50.0, "%s: and wide enough to read: %v", page, geo)
		assert.LessOrEqual(t, geo["docWidth"], geo["width"], "%s: nothing scrolls sideways: %v", page, geo)
		assert.Equal(t, 1.0, geo["kindCut"], "%s: the kind is cut: %v", page, geo)
		assert.Equal(t, 255.0, geo["titleLen"], "%s: its title holds the whole kind", page)
		reviewShot(t, bctx, "large-kind"+strings.ReplaceAll(page, "/", "-"))
	}

	// 3. Requeue every dead mailers job by filter: the confirmation shows the count, and
	// the action runs in batches.
	wantDead := len(d.ids(`SELECT id FROM {s}.jobs WHERE queue = 'mailers' AND status = 'dead'`))
	require.Equal(t, 2500, wantDead)
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/dead?queue=mailers&status=dead"),
		chromedp.WaitVisible(chromedp.CSS(`a[data-action="bulk-requeue"]`)),
		chromedp.Click(chromedp.CSS(`a[data-action="bulk-requeue"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-bulk-count]`)),
	))
	count, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector("[data-bulk-count]").dataset.bulkCount`))
	require.NoError(t, err)
	assert.Equal(t, "2500", count, "the confirmation shows how many jobs match")
	reviewShot(t, bctx, "bulk-confirm")
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Click(chromedp.CSS(`button[data-action="bulk-confirm"]`)),
		chromedp.WaitVisible(chromedp.CSS(`p.flash`)),
	))
	flash, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`p.flash`)))
	require.NoError(t, err)
	assert.Equal(t, "Requeued 2500 jobs.", flash)
	assert.Empty(t, d.ids(`SELECT id FROM {s}.jobs WHERE queue = 'mailers' AND status = 'dead'`), "no mailers job is dead any more")
	assert.Len(t, d.ids(`SELECT id FROM {s}.jobs WHERE queue = 'mailers' AND status = 'queued'`), 2508)
	assert.Equal(t, "dead", d.status(int64(mustAtoi(t, d.ids(`SELECT id FROM {s}.jobs WHERE kind = $1`, longKind)[0]))),
		"a dead job of another queue is left alone")
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}
