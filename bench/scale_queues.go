package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The queues curve: what one skiplock worker process costs when it serves 10, 1,000 or
// 10,000 queues, idle and busy. Idle: the commits per second the database sees from the
// process with nothing to do (the target: 10,000 idle queues cost at most 5
// commits/s per worker), its CPU and the server's per second, the connections it holds,
// its goroutines and memory. Busy: the same process drains a fixed number of jobs spread
// round-robin over the queues, beside the bare floor's drain of the same count (its loops
// in a process of their own; the floor has no queues, so its figure is the same work
// without them).

func init() {
	registerScale(ScaleCurve{
		Name: "queues",
		Desc: func(quick bool) string {
			s := sizesFor(quick)
			return fmt.Sprintf("one skiplock worker process (a pool of %d connections + its listener) serving N queues, %d slots each (QueueConfig.MaxWorkers), for N = %s. "+
				"Idle: commits/s the database saw from it over %s with no job (counted after the %s statistics lag), the process's CPU and the server's per second of wall time, "+
				"the connections it held, its goroutines and the Go runtime's memory at the end of the window. "+
				"Busy: it drains %d jobs inserted round-robin over the N queues (one COPY; timed from the commit until every job is final, after an untimed warm-up drain of a tenth as many), "+
				"beside the bare floor's drain of the same count, its loops in one process", fleetPool, fleetQueueSlots, joinInts(queuesSizes(quick)), s.FleetIdle, statsLag, s.Drain)
		},
		Run: runScaleQueues,
	})
}

// queuesSizes are the queue counts of the curve.
func queuesSizes(quick bool) []int {
	if quick {
		return []int{10, 1_000}
	}
	return []int{10, 1_000, 10_000}
}

// joinInts renders counts as "10, 1,000, 10,000".
func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = thousands(int64(n))
	}
	return strings.Join(s, ", ")
}

// idleQueues is what one idle worker process serving many queues cost.
type idleQueues struct {
	commits    float64 // commits/s in the database
	workerCPU  float64 // ms of CPU per second of wall time, the worker process
	serverCPU  float64 // ms of CPU per second, the server's processes
	conns      float64 // connections the process held at the end of the window
	goroutines float64
	memMB      float64 // Go runtime's memory mapped from the OS
	rssMB      float64 // the process's resident set
	startup    float64 // s from the process's start until it listened
	idxScans   float64 // index scans/s on the jobs table
	busiest    string  // the statements seen running most often in the window
}

