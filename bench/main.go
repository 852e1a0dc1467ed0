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

	"github.com/skiplock/skiplock"
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
	passes     []string // autovacuum of each pass: "" (the server as it is), "off", "on"
	ownCluster bool
	flow       bool
	workflows  bool
	serverWork bool
	latSplit   bool
	statements bool
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-flow-worker" {
		if err := flowWorkerMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench flow worker:", err)
			os.Exit(1)
		}
		return
	}
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
	flag.BoolVar(&o.allSystems, "all-systems", false, "run the skiplock-only workloads (size1m, scheduled) for River and gue too (durable uses skiplock's durable steps: the others skip it)")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the skiplock runs to this file")
	flag.StringVar(&o.out, "out", "results", "folder for latest.json and latest.md (empty: don't write)")
	flag.BoolVar(&o.statements, "statements", false, "print each workload's server statements per system to stderr (pg_stat_statements, reset before the workload's first run; the server must preload it, e.g. a throwaway cluster)")
	flag.BoolVar(&o.keep, "keep", false, "keep the bench_<system> databases after the run for inspection")
	flag.IntVar(&o.poolSize, "pool", 40, "pgxpool MaxConns for every system")
	var passes string
	flag.StringVar(&passes, "autovacuum", "", `passes by autovacuum setting, e.g. "off,on": "off" runs on -dsn (which must have autovacuum off), "on" on a throwaway cluster the bench starts (pgtest.StartCluster) with autovacuum on; empty: one pass on -dsn as it is`)
	flag.BoolVar(&o.ownCluster, "own-cluster", false, "run every -autovacuum pass on the throwaway cluster, setting autovacuum there with ALTER SYSTEM")
	flag.BoolVar(&o.flow, "flow", false, "run skiplock's flow-control workloads instead (worker processes of their own; writes results/flow.md)")
	flag.BoolVar(&o.workflows, "workflows", false, "run skiplock's workflow workloads instead (workflows against independent jobs, HandleBatch against Handle; writes results/workflows.md)")
	flag.BoolVar(&o.serverWork, "server-experiments", false, "run the server-work-per-job experiments instead: three job table shapes in plain SQL, enqueue and drain (section \"Server work per job (round 3)\" in README.md)")
	flag.DurationVar(&swMixedFor, "server-mixed", swMixedFor, "-server-experiments: how long the mixed phase enqueues while the loops drain")
	flag.StringVar(&swOnly, "server-variants", "", "-server-experiments: comma-separated variants to run (status first for the ratios; empty: all)")
	flag.IntVar(&swJobs, "server-jobs", 0, "-server-experiments: jobs per run (0: 50,000, or 20,000 with -quick)")
	flag.BoolVar(&o.latSplit, "latency-split", false, "split skiplock's enqueue → handler-start latency at a low rate into its parts instead (prints a table, writes no file); with -latency-rate and -latency-for")
	flag.IntVar(&latSplitRate, "latency-rate", latSplitRate, "-latency-split: jobs per second")
	flag.DurationVar(&latSplitFor, "latency-for", latSplitFor, "-latency-split: how long each run offers jobs")
	flag.StringVar(&scaleOpts.curves, "scale", "", "run the scale curves instead: comma-separated curve names, or all (writes results/scale.md, scale.json and scale-*.png; see README.md, \"Scale curves\")")
	flag.IntVar(&scaleOpts.runs, "scale-runs", 0, "-scale: runs per point (0: -runs)")
	flag.DurationVar(&maxRun, "max-run", maxRun, "give up on a run whose jobs are not all done after this long")
	flag.StringVar(&skiplockCompletion, "skiplock-completion", skiplockCompletion, "skiplock's WorkerConfig.Completion: archive (its default), delete or keep")
	flag.IntVar(&skiplockWorkers, "skiplock-workers", 0, "skiplock's MaxWorkers on the default queue (0: its default, 100)")
	flag.DurationVar(&riverFetchCooldown, "river-fetch-cooldown", riverFetchCooldown, "River FetchCooldown")
	flag.DurationVar(&riverFetchPollInterval, "river-poll", riverFetchPollInterval, "River FetchPollInterval")
	flag.IntVar(&riverMaxWorkers, "river-workers", riverMaxWorkers, "River MaxWorkers of the default queue")
	flag.IntVar(&gueWorkers, "gue-workers", gueWorkers, "gue WorkerPool size (each working job holds a pooled connection)")
	flag.DurationVar(&guePollInterval, "gue-poll", guePollInterval, "gue poll interval")
	flag.Parse()
	if _, ok := completions[skiplockCompletion]; !ok {
		return fmt.Errorf("-skiplock-completion %q: want archive, delete or keep", skiplockCompletion)
	}
	if child, err := runFleetChild(o.dsn); child {
		return err
	}

	o.systems = splitList(systems)
	o.passes = splitList(passes)
	for _, p := range o.passes {
		if p != "off" && p != "on" {
			return fmt.Errorf("-autovacuum: %q is neither off nor on", p)
		}
	}
	if len(o.passes) == 0 {
		o.passes = []string{""}
	}
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
	if scaleOpts.curves != "" {
		return runScale(ctx, o)
	}
	if o.serverWork {
		return runServerWork(ctx, o)
	}
	if o.latSplit {
		return runLatencySplit(ctx, o)
	}
	if o.flow {
		return runFlow(ctx, o)
	}
	if o.workflows {
		return runWorkflows(ctx, o)
	}

	sizes := sizesFor(o.quick)
	if fleetIdle != 0 {
		sizes.FleetIdle = fleetIdle
	}
	if o.cpuprofile != "" {
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
			f.Close()
			fmt.Fprintf(os.Stderr, "wrote CPU profile of the run (every system) to %s\n", o.cpuprofile)
		}()
	}

	servers := &passServers{o: o}
	defer servers.close(ctx)
	all := &Reports{}
	var errCount int
	for _, pass := range o.passes {
		dsn, err := servers.dsn(ctx, pass)
		if err != nil {
			return err
		}
		rep := &Report{Started: time.Now().UTC(), Quick: o.quick, Runs: o.runs, Sizes: sizes, Pass: pass}
		if err := rep.collectEnv(ctx, dsn); err != nil {
			return err
		}
		if pass != "" && rep.Env.PGSettings["autovacuum"] != pass {
			return fmt.Errorf("pass %q: the server at %s has autovacuum = %s", pass, redact(dsn), rep.Env.PGSettings["autovacuum"])
		}
		rep.Env.OwnCluster = dsn != o.dsn
		for _, w := range workloads {
			if slices.Contains(o.workloads, w.Name) && (w.Skip == nil || !w.Skip(sizes)) {
				rep.Workloads = append(rep.Workloads, WorkloadInfo{Name: w.Name, Desc: w.Desc(sizes)})
			}
		}
		all.Passes = append(all.Passes, rep)
		runPass(ctx, o, sizes, dsn, rep, all)
		rep.Seconds = time.Since(rep.Started).Seconds()
		rep.Complete = ctx.Err() == nil
		errCount += len(rep.Errors)
		if ctx.Err() != nil {
			break
		}
	}
	md := all.Markdown()
	fmt.Print(md)
	if o.out != "" {
		if err := all.Write(o.out, md); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote %s/latest.json, %s/latest.md and %s/ratios.svg\n", o.out, o.out, o.out)
	}
	if errCount > 0 {
		return fmt.Errorf("%d error(s), see the report", errCount)
	}
	return nil
}

