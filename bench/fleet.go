package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
)

// The fleet workload runs skiplock workers as separate OS processes: this
// binary, started again with -fleet-child. Each child is one "host": its own
// pool, its own LISTEN connection, its own leader-election campaign.

// fleetChild holds the flags of a child process.
var fleetChild struct {
	on     bool
	db     string
	id     string
	queues int
	only   string // serve this queue only (-fleet-split)
	schema string // work in this schema (-fleet-schemas)
	system string // the system the child runs: skiplock, or bare (its drain floor's loops)
	stats  string // write the process's goroutines and Go memory to this file every second
}

// fleetQueueSlots is QueueConfig.MaxWorkers of each queue of a many-queue worker process
// (-fleet-queue-slots).
var fleetQueueSlots = 10

// fleetStatsDir, when set, makes every worker process started by startFleet write its
// goroutine count and Go memory to a file of its own there (childStats reads it).
var fleetStatsDir string

// fleetPoolDSN, when set, is the connection string of the worker processes' pools (e.g.
// through a transaction-pooling PgBouncer); their LISTEN connections still go to -dsn.
var fleetPoolDSN string

// fleetSplit: in the drain with many processes, each process serves a queue of its own
// and gets its share of the jobs inserted in one block (its own heap pages). It separates
// what many processes cost from what sharing one queue costs.
var fleetSplit bool

// fleetSchemas: in the drain with many processes, each process works in a schema of its
// own (its own jobs table, archive, indexes and notification channel), so the processes
// share nothing but the server. It measures what many processes cost on this machine
// whatever a queue does.
var fleetSchemas bool

// fleetDrainQueues is how many queues the fleet drain spreads its jobs over (round-robin,
// as jobs of many queues arrive); every process serves all of them.
var fleetDrainQueues = 1

func init() {
	flag.BoolVar(&fleetChild.on, "fleet-child", false, "internal: run as one worker process of the fleet workload")
	flag.StringVar(&fleetChild.db, "fleet-db", "", "internal: database of a fleet child")
	flag.StringVar(&fleetChild.id, "fleet-id", "", "internal: worker id of a fleet child")
	flag.StringVar(&fleetChild.only, "fleet-only", "", "internal: the only queue of a fleet child")
	flag.StringVar(&fleetPoolDSN, "fleet-pool-dsn", "", "fleet: connection string of the worker processes' pools (e.g. a transaction-pooling PgBouncer, with default_query_exec_mode=cache_describe); their LISTEN connections go to -dsn")
	flag.StringVar(&fleetChild.schema, "fleet-schema", "", "internal: the schema of a fleet child")
	flag.IntVar(&fleetDrainQueues, "fleet-drain-queues", fleetDrainQueues, "fleet: queues the drain spreads its jobs over (round-robin; q000…, every process serves all of them, 10 slots each)")
	flag.BoolVar(&fleetSchemas, "fleet-schemas", false, "fleet: in the drain with many processes, each process works in a schema of its own (its own tables and channel; they share only the server)")
	flag.BoolVar(&fleetSplit, "fleet-split", false, "fleet: in the drain with many processes, each process drains a queue of its own (jobs inserted in one block per queue)")
	flag.StringVar(&fleetChild.system, "fleet-system", "skiplock", "internal: the system a fleet child runs (skiplock, bare)")
	flag.StringVar(&fleetChild.stats, "fleet-stats-file", "", "internal: a fleet child writes its goroutine count and Go memory to this file every second")
	flag.IntVar(&fleetQueueSlots, "fleet-queue-slots", fleetQueueSlots, "fleet: QueueConfig.MaxWorkers of each queue of a many-queue worker process")
	flag.IntVar(&fleetChild.queues, "fleet-queues", 1, "internal: queues of a fleet child (q000…; 1 means the default queue)")
	flag.IntVar(&fleetPool, "fleet-pool", fleetPool, "pgxpool MaxConns of each fleet worker process")
	flag.IntVar(&fleetProcs, "fleet-procs", fleetProcs, "worker processes in the fleet workload's many-process runs")
	flag.DurationVar(&fleetIdle, "fleet-idle", 0, "override the fleet workload's idle window (negative: skip the idle runs)")
	flag.IntVar(&fleetSlots, "fleet-slots", 0, "QueueConfig.MaxWorkers of the drain's worker processes (0: the default, 100)")
	flag.BoolVar(&fleetStatements, "fleet-statements", false, "fleet: print the server's busiest statements of each timed drain (pg_stat_statements, reset when the drain starts; the server must preload it) to stderr")
}

