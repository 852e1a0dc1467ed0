package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// -server-experiments: the server work per job of three table shapes (serverwork_sql.go),
// in plain SQL on one database, bench_serverwork, interleaved run by run like the
// systems. A run of a variant is:
//
//   - enqueue: swProducers producers insert swJobs jobs, one INSERT and one commit each
//     (timed: jobs/s, WAL per job);
//   - drain: swLoops loops, each claiming up to swBatch jobs per statement and deleting
//     the batch's successes in one statement, as the bare drain floor (sys_bare.go) does,
//     until every job is gone (timed: jobs/s, WAL, client and server CPU per job, the
//     claim's updates that were HOT);
//   - what is left: the variant's dead tuples (pgstattuple) and the size of all its
//     relations, after the drain and again after the mixed phase;
//   - mixed: producers and claim loops together for swMixedFor (swMixed).
//
// The rotated variant's rotator runs through both phases.

const (
	swProducers = 16
	swLoopCount = bareLoops
	swBatch     = bareBatch
)

// swMixedFor is -server-mixed: how long swMixed enqueues while the loops drain.
var swMixedFor = 10 * time.Second

// swJobs is -server-jobs: the jobs of a run (0: 50,000, or 20,000 with -quick).
var swJobs int

// swOnly is -server-variants: the variants to run (empty: all).
var swOnly string

// swMetrics are the figures of one run, in report order.
var swMetrics = []Metric{
	{Key: "enqueue", Label: "enqueue, 16 producers, one INSERT + commit each", Unit: "jobs/s"},
	{Key: "enqueue_wal", Label: "enqueue: WAL per job", Unit: "B", LowerBetter: true},
	{Key: "drain", Label: "drain (claim 100 + delete 100, 4 loops)", Unit: "jobs/s"},
	{Key: "drain_wal", Label: "drain: WAL per job", Unit: "B", LowerBetter: true},
	{Key: "cpu_server", Label: "drain: server CPU per job", Unit: "µs", LowerBetter: true},
	{Key: "cpu_client", Label: "drain: client CPU per job", Unit: "µs", LowerBetter: true},
	{Key: "hot", Label: "claim updates that were HOT", Unit: "%"},
	{Key: "dead", Label: "dead tuples left after the drain", Unit: "rows", LowerBetter: true},
	{Key: "size", Label: "size of all its relations after the drain", Unit: "kB", LowerBetter: true},
	{Key: "mixed_enqueue", Label: "mixed: enqueued while 4 loops drain", Unit: "jobs/s"},
	{Key: "mixed_done", Label: "mixed: finished", Unit: "jobs/s"},
	{Key: "mixed_cpu_server", Label: "mixed: server CPU per finished job (enqueue + claim + delete)", Unit: "µs", LowerBetter: true},
	{Key: "mixed_dead", Label: "dead tuples left after the mixed phase", Unit: "rows", LowerBetter: true},
	{Key: "mixed_size", Label: "size of all its relations after the mixed phase", Unit: "kB", LowerBetter: true},
}

// runServerWork runs the experiments in every pass of o and prints one table per pass.
func runServerWork(ctx context.Context, o options) error {
	if len(swChosen()) != len(splitList(swOnly)) && swOnly != "" {
		return fmt.Errorf("-server-variants %q: the variants are %s", swOnly, swNames())
	}
	jobs := swJobs
	switch {
	case jobs > 0:
	case o.quick:
		jobs = 20_000
	default:
		jobs = 50_000
	}
	servers := &passServers{o: o}
	defer servers.close(ctx)
	var out strings.Builder
	for _, pass := range o.passes {
		dsn, err := servers.dsn(ctx, pass)
		if err != nil {
			return err
		}
		if err := swCheckAutovacuum(ctx, dsn, pass); err != nil {
			return err
		}
		fmt.Fprintf(&out, "\n### autovacuum %s: %d jobs, mixed phase %s, %d runs, load average %s\n\n", orAsIs(pass), jobs, swMixedFor, o.runs, loadAvg())
		vals, err := swPass(ctx, o, dsn, jobs)
		if err != nil {
			return err
		}
		swTable(&out, swChosen(), vals)
		fmt.Fprintf(&out, "\nload average at the end: %s\n", loadAvg())
	}
	fmt.Print(out.String())
	return nil
}

