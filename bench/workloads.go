package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Sizes are the workload parameters; -quick shrinks them.
type Sizes struct {
	Bulk          int           `json:"bulk"`           // jobs in one bulk insert
	Producers     int           `json:"producers"`      // concurrent producers of the sustained workload
	Drain         int           `json:"drain"`          // pre-inserted jobs drained
	LatencyRate   int           `json:"latency_rate"`   // jobs/s offered in the latency workload
	LatencyFor    time.Duration `json:"latency_for"`    // how long the latency workload offers jobs
	SustainedFor  time.Duration `json:"sustained_for"`  // how long producers insert in the sustained workload
	Size          int           `json:"size"`           // jobs passed through before measuring table size (all systems)
	Size1M        int           `json:"size1m"`         // the same for skiplock (size1m workload)
	ScheduledDue  int           `json:"scheduled_due"`  // due jobs drained in the scheduled workload
	ScheduledSkip int           `json:"scheduled_skip"` // future jobs beside them
	Warmup        time.Duration `json:"warmup"`         // workers run this long before timed producers start
	FleetIdle     time.Duration `json:"fleet_idle"`     // window over which the fleet workload counts idle commits
	SingleFor     time.Duration `json:"single_for"`     // how long each producer count inserts in the single workload
	Storm         int           `json:"storm"`          // jobs of the failure storm (each fails once)
	ManyQueues    int           `json:"many_queues"`    // queues of the many-queues workload
	PerQueue      int           `json:"per_queue"`      // workers per queue there
	ManyJobs      int           `json:"many_jobs"`      // jobs drained across those queues
	Durable       int           `json:"durable"`        // units of work of the durable workload (durable.go)
}

// singleProducers are the producer counts of the single workload.
var singleProducers = []int{1, 16, 64}

var fullSizes = Sizes{
	Bulk: 100_000, Producers: 16, Drain: 100_000,
	LatencyRate: 50, LatencyFor: 10 * time.Second, SustainedFor: 10 * time.Second,
	Size: 50_000, Size1M: 1_000_000, ScheduledDue: 100_000, ScheduledSkip: 1_000_000,
	Warmup: time.Second, FleetIdle: 20 * time.Second, SingleFor: 4 * time.Second,
	Storm: 100_000, ManyQueues: 100, PerQueue: 20, ManyJobs: 100_000, Durable: 20_000,
}

// quickSizes finish all three systems in about two minutes on 2 cores. The
// one-million-job size run is left out (Size1M 0).
var quickSizes = Sizes{
	Bulk: 20_000, Producers: 16, Drain: 10_000,
	LatencyRate: 50, LatencyFor: 1500 * time.Millisecond, SustainedFor: 2 * time.Second,
	Size: 10_000, Size1M: 0, ScheduledDue: 10_000, ScheduledSkip: 100_000,
	Warmup: 300 * time.Millisecond, FleetIdle: 10 * time.Second, SingleFor: time.Second,
	Storm: 10_000, ManyQueues: 100, PerQueue: 20, ManyJobs: 10_000, Durable: 4_000,
}

// sizesFor returns the workload sizes of a run: quickSizes with -quick, else fullSizes.
func sizesFor(quick bool) Sizes {
	if quick {
		return quickSizes
	}
	return fullSizes
}

// Metric is one reported figure of a workload.
type Metric struct {
	Key         string `json:"key"`
	Label       string `json:"label"`
	Unit        string `json:"unit"`
	LowerBetter bool   `json:"lower_is_better"`
}

// Workload is one measured scenario, run -runs times per system.
type Workload struct {
	Name    string
	Desc    func(s Sizes) string
	Metrics []Metric
	// SkiplockOnly workloads run for the peers only with -all-systems.
	SkiplockOnly bool
	// OptIn workloads run only when named in -workloads (they take minutes, or
	// need more server connections than the others).
	OptIn bool
	// OneRun workloads run once whatever -runs says (they are long and their
	// figure barely varies).
	OneRun bool
	// Skip says the workload is off at these sizes.
	Skip func(s Sizes) bool
	Run  func(e *env) (map[string]float64, error)
}

// env is what a workload run gets.
type env struct {
	ctx   context.Context
	sys   System
	pool  *pgxpool.Pool
	sizes Sizes
	notes []string
	// cpu holds the CPU metrics of the last drain (cpu.go).
	cpu map[string]float64
}

