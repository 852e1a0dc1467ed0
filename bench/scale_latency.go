package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync/atomic"
	"time"
)

// The latency curve: enqueue→handler-start latency p50/p99 under a steady offered load,
// at a light load (the latency workload's 50 jobs/s from one producer) and at fractions
// of the system's drain rate, measured in the same run just before. Single inserts (the
// system's ordinary autocommit Insert) from latencyProducers producers on one shared
// schedule: job i is due at i/rate from the start; a producer that falls behind inserts
// at once, so the achieved rate falls short of the offered one, and the table shows both
// and the backlog left when the window closed. Latency counts every job inserted in the
// window, those still queued when it closed included.
//
// skiplock runs its in-process worker at its defaults; its drain rate is the backlog drain
// (sizes.Drain pre-inserted jobs). bare runs its latency floor (INSERT + pg_notify, a
// listener that marks each job started with one UPDATE): its drain rate is what that
// listener works off when latencyProducers producers insert latencyBareJobs jobs as
// fast as they can.

func init() {
	registerScale(ScaleCurve{
		Name: "latency",
		Desc: func(quick bool) string {
			s := sizesFor(quick)
			return fmt.Sprintf("enqueue→handler-start latency p50/p99 of single inserts at a steady offered load for %s per point: light (%d jobs/s, one producer), and %s of the system's drain rate "+
				"(%d producers on one schedule; skiplock only), and 50 %%, 90 %% of the bare floor's drain rate (both systems at the same jobs/s), each drain rate measured in the same run just before: skiplock's backlog drain of %s jobs (in-process worker, defaults), "+
				"the bare latency floor's listener working off %s jobs inserted as fast as %d producers can. Offered and achieved rate, the backlog when the window closed, p50 and p99 of every job inserted in the window",
				latencyWindow(quick), s.LatencyRate, latencyFracNames(quick), latencyProducers, thousands(int64(s.Drain)), thousands(int64(latencyBareJobs(quick))), latencyProducers)
		},
		Run: runScaleLatency,
	})
}

// latencyProducers insert the jobs of the loaded points: enough that skiplock's enqueue
// coalesces into big batches. bare's plain INSERTs share the harness pool (40).
const latencyProducers = 64

// latLoad is one offered load of the curve: rate is frac × the drain rate of the system
// named by of ("" for the light load, at sizes.LatencyRate from one producer). Both
// systems run the light load and the loads of the floor's rate (the same jobs/s for
// both, so their latencies compare); only skiplock runs those of its own rate, which the
// floor's listener, at a tenth of it, could not work off.
type latLoad struct {
	frac float64
	of   string
}

// latencyLoads are the curve's loads, in table order.
func latencyLoads(quick bool) []latLoad {
	loads := []latLoad{{0, ""}, {0.5, "bare"}, {0.9, "bare"}}
	if !quick {
		loads = append(loads, latLoad{0.25, "skiplock"})
	}
	return append(loads, latLoad{0.5, "skiplock"}, latLoad{0.9, "skiplock"})
}

// name is the load's label in the table.
func (l latLoad) name(light int) string {
	switch l.of {
	case "":
		return fmt.Sprintf("light (%d jobs/s)", light)
	case "bare":
		return fmt.Sprintf("%.0f %% of the floor's drain rate", 100*l.frac)
	}
	return fmt.Sprintf("%.0f %% of skiplock's drain rate", 100*l.frac)
}

// runs reports whether system runs the load.
func (l latLoad) runs(system string) bool { return l.of != "skiplock" || system == "skiplock" }

func latencyFracNames(quick bool) string {
	var s string
	for _, l := range latencyLoads(quick) {
		if l.of == "skiplock" {
			if s != "" {
				s += ", "
			}
			s += fmt.Sprintf("%.0f %%", 100*l.frac)
		}
	}
	return s
}

// latencyWindow is how long each point offers its load.
func latencyWindow(quick bool) time.Duration {
	if quick {
		return 2 * time.Second
	}
	return 10 * time.Second
}

// latencyBareJobs is the job count of the bare floor's drain-rate measurement.
func latencyBareJobs(quick bool) int {
	if quick {
		return 5_000
	}
	return 20_000
}

// latPoint is one measured load.
type latPoint struct {
	offered, achieved, backlog, p50, p99 float64
}