func runScaleQueues(sr *scaleRun) (*ScaleResult, error) {
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
	acfg := sk.pool.Config().ConnConfig.Copy()
	acfg.Database = "postgres"
	admin, err := pgx.ConnectConfig(sr.ctx, acfg)
	if err != nil {
		return nil, err
	}
	defer admin.Close(context.WithoutCancel(sr.ctx))
	dir, err := os.MkdirTemp("", "scale-queues")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	prevDir, prevQueues := fleetStatsDir, fleetDrainQueues
	fleetStatsDir = dir
	defer func() { fleetStatsDir, fleetDrainQueues = prevDir, prevQueues }()

	sizes := queuesSizes(sr.quick)
	n := sr.sizes.Drain
	type runs struct {
		rate, wcpu, scpu              []float64
		bareRate, bareWCPU, bareSCPU  []float64
		commits, workerMS, serverMS   []float64
		scans                         []float64
		conns, gor, mem, rss, startup []float64
	}
	pts := make([]runs, len(sizes))
	var notes []string
	for r := range sr.runs {
		for i, q := range sizes {
			sr.progress("queues", "run %d/%d, %s queues: idle %s", r+1, sr.runs, thousands(int64(q)), sr.sizes.FleetIdle)
			id, err := measureIdleQueues(sk, admin, q, sr.sizes.FleetIdle)
			if err != nil {
				return nil, fmt.Errorf("idle, %d queues: %w", q, err)
			}
			p := &pts[i]
			p.commits = append(p.commits, id.commits)
			p.workerMS = append(p.workerMS, id.workerCPU)
			p.serverMS = append(p.serverMS, id.serverCPU)
			p.conns = append(p.conns, id.conns)
			p.gor = append(p.gor, id.goroutines)
			p.mem = append(p.mem, id.memMB)
			p.rss = append(p.rss, id.rssMB)
			p.startup = append(p.startup, id.startup)
			p.scans = append(p.scans, id.idxScans)
			notes = append(notes, fmt.Sprintf("Run %d, %s idle queues, statements seen active in the %s after the window (share of the samples of pg_stat_activity every %s in which a backend of the bench database was active in it, with its wait event, or running): %s.",
				r+1, thousands(int64(q)), activeSampleFor, activeSampleEvery, id.busiest))
			// Busy: skiplock and the floor, the first of them alternating by run.
			order := []*env{sk, bare}
			if r%2 == 1 {
				order = []*env{bare, sk}
			}
			for _, e := range order {
				fleetDrainQueues = q
				sr.progress("queues", "run %d/%d, %s queues: %s drain %s jobs", r+1, sr.runs, thousands(int64(q)), e.sys.Name(), thousands(int64(n)))
				rate, cpu, err := fleetDrain(e, 1, n)
				fleetDrainQueues = prevQueues
				if err != nil {
					return nil, fmt.Errorf("%s drain over %d queues: %w", e.sys.Name(), q, err)
				}
				if e == sk {
					p.rate, p.wcpu, p.scpu = append(p.rate, rate), append(p.wcpu, cpu.workers), append(p.scpu, cpu.server)
				} else {
					p.bareRate, p.bareWCPU, p.bareSCPU = append(p.bareRate, rate), append(p.bareWCPU, cpu.workers), append(p.bareSCPU, cpu.server)
				}
			}
		}
	}
	res := &ScaleResult{
		Header: []string{"queues", "idle commits/s", "idle worker CPU ms/s", "idle server CPU ms/s", "idle index scans/s on jobs", "connections", "goroutines", "Go memory MB", "RSS MB", "listening after s",
			"skiplock drain jobs/s", "worker µs/job", "server µs/job", "bare drain jobs/s", "bare worker µs/job", "bare server µs/job", "skiplock / bare"},
	}
	var sCommits, sWorker, sServer, sRate, sBare, sWCPU, sSCPU, sBWCPU, sBSCPU ScaleSeries
	sCommits.Name, sWorker.Name, sServer.Name = "idle commits/s", "idle worker CPU ms/s", "idle server CPU ms/s"
	sRate.Name, sBare.Name = "skiplock", "bare floor (same job count, no queues)"
	sWCPU.Name, sSCPU.Name, sBWCPU.Name, sBSCPU.Name = "skiplock worker", "skiplock server", "bare worker", "bare server"
	for i, q := range sizes {
		p := pts[i]
		x := float64(q)
		var ratio []float64
		for k := range p.rate {
			if k < len(p.bareRate) && p.bareRate[k] > 0 {
				ratio = append(ratio, p.rate[k]/p.bareRate[k])
			}
		}
		cm, wm, sm := pointOf(x, p.commits), pointOf(x, p.workerMS), pointOf(x, p.serverMS)
		rt, br := pointOf(x, p.rate), pointOf(x, p.bareRate)
		wc, sc, bwc, bsc := pointOf(x, p.wcpu), pointOf(x, p.scpu), pointOf(x, p.bareWCPU), pointOf(x, p.bareSCPU)
		res.Rows = append(res.Rows, []string{thousands(int64(q)),
			cellOf(cm, "commits/s"), cellOf(wm, "ms"), cellOf(sm, "ms"), cellOf(pointOf(x, p.scans), ""), cellOf(pointOf(x, p.conns), ""), cellOf(pointOf(x, p.gor), ""),
			cellOf(pointOf(x, p.mem), "MB"), cellOf(pointOf(x, p.rss), "MB"), cellOf(pointOf(x, p.startup), "x"),
			cellOf(rt, "jobs/s"), cellOf(wc, "µs"), cellOf(sc, "µs"), cellOf(br, "jobs/s"), cellOf(bwc, "µs"), cellOf(bsc, "µs"), cellOf(pointOf(x, ratio), "x")})
		sCommits.Points = append(sCommits.Points, cm)
		sWorker.Points = append(sWorker.Points, wm)
		sServer.Points = append(sServer.Points, sm)
		sRate.Points, sBare.Points = append(sRate.Points, rt), append(sBare.Points, br)
		sWCPU.Points, sSCPU.Points = append(sWCPU.Points, wc), append(sSCPU.Points, sc)
		sBWCPU.Points, sBSCPU.Points = append(sBWCPU.Points, bwc), append(sBSCPU.Points, bsc)
		if q == 10_000 && cm.N > 0 {
			verdict := "meets"
			if cm.Y > 5 {
				verdict = "misses"
			}
			notes = append(notes, fmt.Sprintf("Issue target: 10,000 idle queues cost ≤ 5 commits/s per worker: measured %s commits/s (%s).", cellOf(cm, "commits/s"), verdict))
		}
	}
	res.Plots = []ScalePlot{
		{File: "scale-queues-idle.png", Title: "One idle worker process serving N queues", XLabel: "queues", YLabel: "commits/s, CPU ms per s", LogX: true,
			Series: []ScaleSeries{sCommits, sWorker, sServer}},
		{File: "scale-queues-drain.png", Title: fmt.Sprintf("Drain of %s jobs round-robin over N queues, one worker process", thousands(int64(n))), XLabel: "queues", YLabel: "jobs/s", LogX: true,
			Series: []ScaleSeries{sRate, sBare}},
		{File: "scale-queues-cpu.png", Title: "CPU per drained job over N queues", XLabel: "queues", YLabel: "µs per job", LogX: true,
			Series: []ScaleSeries{sWCPU, sSCPU, sBWCPU, sBSCPU}},
	}
	notes = append(notes,
		"Idle commits are pg_stat_database.xact_commit of the bench database, read from another database; the harness adds at most three reads of its own to the window (the CPU snapshots and the index-scan counter, ≤ 0.15 commits/s at 20 s). Connections are the database's client backends minus the harness pool's. The server CPU is that of the processes serving the bench database and the server's background processes, per second of wall time.",
		fmt.Sprintf("Goroutines and Go memory come from runtime/metrics inside the worker process (-fleet-stats-file); an idle queue holds its claim loops, and its runners (at most MaxWorkers, %d here) are started as its jobs come.", fleetQueueSlots))
	res.Notes = notes
	return res, nil
}