// swCheckAutovacuum fails when pass names an autovacuum setting the server at dsn does
// not have.
func swCheckAutovacuum(ctx context.Context, dsn, pass string) error {
	if pass == "" {
		return nil
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var av string
	if err := conn.QueryRow(ctx, "SHOW autovacuum").Scan(&av); err != nil {
		return err
	}
	if av != pass {
		return fmt.Errorf("pass %q: the server at %s has autovacuum = %s", pass, redact(dsn), av)
	}
	return nil
}

// swChosen is the variants -server-variants names, in its order, or all of them.
func swChosen() []swVariant {
	if swOnly == "" {
		return swVariants
	}
	var out []swVariant
	for _, name := range splitList(swOnly) {
		for _, v := range swVariants {
			if v.name == name {
				out = append(out, v)
			}
		}
	}
	return out
}

func swNames() string {
	var names []string
	for _, v := range swVariants {
		names = append(names, v.name)
	}
	return strings.Join(names, ", ")
}

func orAsIs(pass string) string {
	if pass == "" {
		return "as the server has it"
	}
	return pass
}

// swPass runs every variant o.runs times, interleaved, on a fresh bench_serverwork
// database on dsn, and returns the figures by variant and metric.
func swPass(ctx context.Context, o options, dsn string, jobs int) (map[string]map[string][]float64, error) {
	const db = "bench_serverwork"
	if err := recreateDB(ctx, dsn, db); err != nil {
		return nil, err
	}
	defer func() {
		if !o.keep {
			_ = dropDB(context.WithoutCancel(ctx), dsn, db)
		}
	}()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.Database = db
	cfg.MaxConns = int32(o.poolSize)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE EXTENSION pgstattuple"); err != nil {
		return nil, err
	}
	for _, v := range swVariants {
		if v.setup == "" {
			continue // shares another variant's tables
		}
		if _, err := pool.Exec(ctx, v.setup); err != nil {
			return nil, fmt.Errorf("%s: setup: %w", v.name, err)
		}
	}
	vals := map[string]map[string][]float64{}
	for r := 1; r <= o.runs; r++ {
		for _, v := range swChosen() {
			t0 := time.Now()
			res, err := swRun(ctx, pool, v, jobs)
			if err != nil {
				return nil, fmt.Errorf("%s run %d: %w", v.name, r, err)
			}
			if vals[v.name] == nil {
				vals[v.name] = map[string][]float64{}
			}
			var parts []string
			for _, m := range swMetrics {
				vals[v.name][m.Key] = append(vals[v.name][m.Key], res[m.Key])
				parts = append(parts, m.Key+"="+format(res[m.Key], m.Unit))
			}
			fmt.Fprintf(os.Stderr, "%-8s run %d/%d: %s  (%.1fs)\n", v.name, r, o.runs, strings.Join(parts, " "), time.Since(t0).Seconds())
		}
	}
	return vals, nil
}

// swTable writes a Markdown table: a row per metric, a column per variant of vs, each
// cell the median (min–max), and the ratio of each variant's median to the first's.
func swTable(b *strings.Builder, vs []swVariant, vals map[string]map[string][]float64) {
	b.WriteString("| metric |")
	for _, v := range vs {
		fmt.Fprintf(b, " %s |", v.name)
	}
	for _, v := range vs[1:] {
		fmt.Fprintf(b, " %s / %s |", v.name, vs[0].name)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", 2*len(vs)-1) + "\n")
	for _, m := range swMetrics {
		fmt.Fprintf(b, "| %s (%s) |", m.Label, m.Unit)
		meds := map[string]float64{}
		for _, v := range vs {
			s := slices.Sorted(slices.Values(vals[v.name][m.Key]))
			meds[v.name] = median(s)
			fmt.Fprintf(b, " %s |", cell(Result{Runs: s, Median: meds[v.name], Min: s[0], Max: s[len(s)-1], Unit: m.Unit}))
		}
		for _, v := range vs[1:] {
			if base := meds[vs[0].name]; base != 0 {
				fmt.Fprintf(b, " %.2f× |", meds[v.name]/base)
			} else {
				b.WriteString(" — |")
			}
		}
		b.WriteString("\n")
	}
}

// swRun runs variant v once from empty tables: the enqueue, the drain, then the mixed
// phase on the tables the drain left.
func swRun(ctx context.Context, pool *pgxpool.Pool, v swVariant, jobs int) (map[string]float64, error) {
	if _, err := pool.Exec(ctx, v.reset); err != nil {
		return nil, fmt.Errorf("reset: %w", err)
	}
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return nil, err
	}
	e := &env{ctx: ctx, pool: pool}
	res := map[string]float64{}
	var rot *swRotator
	if v.rotate {
		rot = startRotator(ctx, pool)
	}
	err := func() error {
		if err := swEnqueue(e, v, jobs, res); err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
		upd0, hot0, err := swUpdates(e, v)
		if err != nil {
			return err
		}
		if err := swDrain(e, v, rot, jobs, res); err != nil {
			return fmt.Errorf("drain: %w", err)
		}
		if rot != nil {
			// One more round after the drain, as the rotator would have by its next tick.
			rot.round(ctx)
		}
		upd1, hot1, err := swUpdates(e, v)
		if err != nil {
			return err
		}
		if upd1 > upd0 {
			res["hot"] = 100 * float64(hot1-hot0) / float64(upd1-upd0)
		}
		if err := swLeft(e, v, res, "dead", "size"); err != nil {
			return err
		}
		if err := swMixed(e, v, rot, res); err != nil {
			return fmt.Errorf("mixed: %w", err)
		}
		if rot != nil {
			rot.round(ctx)
		}
		if _, _, err := swUpdates(e, v); err != nil {
			return err
		}
		return swLeft(e, v, res, "mixed_dead", "mixed_size")
	}()
	if rot != nil {
		err = errors.Join(err, rot.stop())
	}
	return res, err
}