// runPass runs every chosen workload on every system against the server at dsn,
// interleaved: for each workload, run 1 of every system, then run 2 of every
// system, and so on, so that a change in the machine's load weighs on all
// systems alike. Each system works in a database of its own, created first and
// dropped at the end. After every workload the report files are rewritten,
// marked incomplete, so a killed run leaves what it measured.
func runPass(ctx context.Context, o options, sizes Sizes, dsn string, rep *Report, all *Reports) {
	type running struct {
		name string
		sys  System
		pool *pgxpool.Pool
		info *SystemInfo
		skip map[string]bool // workloads the system does not support
	}
	var systems []*running
	defer func() {
		for _, r := range systems {
			r.info.LoadAfter = loadAvg()
			rep.Systems = append(rep.Systems, *r.info)
			r.pool.Close()
			if !o.keep {
				if err := dropDB(context.WithoutCancel(ctx), dsn, "bench_"+r.name); err != nil {
					rep.Errors = append(rep.Errors, err.Error())
				}
			}
		}
	}()
	for _, name := range o.systems {
		r := &running{name: name, sys: registry[name](), skip: map[string]bool{},
			info: &SystemInfo{Name: name, Config: registry[name]().Config(), Version: moduleVersion(name), LoadBefore: loadAvg()}}
		pool, err := openSystem(ctx, o, dsn, r.sys)
		if err != nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("%s: %v", name, err))
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			continue
		}
		r.pool = pool
		systems = append(systems, r)
	}

	for _, w := range workloads {
		if !slices.Contains(o.workloads, w.Name) || (w.Skip != nil && w.Skip(sizes)) {
			continue
		}
		runs := o.runs
		if w.OneRun {
			runs = 1
		}
		vals := map[string]map[string][]float64{} // system -> metric -> runs
		if o.statements && len(systems) > 0 {
			statementsStart(ctx, systems[0].pool, "-statements")
		}
		for r := 1; r <= runs; r++ {
			for _, s := range systems {
				if (w.SkiplockOnly && s.name != "skiplock" && !o.allSystems) || s.skip[w.Name] {
					continue
				}
				if ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				res, err := runOnce(ctx, sizes, w, s.sys, s.pool, func(n string) {
					rep.Notes = append(rep.Notes, fmt.Sprintf("%s %s run %d: %s", s.name, w.Name, r, n))
				})
				s.info.Seconds += time.Since(t0).Seconds()
				// Close the idle connections: the systems' pools together must not hold
				// more connections than the server allows.
				s.pool.Reset()
				switch {
				case errors.Is(err, errUnsupported):
					s.skip[w.Name] = true
					continue
				case err != nil:
					rep.Errors = append(rep.Errors, fmt.Sprintf("%s %s run %d: %v", s.name, w.Name, r, err))
					fmt.Fprintf(os.Stderr, "%-8s %-9s run %d/%d: error: %v\n", s.name, w.Name, r, runs, err)
					continue
				}
				var parts []string
				if vals[s.name] == nil {
					vals[s.name] = map[string][]float64{}
				}
				for _, m := range w.Metrics {
					if v, ok := res[m.Key]; ok {
						vals[s.name][m.Key] = append(vals[s.name][m.Key], v)
						parts = append(parts, fmt.Sprintf("%s=%s", m.Key, format(v, m.Unit)))
					}
				}
				fmt.Fprintf(os.Stderr, "%-3s %-8s %-9s run %d/%d: %s  (%.1fs)\n", rep.Pass, s.name, w.Name, r, runs, strings.Join(parts, " "), time.Since(t0).Seconds())
			}
		}
		for _, s := range systems {
			for _, m := range w.Metrics {
				if v := vals[s.name][m.Key]; len(v) > 0 {
					rep.add(w.Name, m, s.name, v)
				}
			}
		}
		if o.statements && len(systems) > 0 {
			statementsByDatabase(ctx, systems[0].pool, rep.Pass+" "+w.Name, runs)
		}
		if o.out != "" {
			if err := all.Write(o.out, all.Markdown()); err != nil {
				rep.Errors = append(rep.Errors, err.Error())
			}
		}
	}
	for _, s := range systems {
		if err := s.sys.Reset(ctx); err != nil && ctx.Err() == nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("%s: reset: %v", s.name, err))
		}
	}
}