func (e *env) note(format string, args ...any) {
	e.notes = append(e.notes, fmt.Sprintf(format, args...))
}

var (
	rate = func(key, label string) Metric { return Metric{Key: key, Label: label, Unit: "jobs/s"} }
	ms   = func(key, label string) Metric { return Metric{Key: key, Label: label, Unit: "ms", LowerBetter: true} }
	mb   = func(key, label string) Metric { return Metric{Key: key, Label: label, Unit: "MB", LowerBetter: true} }
)

// walMetric is the WAL a workload wrote per job: the work the server must flush, which,
// unlike a rate, does not move with the machine's load.
var walMetric = Metric{Key: "wal", Label: "WAL written per job", Unit: "bytes", LowerBetter: true}

// walLSN reads the server's current WAL insert position.
func (e *env) walLSN() (int64, error) {
	var lsn int64
	err := e.pool.QueryRow(e.ctx, `SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn`).Scan(&lsn)
	return lsn, err
}

var sizeMetrics = []Metric{
	mb("hot", "hot table + indexes"),
	mb("hot_table", "hot table (heap)"),
	mb("hot_indexes", "hot table indexes"),
	mb("hot_vacuumed", "hot table + indexes after VACUUM"),
	mb("all", "all job tables + indexes (incl. archive)"),
	rate("rate", "throughput while filling (bulk chunks of 5000, workers running)"),
}