// swLeft stores what v's tables hold now: their dead tuples in res[dead] (counted by
// pgstattuple in the heap: pg_stat_user_tables' counts arrive late and survive a
// TRUNCATE) and the size of all their relations, in kB, in res[size].
func swLeft(e *env, v swVariant, res map[string]float64, dead, size string) error {
	var d, sz float64
	err := e.pool.QueryRow(e.ctx, `SELECT coalesce(sum((pgstattuple(oid)).dead_tuple_count), 0)::float8,
		coalesce(sum(pg_total_relation_size(oid)), 0)::float8 / 1024
		FROM pg_class WHERE relkind = 'r' AND relname LIKE $1`, v.like).Scan(&d, &sz)
	res[dead], res[size] = d, sz
	return err
}

// swUpdates reads the updates and HOT updates of v's body table so far, after closing the
// pool's idle connections so that their backends flush their statistics on exit.
func swUpdates(e *env, v swVariant) (upd, hot int64, err error) {
	e.pool.Reset()
	if err := sleep(e.ctx, 1500*time.Millisecond); err != nil {
		return 0, 0, err
	}
	err = e.pool.QueryRow(e.ctx, `SELECT coalesce(sum(n_tup_upd), 0)::bigint, coalesce(sum(n_tup_hot_upd), 0)::bigint
		FROM pg_stat_user_tables WHERE relname LIKE $1`, v.body+"%").Scan(&upd, &hot)
	return upd, hot, err
}

// swEnqueue inserts jobs jobs from swProducers producers, one autocommit INSERT each.
func swEnqueue(e *env, v swVariant, jobs int, res map[string]float64) error {
	lsn0, err := e.walLSN()
	if err != nil {
		return err
	}
	payload, _ := json.Marshal(NoopArgs{})
	var left atomic.Int64
	left.Store(int64(jobs))
	t0 := time.Now()
	err = producers(e.ctx, swProducers, func(ctx context.Context) (bool, error) {
		if left.Add(-1) < 0 {
			return false, nil
		}
		_, err := e.pool.Exec(ctx, v.insert, payload)
		return true, err
	})
	if err != nil {
		return err
	}
	res["enqueue"] = float64(jobs) / time.Since(t0).Seconds()
	lsn1, err := e.walLSN()
	res["enqueue_wal"] = float64(lsn1-lsn0) / float64(jobs)
	return err
}

// swDrain runs swLoops claim loops until jobs jobs were claimed and deleted.
func swDrain(e *env, v swVariant, rot *swRotator, jobs int, res map[string]float64) error {
	lsn0, err := e.walLSN()
	if err != nil {
		return err
	}
	var done atomic.Int64
	c0 := e.cpuNow()
	t0 := time.Now()
	err = swLoops(e.ctx, e.pool, v, rot, &done, func() bool { return done.Load() >= int64(jobs) })
	if err != nil {
		return err
	}
	res["drain"] = float64(jobs) / time.Since(t0).Seconds()
	cpuPerJob(res, c0, e.cpuNow(), jobs)
	lsn1, err := e.walLSN()
	res["drain_wal"] = float64(lsn1-lsn0) / float64(jobs)
	return err
}

