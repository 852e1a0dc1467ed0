package main

import (
	"fmt"
)

// The procs curve: the drain of one queue by 1, 2, 4, 8 and 16 skiplock worker processes
// against one process, beside the bare floor's loops run in as many processes (each its
// own pool and its bareLoops loops on the one table). The rate, its ratio to one process
// in the same run, and the CPU per job of the worker processes and of the server.
//
// Connections: every skiplock process holds a pool and a LISTEN connection; 16 of them at
// the fleet's pool of 10 would take 176 of the server's max_connections (100 here). Each
// point sizes the processes' pools from what the server has free when it starts (see
// procsPool), the same for both systems, and the table shows the size.

func init() {
	registerScale(ScaleCurve{
		Name: "procs",
		Desc: func(quick bool) string {
			s := sizesFor(quick)
			return fmt.Sprintf("drain %s no-op jobs of one queue with P worker processes (this binary re-run, one skiplock Worker each at its defaults: 100 slots), P = %s, "+
				"beside the bare floor's claim+DELETE loops (%d loops per process) in as many processes; jobs inserted in one COPY, timed from its commit until every job is final, after an untimed warm-up drain of a tenth as many. "+
				"Each process's pool: %d connections, or fewer when P processes (plus a listener each) would not fit in the server's free connections (column pool)",
				thousands(int64(s.Drain)), joinInts(procsSizes(quick)), bareLoops, fleetPool)
		},
		Run: runScaleProcs,
	})
}

// procsSizes are the process counts of the curve.
func procsSizes(quick bool) []int {
	if quick {
		return []int{1, 2, 4}
	}
	return []int{1, 2, 4, 8, 16}
}

// procsReserve is the connections a point leaves to the harness (its pool's polling, the
// CPU reads) and to the server's other clients: the pools are sized from max_connections
// less this, the same at every run of a point.
const procsReserve = 20

// procsPool is the pool size of each of procs worker processes: the fleet's pool (10) when
// it fits, else what max_connections less procsReserve allows with one listener per
// process. It fails when the connections open now leave too little room for that.
func procsPool(e *env, procs int) (pool, maxConns, open int, err error) {
	if err := e.pool.QueryRow(e.ctx, `SELECT current_setting('max_connections')::int,
		(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')`).Scan(&maxConns, &open); err != nil {
		return 0, 0, 0, err
	}
	pool = min(fleetPool, (maxConns-procsReserve)/procs-1)
	if pool < 2 || open+procs*(pool+1) > maxConns-3 {
		return 0, maxConns, open, fmt.Errorf("%d worker processes with pools of %d do not fit: max_connections %d, %d open", procs, pool, maxConns, open)
	}
	return pool, maxConns, open, nil
}