var (
	fleetSlots int
	// fleetStatements: print each timed drain's busiest statements (-fleet-statements).
	fleetStatements bool
	fleetIdle       time.Duration
	fleetPool       = 10 // the need of a one-queue worker (8), and a little room
	fleetProcs      = 16
)

// fleetQueues is the queue count of the many-queue idle runs.
const fleetQueues = 100

// statsLag: an idle backend reports its commits to pg_stat_database up to
// 10 s late (PGSTAT_IDLE_INTERVAL), so idle counting starts this long after
// the workers started.
const statsLag = 11 * time.Second

// runFleetChild runs one worker until SIGTERM, or until stdin closes (the
// parent died), and reports whether it ran.
func runFleetChild(dsn string) (bool, error) {
	if !fleetChild.on {
		return false, nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	poolDSN := dsn
	if fleetPoolDSN != "" {
		poolDSN = fleetPoolDSN
	}
	cfg, err := pgxpool.ParseConfig(poolDSN)
	if err != nil {
		return true, err
	}
	cfg.ConnConfig.Database = fleetChild.db
	cfg.MaxConns = int32(fleetPool)
	if fleetChild.system == "bare" {
		cfg.ConnConfig.RuntimeParams["application_name"] = bareFleetApp + fleetChild.id
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return true, err
	}
	defer pool.Close()
	if fleetChild.stats != "" {
		go writeChildStats(ctx, fleetChild.stats)
	}
	if fleetChild.system == "bare" {
		// The drain floor's loops, as one process of a fleet of them.
		b := &bareSystem{pool: pool}
		if err := b.startLoops(ctx, NewSink(0), false); err != nil {
			return true, err
		}
		<-ctx.Done()
		return true, b.Stop(context.WithoutCancel(ctx))
	}
	client, err := skiplock.NewClient(pool, skiplock.Config{Logger: quietLogger(), Schema: fleetChild.schema})
	if err != nil {
		return true, err
	}
	wc := skiplock.WorkerConfig{ID: fleetChild.id, Logger: quietLogger(), Completion: completions[skiplockCompletion]}
	if fleetPoolDSN != "" {
		u, err := url.Parse(dsn)
		if err != nil {
			return true, fmt.Errorf("-dsn must be a URL with -fleet-pool-dsn: %w", err)
		}
		u.Path = "/" + fleetChild.db
		wc.ListenURL = u.String()
	}
	if fleetChild.queues == 1 && fleetSlots > 0 {
		wc.Queues = map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: fleetSlots}}
	}
	if fleetChild.only != "" {
		wc.Queues = map[string]skiplock.QueueConfig{fleetChild.only: {MaxWorkers: fleetSlots}}
	}
	if fleetChild.queues > 1 {
		wc.Queues = map[string]skiplock.QueueConfig{}
		for i := range fleetChild.queues {
			wc.Queues[fmt.Sprintf("q%03d", i)] = skiplock.QueueConfig{MaxWorkers: fleetQueueSlots}
		}
	}
	w, err := skiplock.NewWorker(client, wc)
	if err != nil {
		return true, err
	}
	if err := skiplock.Handle(w, func(context.Context, *skiplock.Job[NoopArgs]) error { return nil }); err != nil {
		return true, err
	}
	return true, w.Run(ctx)
}