var workloads = []Workload{
	{
		Name: "bulk",
		Desc: func(s Sizes) string {
			return fmt.Sprintf("bulk insert of %d jobs in one call (system's bulk path)", s.Bulk)
		},
		Metrics: append([]Metric{rate("rate", "bulk insert")}, cpuMetrics...),
		Run:     runBulk,
	},
	{
		Name: "single",
		Desc: func(s Sizes) string {
			return fmt.Sprintf("one job per call outside any caller transaction (skiplock: coalesced; bare: INSERT + commit per call), 1, 16 and 64 producers for %s each, no workers", s.SingleFor)
		},
		Metrics: append([]Metric{
			rate("p1", "single inserts, 1 producer"),
			rate("p16", "single inserts, 16 producers"),
			rate("p64", "single inserts, 64 producers"),
		}, cpuMetrics...),
		Run: runSingle,
	},
	{
		Name: "drain",
		Desc: func(s Sizes) string {
			return fmt.Sprintf("drain %d pre-inserted no-op jobs (until all final in the DB)", s.Drain)
		},
		Metrics: append([]Metric{rate("rate", "drain"), rate("handled", "drain, counting handler runs only"), walMetric}, cpuMetrics...),
		Run:     runDrain,
	},
	{
		Name: "storm",
		Desc: func(s Sizes) string {
			return fmt.Sprintf("failure storm: %d pre-inserted jobs each fail their first attempt (a downstream outage), are retried at once and succeed; until all succeeded in the DB", s.Storm)
		},
		Metrics: append([]Metric{rate("rate", "failure storm (jobs finished)"), walMetric}, cpuMetrics...),
		Run:     runStorm,
	},
	{
		Name: "queues",
		Desc: func(s Sizes) string {
			return fmt.Sprintf("drain %d pre-inserted jobs spread over %d queues, %d workers per queue", s.ManyJobs, s.ManyQueues, s.PerQueue)
		},
		Metrics: append([]Metric{rate("rate", "many queues drain"), walMetric}, cpuMetrics...),
		Run:     runManyQueues,
	},
	{
		Name: "latency",
		Desc: func(s Sizes) string {
			return fmt.Sprintf("enqueue→handler start, %d jobs/s from one producer for %s, idle workers", s.LatencyRate, s.LatencyFor)
		},
		Metrics: []Metric{ms("p50", "latency p50"), ms("p99", "latency p99"), ms("max", "latency max")},
		Run:     runLatency,
	},
	{
		Name: "sustained",
		Desc: func(s Sizes) string {
			return fmt.Sprintf("%d producers insert singly for %s while workers drain", s.Producers, s.SustainedFor)
		},
		Metrics: []Metric{
			rate("completed", "sustained completed"), rate("inserted", "sustained inserted"),
			ms("p50", "sustained latency p50"), ms("p99", "sustained latency p99"),
			{Key: "backlog", Label: "backlog at end of window", Unit: "jobs", LowerBetter: true},
		},
		Run: runSustained,
	},
	{
		Name:    "size",
		Desc:    func(s Sizes) string { return fmt.Sprintf("table sizes after %d jobs passed through", s.Size) },
		Metrics: sizeMetrics,
		Run:     func(e *env) (map[string]float64, error) { return runSize(e, e.sizes.Size) },
	},
	{
		Name: "size1m",
		Desc: func(s Sizes) string {
			return fmt.Sprintf("table sizes after %d jobs passed through (one run)", s.Size1M)
		},
		Metrics:      sizeMetrics,
		SkiplockOnly: true,
		OneRun:       true,
		Skip:         func(s Sizes) bool { return s.Size1M == 0 },
		Run:          func(e *env) (map[string]float64, error) { return runSize(e, e.sizes.Size1M) },
	},
	{
		Name: "scheduled",
		Desc: func(s Sizes) string {
			return fmt.Sprintf("drain %d due jobs alone vs beside %d jobs scheduled 24 h ahead", s.ScheduledDue, s.ScheduledSkip)
		},
		Metrics: []Metric{
			rate("alone", "drain, due jobs alone"),
			rate("beside", "drain, beside future jobs"),
			{Key: "ratio", Label: "drain beside / alone", Unit: "x"},
		},
		SkiplockOnly: true,
		Run:          runScheduled,
	},
	{
		Name: "durable",
		Desc: func(s Sizes) string {
			return fmt.Sprintf("the cost of a durable step: drain %d jobs of 5 Steps (no-op), %d jobs of 5 StepTx (a one-row INSERT each), %d chains of 5 jobs (workflow a→b→c→d→e) and %d plain jobs, one after the other (enqueue not timed; WAL from before it); and the bare SQL floor, %d single-row INSERT commits from 100 clients",
				s.Durable, s.Durable, s.Durable, s.Durable, 5*s.Durable)
		},
		Metrics:      durMetrics,
		SkiplockOnly: true,
		Run:          runDurable,
	},
	{
		Name: "fleet",
		Desc: func(s Sizes) string {
			split := fleetVariant()
			return fmt.Sprintf("worker processes (one pool of %d + one listener each): idle server commits/s over %s with 1×1, 1×%d and %d×%d queues; drain %d jobs with %d processes (%s) vs 1, after an untimed warm-up drain of a tenth as many (one run); bare (with -all-systems): the drain only, each process running the drain floor's loops",
				fleetPool, s.FleetIdle, fleetQueues, fleetProcs, fleetQueues, s.Drain, fleetProcs, split)
		},
		Metrics: []Metric{
			{Key: "idle_1x1", Label: "idle commits/s, 1 process × 1 queue", Unit: "commits/s", LowerBetter: true},
			{Key: "idle_1x100", Label: "idle commits/s, 1 process × 100 queues", Unit: "commits/s", LowerBetter: true},
			{Key: "idle_nx100", Label: "idle commits/s, all processes × 100 queues", Unit: "commits/s", LowerBetter: true},
			rate("drain_1", "drain, 1 process"),
			rate("drain_n", "drain, all processes"),
			{Key: "drain_ratio", Label: "drain, all processes / 1 process", Unit: "x"},
			{Key: "cpu_workers_1", Label: "drain, 1 process: CPU per job, worker process", Unit: "µs", LowerBetter: true},
			{Key: "cpu_server_1", Label: "drain, 1 process: CPU per job, server processes", Unit: "µs", LowerBetter: true},
			{Key: "cpu_idle_1", Label: "drain, 1 process: cores idle on the machine", Unit: "cores", LowerBetter: true},
			{Key: "cpu_workers_n", Label: "drain, all processes: CPU per job, worker processes", Unit: "µs", LowerBetter: true},
			{Key: "cpu_server_n", Label: "drain, all processes: CPU per job, server processes", Unit: "µs", LowerBetter: true},
			{Key: "cpu_idle_n", Label: "drain, all processes: cores idle on the machine", Unit: "cores", LowerBetter: true},
		},
		SkiplockOnly: true,
		OneRun:       true,
		OptIn:        true,
		Run:          runFleet,
	},
}

func runBulk(e *env) (map[string]float64, error) {
	n := e.sizes.Bulk
	insert := e.sys.Bulk(n, time.Time{}, 1)
	c0 := e.cpuNow()
	t0 := time.Now()
	if err := insert(e.ctx); err != nil {
		return nil, err
	}
	el := time.Since(t0)
	c1 := e.cpuNow()
	if err := e.expectPending(int64(n)); err != nil {
		return nil, err
	}
	res := map[string]float64{"rate": float64(n) / el.Seconds()}
	cpuPerJob(res, c0, c1, n)
	return res, nil
}

