package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The backlog curve: how fast skiplock drains, and how long its claim statement takes,
// when N jobs wait in the queue, beside the bare floor's claim+DELETE loop (sys_bare.go)
// on a backlog of the same size.
//
// Per point and system the backlog is filled once, untimed: the system's own Bulk path
// writes one job, and INSERT ... SELECT generate_series copies that row N-1 times (every
// column but the identity id, so the rows are exactly what Bulk writes, run_at and
// created_at included). Then each run takes one timed sample off it: the workers start,
// a warm-up of a tenth of the sample is handled untimed, the next K handler runs are
// timed (rate, client-side claim statement latency, server CPU), the workers stop, and
// the queue is topped back up to N (the same copy) so every sample starts at N.

func init() {
	registerScale(ScaleCurve{Name: "backlog", Desc: backlogDesc, Run: runBacklogCurve})
	flag.StringVar(&backlogSizesFlag, "scale-backlog", "", "-scale backlog: comma-separated backlog sizes, e.g. 1e4,1e7 (empty: 1e4,1e5,1e6,1e7; with -quick 1e4,1e5)")
	flag.IntVar(&backlogSampleFlag, "scale-backlog-sample", 0, "-scale backlog: jobs timed per run (0: 100,000, or 10,000 with -quick); a sample of 1,000,000 off a 10^7 backlog is a sustained drain, long enough for the maintenance vacuum to matter")
}

// backlogSizesFlag is -scale-backlog; backlogSampleFlag is -scale-backlog-sample.
var (
	backlogSizesFlag  string
	backlogSampleFlag int
)

// backlogSizes are the curve's points.
func backlogSizes(quick bool) ([]int, error) {
	if backlogSizesFlag != "" {
		return parseSizes(backlogSizesFlag)
	}
	if quick {
		return []int{1e4, 1e5}, nil
	}
	return []int{1e4, 1e5, 1e6, 1e7}, nil
}

// backlogSample is the jobs timed per sample, 100,000 (10,000 with -quick), the same at
// every backlog size; backlogChunk is how many of them are timed at a time at backlog n:
// at most half of it, so the queue stays within a factor two of n while measured.
func backlogSample(quick bool) int {
	if backlogSampleFlag > 0 {
		return backlogSampleFlag
	}
	if quick {
		return 10_000
	}
	return 100_000
}

func backlogChunk(quick bool, n int) int { return min(backlogSample(quick), n/2) }

func backlogDesc(quick bool) string {
	sizes, _ := backlogSizes(quick)
	var s []string
	for _, n := range sizes {
		s = append(s, fmt.Sprintf("%s (chunks of %s)", thousands(int64(n)), thousands(int64(backlogChunk(quick, n)))))
	}
	return "Drain rate and claim statement latency with a backlog of " + strings.Join(s, ", ") +
		" queued no-op jobs, a sample of " + thousands(int64(backlogSample(quick))) + " jobs per run at every size: skiplock at its defaults beside the bare floor (its claim+DELETE loop, 4 loops of 100). " +
		"Per point and system the backlog is filled once, untimed (one job by the system's Bulk path, copied N-1 times by INSERT ... SELECT: the same columns; then ANALYZE and CHECKPOINT). " +
		"Each run is one sample, taken in chunks of at most N/2 jobs: per chunk the workers start, a tenth of the chunk is handled untimed (warm-up), the next chunk's handler runs are timed, the workers stop, and the queue is topped back up to N (the same copy; the top-up counts the queued jobs) so the next chunk starts at N again; nothing is vacuumed between chunks or runs unless the system does it, so every size sees the same dead claim-index entries pile up (skiplock's archive grows by the jobs drained). " +
		"jobs/s counts handler runs in the timed window; claim p50/p99 is the claim statement's time at the client (pgx QueryTracer: send to the last row read) over the timed window; server CPU is µs per handled job (cpu.go). A CHECKPOINT precedes every sample."
}

// parseSizes parses a comma-separated list of sizes ("1e4,100000").
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v < 1 || v > 1e10 || v != math.Trunc(v) {
			return nil, fmt.Errorf("size %q: want a whole number like 1e6", f)
		}
		out = append(out, int(v))
	}
	if len(out) == 0 {
		return nil, errors.New("no sizes")
	}
	return out, nil
}