// fleet is a set of running child processes.
type fleet struct {
	cmds  []*exec.Cmd
	stdin []io.WriteCloser
}

// startFleet starts procs worker processes with queues queues each on the
// database of pool, and waits until every one listens.
func startFleet(e *env, procs, queues int) (*fleet, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	f := &fleet{}
	for i := range procs {
		cmd := exec.Command(self, "-fleet-child", "-fleet-system", e.sys.Name(), "-dsn", e.pool.Config().ConnString(), "-fleet-db", e.pool.Config().ConnConfig.Database,
			"-fleet-id", fmt.Sprintf("fleet-%d-%d", os.Getpid(), i),
			"-fleet-queues", fmt.Sprint(queues), "-fleet-pool", fmt.Sprint(fleetPool), "-fleet-slots", fmt.Sprint(fleetSlots),
			"-fleet-queue-slots", fmt.Sprint(fleetQueueSlots), "-skiplock-completion", skiplockCompletion)
		if fleetStatsDir != "" {
			cmd.Args = append(cmd.Args, "-fleet-stats-file", childStatsFile(i))
		}
		if fleetSplit && procs > 1 {
			cmd.Args = append(cmd.Args, "-fleet-only", queueName(i))
		}
		if fleetSchemas && procs > 1 {
			cmd.Args = append(cmd.Args, "-fleet-schema", fleetSchemaName(i))
		}
		if fleetPoolDSN != "" && procs > 1 {
			cmd.Args = append(cmd.Args, "-fleet-pool-dsn", fleetPoolDSN)
		}
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, errors.Join(err, f.stop())
		}
		if err := cmd.Start(); err != nil {
			return nil, errors.Join(err, f.stop())
		}
		f.cmds = append(f.cmds, cmd)
		f.stdin = append(f.stdin, in)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var n int
		ready := `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name LIKE 'skiplock-listen fleet-%' AND query LIKE 'LISTEN%'`
		if e.sys.Name() == "bare" {
			ready = `SELECT count(DISTINCT application_name) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name LIKE '` + bareFleetApp + `%'`
		}
		if err := e.pool.QueryRow(e.ctx, ready).Scan(&n); err != nil {
			return nil, errors.Join(err, f.stop())
		}
		if n == procs {
			return f, nil
		}
		if time.Now().After(deadline) {
			return nil, errors.Join(fmt.Errorf("fleet: %d of %d worker processes listening after 2 minutes", n, procs), f.stop())
		}
		if err := sleep(e.ctx, 50*time.Millisecond); err != nil {
			return nil, errors.Join(err, f.stop())
		}
	}
}

// stop stops the processes gracefully (SIGTERM) and waits for them.
func (f *fleet) stop() error {
	for _, c := range f.cmds {
		_ = c.Process.Signal(syscall.SIGTERM)
	}
	var errs []error
	for i, c := range f.cmds {
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				errs = append(errs, fmt.Errorf("fleet worker %d: %w", i, err))
			}
		case <-time.After(time.Minute):
			_ = c.Process.Kill()
			errs = append(errs, fmt.Errorf("fleet worker %d did not stop within a minute", i))
			<-done
		}
		_ = f.stdin[i].Close()
	}
	return errors.Join(errs...)
}

// idleCommits starts procs processes with queues queues each, waits out
// the statistics lag, and returns the commits per second the database saw
// over window (pg_stat_database.xact_commit of the bench database, read from
// another database so the reads are not counted).
func idleCommits(e *env, admin *pgx.Conn, procs, queues int, window time.Duration) (float64, error) {
	f, err := startFleet(e, procs, queues)
	if err != nil {
		return 0, err
	}
	rate, err := func() (float64, error) {
		if err := sleep(e.ctx, statsLag); err != nil {
			return 0, err
		}
		db := e.pool.Config().ConnConfig.Database
		var c0, c1 int64
		if err := admin.QueryRow(e.ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = $1`, db).Scan(&c0); err != nil {
			return 0, err
		}
		t0 := time.Now()
		if err := sleep(e.ctx, window); err != nil {
			return 0, err
		}
		if err := admin.QueryRow(e.ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = $1`, db).Scan(&c1); err != nil {
			return 0, err
		}
		return float64(c1-c0) / time.Since(t0).Seconds(), nil
	}()
	return rate, errors.Join(err, f.stop())
}