func runSingle(e *env) (map[string]float64, error) {
	res := map[string]float64{}
	var total int64
	c0 := e.cpuNow()
	for _, k := range singleProducers {
		var inserted atomic.Int64
		end := time.Now().Add(e.sizes.SingleFor)
		t0 := time.Now()
		err := producers(e.ctx, k, func(ctx context.Context) (bool, error) {
			if !time.Now().Before(end) {
				return false, nil
			}
			if err := e.sys.Insert(ctx, NoopArgs{T: Now()}); err != nil {
				return false, err
			}
			inserted.Add(1)
			return true, nil
		})
		el := time.Since(t0)
		if err != nil {
			return nil, err
		}
		total += inserted.Load()
		res[fmt.Sprintf("p%d", k)] = float64(inserted.Load()) / el.Seconds()
	}
	cpuPerJob(res, c0, e.cpuNow(), int(total))
	if err := e.expectPending(total); err != nil {
		return nil, err
	}
	return res, nil
}

func runStorm(e *env) (map[string]float64, error) {
	n := e.sizes.Storm
	if err := e.sys.Bulk(n, time.Time{}, 1)(e.ctx); err != nil {
		return nil, err
	}
	// Every job runs twice: it fails once, then succeeds.
	return e.work(n, NewSink(int64(2*n)), Spec{FailOnce: true, Backlog: true}, timeoutFor(2*n, 1000))
}

func runManyQueues(e *env) (map[string]float64, error) {
	n := e.sizes.ManyJobs
	if err := e.sys.Bulk(n, time.Time{}, e.sizes.ManyQueues)(e.ctx); err != nil {
		return nil, err
	}
	return e.work(n, NewSink(int64(n)), Spec{Queues: e.sizes.ManyQueues, PerQueue: e.sizes.PerQueue}, timeoutFor(n, 1000))
}

// work starts the workers with spec on n pre-inserted jobs and times them until sink is
// full and every job is final (at most timeout). It reports the rate over the n jobs,
// their CPU (cpu.go) and the WAL written per job.
func (e *env) work(n int, sink *Sink, spec Spec, timeout time.Duration) (map[string]float64, error) {
	lsn0, err := e.walLSN()
	if err != nil {
		return nil, err
	}
	c0 := e.cpuNow()
	t0 := time.Now()
	if err := e.sys.Start(e.ctx, sink, spec); err != nil {
		return nil, err
	}
	werr := waitDrained(e.ctx, e.sys, sink, timeout)
	el := time.Since(t0)
	res := map[string]float64{"rate": float64(n) / el.Seconds()}
	cpuPerJob(res, c0, e.cpuNow(), n)
	if err := errors.Join(werr, e.stop()); err != nil {
		return nil, err
	}
	lsn1, err := e.walLSN()
	if err != nil {
		return nil, err
	}
	res["wal"] = float64(lsn1-lsn0) / float64(n)
	return res, nil
}

func runDrain(e *env) (map[string]float64, error) {
	lsn0, err := e.walLSN()
	if err != nil {
		return nil, err
	}
	final, handled, err := e.drain(e.sizes.Drain)
	if err != nil {
		return nil, err
	}
	lsn1, err := e.walLSN()
	if err != nil {
		return nil, err
	}
	n := float64(e.sizes.Drain)
	// The WAL includes the bulk insert of the jobs before the timed part.
	res := map[string]float64{"rate": n / final.Seconds(), "handled": n / handled.Seconds(), "wal": float64(lsn1-lsn0) / n}
	maps.Copy(res, e.cpu)
	return res, nil
}

