package ui_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/ui"
)

// BenchmarkPages_MillionRowArchive times pages against an archive of 1,000,000 jobs
// (finished over the last two hours, so half fall in the throughput plot's hour) and a
// hot table of 10,000 queued jobs. Setup takes about half a minute; run it with
//
//	go test -run '^$' -bench MillionRowArchive -benchtime 10x -count 3 ./ui
func BenchmarkPages_MillionRowArchive(b *testing.B) {
	ctx := context.Background()
	schema := pgtest.Schema(b)
	pool := pgtest.Pool(b)
	if err := skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}); err != nil {
		b.Fatal(err)
	}
	s := pgx.Identifier{schema}.Sanitize()
	for _, q := range []string{
		`INSERT INTO ` + s + `.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts, created_at, finished_at)
		SELECT g, 'q' || (g % 8), 'kind_' || (g % 50), jsonb_build_object('n', g), 'succeeded', 0, now(), 1, 20, now(),
			now() - interval '2 hours' + make_interval(secs => g * 0.0072)
		FROM generate_series(1, 1000000) g`,
		`INSERT INTO ` + s + `.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts, created_at, finished_at)
		VALUES (0, 'q0', 'rare', '{}', 'succeeded', 0, now(), 1, 20, now(), now() - interval '3 hours')`,
		`SELECT setval(pg_get_serial_sequence('` + s + `.jobs', 'id'), 1000001)`,
		`INSERT INTO ` + s + `.jobs (queue, kind) SELECT 'q' || (g % 8), 'kind_' || (g % 50) FROM generate_series(1, 10000) g`,
		`VACUUM ANALYZE ` + s + `.jobs_archive`,
		`ANALYZE ` + s + `.jobs`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	h, err := ui.New(ui.Config{Client: client, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(b *testing.B, url string) {
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: %s", url, resp.Status)
		}
	}

	for _, page := range []struct{ name, path string }{
		{"jobs_newest", "/jobs"},
		{"jobs_deep_cursor", "/jobs?before=500000"},
		{"jobs_status_succeeded", "/jobs?status=succeeded&before=" + strconv.Itoa(700000)},
		{"jobs_kind_filter", "/jobs?kind=kind_7"},
		{"jobs_rare_kind_one_window", "/jobs?kind=rare"},
		{"job", "/jobs/123456"},
		{"queues_refresh", "/queues/live"}, // after the first render: the plot's past minutes are cached
	} {
		b.Run(page.name, func(b *testing.B) {
			get(b, srv.URL+page.path) // warm up
			for b.Loop() {
				get(b, srv.URL+page.path)
			}
		})
	}
	// The first render of a new handler counts the whole hour: 500,000 archive rows here.
	b.Run("queues_first_render", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			h, err := ui.New(ui.Config{Client: client, Logger: quietLogger()})
			if err != nil {
				b.Fatal(err)
			}
			srv := httptest.NewServer(h)
			b.StartTimer()
			get(b, srv.URL+"/queues")
			b.StopTimer()
			srv.Close()
			b.StartTimer()
		}
	})
}
