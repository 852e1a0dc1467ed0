package main

// The flow-control workloads (go run . -flow): skiplock only, with worker processes of
// their own (this binary re-run with -flow-worker), so that the limits are measured
// across processes as they are deployed. Every concurrency and rate figure comes from an
// audit table the handlers write, never from the library.

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
)

// FlowArgs is the job of the flow workloads; Key is copied from the partition key so the
// handler can write it in the audit.
type FlowArgs struct {
	Key string `json:"key,omitempty"`
}

func (FlowArgs) Kind() string { return "flow" }

// flowSizes are the flow workloads' parameters.
type flowSizes struct {
	procs, slots   int           // worker processes, slots (MaxWorkers) per process
	drain          int           // jobs per drain run
	limit10Jobs    int           // jobs in the limit-10 run (each sleeps 20ms)
	fairBig        int           // tenant a's backlog
	fairSmall      int           // tenant b's jobs
	rate           int           // rate limit, starts per second
	rateFor        time.Duration // measured window of the rate run
	rateWarmup     time.Duration // before the window
	globalLimit    int           // the drain's limited variant
	limit10        int
	limit10SleepMs int
}

var flowFull = flowSizes{procs: 4, slots: 500, drain: 100_000, limit10Jobs: 3000, fairBig: 100_000, fairSmall: 100,
	rate: 500, rateFor: 30 * time.Second, rateWarmup: 2 * time.Second, globalLimit: 200, limit10: 10, limit10SleepMs: 20}

var flowQuick = flowSizes{procs: 4, slots: 500, drain: 20_000, limit10Jobs: 1000, fairBig: 20_000, fairSmall: 100,
	rate: 500, rateFor: 10 * time.Second, rateWarmup: 2 * time.Second, globalLimit: 200, limit10: 10, limit10SleepMs: 20}

const flowAuditSQL = `CREATE TABLE IF NOT EXISTS public.flow_audit (
	id bigserial PRIMARY KEY, key text, started timestamptz NOT NULL DEFAULT clock_timestamp(), finished timestamptz)`

// flowWorkerMain is the worker process: it works one queue with the limits of its flags
// until SIGTERM.
func flowWorkerMain(args []string) error {
	fs := flag.NewFlagSet("flow-worker", flag.ContinueOnError)
	dsn := fs.String("dsn", "", "database")
	queue := fs.String("queue", "", "queue")
	slots := fs.Int("slots", 500, "MaxWorkers")
	var l skiplock.QueueLimits
	fs.IntVar(&l.Concurrency, "concurrency", 0, "")
	fs.IntVar(&l.KeyConcurrency, "key-concurrency", 0, "")
	fs.IntVar(&l.Rate, "rate", 0, "")
	fs.BoolVar(&l.Fair, "fair", false, "")
	sleep := fs.Duration("sleep", 0, "handler work")
	audit := fs.Bool("audit", false, "write flow_audit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg, err := pgxpool.ParseConfig(*dsn)
	if err != nil {
		return err
	}
	cfg.MaxConns = 8 // 4 processes stay well under the server's max_connections (shared)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := skiplock.NewClient(pool, skiplock.Config{Logger: quietLogger()})
	if err != nil {
		return err
	}
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{
		Queues:       map[string]skiplock.QueueConfig{*queue: {MaxWorkers: *slots, Limits: l}},
		PollInterval: 100 * time.Millisecond,
		Logger:       quietLogger(),
	})
	if err != nil {
		return err
	}
	// The audit is written in batches by one goroutine, with the host's clock (every
	// process runs on this host): a handler that waited for its own insert would make the
	// workers wait on the pool, not on the queue.
	recs := make(chan auditRec, 1<<16)
	written := make(chan error, 1)
	go func() { written <- writeAudit(pool, recs) }()
	err = skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[FlowArgs]) error {
		r := auditRec{key: job.Args.Key, started: time.Now()}
		if *sleep > 0 {
			time.Sleep(*sleep)
			f := time.Now()
			r.finished = &f
		}
		if *audit {
			recs <- r
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer func() { close(recs); <-written }()
	fmt.Println("ready")
	return w.Run(ctx)
}

// auditRec is one execution, by the host's clock.
type auditRec struct {
	key      string
	started  time.Time
	finished *time.Time
}

// writeAudit copies recs into flow_audit in batches until recs is closed.
func writeAudit(pool *pgxpool.Pool, recs <-chan auditRec) error {
	var rows [][]any
	flush := func() error {
		if len(rows) == 0 {
			return nil
		}
		_, err := pool.CopyFrom(context.Background(), pgx.Identifier{"public", "flow_audit"},
			[]string{"key", "started", "finished"}, pgx.CopyFromRows(rows))
		rows = rows[:0]
		return err
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case r, ok := <-recs:
			if !ok {
				return flush()
			}
			rows = append(rows, []any{r.key, r.started, r.finished})
		case <-t.C:
			if err := flush(); err != nil {
				return err
			}
		}
	}
}