// cpu is the CPU time the fleet's processes have used so far (0 for one that ended).
func (f *fleet) cpu() time.Duration {
	var d time.Duration
	for _, c := range f.cmds {
		if t, err := procCPU(c.Process.Pid); err == nil {
			d += t
		}
	}
	return d
}

// drainCPU is where the CPU of a fleet drain went, per job: the worker processes, the
// server's processes, and the cores the machine left idle on average.
type drainCPU struct {
	workers, server float64 // µs per job
	idle            float64 // cores
}

// fleetDrain starts procs worker processes, waits until they listen, then inserts n due
// jobs in one transaction and times from its commit until every job is final in the
// database.
func fleetDrain(e *env, procs, n int) (float64, drainCPU, error) {
	var cpu drainCPU
	if err := e.sys.Reset(e.ctx); err != nil {
		return 0, cpu, err
	}
	// insert writes n jobs in one transaction; wait waits until they are all final.
	var (
		insert      func(n int) error
		wait        func(timeout time.Duration) error
		childQueues = fleetDrainQueues
	)
	if e.sys.Name() == "bare" {
		insert = func(n int) error { return e.sys.Bulk(n, time.Time{}, 1)(e.ctx) }
		wait = func(timeout time.Duration) error { return bareFleetWait(e, timeout) }
	} else if fleetSchemas && procs > 1 {
		var err error
		if insert, wait, err = fleetSchemasSetup(e, procs); err != nil {
			return 0, cpu, err
		}
		childQueues = 1
	} else {
		queues := []string{skiplock.DefaultQueue}
		if fleetDrainQueues > 1 {
			queues = queues[:0]
			for i := range fleetDrainQueues {
				queues = append(queues, queueName(i))
			}
		} else if fleetSplit && procs > 1 {
			queues = queues[:0]
			for i := range procs {
				queues = append(queues, queueName(i))
			}
		}
		insert = func(n int) error { return fleetInsert(e, n, queues) }
		wait = func(timeout time.Duration) error { return fleetWait(e, inSkiplock(queues), timeout) }
		if len(queues) > manyQueuesWait {
			// Two probes per queue would take longer than the drain: one statement asks
			// for the whole table, which holds only this drain's jobs after the Reset.
			wait = func(timeout time.Duration) error { return fleetWaitAll(e, timeout) }
		}
	}
	f, err := startFleet(e, procs, childQueues)
	if err != nil {
		return 0, cpu, err
	}
	rate, err := func() (float64, error) {
		// The start-up polls and the first election are over.
		if err := sleep(e.ctx, 2*time.Second); err != nil {
			return 0, err
		}
		// Warm up, untimed, as a fleet that has been running is: its pools hold open
		// connections whose statements are prepared. Otherwise the timed drain pays for
		// opening up to procs × pool connections (each a new server process that then
		// plans every statement once), which a fleet does once at start.
		if err := insert(max(n/10, 1000)); err != nil {
			return 0, err
		}
		if err := wait(timeoutFor(n/10, 500)); err != nil {
			return 0, fmt.Errorf("fleet warm-up: %w", err)
		}
		if err := insert(n); err != nil {
			return 0, err
		}
		if fleetStatements {
			statementsStart(e.ctx, e.pool, "-fleet-statements")
		}
		t0 := time.Now()
		c0, w0 := e.cpuNow(), f.cpu()
		if err := wait(timeoutFor(n, 500)); err != nil {
			return 0, fmt.Errorf("fleet drain with %d processes: %w", procs, err)
		}
		rate := float64(n) / time.Since(t0).Seconds()
		c1, w1 := e.cpuNow(), f.cpu()
		if fleetStatements {
			statementsPrint(e, fmt.Sprintf("fleet drain, %d process(es)", procs))
		}
		res := map[string]float64{}
		cpuPerJob(res, c0, c1, n)
		cpu = drainCPU{workers: float64((w1 - w0).Microseconds()) / float64(n), server: res[cpuServerMetric.Key], idle: res[cpuIdleMetric.Key]}
		return rate, nil
	}()
	return rate, cpu, errors.Join(err, f.stop())
}