// swLoops runs swLoopCount claim loops until stop says so or ctx ends (a clean end: no
// error), adding the jobs they finish to done.
func swLoops(ctx context.Context, pool *pgxpool.Pool, v swVariant, rot *swRotator, done *atomic.Int64, stop func() bool) error {
	var slot atomic.Int32 // direct: the oldest generation that may hold jobs
	err := producers(ctx, swLoopCount, func(ctx context.Context) (bool, error) {
		if stop() {
			return false, nil
		}
		s := slot.Load()
		n, err := swClaimOnce(ctx, pool, v, int(s))
		switch {
		case err != nil || n > 0:
		case v.direct && rot.after(int(s)) != int(s):
			slot.CompareAndSwap(s, int32(rot.after(int(s))))
		default:
			err = sleep(ctx, time.Millisecond)
		}
		done.Add(int64(n))
		return true, err
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// swMixed runs swProducers producers and the claim loops together for swMixedFor, on
// the tables as the drain left them: enqueues and completions per second in that window,
// and the server CPU per job finished in it (enqueue, claim and completion together).
// Then it waits for the backlog.
func swMixed(e *env, v swVariant, rot *swRotator, res map[string]float64) error {
	var done, inserted atomic.Int64
	lctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	loopsDone := make(chan error, 1)
	go func() { loopsDone <- swLoops(lctx, e.pool, v, rot, &done, func() bool { return false }) }()
	payload, _ := json.Marshal(NoopArgs{})
	c0 := e.cpuNow()
	t0 := time.Now()
	end := t0.Add(swMixedFor)
	err := producers(e.ctx, swProducers, func(ctx context.Context) (bool, error) {
		if time.Now().After(end) {
			return false, nil
		}
		_, err := e.pool.Exec(ctx, v.insert, payload)
		if err == nil {
			inserted.Add(1)
		}
		return true, err
	})
	window, finished := time.Since(t0), done.Load()
	c1 := e.cpuNow()
	res["mixed_enqueue"] = float64(inserted.Load()) / window.Seconds()
	res["mixed_done"] = float64(finished) / window.Seconds()
	cpu := map[string]float64{}
	cpuPerJob(cpu, c0, c1, int(finished))
	res["mixed_cpu_server"] = cpu[cpuServerMetric.Key]
	if err == nil {
		err = pollUntil(e.ctx, time.Minute, 5*time.Millisecond, func() (bool, error) {
			select {
			case err := <-loopsDone:
				return false, fmt.Errorf("claim loops ended: %v", err)
			default:
				return done.Load() >= inserted.Load(), nil
			}
		})
	}
	cancel()
	select {
	case lerr := <-loopsDone:
		return errors.Join(err, lerr)
	case <-time.After(time.Minute):
		return errors.Join(err, errors.New("claim loops did not stop"))
	}
}

// swClaimOnce claims a batch (from partition slot if v.direct), runs it (decodes each
// payload) and deletes it; it returns how many jobs it finished.
func swClaimOnce(ctx context.Context, pool *pgxpool.Pool, v swVariant, slot int) (int, error) {
	claim, complete := v.claim, v.complete
	if v.direct {
		p := pgx.Identifier{fmt.Sprintf("sw_rot_%d", slot)}.Sanitize()
		claim, complete = strings.ReplaceAll(claim, "{p}", p), strings.ReplaceAll(complete, "{p}", p)
	}
	rows, err := pool.Query(ctx, claim, "default", swBatch, "sw-worker", "1 minute")
	if err != nil {
		return 0, err
	}
	var ids, fences []int64
	var gens []int16
	gen := int16(0)
	var id, fence int64
	var payload []byte
	_, err = pgx.ForEachRow(rows, []any{&id, &fence, &gen, &payload}, func() error {
		var a NoopArgs
		if err := json.Unmarshal(payload, &a); err != nil {
			return err
		}
		ids, fences = append(ids, id), append(fences, fence)
		if !slices.Contains(gens, gen) {
			gens = append(gens, gen)
		}
		return nil
	})
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	args := []any{ids, fences, "sw-worker"}
	if v.gens {
		args = append(args, gens)
	}
	tag, err := pool.Exec(ctx, complete, args...)
	if err == nil && tag.RowsAffected() != int64(len(ids)) {
		err = fmt.Errorf("completed %d of %d claimed jobs", tag.RowsAffected(), len(ids))
	}
	return len(ids), err
}
