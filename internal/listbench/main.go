// Command listbench measures Client.ListPage paging through a large archive by cursor:
// it loads archived jobs into a schema of its own (generate_series, in a few seconds),
// then pages through them with several filters and prints, per listing, the pages, the
// slowest page and percentiles of the time per page as the caller sees it (round trip
// included).
//
// Usage:
//
//	go run ./internal/listbench                 # 1,000,008 succeeded resize jobs among 1,157,904, 3 runs
//	go run ./internal/listbench -jobs 100000 -runs 1 -limit 1000
//	go run ./internal/listbench -keep           # keep the loaded schema afterwards
//	go run ./internal/listbench -load=false     # reuse the schema kept by an earlier run
//
// DATABASE_URL names the server (default: postgres on 127.0.0.1:5432). The schema
// (-schema, default skiplock_listbench) is dropped and recreated when -load is set, and
// dropped at the end unless -keep is.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
)

// loadSQL fills the archive: ids 1..$1 in finish order; of every 22 jobs, 2 are of
// another kind and 1 is a dead resize, so 19 are succeeded resize jobs. Payloads and metadata have a realistic size (~100 bytes).
const loadSQL = `INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at,
	attempts, max_attempts, created_at, finished_at, metadata)
SELECT g,
	CASE WHEN g % 3 = 0 THEN 'images' ELSE 'default' END,
	CASE WHEN g % 11 = 5 THEN 'send_email' ELSE 'resize' END,
	jsonb_build_object('image', 's3://bucket/uploads/' || g || '.jpg', 'width', 640, 'height', 480),
	CASE WHEN g % 22 = 10 THEN 'dead' ELSE 'succeeded' END,
	0, t, 1, 20, t - interval '1 second', t,
	jsonb_build_object('tenant', 'tenant-' || (g % 50))
FROM generate_series(1, $1::bigint) g, LATERAL (SELECT now() - interval '6 days' + g * interval '400 milliseconds' AS t) x`

func main() {
	var (
		jobs   = flag.Int("jobs", 1_000_000, "archived jobs of the kind+status listing (rounded up); the archive holds 22/19 as many")
		schema = flag.String("schema", "skiplock_listbench", "schema to load and list")
		load   = flag.Bool("load", true, "drop, migrate and load the schema first")
		runs   = flag.Int("runs", 3, "passes over each listing")
		limit  = flag.Int("limit", skiplock.DefaultListLimit, "jobs per page")
	)
	only := flag.String("only", "", "run only the listings whose name contains this")
	keep := flag.Bool("keep", false, "keep the schema at the end (for -load=false)")
	flag.Parse()
	ctx := context.Background()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	s := pgx.Identifier{*schema}.Sanitize()
	if !*keep {
		defer func() {
			if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+s+` CASCADE`); err != nil {
				log.Print(err)
			}
		}()
	}
	total := (*jobs + 18) / 19 * 22
	if *load {
		start := time.Now()
		if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+s+` CASCADE`); err != nil {
			log.Fatal(err)
		}
		if err := skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: *schema}); err != nil {
			log.Fatal(err)
		}
		if _, err := pool.Exec(ctx, replaceSchema(loadSQL, s), total); err != nil {
			log.Fatal(err)
		}
		// The server here runs with autovacuum off; a live one would have vacuumed and
		// analyzed the archive by itself.
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+s+`.jobs_archive`); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("loaded %d archived jobs in %s\n", total, time.Since(start).Round(time.Millisecond))
	}
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: *schema})
	if err != nil {
		log.Fatal(err)
	}
	var mid time.Time
	if err := pool.QueryRow(ctx, `SELECT finished_at FROM `+s+`.jobs_archive WHERE id = $1`, total/2).Scan(&mid); err != nil {
		log.Fatal(err)
	}
	listings := []struct {
		name string
		p    skiplock.ListParams
	}{
		{"kind+status (resize, succeeded)", skiplock.ListParams{Kind: "resize", Status: skiplock.StatusSucceeded}},
		{"kind+status, newest first", skiplock.ListParams{Kind: "resize", Status: skiplock.StatusSucceeded, Descending: true}},
		{"no filter", skiplock.ListParams{}},
		{"kind send_email (1 in 11)", skiplock.ListParams{Kind: "send_email"}},
		{"status dead (1 in 22)", skiplock.ListParams{Status: skiplock.StatusDead}},
		{"metadata tenant-7 (1 in 50)", skiplock.ListParams{Metadata: map[string]string{"tenant": "tenant-7"}}},
		{"finished in the later half", skiplock.ListParams{FinishedSince: mid}},
		{"finished in a 1 h window", skiplock.ListParams{FinishedSince: mid, FinishedUntil: mid.Add(time.Hour)}},
		{"finished in a 1 h window, newest", skiplock.ListParams{FinishedSince: mid, FinishedUntil: mid.Add(time.Hour), Descending: true}},
		{"created in a 1 h window", skiplock.ListParams{CreatedSince: mid, CreatedUntil: mid.Add(time.Hour)}},
	}
	fmt.Printf("%d jobs per page, %d run(s); times per page as the caller sees them\n", *limit, *runs)
	fmt.Printf("%-34s %4s %9s %8s %8s %8s %8s %8s %5s %9s\n", "listing", "run", "jobs", "pages", "p50", "p99", "max", "total", ">20ms", "rerun max")
	for _, l := range listings {
		if !strings.Contains(l.name, *only) {
			continue
		}
		for run := 1; run <= *runs; run++ {
			p := l.p
			p.Limit = *limit
			var times []time.Duration
			var slow, rerunMax time.Duration
			nslow := 0
			n := 0
			start := time.Now()
			for {
				t0 := time.Now()
				res, err := client.ListPage(ctx, p)
				took := time.Since(t0)
				times = append(times, took)
				if err != nil {
					log.Fatal(err)
				}
				if took > slowPage {
					// Run the same page again at once: on a shared machine a slow page is
					// often the scheduler, not the statement; a statement that walks too
					// many rows is as slow the second time.
					nslow++
					slow = max(slow, took)
					t1 := time.Now()
					if _, err := client.ListPage(ctx, p); err != nil {
						log.Fatal(err)
					}
					rerunMax = max(rerunMax, time.Since(t1))
				}
				n += len(res.Jobs)
				if res.Next == "" {
					break
				}
				p.Cursor = res.Next
			}
			elapsed := time.Since(start)
			slices.Sort(times)
			q := func(f float64) time.Duration { return times[min(len(times)-1, int(f*float64(len(times))))] }
			fmt.Printf("%-34s %4d %9d %8d %8s %8s %8s %8s %5d %9s\n", l.name, run, n, len(times),
				ms(q(0.5)), ms(q(0.99)), ms(times[len(times)-1]), elapsed.Round(time.Millisecond), nslow, ms(rerunMax))
		}
	}
}

// slowPage is the page time the issue sets as the bound; slower pages are run again.
const slowPage = 20 * time.Millisecond

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000) }

func replaceSchema(q, s string) string {
	out := []byte{}
	for i := 0; i < len(q); i++ {
		if i+3 <= len(q) && q[i:i+3] == "{s}" {
			out = append(out, s...)
			i += 2
			continue
		}
		out = append(out, q[i])
	}
	return string(out)
}