// fleetInsert inserts n no-op jobs in one COPY, split evenly across queues, each queue's
// jobs in one block.
func fleetInsert(e *env, n int, queues []string) error {
	sys, ok := e.sys.(*skiplockSystem)
	if !ok {
		return errors.New("the fleet workload runs skiplock only")
	}
	params := make([]skiplock.EnqueueParams, n)
	for i := range params {
		q := queues[i*len(queues)/n] // in blocks: a queue per process (-fleet-split)
		if fleetDrainQueues > 1 {
			q = queues[i%len(queues)] // round-robin, as jobs of many queues arrive
		}
		params[i] = skiplock.EnqueueParams{Args: NoopArgs{}, Options: &skiplock.EnqueueOptions{Queue: q}}
	}
	sys.queues = queues // what Pending counts, as after Bulk
	_, err := sys.client.EnqueueMany(e.ctx, params)
	return err
}

// drainTarget is a queue of a schema that a fleet drain waits for.
type drainTarget struct{ schema, queue string }

// inSkiplock returns the targets of queues in the skiplock schema.
func inSkiplock(queues []string) []drainTarget {
	t := make([]drainTarget, len(queues))
	for i, q := range queues {
		t[i] = drainTarget{skiplockSchema, q}
	}
	return t
}

// fleetWait waits until no job of targets is queued or running. It asks every 10 ms with
// two index probes per queue (drainedQuery, flow.go), not a count: counting the backlog
// read the whole table each time (18 ms a count, 1,956 buffers, from pg_stat_statements)
// and took CPU from the processes it timed, the more so the longer the drain.
func fleetWait(e *env, targets []drainTarget, timeout time.Duration) error {
	left := slices.Clone(targets)
	err := pollUntil(e.ctx, timeout, 10*time.Millisecond, func() (bool, error) {
		for len(left) > 0 {
			var done bool
			if err := e.pool.QueryRow(e.ctx, drainedQuery(left[0].schema), left[0].queue).Scan(&done); err != nil || !done {
				return false, err
			}
			left = left[1:]
		}
		return true, nil
	})
	if !errors.Is(err, errPollTimeout) {
		return err
	}
	err = fmt.Errorf("queue %s of schema %s (and %d more) not drained after %s", left[0].queue, left[0].schema, len(left)-1, timeout)
	if left[0].schema == skiplockSchema {
		p, perr := e.sys.Pending(e.ctx)
		err = errors.Join(fmt.Errorf("%w: %d jobs pending", err, p), perr)
	}
	return err
}

// manyQueuesWait: a drain over more queues than this waits with fleetWaitAll.
const manyQueuesWait = 100

// fleetWaitAll waits until no job of the skiplock schema is queued or running, asking
// every 10 ms with one statement (two probes of the partial indexes on status).
func fleetWaitAll(e *env, timeout time.Duration) error {
	jobs := pgx.Identifier{skiplockSchema, "jobs"}.Sanitize()
	q := `SELECT NOT EXISTS (SELECT 1 FROM ` + jobs + ` WHERE status = 'queued')
		AND NOT EXISTS (SELECT 1 FROM ` + jobs + ` WHERE status = 'running')`
	err := pollUntil(e.ctx, timeout, 10*time.Millisecond, func() (done bool, err error) {
		err = e.pool.QueryRow(e.ctx, q).Scan(&done)
		return done, err
	})
	if errors.Is(err, errPollTimeout) {
		p, perr := e.sys.Pending(e.ctx)
		return errors.Join(fmt.Errorf("skiplock jobs not drained after %s: %d pending", timeout, p), perr)
	}
	return err
}