func runScaleLatency(sr *scaleRun) (*ScaleResult, error) {
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
	loads := latencyLoads(sr.quick)
	window := latencyWindow(sr.quick)
	systems := []string{"skiplock", "bare"}
	envs := map[string]*env{"skiplock": sk, "bare": bare}
	// got[system][load] are the runs of one point; drains[system] the drain rates.
	got := map[string][][]latPoint{}
	drains := map[string][]float64{}
	for _, s := range systems {
		got[s] = make([][]latPoint, len(loads))
	}
	for r := range sr.runs {
		order := slices.Clone(systems)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		drain := map[string]float64{}
		for _, name := range order {
			sr.progress("latency", "run %d/%d, %s: drain rate", r+1, sr.runs, name)
			d, err := latencyDrainRate(envs[name], sr.quick)
			if err != nil {
				return nil, fmt.Errorf("%s drain rate: %w", name, err)
			}
			drain[name] = d
			drains[name] = append(drains[name], d)
		}
		for _, name := range order {
			e := envs[name]
			for i, l := range loads {
				if !l.runs(name) {
					continue
				}
				rate, producers := float64(e.sizes.LatencyRate), 1
				if l.of != "" {
					rate, producers = l.frac*drain[l.of], latencyProducers
				}
				sr.progress("latency", "run %d/%d, %s: %s jobs/s offered for %s (%d producers)", r+1, sr.runs, name, thousands(int64(rate)), window, producers)
				p, err := latencyAt(e, rate, producers, window)
				if err != nil {
					return nil, fmt.Errorf("%s at %.0f jobs/s: %w", name, rate, err)
				}
				got[name][i] = append(got[name][i], p)
			}
		}
	}
	res := &ScaleResult{Header: []string{"load", "skiplock offered jobs/s", "achieved", "backlog at end", "p50 ms", "p99 ms",
		"bare offered jobs/s", "achieved", "backlog at end", "p50 ms", "p99 ms", "p50 skiplock − bare ms"}}
	pick := func(ps []latPoint, f func(latPoint) float64) []float64 {
		out := make([]float64, len(ps))
		for i, p := range ps {
			out[i] = f(p)
		}
		return out
	}
	series := map[string]*ScaleSeries{}
	for _, k := range []string{"skiplock p50", "skiplock p99", "bare p50", "bare p99", "skiplock achieved", "bare achieved"} {
		series[k] = &ScaleSeries{Name: k}
	}
	series["bare p50"].Name, series["bare p99"].Name, series["bare achieved"].Name = "bare floor p50", "bare floor p99", "bare floor"
	series["skiplock achieved"].Name = "skiplock"
	var notes []string
	for i, l := range loads {
		row := []string{l.name(sk.sizes.LatencyRate)}
		for _, name := range systems {
			ps := got[name][i]
			if len(ps) == 0 {
				row = append(row, "–", "–", "–", "–", "–")
				continue
			}
			offered := pick(ps, func(p latPoint) float64 { return p.offered })
			x := medianOf(offered)
			ach, p50, p99 := pointOf(x, pick(ps, func(p latPoint) float64 { return p.achieved })), pointOf(x, pick(ps, func(p latPoint) float64 { return p.p50 })), pointOf(x, pick(ps, func(p latPoint) float64 { return p.p99 }))
			row = append(row, cellOf(pointOf(x, offered), "jobs/s"), cellOf(ach, "jobs/s"), cellOf(pointOf(x, pick(ps, func(p latPoint) float64 { return p.backlog })), "jobs"),
				cellOf(p50, "ms"), cellOf(p99, "ms"))
			series[name+" p50"].Points = append(series[name+" p50"].Points, p50)
			series[name+" p99"].Points = append(series[name+" p99"].Points, p99)
			series[name+" achieved"].Points = append(series[name+" achieved"].Points, ach)
		}
		var gap []float64
		for k := range got["skiplock"][i] {
			if k < len(got["bare"][i]) {
				gap = append(gap, got["skiplock"][i][k].p50-got["bare"][i][k].p50)
			}
		}
		g := pointOf(0, gap)
		row = append(row, signedMs(g))
		res.Rows = append(res.Rows, row)
		if l.of == "" && g.N > 0 {
			verdict := "meets"
			if g.Y > 0.3 {
				verdict = "misses"
			}
			notes = append(notes, fmt.Sprintf("Issue target: skiplock's latency p50 within 0.3 ms of the floor's (light load): the gap is %s ms (median, min–max over runs, each run's pair measured minutes apart at most; %s).", signedMs(g), verdict))
		}
	}
	for _, name := range systems {
		what := "backlog drain, in-process worker"
		if name == "bare" {
			what = "the latency floor's listener working off a burst of inserts"
		}
		notes = append(notes, fmt.Sprintf("Drain rate of %s (%s), the 100 %% its loads are fractions of: %s jobs/s.", name, what, cellOf(pointOf(0, drains[name]), "jobs/s")))
	}
	notes = append(notes, "Latency is from just before the Insert call to the handler's start; a producer behind its schedule inserts at once and its lateness is not counted, so read each p50/p99 at its achieved rate, not the offered one.")
	res.Notes = notes
	res.Plots = []ScalePlot{
		{File: "scale-latency-p50.png", Title: "Enqueue→start latency p50 under a steady load", XLabel: "offered jobs/s", YLabel: "ms", LogX: true,
			Series: []ScaleSeries{*series["skiplock p50"], *series["bare p50"]}},
		{File: "scale-latency-p99.png", Title: "Enqueue→start latency p99 under a steady load", XLabel: "offered jobs/s", YLabel: "ms", LogX: true,
			Series: []ScaleSeries{*series["skiplock p99"], *series["bare p99"]}},
		{File: "scale-latency-achieved.png", Title: "Achieved insert rate against the offered one", XLabel: "offered jobs/s", YLabel: "achieved jobs/s", LogX: true,
			Series: []ScaleSeries{*series["skiplock achieved"], *series["bare achieved"]}},
	}
	return res, nil
}