// measureIdleQueues starts one skiplock worker process serving queues queues, waits out the
// statistics lag, and measures it idle over window.
func measureIdleQueues(e *env, admin *pgx.Conn, queues int, window time.Duration) (idleQueues, error) {
	var out idleQueues
	if err := e.sys.Reset(e.ctx); err != nil {
		return out, err
	}
	t0 := time.Now()
	f, err := startFleet(e, 1, queues)
	if err != nil {
		return out, err
	}
	out.startup = time.Since(t0).Seconds()
	err = func() error {
		if err := sleep(e.ctx, statsLag); err != nil {
			return err
		}
		db := e.pool.Config().ConnConfig.Database
		commits := func() (int64, error) {
			var c int64
			err := admin.QueryRow(e.ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = $1`, db).Scan(&c)
			return c, err
		}
		// The jobs table's index scans, read through the bench database before the
		// commits are counted and after (the two reads' commits fall outside the window).
		jobs := pgx.Identifier{skiplockSchema, "jobs"}.Sanitize()
		scans := func() (int64, error) {
			var n int64
			err := e.pool.QueryRow(e.ctx, `SELECT coalesce(idx_scan, 0) FROM pg_stat_user_tables WHERE relid = $1::regclass`, jobs).Scan(&n)
			return n, err
		}
		i0, err := scans()
		if err != nil {
			return err
		}
		c0, err := commits()
		if err != nil {
			return err
		}
		s0, w0, at0 := e.cpuNow(), f.cpu(), time.Now()
		if err := sleep(e.ctx, window); err != nil {
			return err
		}
		c1, err := commits()
		if err != nil {
			return err
		}
		s1, w1 := e.cpuNow(), f.cpu()
		wall := time.Since(at0).Seconds()
		i1, err := scans()
		if err != nil {
			return err
		}
		out.idxScans = float64(i1-i0) / wall
		// What the server was doing, sampled after the window: the sampling's own reads
		// would otherwise weigh on the figures above.
		if out.busiest, err = sampleActive(e, admin, db, activeSampleFor); err != nil {
			return err
		}
		out.commits = float64(c1-c0) / wall
		out.workerCPU = float64((w1 - w0).Milliseconds()) / wall
		if s0.server != nil && s1.server != nil {
			var d time.Duration
			for pid, t := range s1.server {
				d += t - s0.server[pid]
			}
			out.serverCPU = float64(d.Milliseconds()) / wall
		}
		var backends int
		if err := admin.QueryRow(e.ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'`, db).Scan(&backends); err != nil {
			return err
		}
		out.conns = float64(backends - int(e.pool.Stat().TotalConns()))
		if g, m, err := childStats(0); err == nil {
			out.goroutines, out.memMB = float64(g), float64(m)/(1<<20)
		}
		if kb, err := strconv.ParseFloat(strings.TrimSuffix(procField(fmt.Sprintf("/proc/%d/status", f.cmds[0].Process.Pid), "VmRSS"), " kB"), 64); err == nil {
			out.rssMB = kb / 1024
		}
		return nil
	}()
	if serr := f.stop(); err == nil {
		err = serr
	}
	return out, err
}

// activeSampleEvery is how often sampleActive looks at pg_stat_activity, for
// activeSampleFor after each idle window.
const (
	activeSampleEvery = 20 * time.Millisecond
	activeSampleFor   = 5 * time.Second
)

// sampleActive looks every activeSampleEvery, for d, at the statements the client
// backends of database db are running (read through admin, in another database, so the
// reads are not counted in db), and returns the three seen most often, each with the
// share of the samples that saw it and what it was waiting for ("running" when nothing):
// a sampling profile of the server's time by statement.
func sampleActive(e *env, admin *pgx.Conn, db string, d time.Duration) (string, error) {
	seen := map[string]int{}
	samples := 0
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		rows, err := admin.Query(e.ctx, `SELECT coalesce(wait_event_type || ':' || wait_event, 'running') || ' ' || left(regexp_replace(query, '\s+', ' ', 'g'), 90) FROM pg_stat_activity
			WHERE datname = $1 AND backend_type = 'client backend' AND state = 'active'`, db)
		if err != nil {
			return "", err
		}
		qs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return "", err
		}
		for _, q := range qs {
			seen[q]++
		}
		samples++
		if err := sleep(e.ctx, activeSampleEvery); err != nil {
			return "", err
		}
	}
	type stmt struct {
		q string
		n int
	}
	var top []stmt
	for q, n := range seen {
		top = append(top, stmt{q, n})
	}
	sort.Slice(top, func(i, j int) bool { return top[i].n > top[j].n || top[i].n == top[j].n && top[i].q < top[j].q })
	if len(top) == 0 {
		return fmt.Sprintf("none in %d samples", samples), nil
	}
	var parts []string
	for _, t := range top[:min(3, len(top))] {
		parts = append(parts, fmt.Sprintf("%.3f `%s…`", float64(t.n)/float64(samples), strings.ReplaceAll(t.q, "|", "\\|")))
	}
	return fmt.Sprintf("%s (%d samples)", strings.Join(parts, "; "), samples), nil
}