// childStatsFile is the stats file of the i-th process of a fleet (-fleet-stats-file).
func childStatsFile(i int) string { return filepath.Join(fleetStatsDir, fmt.Sprintf("child-%d", i)) }

// writeChildStats writes the process's goroutine count and the Go runtime's memory
// (bytes mapped from the OS) to path every second until ctx ends. runtime/metrics reads
// them without stopping the world.
func writeChildStats(ctx context.Context, path string) {
	samples := []metrics.Sample{{Name: "/sched/goroutines:goroutines"}, {Name: "/memory/classes/total:bytes"}}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		metrics.Read(samples)
		_ = os.WriteFile(path, fmt.Appendf(nil, "%d %d\n", samples[0].Value.Uint64(), samples[1].Value.Uint64()), 0o644)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// childStats reads what the i-th process of a fleet last wrote to its stats file: its
// goroutines and the Go runtime's memory in bytes.
func childStats(i int) (goroutines, mem uint64, err error) {
	b, err := os.ReadFile(childStatsFile(i))
	if err != nil {
		return 0, 0, err
	}
	_, err = fmt.Sscan(string(b), &goroutines, &mem)
	return goroutines, mem, err
}

// bareFleetApp prefixes the application_name of a bare fleet child's connections.
const bareFleetApp = "bare-fleet "

// bareFleetWait waits until bare_jobs is empty (every job of the drain floor deleted),
// asking every 10 ms.
func bareFleetWait(e *env, timeout time.Duration) error {
	err := pollUntil(e.ctx, timeout, 10*time.Millisecond, func() (done bool, err error) {
		err = e.pool.QueryRow(e.ctx, `SELECT NOT EXISTS (SELECT 1 FROM bare_jobs)`).Scan(&done)
		return done, err
	})
	if errors.Is(err, errPollTimeout) {
		return fmt.Errorf("bare_jobs not drained after %s", timeout)
	}
	return err
}

// runFleet measures idle cost (1×1, 1×100 and procs×100 queues) and drain
// with procs processes against one. For bare (with -all-systems) it runs the drain
// only, with the drain floor's loops in each process: what sharing one table costs a
// queue that does nothing but claim and delete.
func runFleet(e *env) (map[string]float64, error) {
	switch e.sys.Name() {
	case "skiplock", "bare":
	default:
		return nil, errUnsupported
	}
	acfg := e.pool.Config().ConnConfig.Copy()
	acfg.Database = "postgres"
	admin, err := pgx.ConnectConfig(e.ctx, acfg)
	if err != nil {
		return nil, err
	}
	defer admin.Close(context.WithoutCancel(e.ctx))
	res := map[string]float64{}
	for _, c := range []struct {
		key           string
		procs, queues int
	}{{"idle_1x1", 1, 1}, {"idle_1x100", 1, fleetQueues}, {"idle_nx100", fleetProcs, fleetQueues}} {
		if e.sizes.FleetIdle <= 0 || e.sys.Name() == "bare" {
			break
		}
		r, err := idleCommits(e, admin, c.procs, c.queues, e.sizes.FleetIdle)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.key, err)
		}
		res[c.key] = r
	}
	one, cpu1, err := fleetDrain(e, 1, e.sizes.Drain)
	if err != nil {
		return nil, err
	}
	many, cpuN, err := fleetDrain(e, fleetProcs, e.sizes.Drain)
	if err != nil {
		return nil, err
	}
	res["drain_1"], res["drain_n"], res["drain_ratio"] = one, many, many/one
	res["cpu_workers_1"], res["cpu_server_1"], res["cpu_idle_1"] = cpu1.workers, cpu1.server, cpu1.idle
	res["cpu_workers_n"], res["cpu_server_n"], res["cpu_idle_n"] = cpuN.workers, cpuN.server, cpuN.idle
	return res, nil
}