// drain times workers from start until n pre-inserted due jobs are final in
// the database, and until the last of them was handed to a handler.
func (e *env) drain(n int) (final, handled time.Duration, err error) {
	if err := e.sys.Bulk(n, time.Time{}, 1)(e.ctx); err != nil {
		return 0, 0, err
	}
	sink := NewSink(int64(n))
	c0 := e.cpuNow()
	t0 := time.Now()
	if err := e.sys.Start(e.ctx, sink, Spec{Backlog: true}); err != nil {
		return 0, 0, err
	}
	werr := waitDrained(e.ctx, e.sys, sink, timeoutFor(n, 2000))
	final = time.Since(t0)
	e.cpu = map[string]float64{}
	cpuPerJob(e.cpu, c0, e.cpuNow(), n)
	if err := errors.Join(werr, e.stop()); err != nil {
		return 0, 0, err
	}
	handled = sink.ReachedAt().Sub(t0) // reached: waitDrained succeeded
	if d := sink.Done(); d != int64(n) {
		e.note("%d jobs enqueued, handler ran %d times", n, d)
	}
	return final, handled, nil
}

func runLatency(e *env) (map[string]float64, error) {
	sink := NewSink(0)
	if err := e.sys.Start(e.ctx, sink, Spec{OneAtATime: true}); err != nil {
		return nil, err
	}
	res, err := func() (map[string]float64, error) {
		if err := sleep(e.ctx, e.sizes.Warmup); err != nil {
			return nil, err
		}
		sink.Record(true)
		tick := time.NewTicker(time.Second / time.Duration(e.sizes.LatencyRate))
		defer tick.Stop()
		end := time.Now().Add(e.sizes.LatencyFor)
		var sent int64
		for time.Now().Before(end) {
			select {
			case <-tick.C:
			case <-e.ctx.Done():
				return nil, e.ctx.Err()
			}
			if err := e.sys.Insert(e.ctx, NoopArgs{T: Now()}); err != nil {
				return nil, err
			}
			sent++
		}
		if err := waitCount(e.ctx, sink, sent, 30*time.Second); err != nil {
			return nil, err
		}
		lats := sink.Latencies()
		return map[string]float64{
			"p50": msOf(percentile(lats, 0.50)),
			"p99": msOf(percentile(lats, 0.99)),
			"max": msOf(percentile(lats, 1)),
		}, nil
	}()
	return res, errors.Join(err, e.stop())
}

func runSustained(e *env) (map[string]float64, error) {
	sink := NewSink(0)
	if err := e.sys.Start(e.ctx, sink, Spec{}); err != nil {
		return nil, err
	}
	res, err := func() (map[string]float64, error) {
		if err := sleep(e.ctx, e.sizes.Warmup); err != nil {
			return nil, err
		}
		sink.Record(true)
		var inserted atomic.Int64
		d := e.sizes.SustainedFor
		done0 := sink.Done()
		t0 := time.Now()
		end := t0.Add(d)
		err := producers(e.ctx, e.sizes.Producers, func(ctx context.Context) (bool, error) {
			if !time.Now().Before(end) {
				return false, nil
			}
			err := e.sys.Insert(ctx, NoopArgs{T: Now()})
			if err == nil {
				inserted.Add(1)
			}
			return true, err
		})
		el := time.Since(t0)
		completed := sink.Done() - done0
		if err != nil {
			return nil, err
		}
		ins := inserted.Load()
		// Latency covers every job enqueued in the window, also those still
		// queued when it closed, so a system that falls behind shows it.
		if err := waitCount(e.ctx, sink, done0+ins, timeoutFor(int(ins), 1000)); err != nil {
			return nil, err
		}
		lats := sink.Latencies()
		return map[string]float64{
			"completed": float64(completed) / el.Seconds(),
			"inserted":  float64(ins) / el.Seconds(),
			"p50":       msOf(percentile(lats, 0.50)),
			"p99":       msOf(percentile(lats, 0.99)),
			"backlog":   float64(ins - completed),
		}, nil
	}()
	return res, errors.Join(err, e.stop())
}