// signedMs renders a gap in ms with its sign, "median (min–max)".
func signedMs(p ScalePoint) string {
	if p.N == 0 {
		return "–"
	}
	if p.Min == p.Max {
		return fmt.Sprintf("%+.2f", p.Y)
	}
	return fmt.Sprintf("%+.2f (%+.2f to %+.2f)", p.Y, p.Min, p.Max)
}

// medianOf is the median of vs (0 for none).
func medianOf(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	sort.Float64s(s)
	return median(s)
}

// latencyDrainRate measures the system's drain rate for the loads: skiplock's backlog
// drain, the bare latency floor's listener working off a burst.
func latencyDrainRate(e *env, quick bool) (float64, error) {
	if err := e.sys.Reset(e.ctx); err != nil {
		return 0, err
	}
	if e.sys.Name() != "bare" {
		final, _, err := e.drain(e.sizes.Drain)
		if err != nil {
			return 0, err
		}
		return float64(e.sizes.Drain) / final.Seconds(), nil
	}
	n := latencyBareJobs(quick)
	sink := NewSink(int64(n))
	if err := e.sys.Start(e.ctx, sink, Spec{OneAtATime: true}); err != nil {
		return 0, err
	}
	rate, err := func() (float64, error) {
		var sent atomic.Int64
		t0 := time.Now()
		if err := producers(e.ctx, latencyProducers, func(ctx context.Context) (bool, error) {
			if sent.Add(1) > int64(n) {
				return false, nil
			}
			return true, e.sys.Insert(ctx, NoopArgs{})
		}); err != nil {
			return 0, err
		}
		if err := waitDrained(e.ctx, e.sys, sink, timeoutFor(n, 500)); err != nil {
			return 0, err
		}
		return float64(n) / sink.ReachedAt().Sub(t0).Seconds(), nil
	}()
	if serr := e.stop(); err == nil {
		err = serr
	}
	return rate, err
}

// latencyAt offers rate jobs/s from k producers on one schedule for d, with the system's
// workers running, and measures the achieved rate, the backlog when the window closed and
// the latency of every job inserted in it.
func latencyAt(e *env, rate float64, k int, d time.Duration) (latPoint, error) {
	out := latPoint{offered: rate}
	if err := e.sys.Reset(e.ctx); err != nil {
		return out, err
	}
	sink := NewSink(0)
	if err := e.sys.Start(e.ctx, sink, Spec{OneAtATime: true}); err != nil {
		return out, err
	}
	err := func() error {
		if err := sleep(e.ctx, e.sizes.Warmup); err != nil {
			return err
		}
		sink.Record(true)
		interval := time.Duration(float64(time.Second) / rate)
		var next, inserted atomic.Int64
		done0 := sink.Done()
		t0 := time.Now()
		end := t0.Add(d)
		err := producers(e.ctx, k, func(ctx context.Context) (bool, error) {
			due := t0.Add(time.Duration(next.Add(1)-1) * interval)
			if !due.Before(end) {
				return false, nil
			}
			if w := time.Until(due); w > 0 {
				if err := sleep(ctx, w); err != nil {
					return false, err
				}
			} else if !time.Now().Before(end) {
				return false, nil // behind schedule when the window closed
			}
			if err := e.sys.Insert(ctx, NoopArgs{T: Now()}); err != nil {
				return false, err
			}
			inserted.Add(1)
			return true, nil
		})
		el := time.Since(t0)
		handled := sink.Done() - done0
		if err != nil {
			return err
		}
		ins := inserted.Load()
		out.achieved = float64(ins) / el.Seconds()
		out.backlog = float64(max(ins-handled, 0))
		if err := waitCount(e.ctx, sink, done0+ins, timeoutFor(int(ins), 500)); err != nil {
			return err
		}
		lats := sink.Latencies()
		out.p50, out.p99 = msOf(percentile(lats, 0.50)), msOf(percentile(lats, 0.99))
		return nil
	}()
	if serr := e.stop(); err == nil {
		err = serr
	}
	return out, err
}
