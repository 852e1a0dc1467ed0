// Command bench runs skiplock, River and gue side by side on the same
// PostgreSQL server, one system after another in one process, and writes a
// Markdown table and JSON to results/. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const defaultDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

type options struct {
	dsn        string
	quick      bool
	runs       int
	systems    []string
	workloads  []string
	allSystems bool
	cpuprofile string
	out        string
	keep       bool
	poolSize   int
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		o                  options
		systems, workNames string
	)
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		dsn = defaultDSN
	}
	var compiled []string
	for _, n := range systemOrder {
		if registry[n] != nil {
			compiled = append(compiled, n)
		}
	}
	var allWork, defaultWork []string
	for _, w := range workloads {
		allWork = append(allWork, w.Name)
		if !w.OptIn {
			defaultWork = append(defaultWork, w.Name)
		}
	}
	flag.StringVar(&o.dsn, "dsn", dsn, "PostgreSQL URL of a database to connect to first; each system gets a database bench_<system> created (and dropped) on that server. Default: $DATABASE_URL or "+defaultDSN)
	flag.BoolVar(&o.quick, "quick", false, "reduced sizes: the whole run takes about 1-2 minutes")
	flag.IntVar(&o.runs, "runs", 3, "runs per workload and system; figures are the median with min–max")
	flag.StringVar(&systems, "systems", strings.Join(compiled, ","), "comma-separated systems to run, in this order")
	flag.StringVar(&workNames, "workloads", strings.Join(defaultWork, ","), "comma-separated workloads to run (fleet runs only when named: "+strings.Join(allWork, ",")+")")
	flag.BoolVar(&o.allSystems, "all-systems", false, "run the skiplock-only workloads (size1m, scheduled) for River and gue too")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the skiplock runs to this file")
	flag.StringVar(&o.out, "out", "results", "folder for latest.json and latest.md (empty: don't write)")
	flag.BoolVar(&o.keep, "keep", false, "keep the bench_<system> databases after the run for inspection")
	flag.IntVar(&o.poolSize, "pool", 40, "pgxpool MaxConns for every system")
	flag.DurationVar(&maxRun, "max-run", maxRun, "give up on a run whose jobs are not all done after this long")
	flag.DurationVar(&riverFetchCooldown, "river-fetch-cooldown", riverFetchCooldown, "River FetchCooldown")
	flag.DurationVar(&riverFetchPollInterval, "river-poll", riverFetchPollInterval, "River FetchPollInterval")
	flag.IntVar(&riverMaxWorkers, "river-workers", riverMaxWorkers, "River MaxWorkers of the default queue")
	flag.IntVar(&gueWorkers, "gue-workers", gueWorkers, "gue WorkerPool size (each working job holds a pooled connection)")
	flag.DurationVar(&guePollInterval, "gue-poll", guePollInterval, "gue poll interval")
	flag.Parse()
	if child, err := runFleetChild(o.dsn); child {
		return err
	}

	o.systems = splitList(systems)
	o.workloads = splitList(workNames)
	for _, s := range o.systems {
		if registry[s] == nil {
			return fmt.Errorf("system %q is not compiled in (have %s)", s, strings.Join(compiled, ", "))
		}
	}
	for _, w := range o.workloads {
		if !slices.Contains(allWork, w) {
			return fmt.Errorf("unknown workload %q (have %s)", w, strings.Join(allWork, ", "))
		}
	}
	if o.runs < 1 {
		return errors.New("-runs must be at least 1")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	sizes := fullSizes
	if o.quick {
		sizes = quickSizes
	}
	if fleetIdle != 0 {
		sizes.FleetIdle = fleetIdle
	}
	rep := &Report{Started: time.Now().UTC(), Quick: o.quick, Runs: o.runs, Sizes: sizes}
	if err := rep.collectEnv(ctx, o.dsn); err != nil {
		return err
	}
	for _, w := range workloads {
		if slices.Contains(o.workloads, w.Name) && (w.Skip == nil || !w.Skip(sizes)) {
			rep.Workloads = append(rep.Workloads, WorkloadInfo{Name: w.Name, Desc: w.Desc(sizes)})
		}
	}

	for _, name := range o.systems {
		if err := runSystem(ctx, o, sizes, name, rep); err != nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("%s: %v", name, err))
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	rep.Seconds = time.Since(rep.Started).Seconds()

	rep.Complete = ctx.Err() == nil
	md := rep.Markdown()
	fmt.Print(md)
	if o.out != "" {
		if err := rep.Write(o.out, md); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote %s/latest.json and %s/latest.md\n", o.out, o.out)
	}
	if len(rep.Errors) > 0 {
		return fmt.Errorf("%d error(s), see the report", len(rep.Errors))
	}
	return nil
}

