// Command bigload fills a schema with a million jobs shaped like a troubled afternoon
// and times every dashboard page against it. It is how docs/dashboard.md's timings
// are measured:
//
//	go run ./ui/internal/bigload -load            # create and fill the schema (~1-2 min)
//	go run ./ui/internal/bigload                  # time the pages again
//	go run ./ui/internal/bigload -load -archive-day 1000000 -schema skiplock_ui_day
//	                                              # a million archived jobs in the last day
//
// The jobs table gets 1,000,000 rows: about 880,000 queued (8 of them, and 2 running, in
// the small "mailers" queue, at the oldest ids, where a window over the newest rows
// never reaches), 100,000 dead, 20,000 failed, and ten 255-character kinds; the
// archive gets 300,000 succeeded jobs, 70,000 of them in the last hour with a 10,000-job
// spike in one minute. Each page is served by ui.Handler in this process (no network),
// once to warm up and then -runs times; the table gives the median and the slowest.
// Every count link of the queues page is followed and checked to list jobs when its
// count is not zero.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/maintenance"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/ui"
)

func main() {
	dsn := flag.String("database-url", "postgres://postgres@127.0.0.1:5432/postgres", "the database")
	schema := flag.String("schema", "skiplock_ui_big", "the schema to fill and read")
	load := flag.Bool("load", false, "drop and fill the schema first")
	runs := flag.Int("runs", 10, "timed requests per page")
	day := flag.Int("archive-day", 0, "with -load: archive this many jobs over the last day instead of 230,000 over the week")
	flag.Parse()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, *dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if *load {
		start := time.Now()
		if err := fill(ctx, pool, *schema, *day); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("loaded schema %s in %s\n", *schema, time.Since(start).Round(time.Second))
	}
	// The timing rollup, as the maintenance leader writes it: after a load it catches up
	// with the week (timed), later it writes the minutes over since the last run.
	start := time.Now()
	rollup := maintenance.NewTimingRollup(pgutil.DB{Pool: pool, Schema: *schema})
	for statements := 1; ; statements++ {
		behind, err := rollup.Run(ctx, time.Now())
		if err != nil {
			log.Fatal(err)
		}
		if !behind {
			fmt.Printf("timing rollup written in %s (%d checks)\n", time.Since(start).Round(time.Millisecond), statements)
			break
		}
	}
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: *schema})
	if err != nil {
		log.Fatal(err)
	}
	ctl := ui.NewClientControl(client)
	newHandler := func() http.Handler {
		h, err := ui.New(ui.Config{Client: client, Queues: ctl, Periodic: ctl, TrustLoopback: true,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
		if err != nil {
			log.Fatal(err)
		}
		return h
	}
	if err := measure(ctx, pool, *schema, newHandler, *runs); err != nil {
		log.Fatal(err)
	}
}

// fill drops the schema, migrates it and loads it with one INSERT ... SELECT
// generate_series per table.
func fill(ctx context.Context, pool *pgxpool.Pool, schema string, day int) error {
	s := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+s+` CASCADE`); err != nil {
		return err
	}
	if err := skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}); err != nil {
		return err
	}
	q := func(sql string, args ...any) error {
		_, err := pool.Exec(ctx, strings.ReplaceAll(sql, "{s}", s), args...)
		return err
	}
	rows, span, gap := 230000, 7*86400, 86400 // the archive before the last hour: six days of the week
	if day > 0 {
		rows, span, gap = day, 86400, 3600
	}
	// The archive holds the oldest ids (1-300,000), the jobs table 300,001-1,300,000
	// (300,000 + g). Status: g % 100 < 10 dead (100,000), 17 or 20 failed (20,000), else
	// queued; the 10 oldest multiples of 1000 are the mailers queue's 8 queued and 2
	// running jobs. Queues: 1 in 10 reports, 1 in 10 webhooks, the rest default.
	if err := q(`
		INSERT INTO {s}.jobs (id, queue, kind, payload, status, attempts, max_attempts, run_at, created_at,
			locked_at, locked_by, last_error, errors, finished_at)
		OVERRIDING SYSTEM VALUE
		SELECT 300000 + g, queue, kind, jsonb_build_object('n', g, 'customer', 'c-' || (g % 9973)), status,
			CASE WHEN status IN ('dead', 'failed') THEN 3 WHEN status = 'running' THEN 1 ELSE 0 END, 3,
			CASE WHEN status = 'queued' AND g % 97 = 0 THEN now() + interval '2 hours' ELSE created END,
			created,
			CASE WHEN status = 'running' THEN now() END,
			CASE WHEN status = 'running' THEN 'worker-' || g WHEN status IN ('dead', 'failed') THEN 'worker-c' END,
			CASE WHEN status IN ('dead', 'failed') THEN 'upstream timed out after 30s (call ' || g || ')' END,
			CASE WHEN status IN ('dead', 'failed') THEN jsonb_build_array(
				jsonb_build_object('attempt', 1, 'at', created + interval '31 seconds', 'error', 'upstream timed out', 'worker', 'worker-a'),
				jsonb_build_object('attempt', 2, 'at', created + interval '1 hour', 'error', 'upstream timed out', 'worker', 'worker-b')) END,
			CASE WHEN status IN ('dead', 'failed') THEN created + interval '3 hours' END
		FROM (
			SELECT g, now() - make_interval(secs => (1000000 - g) * 0.37) - interval '3 hours' AS created,
				CASE WHEN g IN (1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000) THEN 'mailers'
					WHEN g % 10 = 7 THEN 'reports' WHEN g % 10 = 8 THEN 'webhooks' ELSE 'default' END AS queue,
				CASE WHEN g IN (9000, 10000) THEN 'running'
					WHEN g IN (1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000) THEN 'queued'
					WHEN g % 100 < 10 THEN 'dead' WHEN g % 100 IN (17, 20) THEN 'failed' ELSE 'queued' END AS status,
				CASE WHEN g % 100000 = 12345 THEN 'billing.reconcile.' || repeat('x', 237)
					WHEN g % 3 = 0 THEN 'email.send' WHEN g % 3 = 1 THEN 'invoice.render' ELSE 'webhook.deliver' END AS kind
			FROM generate_series(1, 1000000) g
		) t`); err != nil {
		return err
	}
	// The archive, in finished_at order (its BRIN index relies on it): 230,000 jobs over
	// the week before the last day (or -archive-day jobs over the day before the last
	// hour), then 60,000 over the last hour and a 10,000-job spike 20 minutes ago; each
	// waited 0-4.8 s and ran 0-3.6 s.
	if err := q(`
		INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
			created_at, finished_at, started_at)
		SELECT row_number() OVER (ORDER BY f), q, CASE WHEN n % 5 = 0 THEN 'invoice.render' ELSE 'email.send' END, '{}', 'succeeded', 0,
			f - make_interval(secs => (n % 97) * 0.05 + (n % 13) * 0.3), 1, 3,
			f - make_interval(secs => (n % 97) * 0.05 + (n % 13) * 0.3), f, f - make_interval(secs => (n % 97) * 0.05)
		FROM (
			SELECT now() - make_interval(secs => $2) + make_interval(secs => g * ($2 - $3::float8) / $1) AS f,
				CASE WHEN g % 4 = 0 THEN 'mailers' ELSE 'default' END AS q, g AS n FROM generate_series(1, $1) g
			UNION ALL
			SELECT now() - interval '1 hour' + make_interval(secs => g * (3600.0 / 60000)),
				CASE WHEN g % 4 = 0 THEN 'mailers' ELSE 'default' END, g FROM generate_series(1, 60000) g
			UNION ALL
			SELECT date_trunc('minute', now()) - interval '20 minutes' + make_interval(secs => g * (55.0 / 10000)), 'reports', g
			FROM generate_series(1, 10000) g
		) t ORDER BY f`, rows, span, gap); err != nil {
		return err
	}
	// The newest job is a durable one with 200 steps, 5 signals and 300 log records.
	if err := q(`UPDATE {s}.jobs SET durable = true WHERE id = 1300000`); err != nil {
		return err
	}
	if err := q(`INSERT INTO {s}.job_steps (job_id, seq, name, kind, result, attempt, started_at, finished_at)
		SELECT 1300000, g, 'step-' || g, 'step', jsonb_build_object('n', g), 1, now(), now() FROM generate_series(0, 199) g`); err != nil {
		return err
	}
	if err := q(`INSERT INTO {s}.job_signals (job_id, name, payload) SELECT 1300000, 'approve', '{}' FROM generate_series(1, 5)`); err != nil {
		return err
	}
	if err := q(`INSERT INTO {s}.job_logs (job_id, fence, seq, attempt, at, level, message)
		SELECT 1300000, 1, g, 1, now(), 0, 'log line ' || g FROM generate_series(1, 300) g`); err != nil {
		return err
	}
	// New jobs get ids after the loaded ones.
	if err := q(`SELECT setval(pg_get_serial_sequence('{s}.jobs', 'id'), 1300000)`); err != nil {
		return err
	}
	// As autovacuum would have by then (it is off on the shared test server).
	if err := q(`VACUUM ANALYZE {s}.jobs`); err != nil {
		return err
	}
	return q(`VACUUM ANALYZE {s}.jobs_archive`)
}