func runScaleProcs(sr *scaleRun) (*ScaleResult, error) {
	sk, doneSk, err := sr.open("skiplock")
	if err != nil {
		return nil, err
	}
	defer doneSk()
	bare, doneBare, err := sr.open("bare")
	if err != nil {
		return nil, err
	}
	defer doneBare()
	prevPool := fleetPool
	defer func() { fleetPool = prevPool }()

	sizes := procsSizes(sr.quick)
	n := sr.sizes.Drain
	type sysRuns struct{ rate, ratio, wcpu, scpu []float64 }
	type point struct {
		sys  map[string]*sysRuns
		pool []float64
	}
	pts := make([]point, len(sizes))
	for i := range pts {
		pts[i].sys = map[string]*sysRuns{"skiplock": {}, "bare": {}}
	}
	var maxConns int
	for r := range sr.runs {
		one := map[string]float64{}
		for i, p := range sizes {
			pool, mc, open, err := procsPool(sk, p)
			if err != nil {
				return nil, err
			}
			maxConns = mc
			fleetPool = pool
			pts[i].pool = append(pts[i].pool, float64(pool))
			order := []*env{sk, bare}
			if (r+i)%2 == 1 {
				order = []*env{bare, sk}
			}
			for _, e := range order {
				name := e.sys.Name()
				sr.progress("procs", "run %d/%d, %d process(es), pool %d (%d of %d connections open): %s drain %s jobs", r+1, sr.runs, p, pool, open, mc, name, thousands(int64(n)))
				rate, cpu, err := fleetDrain(e, p, n)
				if err != nil {
					return nil, fmt.Errorf("%s, %d processes: %w", name, p, err)
				}
				s := pts[i].sys[name]
				s.rate, s.wcpu, s.scpu = append(s.rate, rate), append(s.wcpu, cpu.workers), append(s.scpu, cpu.server)
				if p == 1 {
					one[name] = rate
				}
				if one[name] > 0 {
					s.ratio = append(s.ratio, rate/one[name])
				}
			}
			fleetPool = prevPool
		}
	}
	res := &ScaleResult{Header: []string{"processes", "pool", "skiplock jobs/s", "× 1 process", "worker µs/job", "server µs/job",
		"bare jobs/s", "× 1 process", "bare worker µs/job", "bare server µs/job", "skiplock / bare"}}
	series := map[string]*ScaleSeries{}
	for _, k := range []string{"skiplock", "bare", "skiplock ratio", "bare ratio", "skiplock worker", "skiplock server", "bare worker", "bare server"} {
		series[k] = &ScaleSeries{Name: k}
	}
	series["bare"].Name, series["bare ratio"].Name = "bare floor", "bare floor"
	series["skiplock ratio"].Name = "skiplock"
	for i, p := range sizes {
		x := float64(p)
		sk, b := pts[i].sys["skiplock"], pts[i].sys["bare"]
		var vs []float64
		for k := range sk.rate {
			if k < len(b.rate) && b.rate[k] > 0 {
				vs = append(vs, sk.rate[k]/b.rate[k])
			}
		}
		cells := []string{fmt.Sprint(p), cellOf(pointOf(x, pts[i].pool), "")}
		for _, name := range []string{"skiplock", "bare"} {
			s := pts[i].sys[name]
			rt, ra, wc, sc := pointOf(x, s.rate), pointOf(x, s.ratio), pointOf(x, s.wcpu), pointOf(x, s.scpu)
			cells = append(cells, cellOf(rt, "jobs/s"), cellOf(ra, "x"), cellOf(wc, "µs"), cellOf(sc, "µs"))
			series[name].Points = append(series[name].Points, rt)
			series[name+" ratio"].Points = append(series[name+" ratio"].Points, ra)
			series[name+" worker"].Points = append(series[name+" worker"].Points, wc)
			series[name+" server"].Points = append(series[name+" server"].Points, sc)
		}
		cells = append(cells, cellOf(pointOf(x, vs), "x"))
		res.Rows = append(res.Rows, cells)
	}
	ticks := make([]float64, len(sizes))
	for i, p := range sizes {
		ticks[i] = float64(p)
	}
	res.Plots = []ScalePlot{
		{File: "scale-procs-rate.png", Title: fmt.Sprintf("Drain of %s jobs by P worker processes", thousands(int64(n))), XLabel: "worker processes", YLabel: "jobs/s", XTicks: ticks,
			Series: []ScaleSeries{*series["skiplock"], *series["bare"]}},
		{File: "scale-procs-ratio.png", Title: "Drain rate with P processes / with 1 process (same run)", XLabel: "worker processes", YLabel: "× 1 process", XTicks: ticks,
			Series: []ScaleSeries{*series["skiplock ratio"], *series["bare ratio"]}},
		{File: "scale-procs-cpu.png", Title: "CPU per drained job with P processes", XLabel: "worker processes", YLabel: "µs per job", XTicks: ticks,
			Series: []ScaleSeries{*series["skiplock worker"], *series["skiplock server"], *series["bare worker"], *series["bare server"]}},
	}
	res.Notes = []string{
		fmt.Sprintf("Pools: max_connections is %d. Each point gives every process a pool of min(%d, (max_connections − %d) / P − 1) connections, one more for a skiplock process's listener, so P processes fit beside the harness and the server's other clients (%d kept for them); the same size for the bare processes (which use at most %d, one per loop). "+
			"A skiplock worker keeps at most max(1, FleetStatements/n) = max(1, 8/P) claims and outcome batches in flight when n workers serve its queue, so at P = 16 a pool of 4 holds its one statement in flight beside heartbeats, the poll and the election; whether the smaller pool costs rate there is not measured (16 pools of 10 do not fit).",
			maxConns, prevPool, procsReserve, procsReserve, bareLoops),
		"The ratio is each run's rate over the same run's rate with one process; the two systems alternate which goes first from point to point and run to run.",
	}
	return res, nil
}