// runSystem gives one system a fresh database and runs the chosen workloads.
// After every workload it rewrites the report files, marked incomplete, so a
// killed run leaves what it measured.
func runSystem(ctx context.Context, o options, sizes Sizes, name string, rep *Report) (err error) {
	sys := registry[name]()
	start := time.Now()
	info := SystemInfo{Name: name, Config: sys.Config(), Version: moduleVersion(name), LoadBefore: loadAvg()}
	defer func() {
		info.Seconds = time.Since(start).Seconds()
		info.LoadAfter = loadAvg()
		rep.Systems = append(rep.Systems, info)
	}()

	db := "bench_" + name
	if err := recreateDB(ctx, o.dsn, db); err != nil {
		return err
	}
	if !o.keep {
		defer func() {
			err = errors.Join(err, dropDB(context.WithoutCancel(ctx), o.dsn, db))
		}()
	}
	cfg, err := pgxpool.ParseConfig(o.dsn)
	if err != nil {
		return err
	}
	cfg.ConnConfig.Database = db
	cfg.MaxConns = int32(o.poolSize)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := sys.Setup(ctx, pool); err != nil {
		return fmt.Errorf("setup: %w", err)
	}

	if name == "skiplock" && o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			err = errors.Join(err, f.Close())
			fmt.Fprintf(os.Stderr, "wrote CPU profile of the skiplock runs to %s\n", o.cpuprofile)
		}()
	}

	for _, w := range workloads {
		if !slices.Contains(o.workloads, w.Name) || (w.Skip != nil && w.Skip(sizes)) ||
			(w.SkiplockOnly && name != "skiplock" && !o.allSystems) {
			continue
		}
		runs := o.runs
		if w.OneRun {
			runs = 1
		}
		vals := map[string][]float64{}
		for r := 1; r <= runs; r++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := sys.Reset(ctx); err != nil {
				return fmt.Errorf("reset: %w", err)
			}
			// Start every run without a pending checkpoint's worth of WAL.
			if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
				return fmt.Errorf("checkpoint: %w", err)
			}
			rctx, cancel := context.WithTimeout(ctx, maxRun)
			e := &env{ctx: rctx, sys: sys, pool: pool, sizes: sizes}
			t0 := time.Now()
			res, err := w.Run(e)
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				err = fmt.Errorf("gave up after -max-run %s: %w", maxRun, err)
			}
			cancel()
			for _, n := range e.notes {
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s %s run %d: %s", name, w.Name, r, n))
			}
			if err != nil {
				rep.Errors = append(rep.Errors, fmt.Sprintf("%s %s run %d: %v", name, w.Name, r, err))
				fmt.Fprintf(os.Stderr, "%-8s %-9s run %d/%d: error: %v\n", name, w.Name, r, runs, err)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				continue
			}
			var parts []string
			for _, m := range w.Metrics {
				if v, ok := res[m.Key]; ok {
					vals[m.Key] = append(vals[m.Key], v)
					parts = append(parts, fmt.Sprintf("%s=%s", m.Key, format(v, m.Unit)))
				}
			}
			fmt.Fprintf(os.Stderr, "%-8s %-9s run %d/%d: %s  (%.1fs)\n", name, w.Name, r, runs, strings.Join(parts, " "), time.Since(t0).Seconds())
		}
		for _, m := range w.Metrics {
			if v := vals[m.Key]; len(v) > 0 {
				rep.add(w.Name, m, name, v)
			}
		}
		if o.out != "" {
			partial := *rep
			partial.Systems = append(slices.Clone(rep.Systems), info)
			partial.Seconds = time.Since(rep.Started).Seconds()
			if err := partial.Write(o.out, partial.Markdown()); err != nil {
				return err
			}
		}
	}
	return sys.Reset(ctx)
}

func recreateDB(ctx context.Context, dsn, db string) error {
	if err := dropDB(ctx, dsn, db); err != nil {
		return err
	}
	return adminExec(ctx, dsn, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize())
}

func dropDB(ctx context.Context, dsn, db string) error {
	return adminExec(ctx, dsn, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)")
}

func adminExec(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect to %s: %w (set -dsn or DATABASE_URL)", redact(dsn), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w (the bench needs a role that may create databases)", sql, err)
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// splitQualified turns "schema.table" into its identifier parts.
func splitQualified(name string) []string { return strings.Split(name, ".") }