// claimTracer times, at the client, the statements whose SQL match says is a claim: from
// the query's start to the end of its rows (pgx calls TraceQueryEnd when the rows close),
// or, for a claim sent in a batch (skiplock's, after its plan settings), from the batch's
// start to its end, while on.
type claimTracer struct {
	match    func(sql string) bool
	limitArg int // which argument is the claim's limit (explainClaim sets it to 100)
	on       atomic.Bool

	mu   sync.Mutex
	lats []time.Duration
	sql  string // the last claim's SQL and arguments, for EXPLAIN
	args []any
}

type claimStartKey struct{}

// TraceQueryStart notes the start of a claim.
func (t *claimTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !t.match(d.SQL) || strings.HasPrefix(d.SQL, "EXPLAIN") {
		return ctx
	}
	t.mu.Lock()
	t.sql, t.args = d.SQL, d.Args
	t.mu.Unlock()
	if !t.on.Load() {
		return ctx
	}
	return context.WithValue(ctx, claimStartKey{}, time.Now())
}

// TraceQueryEnd records a claim's time.
func (t *claimTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	t0, ok := ctx.Value(claimStartKey{}).(time.Time)
	if !ok || d.Err != nil {
		return
	}
	el := time.Since(t0)
	t.mu.Lock()
	t.lats = append(t.lats, el)
	t.mu.Unlock()
}

// claimBatch is a traced batch: when it started (while on), and whether it held a claim.
type claimBatch struct {
	t0    time.Time
	claim bool
}

type claimBatchKey struct{}

// TraceBatchStart notes the start of a batch: skiplock sends its claim in a pipeline,
// after its plan settings, which pgx traces as a batch, not as a query.
func (t *claimTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return context.WithValue(ctx, claimBatchKey{}, &claimBatch{t0: time.Now()})
}

// TraceBatchQuery notes a claim among a batch's statements.
func (t *claimTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	b, ok := ctx.Value(claimBatchKey{}).(*claimBatch)
	if !ok || !t.match(d.SQL) || strings.HasPrefix(d.SQL, "EXPLAIN") {
		return
	}
	b.claim = true
	t.mu.Lock()
	t.sql, t.args = d.SQL, d.Args
	t.mu.Unlock()
}

// TraceBatchEnd records the time of a batch that held a claim: from its start to the
// end of its results (pgx calls it when the batch closes, after the claim's rows).
func (t *claimTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchEndData) {
	b, ok := ctx.Value(claimBatchKey{}).(*claimBatch)
	if !ok || !b.claim || d.Err != nil || !t.on.Load() {
		return
	}
	el := time.Since(b.t0)
	t.mu.Lock()
	t.lats = append(t.lats, el)
	t.mu.Unlock()
}

// start clears the recorded times and records from now on.
func (t *claimTracer) start() {
	t.mu.Lock()
	t.lats = t.lats[:0]
	t.mu.Unlock()
	t.on.Store(true)
}

// stop ends recording and returns the sorted times.
func (t *claimTracer) stop() []time.Duration {
	t.on.Store(false)
	t.mu.Lock()
	defer t.mu.Unlock()
	out := append([]time.Duration(nil), t.lats...)
	slices.Sort(out)
	return out
}

// last returns the last claim's SQL and arguments.
func (t *claimTracer) last() (string, []any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sql, t.args
}

// claimMatch says which statements are each system's claim.
var claimMatch = map[string]func(string) bool{
	// The claim is the one statement that sets status 'running' with SKIP LOCKED (the
	// success batch and the lease refresh also use SKIP LOCKED).
	"skiplock": func(sql string) bool {
		return strings.Contains(sql, "SKIP LOCKED") && strings.Contains(sql, "SET status = 'running'")
	},
	"bare": func(sql string) bool { return sql == bareClaimSQL },
}

// claimLimitArg is the position of the limit among each system's claim arguments.
var claimLimitArg = map[string]int{"skiplock": 1, "bare": 0}

// withTracer sets a pool's query tracer.
func withTracer(t pgx.QueryTracer) func(*pgxpool.Config) {
	return func(c *pgxpool.Config) { c.ConnConfig.Tracer = t }
}

// templateTable holds the one row a fill copies.
const templateTable = "scale_template"