// fleetVariant names the drain's setup with many processes, for the report.
func fleetVariant() string {
	var v string
	switch {
	case fleetSchemas:
		v = "a schema per process (-fleet-schemas)"
	case fleetDrainQueues > 1:
		v = fmt.Sprintf("jobs round-robin over %d queues, every process serving all (-fleet-drain-queues)", fleetDrainQueues)
	case fleetSplit:
		v = "a queue per process (-fleet-split)"
	default:
		v = "one queue"
	}
	if fleetPoolDSN != "" {
		v += ", pools through -fleet-pool-dsn"
	}
	if skiplockCompletion != "archive" {
		v += ", Completion " + skiplockCompletion
	}
	return v
}

// fleetSchemaName is the schema of the i-th process with -fleet-schemas.
func fleetSchemaName(i int) string { return fmt.Sprintf("fleet%02d", i) }

// fleetSchemasSetup prepares the drain with a schema per process (-fleet-schemas): it
// migrates and empties each schema and returns the drain's insert, which gives each
// schema n/procs jobs in one transaction (a COPY per schema), and its wait.
func fleetSchemasSetup(e *env, procs int) (insert func(int) error, wait func(time.Duration) error, err error) {
	clients := make([]*skiplock.Client, procs)
	for i := range procs {
		name := fleetSchemaName(i)
		if err := skiplock.Migrate(e.ctx, e.pool, skiplock.MigrateConfig{Schema: name}); err != nil {
			return nil, nil, err
		}
		if _, err := e.pool.Exec(e.ctx, "TRUNCATE "+pgx.Identifier{name, "jobs"}.Sanitize()+", "+pgx.Identifier{name, "jobs_archive"}.Sanitize()); err != nil {
			return nil, nil, err
		}
		if clients[i], err = skiplock.NewClient(e.pool, skiplock.Config{Schema: name, Logger: quietLogger()}); err != nil {
			return nil, nil, err
		}
	}
	insert = func(n int) error {
		tx, err := e.pool.Begin(e.ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(e.ctx)) //nolint:errcheck // no-op after commit
		for i, c := range clients {
			params := make([]skiplock.EnqueueParams, n*(i+1)/procs-n*i/procs)
			for k := range params {
				params[k] = skiplock.EnqueueParams{Args: NoopArgs{}}
			}
			if _, err := c.EnqueueManyTx(e.ctx, tx, params); err != nil {
				return err
			}
		}
		return tx.Commit(e.ctx)
	}
	targets := make([]drainTarget, procs)
	for i := range targets {
		targets[i] = drainTarget{fleetSchemaName(i), skiplock.DefaultQueue}
	}
	wait = func(timeout time.Duration) error { return fleetWait(e, targets, timeout) }
	return insert, wait, nil
}

// statementsPrint writes the ten statements that took the server the most time since
// statementsStart: calls, plans (counted only with pg_stat_statements.track_planning on),
// planning and execution milliseconds, rows, shared buffers hit, and the statement's start.
func statementsPrint(e *env, label string) {
	rows, err := e.pool.Query(e.ctx, `SELECT calls, plans, round(total_plan_time)::bigint,
		round(total_exec_time)::bigint, rows, shared_blks_hit, left(regexp_replace(query, '\s+', ' ', 'g'), 70)
		FROM pg_stat_statements ORDER BY total_plan_time + total_exec_time DESC LIMIT 10`)
	printStatements(rows, err, "-fleet-statements", label+": calls, plans, plan ms, exec ms, rows, buffers hit, statement")
}