// flowProc is one running worker process.
type flowProc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it exited
}

// flowProcs are the running worker processes of one measurement.
type flowProcs []*flowProc

// startFlowProcs starts n worker processes and waits until each is running.
func startFlowProcs(dsn string, n int, args ...string) (flowProcs, error) {
	var ps flowProcs
	for range n {
		cmd := exec.Command(os.Args[0], append([]string{"-flow-worker", "-dsn", dsn}, args...)...)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			ps.stop()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			ps.stop()
			return nil, err
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		p := &flowProc{cmd: cmd, done: make(chan struct{})}
		go func() { _ = cmd.Wait(); close(p.done) }()
		ps = append(ps, p)
		if err != nil || strings.TrimSpace(line) != "ready" {
			ps.stop()
			return nil, fmt.Errorf("worker process did not start: %q %v", line, err)
		}
	}
	return ps, nil
}

// exited reports whether a process has exited on its own.
func (ps flowProcs) exited() bool {
	for _, p := range ps {
		select {
		case <-p.done:
			return true
		default:
		}
	}
	return false
}

// stop shuts the processes down gracefully (SIGTERM) and waits for them.
func (ps flowProcs) stop() {
	for _, p := range ps {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range ps {
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

type flowBench struct {
	ctx  context.Context
	ps   flowProcs // the processes running now, if any
	dsn  string
	pool *pgxpool.Pool
	cl   *skiplock.Client
	sz   flowSizes
	md   strings.Builder
}

func (b *flowBench) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "flow: "+format+"\n", args...)
}

func (b *flowBench) reset() error {
	_, err := b.pool.Exec(b.ctx, `TRUNCATE skiplock.jobs, skiplock.jobs_archive, skiplock.queue_flow, skiplock.queue_slots, public.flow_audit`)
	if err == nil {
		_, err = b.pool.Exec(b.ctx, `CHECKPOINT`)
	}
	return err
}

func (b *flowBench) enqueue(queue, key string, n int) error {
	for done := 0; done < n; {
		chunk := min(n-done, 10_000)
		params := make([]skiplock.EnqueueParams, chunk)
		for i := range params {
			params[i] = skiplock.EnqueueParams{Args: FlowArgs{Key: key},
				Options: &skiplock.EnqueueOptions{Queue: queue, PartitionKey: key}}
		}
		if _, err := b.cl.EnqueueMany(b.ctx, params); err != nil {
			return err
		}
		done += chunk
	}
	return nil
}

func (b *flowBench) count(sql string, args ...any) (n int64) {
	if err := b.pool.QueryRow(b.ctx, sql, args...).Scan(&n); err != nil {
		b.logf("count: %v", err)
		return -1
	}
	return n
}

func (b *flowBench) waitFor(what string, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if b.ps.exited() {
			return fmt.Errorf("a worker process exited while waiting for %s", what)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-b.ctx.Done():
			return b.ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// drainedSQL says whether a queue of the skiplock schema has no queued or running job
// left (drainedQuery says it for any schema). The harness asks
// every 5 ms; while the queue has a backlog, the first EXISTS answers from the first
// entry of jobs_claim_idx. It first counted the queue's rows instead, which read the
// whole jobs table each time: during a 100,000-job drain, auto_explain logged counts of
// 28 ms (median; up to 165 ms), and sampled pg_stat_activity found the count on a CPU
// half as often as the claims it was timing. (No-op jobs end succeeded: no other status
// is left.)
var drainedSQL = drainedQuery(skiplockSchema)

// drainedQuery is drainedSQL for the jobs table of schema.
func drainedQuery(schema string) string {
	jobs := pgx.Identifier{schema, "jobs"}.Sanitize()
	return `SELECT NOT EXISTS (SELECT 1 FROM ` + jobs + ` WHERE status = 'queued' AND queue = $1)
	AND NOT EXISTS (SELECT 1 FROM ` + jobs + ` WHERE status = 'running' AND queue = $1)`
}

// drained reports whether queue has no job left to run or being run.
func (b *flowBench) drained(queue string) bool {
	var done bool
	if err := b.pool.QueryRow(b.ctx, drainedSQL, queue).Scan(&done); err != nil {
		b.logf("drained: %v", err)
		return false
	}
	return done
}

// drain times the drain of sz.drain no-op jobs by the worker processes: from their start
// to an empty queue.
func (b *flowBench) drain(queue string, extra ...string) (float64, error) {
	if err := b.reset(); err != nil {
		return 0, err
	}
	if err := b.enqueue(queue, "", b.sz.drain); err != nil {
		return 0, err
	}
	t0 := time.Now()
	ps, err := startFlowProcs(b.dsn, b.sz.procs, append([]string{"-queue", queue, "-slots", fmt.Sprint(b.sz.slots)}, extra...)...)
	if err != nil {
		return 0, err
	}
	b.ps = ps
	defer ps.stop()
	err = b.waitFor("the drain", 10*time.Minute, func() bool {
		return b.drained(queue)
	})
	return float64(b.sz.drain) / time.Since(t0).Seconds(), err
}

const overlapSQL = `SELECT coalesce(max(running), 0) FROM (
	SELECT sum(d) OVER (ORDER BY t, d ROWS UNBOUNDED PRECEDING) AS running FROM (
		SELECT started AS t, 1 AS d FROM public.flow_audit
		UNION ALL SELECT finished, -1 FROM public.flow_audit) e) x`

func runFlow(ctx context.Context, o options) error {
	sz := flowFull
	if o.quick {
		sz = flowQuick
	}
	const db = "bench_flow"
	pool, done, err := migratedDB(ctx, o, db, 0)
	if err != nil {
		return err
	}
	defer done()
	if _, err := pool.Exec(ctx, flowAuditSQL); err != nil {
		return err
	}
	cl, err := skiplock.NewClient(pool, skiplock.Config{Logger: quietLogger()})
	if err != nil {
		return err
	}
	u, err := url.Parse(o.dsn)
	if err != nil {
		return err
	}
	u.Path = "/" + db
	dsn := u.String()
	b := &flowBench{ctx: ctx, dsn: dsn, pool: pool, cl: cl, sz: sz}
	fmt.Fprintf(&b.md, "# skiplock flow control (go run . -flow%s)\n\n", map[bool]string{true: " -quick"}[o.quick])
	fmt.Fprintf(&b.md, "%s, %d worker processes with %d slots each, %d runs. Figures from the handlers' audit table.\n\n",
		time.Now().UTC().Format(time.RFC3339), sz.procs, sz.slots, o.runs)

	// 1. Drain: unlimited vs a global limit, alternated within each run.
	var unl, lim, ratio []float64
	for r := 1; r <= o.runs; r++ {
		u, err := b.drain("plain")
		if err != nil {
			return err
		}
		l, err := b.drain("limited", "-concurrency", fmt.Sprint(sz.globalLimit))
		if err != nil {
			return err
		}
		unl, lim, ratio = append(unl, u), append(lim, l), append(ratio, l/u)
		var slotBytes int64
		_ = pool.QueryRow(ctx, `SELECT pg_relation_size('skiplock.queue_slots')`).Scan(&slotBytes)
		b.logf("drain run %d: unlimited %.0f/s, limit %d %.0f/s (%.0f%%); queue_slots %d kB", r, u, sz.globalLimit, l, 100*l/u, slotBytes/1024)
	}
	fmt.Fprintf(&b.md, "## Drain of %d no-op jobs\n\n| queue | jobs/s, median (min–max) |\n| --- | --- |\n", sz.drain)
	fmt.Fprintf(&b.md, "| no limit | %s |\n| global limit %d | %s |\n| limited / unlimited, same run | %s |\n\n",
		spreadF(unl, "%.0f"), sz.globalLimit, spreadF(lim, "%.0f"), spreadF(ratio, "%.2f"))

	// 2. A limit of 10 under 2,000 slots.
	{
		if err := b.reset(); err != nil {
			return err
		}
		if err := b.enqueue("ten", "", sz.limit10Jobs); err != nil {
			return err
		}
		ps, err := startFlowProcs(dsn, sz.procs, "-queue", "ten", "-slots", fmt.Sprint(sz.slots),
			"-concurrency", fmt.Sprint(sz.limit10), "-audit", "-sleep", fmt.Sprintf("%dms", sz.limit10SleepMs))
		if err != nil {
			return err
		}
		b.ps = ps
		err = b.waitFor("the limit-10 drain", 10*time.Minute, func() bool {
			return b.drained("ten")
		})
		ps.stop()
		if err != nil {
			return err
		}
		most := b.count(overlapSQL)
		var busy, wall float64
		if err := pool.QueryRow(ctx, `SELECT extract(epoch FROM sum(finished - started)), extract(epoch FROM max(finished) - min(started))
			FROM public.flow_audit`).Scan(&busy, &wall); err != nil {
			return err
		}
		b.logf("limit %d: most at once %d, mean %.2f", sz.limit10, most, busy/wall)
		fmt.Fprintf(&b.md, "## Global limit %d, %d jobs of %dms, %d slots\n\n", sz.limit10, sz.limit10Jobs, sz.limit10SleepMs, sz.procs*sz.slots)
		fmt.Fprintf(&b.md, "- most handlers running at once: **%d**\n- mean running over the run (handler time / wall time): %.2f\n\n", most, busy/wall)
	}

	// 3. Fairness: tenant b's jobs behind tenant a's backlog.
	{
		if err := b.reset(); err != nil {
			return err
		}
		if err := b.enqueue("fair", "a", sz.fairBig); err != nil {
			return err
		}
		ps, err := startFlowProcs(dsn, sz.procs, "-queue", "fair", "-slots", fmt.Sprint(sz.slots), "-fair", "-audit")
		if err != nil {
			return err
		}
		b.ps = ps
		err = b.waitFor("tenant a under way", 5*time.Minute, func() bool {
			return b.count(`SELECT count(*) FROM public.flow_audit`) >= 5000
		})
		tb := time.Now()
		if err == nil {
			err = b.enqueue("fair", "b", sz.fairSmall)
		}
		if err == nil {
			err = b.waitFor("tenant b started", 5*time.Minute, func() bool {
				return b.count(`SELECT count(*) FROM public.flow_audit WHERE key = 'b'`) == int64(sz.fairSmall)
			})
		}
		ps.stop()
		if err != nil {
			return err
		}
		aStarts := b.count(`SELECT count(*) FROM public.flow_audit WHERE key = 'a' AND started > $1
			AND started <= (SELECT max(started) FROM public.flow_audit WHERE key = 'b')`, tb)
		var span float64
		_ = pool.QueryRow(ctx, `SELECT extract(epoch FROM max(started) - $1) FROM public.flow_audit WHERE key = 'b'`, tb).Scan(&span)
		b.logf("fair: a started %d jobs while b's %d started (%.0f ms)", aStarts, sz.fairSmall, span*1000)
		fmt.Fprintf(&b.md, "## Fair sharing: tenant a has %d queued, then tenant b enqueues %d\n\n", sz.fairBig, sz.fairSmall)
		fmt.Fprintf(&b.md, "- tenant a's starts from b's enqueue to b's last start: **%d** (target: under 2,000)\n- b's last start came %.0f ms after its enqueue\n\n", aStarts, span*1000)
	}

	// 4. Rate limit across the processes.
	{
		if err := b.reset(); err != nil {
			return err
		}
		total := int(float64(sz.rate)*(sz.rateFor+sz.rateWarmup).Seconds()*1.2) + 1000
		if err := b.enqueue("rate", "", total); err != nil {
			return err
		}
		t0 := time.Now()
		ps, err := startFlowProcs(dsn, sz.procs, "-queue", "rate", "-slots", "100", "-rate", fmt.Sprint(sz.rate), "-audit")
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(sz.rateWarmup + sz.rateFor + time.Second):
		}
		ps.stop()
		from := t0.Add(sz.rateWarmup)
		to := from.Add(sz.rateFor)
		n := b.count(`SELECT count(*) FROM public.flow_audit WHERE started >= $1 AND started < $2`, from, to)
		perSec := float64(n) / sz.rateFor.Seconds()
		var lo, hi int64
		err = pool.QueryRow(ctx, `SELECT min(c), max(c) FROM (
			SELECT count(a.id) AS c FROM generate_series(0, $2::int - 1) s
			LEFT JOIN public.flow_audit a ON a.started >= $1::timestamptz + s * interval '1 second' AND a.started < $1::timestamptz + (s + 1) * interval '1 second'
			GROUP BY s) x`, from, int(sz.rateFor.Seconds())).Scan(&lo, &hi)
		if err != nil {
			return err
		}
		b.logf("rate %d/s: %.1f/s over %s (%+.2f%%), seconds min %d max %d", sz.rate, perSec, sz.rateFor, 100*(perSec/float64(sz.rate)-1), lo, hi)
		fmt.Fprintf(&b.md, "## Rate limit %d starts/s, %d processes, %s window after %s\n\n", sz.rate, sz.procs, sz.rateFor, sz.rateWarmup)
		fmt.Fprintf(&b.md, "- measured: **%.1f starts/s** (%+.2f%% of the limit)\n- starts per 1 s bucket: min %d, max %d\n\n", perSec, 100*(perSec/float64(sz.rate)-1), lo, hi)
	}

	fmt.Print(b.md.String())
	if o.out != "" {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(o.out, "flow.md"), []byte(b.md.String()), 0o644)
	}
	return nil
}

// spreadF formats the median and min–max of vs.
func spreadF(vs []float64, f string) string {
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s) == 0 {
		return "-"
	}
	return fmt.Sprintf(f+" ("+f+"–"+f+")", s[len(s)/2], s[0], s[len(s)-1])
}