// makeTemplate writes one job through the system's Bulk path and keeps a copy of its row
// in public.scale_template; the job stays in the hot table.
func makeTemplate(e *env) error {
	hot := pgx.Identifier(splitQualified(e.sys.HotTable())).Sanitize()
	if err := e.sys.Bulk(1, time.Time{}, 1)(e.ctx); err != nil {
		return err
	}
	_, err := e.pool.Exec(e.ctx, `DROP TABLE IF EXISTS public.`+templateTable+`; CREATE TABLE public.`+templateTable+` AS SELECT * FROM `+hot)
	if err != nil {
		return err
	}
	var n int
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM public.`+templateTable).Scan(&n); err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("%s: template: %d rows in %s after a bulk insert of one job into an empty table", e.sys.Name(), n, hot)
	}
	return nil
}

// copyColumns lists the columns of table a copy writes: all but identity and generated
// ones, quoted.
func copyColumns(e *env, table string) ([]string, error) {
	rows, err := e.pool.Query(e.ctx, `SELECT attname FROM pg_attribute
		WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attidentity = '' AND attgenerated = ''
		ORDER BY attnum`, table)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	for i := range names {
		names[i] = pgx.Identifier{names[i]}.Sanitize()
	}
	return names, nil
}

// fillBacklog adds n copies of the template row to the system's hot table, in
// statements of at most a million rows.
func fillBacklog(e *env, n int) error {
	hot := pgx.Identifier(splitQualified(e.sys.HotTable())).Sanitize()
	cols, err := copyColumns(e, hot)
	if err != nil {
		return err
	}
	list := strings.Join(cols, ", ")
	q := `INSERT INTO ` + hot + ` (` + list + `) SELECT ` + list + ` FROM public.` + templateTable + `, generate_series(1, $1)`
	for done := 0; done < n; {
		k := min(1_000_000, n-done)
		if _, err := e.pool.Exec(e.ctx, q, k); err != nil {
			return err
		}
		done += k
	}
	return nil
}

// queuedSQL counts each system's queued jobs. The jobs handled are not all that left
// the queue: a stopped bare loop leaves its last claimed batch started and unhandled.
var queuedSQL = map[string]string{
	"skiplock": `SELECT count(*) FROM ` + pgx.Identifier{skiplockSchema, "jobs"}.Sanitize() + ` WHERE status = 'queued'`,
	"bare":     `SELECT count(*) FROM bare_jobs WHERE started_at IS NULL`,
}

// topUp puts back as many jobs as the queue lacks to hold n.
func topUp(e *env, n int) error {
	var queued int
	if err := e.pool.QueryRow(e.ctx, queuedSQL[e.sys.Name()]).Scan(&queued); err != nil {
		return err
	}
	if queued >= n {
		return nil
	}
	return fillBacklog(e, n-queued)
}

// backlogSampleResult is one timed sample.
type backlogSampleResult struct {
	rate, p50, p99, cpuServer, cpuClient float64
	claims                               int
	vacuums                              int64 // vacuums of the hot table during the sample
}

// vacuumStats reads how often the table was vacuumed (by anyone: a vacuum reports itself
// at once) and its dead rows (which backends report lazily, up to seconds late).
func vacuumStats(e *env, table string) (vacuums, dead int64, err error) {
	_, _ = e.pool.Exec(e.ctx, `SELECT pg_stat_clear_snapshot()`)
	err = e.pool.QueryRow(e.ctx, `SELECT vacuum_count + autovacuum_count, n_dead_tup FROM pg_stat_user_tables WHERE relid = $1::regclass`,
		pgx.Identifier(splitQualified(table)).Sanitize()).Scan(&vacuums, &dead)
	return vacuums, dead, err
}

// sampleBacklog takes one timed sample of k handler runs off the system's backlog, in
// chunks of at most chunk jobs (a backlog smaller than twice the sample is not drained
// below half): per chunk the workers start, a tenth of the chunk is handled untimed
// (warm-up), the next chunk jobs are timed, the workers stop and the queue is topped
// back up to n. The chunks of a sample leave the same dead claim-index entries
// behind them at every backlog size (nothing is vacuumed in between unless the system
// does it).
func sampleBacklog(e *env, tr *claimTracer, n, k, chunk int) (backlogSampleResult, error) {
	var r backlogSampleResult
	if _, err := e.pool.Exec(e.ctx, "CHECKPOINT"); err != nil {
		return r, err
	}
	v0, _, err := vacuumStats(e, e.sys.HotTable())
	if err != nil {
		return r, err
	}
	var (
		handled            int64
		timed              time.Duration
		lats               []time.Duration
		serverUs, clientUs float64
	)
	for left := k; left > 0; {
		c := min(chunk, left)
		left -= c
		warm := int64(max(1, c/10))
		sink := NewSink(0)
		if err := e.sys.Start(e.ctx, sink, Spec{Backlog: true}); err != nil {
			return r, err
		}
		err := func() error {
			if err := waitCount(e.ctx, sink, warm, timeoutFor(int(warm), 200)); err != nil {
				return fmt.Errorf("warm-up: %w", err)
			}
			c0 := e.cpuNow()
			d0 := sink.Done()
			tr.start()
			t0 := time.Now()
			if err := waitCount(e.ctx, sink, d0+int64(c), timeoutFor(c, 200)); err != nil {
				tr.stop()
				return err
			}
			el := time.Since(t0)
			d1 := sink.Done()
			lats = append(lats, tr.stop()...)
			c1 := e.cpuNow()
			cpu := map[string]float64{}
			cpuPerJob(cpu, c0, c1, int(d1-d0))
			handled += d1 - d0
			timed += el
			serverUs += cpu[cpuServerMetric.Key] * float64(d1-d0)
			clientUs += cpu[cpuClientMetric.Key] * float64(d1-d0)
			return nil
		}()
		if err := errors.Join(err, e.stop()); err != nil {
			return r, err
		}
		if err := topUp(e, n); err != nil {
			return r, err
		}
	}
	v1, _, err := vacuumStats(e, e.sys.HotTable())
	if err != nil {
		return r, err
	}
	slices.Sort(lats)
	r.rate = float64(handled) / timed.Seconds()
	r.p50, r.p99 = msOf(percentile(lats, 0.50)), msOf(percentile(lats, 0.99))
	r.cpuServer, r.cpuClient = serverUs/float64(handled), clientUs/float64(handled)
	r.claims = len(lats)
	r.vacuums = v1 - v0
	return r, nil
}

// explainClaim runs EXPLAIN (ANALYZE, BUFFERS) of the system's last claim statement in a
// transaction it rolls back, and returns the plan's text.
func explainClaim(e *env, tr *claimTracer) (string, error) {
	sql, args := tr.last()
	if sql == "" {
		return "", errors.New("no claim seen")
	}
	args = slices.Clone(args)
	args[tr.limitArg] = explainLimit
	var out []string
	err := pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(e.ctx, "EXPLAIN (ANALYZE, BUFFERS) "+sql, args...)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		return errRollback
	})
	if err != nil && !errors.Is(err, errRollback) {
		return "", err
	}
	return strings.Join(out, "\n"), nil
}

// explainLimit is the claim limit explainClaim asks for (a worker asks for its free slots).
const explainLimit = 100

// errRollback makes pgx.BeginFunc roll back.
var errRollback = errors.New("roll back")

// planSummary picks the top line's time and the buffer totals out of a plan.
func planSummary(plan string) string {
	var exec, bufs string
	for _, l := range strings.Split(plan, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "Execution Time:") {
			exec = strings.TrimSpace(strings.TrimPrefix(t, "Execution Time:"))
		}
		if bufs == "" && strings.HasPrefix(t, "Buffers:") {
			bufs = strings.TrimSpace(strings.TrimPrefix(t, "Buffers:"))
		}
	}
	return fmt.Sprintf("execution %s, buffers %s", exec, bufs)
}

// relSize is a relation's total size (table, indexes, TOAST) in MB.
func relSize(e *env, table string) (float64, error) {
	var b int64
	err := e.pool.QueryRow(e.ctx, `SELECT pg_total_relation_size($1::regclass)`,
		pgx.Identifier(splitQualified(table)).Sanitize()).Scan(&b)
	return mib(b), err
}

// backlogSystem is one system of a backlog point.
type backlogSystem struct {
	name string
	e    *env
	tr   *claimTracer
	done func()
	runs []backlogSampleResult
}

func runBacklogCurve(sr *scaleRun) (*ScaleResult, error) {
	sizes, err := backlogSizes(sr.quick)
	if err != nil {
		return nil, fmt.Errorf("-scale-backlog: %w", err)
	}
	names := []string{"skiplock", "bare"}
	res := &ScaleResult{Header: []string{"backlog", "chunk", "skiplock jobs/s", "bare jobs/s", "skiplock / bare",
		"skiplock claim p50 ms", "skiplock claim p99 ms", "bare claim p50 ms", "bare claim p99 ms",
		"skiplock server µs/job", "bare server µs/job", "skiplock MB", "bare MB"}}
	series := map[string]*ScaleSeries{}
	ser := func(name string) *ScaleSeries {
		if series[name] == nil {
			series[name] = &ScaleSeries{Name: name}
		}
		return series[name]
	}
	var firstRate, lastRate float64
	var worstP99 float64
	for _, n := range sizes {
		k, chunk := backlogSample(sr.quick), backlogChunk(sr.quick, n)
		x := float64(n)
		systems := make([]*backlogSystem, 0, len(names))
		closeAll := func() {
			for _, s := range systems {
				s.done()
			}
		}
		mb := map[string]float64{}
		err := func() error {
			for _, name := range names {
				tr := &claimTracer{match: claimMatch[name], limitArg: claimLimitArg[name]}
				e, done, err := sr.open(name, withTracer(tr))
				if err != nil {
					return err
				}
				s := &backlogSystem{name: name, e: e, tr: tr, done: done}
				systems = append(systems, s)
				t0 := time.Now()
				if err := makeTemplate(e); err != nil {
					return err
				}
				if err := fillBacklog(e, n-1); err != nil {
					return fmt.Errorf("%s: fill %d: %w", name, n, err)
				}
				hot := pgx.Identifier(splitQualified(e.sys.HotTable())).Sanitize()
				if _, err := e.pool.Exec(e.ctx, "ANALYZE "+hot); err != nil {
					return err
				}
				if _, err := e.pool.Exec(e.ctx, "CHECKPOINT"); err != nil {
					return err
				}
				if mb[name], err = relSize(e, e.sys.HotTable()); err != nil {
					return err
				}
				sr.progress("backlog", "%s: filled %s jobs in %.1f s (%.0f MB)", name, thousands(int64(n)), time.Since(t0).Seconds(), mb[name])
				res.Notes = append(res.Notes, fmt.Sprintf("%s: %s jobs: filled in %.1f s, table + indexes %.0f MB.", name, thousands(int64(n)), time.Since(t0).Seconds(), mb[name]))
			}
			for r := range sr.runs {
				for i := range systems {
					s := systems[(i+r)%len(systems)] // alternate which system goes first
					got, err := sampleBacklog(s.e, s.tr, n, k, chunk)
					if err != nil {
						return fmt.Errorf("%s at %d, run %d: %w", s.name, n, r+1, err)
					}
					s.runs = append(s.runs, got)
					sr.progress("backlog", "%s backlog %s run %d: %s jobs/s, claim p50 %.2f p99 %.2f ms (%d claims), server %.1f µs/job",
						s.name, thousands(int64(n)), r+1, thousands(int64(got.rate)), got.p50, got.p99, got.claims, got.cpuServer)
				}
			}
			for _, s := range systems {
				// The claim as the samples left the table (dead entries of the jobs they
				// took, unless a vacuum ran), then after a VACUUM.
				var vac []string
				for _, g := range s.runs {
					vac = append(vac, fmt.Sprintf("%d vacuum(s) during", g.vacuums))
				}
				plan, err := explainClaim(s.e, s.tr)
				if err != nil {
					return fmt.Errorf("%s: explain: %w", s.name, err)
				}
				hot := pgx.Identifier(splitQualified(s.e.sys.HotTable())).Sanitize()
				t0 := time.Now()
				if _, err := s.e.pool.Exec(s.e.ctx, "VACUUM "+hot); err != nil {
					return err
				}
				vt := time.Since(t0)
				plan2, err := explainClaim(s.e, s.tr)
				if err != nil {
					return fmt.Errorf("%s: explain: %w", s.name, err)
				}
				sr.progress("backlog", "%s backlog %s: EXPLAIN (ANALYZE, BUFFERS) of the claim after the samples:\n%s\nafter VACUUM (%.1f s):\n%s", s.name, thousands(int64(n)), plan, vt.Seconds(), plan2)
				res.Notes = append(res.Notes, fmt.Sprintf("%s at %s: samples: %s. One claim of 100 after them, EXPLAIN (ANALYZE, BUFFERS): %s; after a VACUUM (%.1f s): %s.",
					s.name, thousands(int64(n)), strings.Join(vac, "; "), planSummary(plan), vt.Seconds(), planSummary(plan2)))
			}
			return nil
		}()
		closeAll()
		if err != nil {
			return res, err
		}
		pts := map[string]map[string]ScalePoint{}
		for _, s := range systems {
			var rate, p50, p99, cpu []float64
			for _, g := range s.runs {
				rate, p50, p99, cpu = append(rate, g.rate), append(p50, g.p50), append(p99, g.p99), append(cpu, g.cpuServer)
			}
			pts[s.name] = map[string]ScalePoint{"rate": pointOf(x, rate), "p50": pointOf(x, p50), "p99": pointOf(x, p99), "cpu": pointOf(x, cpu)}
			ser(s.name + " jobs/s").Points = append(ser(s.name+" jobs/s").Points, pts[s.name]["rate"])
			ser(s.name + " claim p50").Points = append(ser(s.name+" claim p50").Points, pts[s.name]["p50"])
			ser(s.name + " claim p99").Points = append(ser(s.name+" claim p99").Points, pts[s.name]["p99"])
			ser(s.name + " server µs/job").Points = append(ser(s.name+" server µs/job").Points, pts[s.name]["cpu"])
		}
		var ratio []float64
		for r := range min(len(systems[0].runs), len(systems[1].runs)) {
			ratio = append(ratio, systems[0].runs[r].rate/systems[1].runs[r].rate)
		}
		sk, ba := pts["skiplock"], pts["bare"]
		res.Rows = append(res.Rows, []string{thousands(int64(n)), thousands(int64(chunk)),
			cellOf(sk["rate"], "jobs/s"), cellOf(ba["rate"], "jobs/s"), cellOf(pointOf(x, ratio), "x"),
			cellOf(sk["p50"], "ms"), cellOf(sk["p99"], "ms"), cellOf(ba["p50"], "ms"), cellOf(ba["p99"], "ms"),
			cellOf(sk["cpu"], "µs"), cellOf(ba["cpu"], "µs"), format(mb["skiplock"], "MB"), format(mb["bare"], "MB")})
		if firstRate == 0 {
			firstRate = sk["rate"].Y
		}
		lastRate = sk["rate"].Y
		worstP99 = math.Max(worstP99, sk["p99"].Max)
	}
	if len(sizes) > 1 && firstRate > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("Issue 45's target: from %s to %s jobs skiplock's drain rate falls by at most 20 %% (here %+.1f %%, medians) and claim p99 stays under 10 ms (here at most %.2f ms, worst run).",
			thousands(int64(sizes[0])), thousands(int64(sizes[len(sizes)-1])), 100*(lastRate/firstRate-1), worstP99))
	}
	pick := func(names ...string) []ScaleSeries {
		var out []ScaleSeries
		for _, n := range names {
			if s := series[n]; s != nil {
				out = append(out, *s)
			}
		}
		return out
	}
	res.Plots = []ScalePlot{
		{File: "scale-backlog-rate.png", Title: "Drain rate by backlog (median, min–max)", XLabel: "queued jobs", YLabel: "jobs/s", LogX: true,
			Series: pick("skiplock jobs/s", "bare jobs/s")},
		{File: "scale-backlog-claim.png", Title: "Claim statement time at the client by backlog", XLabel: "queued jobs", YLabel: "ms", LogX: true,
			Series: pick("skiplock claim p50", "skiplock claim p99", "bare claim p50", "bare claim p99")},
		{File: "scale-backlog-cpu.png", Title: "Server CPU per job by backlog", XLabel: "queued jobs", YLabel: "µs/job", LogX: true,
			Series: pick("skiplock server µs/job", "bare server µs/job")},
	}
	return res, nil
}