// page is one timed URL.
type page struct {
	path       string
	median, mx time.Duration
	rows       int
}

var (
	countLinkRE = regexp.MustCompile(`href="(/jobs\?queue=[^"]+&amp;status=[a-z]+)">([0-9\x{202f}]+)<`)
	rowRE       = regexp.MustCompile(`<tr data-job="`)
)

func measure(ctx context.Context, pool *pgxpool.Pool, schema string, newHandler func() http.Handler, runs int) error {
	h := newHandler()
	get := func(path string) (string, time.Duration, error) {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.RemoteAddr, req.Host = "127.0.0.1:50000", "127.0.0.1:8080"
		rec := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(rec, req)
		took := time.Since(start)
		body, _ := io.ReadAll(rec.Result().Body)
		if rec.Code != http.StatusOK {
			return "", took, fmt.Errorf("%s: %d %s", path, rec.Code, body)
		}
		return string(body), took, nil
	}
	var someDead int64
	if err := pool.QueryRow(ctx, `SELECT max(id) FROM `+pgx.Identifier{schema, "jobs"}.Sanitize()+` WHERE status = 'dead'`).Scan(&someDead); err != nil {
		return err
	}
	paths := []string{"/queues", "/queues/live", "/jobs", "/jobs?status=queued", "/jobs?status=running",
		"/jobs?queue=mailers&status=queued", "/jobs?queue=mailers&status=running", "/jobs?queue=default&status=queued",
		"/jobs?queue=reports&status=dead", "/jobs?queue=default&status=failed", "/jobs?queue=webhooks&status=failed", "/jobs?status=dead&before=350000",
		"/dead", "/dead?queue=webhooks", "/dead?kind=invoice.render&queue=reports",
		"/jobs?queue=mailers", "/jobs?status=succeeded&queue=reports", "/jobs?kind=nothing.matches", "/jobs?status=queued&kind=nothing.matches",
		"/jobs?q=%22c-42%22", "/jobs?status=queued&q=%22c-42%22", "/queues?sort=dead",
		"/queue?name=default", "/queue?name=default&range=24h", "/queue?name=default&range=7d", "/queue?name=reports",
		"/jobs?queue=default&status=queued&order=run", "/periodic", "/limits", "/jobs/1300000",
		"/search", "/search?q=%22c-42%22", "/search?q=nothing.matches", "/search?mode=error&q=call+1234567",
		"/search?mode=contains&q=%7B%22customer%22%3A%22c-42%22%7D", "/search?q=%22c-42%22&queue=mailers",
		fmt.Sprintf("/jobs/%d", someDead), "/workers", "/audit"}
	var out []page
	for _, p := range paths {
		if _, _, err := get(p); err != nil { // warm up
			return err
		}
		var times []time.Duration
		var body string
		for range runs {
			b, took, err := get(p)
			if err != nil {
				return err
			}
			body, times = b, append(times, took)
		}
		slices.Sort(times)
		out = append(out, page{path: p, median: times[len(times)/2], mx: times[len(times)-1], rows: len(rowRE.FindAllString(body, -1))})
	}
	fmt.Printf("\n| page | median | slowest | rows listed |\n| --- | ---: | ---: | ---: |\n")
	for _, p := range out {
		fmt.Printf("| `%s` | %.1f ms | %.1f ms | %d |\n", p.path, ms(p.median), ms(p.mx), p.rows)
	}

	// Every count link of the queues page reaches its jobs.
	body, _, err := get("/queues")
	if err != nil {
		return err
	}
	links, empty := 0, 0
	var slowest time.Duration
	for _, m := range countLinkRE.FindAllStringSubmatch(body, -1) {
		link := strings.ReplaceAll(m[1], "&amp;", "&")
		n := strings.ReplaceAll(m[2], "\u202f", "")
		b, took, err := get(link)
		if err != nil {
			return err
		}
		slowest = max(slowest, took)
		links++
		if got := len(rowRE.FindAllString(b, -1)); n != "0" && got == 0 {
			empty++
			fmt.Printf("count link %s (count %s) lists no job\n", link, n)
		}
	}
	fmt.Printf("\ncount links followed: %d, of which listing nothing despite a count: %d; slowest %.1f ms\n", links, empty, ms(slowest))

	// What a refresh of the shared stats costs (one request per StatsMaxAge pays it).
	var took []time.Duration
	for range 3 {
		if _, err := pool.Exec(ctx, `UPDATE `+pgx.Identifier{schema, "stats_cache"}.Sanitize()+` SET taken_at = now() - interval '1 hour'`); err != nil {
			return err
		}
		_, t, err := get("/queues/live")
		if err != nil {
			return err
		}
		took = append(took, t)
	}
	slices.Sort(took)
	fmt.Printf("/queues/live when it recomputes the stats cache: median %.1f ms, slowest %.1f ms\n", ms(took[1]), ms(took[2]))

	// The first live refresh of a new handler reads the whole hour of the archive and the
	// failure series (later ones read two minutes, and failures once a minute).
	took = took[:0]
	for range 3 {
		h = newHandler()
		_, t, err := get("/queues/live")
		if err != nil {
			return err
		}
		took = append(took, t)
	}
	slices.Sort(took)
	fmt.Printf("/queues/live, first of a new handler (the hour's plot and failures): median %.1f ms, slowest %.1f ms\n", ms(took[1]), ms(took[2]))

	// The first queue page of a new handler: it keeps nothing, so as every other (the
	// rollup's rows and the archive's minutes since its mark).
	for _, path := range []string{"/queue?name=default", "/queue?name=default&range=24h", "/queue?name=default&range=7d"} {
		took = took[:0]
		for range 3 {
			h = newHandler()
			_, t, err := get(path)
			if err != nil {
				return err
			}
			took = append(took, t)
		}
		slices.Sort(took)
		fmt.Printf("%s, first of a new handler: median %.1f ms, slowest %.1f ms\n", path, ms(took[1]), ms(took[2]))
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