// openSystem gives sys a fresh database bench_<name> on the server at dsn, a pool
// on it, and runs its setup.
// tune, if given, adjusts the pool's configuration before it connects (a scale curve's
// query tracer).
func openSystem(ctx context.Context, o options, dsn string, sys System, tune ...func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	db := "bench_" + sys.Name()
	if err := recreateDB(ctx, dsn, db); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.Database = db
	cfg.MaxConns = int32(o.poolSize)
	for _, f := range tune {
		f(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := sys.Setup(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("setup: %w", err)
	}
	return pool, nil
}

// runOnce runs one workload once on one system, from empty tables and a fresh
// checkpoint.
func runOnce(ctx context.Context, sizes Sizes, w Workload, sys System, pool *pgxpool.Pool, note func(string)) (map[string]float64, error) {
	if err := sys.Reset(ctx); err != nil {
		return nil, fmt.Errorf("reset: %w", err)
	}
	// Start every run without a pending checkpoint's worth of WAL.
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, maxRun)
	defer cancel()
	e := &env{ctx: rctx, sys: sys, pool: pool, sizes: sizes}
	res, err := w.Run(e)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = fmt.Errorf("gave up after -max-run %s: %w", maxRun, err)
	}
	for _, n := range e.notes {
		note(n)
	}
	return res, err
}

// migratedDB recreates database db on o.dsn, migrates skiplock's schema into it and
// opens a pool on it (maxConns 0: pgx's default). done closes the pool and, unless
// -keep, drops the database.
func migratedDB(ctx context.Context, o options, db string, maxConns int32) (pool *pgxpool.Pool, done func(), err error) {
	if err := recreateDB(ctx, o.dsn, db); err != nil {
		return nil, nil, err
	}
	drop := func() {
		if !o.keep {
			_ = dropDB(context.WithoutCancel(ctx), o.dsn, db)
		}
	}
	cfg, err := pgxpool.ParseConfig(o.dsn)
	if err != nil {
		drop()
		return nil, nil, err
	}
	cfg.ConnConfig.Database = db
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	if pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		drop()
		return nil, nil, err
	}
	done = func() { pool.Close(); drop() }
	if err := skiplock.Migrate(ctx, pool); err != nil {
		done()
		return nil, nil, err
	}
	return pool, done, nil
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