// runSize passes n jobs through the system (bulk chunks of 5000 while
// workers run, at most 20000 waiting), then measures the tables.
func runSize(e *env, n int) (map[string]float64, error) {
	const chunk, ahead = 5000, 20000
	sink := NewSink(int64(n))
	t0 := time.Now()
	if err := e.sys.Start(e.ctx, sink, Spec{}); err != nil {
		return nil, err
	}
	err := func() error {
		for sent := 0; sent < n; {
			for int64(sent)-sink.Done() > ahead {
				if err := sleep(e.ctx, 2*time.Millisecond); err != nil {
					return err
				}
			}
			k := min(chunk, n-sent)
			if err := e.sys.Bulk(k, time.Time{}, 1)(e.ctx); err != nil {
				return err
			}
			sent += k
		}
		return waitDrained(e.ctx, e.sys, sink, timeoutFor(n, 1000))
	}()
	el := time.Since(t0)
	if err != nil {
		err = fmt.Errorf("%d of %d jobs handled in %s: %w", sink.Done(), n, el.Round(time.Second), err)
	}
	if err := errors.Join(err, e.stop()); err != nil {
		return nil, err
	}
	res := map[string]float64{"rate": float64(n) / el.Seconds()}
	hot := pgx.Identifier(splitQualified(e.sys.HotTable())).Sanitize()
	var heap, idx int64
	if err := e.pool.QueryRow(e.ctx, `SELECT pg_table_size($1::regclass), pg_indexes_size($1::regclass)`, hot).
		Scan(&heap, &idx); err != nil {
		return nil, err
	}
	res["hot_table"], res["hot_indexes"], res["hot"] = mib(heap), mib(idx), mib(heap+idx)
	var all float64
	for _, t := range e.sys.JobTables() {
		var b int64
		if err := e.pool.QueryRow(e.ctx, `SELECT pg_total_relation_size($1::regclass)`,
			pgx.Identifier(splitQualified(t)).Sanitize()).Scan(&b); err != nil {
			return nil, err
		}
		all += mib(b)
	}
	res["all"] = all
	if _, err := e.pool.Exec(e.ctx, "VACUUM "+hot); err != nil {
		return nil, err
	}
	var vac int64
	if err := e.pool.QueryRow(e.ctx, `SELECT pg_table_size($1::regclass) + pg_indexes_size($1::regclass)`, hot).Scan(&vac); err != nil {
		return nil, err
	}
	res["hot_vacuumed"] = mib(vac)
	return res, nil
}

func runScheduled(e *env) (map[string]float64, error) {
	due, skip := e.sizes.ScheduledDue, e.sizes.ScheduledSkip
	alone, _, err := e.drain(due)
	if err != nil {
		return nil, err
	}
	if err := e.sys.Reset(e.ctx); err != nil {
		return nil, err
	}
	// Future jobs first, so the due ones come after them in insertion order.
	if err := e.sys.Bulk(skip, time.Now().Add(24*time.Hour), 1)(e.ctx); err != nil {
		return nil, err
	}
	beside, _, err := e.drain(due)
	if err != nil {
		return nil, err
	}
	a, b := float64(due)/alone.Seconds(), float64(due)/beside.Seconds()
	return map[string]float64{"alone": a, "beside": b, "ratio": b / a}, nil
}

// producers runs k goroutines calling step until one returns false or an
// error; it returns the first error.
func producers(ctx context.Context, k int, step func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for range k {
		wg.Go(func() {
			for {
				more, err := step(ctx)
				if err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
				if !more {
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

func (e *env) stop() error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.ctx), time.Minute)
	defer cancel()
	return e.sys.Stop(ctx)
}

func (e *env) expectPending(n int64) error {
	got, err := e.sys.Pending(e.ctx)
	if err != nil {
		return err
	}
	if got != n {
		return fmt.Errorf("%s: inserted %d jobs but %d are pending", e.sys.Name(), n, got)
	}
	return nil
}

// waitCount waits until sink has handled n jobs.
func waitCount(ctx context.Context, sink *Sink, n int64, timeout time.Duration) error {
	err := pollUntil(ctx, timeout, time.Millisecond, func() (bool, error) { return sink.Done() >= n, nil })
	if errors.Is(err, errPollTimeout) {
		return fmt.Errorf("timed out after %s: %d of %d jobs handled", timeout, sink.Done(), n)
	}
	return err
}

// errPollTimeout is pollUntil's error when its timeout passed first.
var errPollTimeout = errors.New("timed out")

// pollUntil calls done, then again every interval, until it reports true or an error,
// ctx ends, or timeout has passed (errPollTimeout).
func pollUntil(ctx context.Context, timeout, every time.Duration, done func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		if ok, err := done(); ok || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return errPollTimeout
		}
		if err := sleep(ctx, every); err != nil {
			return err
		}
	}
}

// maxRun caps every wait of a run (-max-run).
var maxRun = 5 * time.Minute

// timeoutFor is a generous limit for n jobs at no less than minRate jobs/s,
// capped by -max-run.
func timeoutFor(n, minRate int) time.Duration {
	return min(maxRun, 30*time.Second+time.Duration(n/minRate)*time.Second)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mib(b int64) float64 { return float64(b) / (1 << 20) }
