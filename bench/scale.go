package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Scale curves (-scale): how skiplock's figures move as the work grows (a deeper backlog,
// a bigger archive, more queues, more worker processes, a higher offered load), each point
// measured beside the bare SQL floor in the same run. Every curve is a table and one or
// more PNG plots in results/ (scale.md, scale.json, scale-*.png). A curve registers itself
// in an init function of its own file (scale_*.go).

// ScaleCurve is one curve of the -scale mode.
type ScaleCurve struct {
	// Name is the curve's name in -scale and in the file names ("backlog").
	Name string
	// Desc says what the curve measures, at sizes s; it heads the curve's section.
	Desc func(quick bool) string
	// Run measures the curve. It opens the systems it compares with sr.open, walks its
	// points (sr.runs runs each, interleaved across systems) and returns the table and plots.
	Run func(sr *scaleRun) (*ScaleResult, error)
}

// scaleCurves are the registered curves, in report order (registration order).
var scaleCurves []ScaleCurve

func registerScale(c ScaleCurve) { scaleCurves = append(scaleCurves, c) }

// ScaleResult is what a curve measured: a table (Markdown), plots, and notes.
type ScaleResult struct {
	Header []string    `json:"header"`
	Rows   [][]string  `json:"rows"`
	Plots  []ScalePlot `json:"plots"`
	Notes  []string    `json:"notes,omitempty"`
}

// ScalePlot is one PNG chart of a curve: one line per series, the min–max over runs as
// error bars.
type ScalePlot struct {
	File   string        `json:"file"` // base name, e.g. "scale-backlog-rate.png"
	Title  string        `json:"title"`
	XLabel string        `json:"x_label"`
	YLabel string        `json:"y_label"`
	LogX   bool          `json:"log_x"`
	Series []ScaleSeries `json:"series"`

	// XTicks, when set, are the X axis's labelled ticks (e.g. 1, 2, 4, 8, 16 on a linear
	// axis) in place of the default ones.
	XTicks []float64 `json:"x_ticks,omitempty"`
}

// ScaleSeries is one line of a plot (a system, or a figure of one system).
type ScaleSeries struct {
	Name   string       `json:"name"`
	Points []ScalePoint `json:"points"`
}

// ScalePoint is one measured point: the median Y over N runs and its min–max. A point
// with N 0 was not measured (its run failed or the system skips it).
type ScalePoint struct {
	X   float64 `json:"x"`
	Y   float64 `json:"y"`
	Min float64 `json:"min"`
	Max float64 `json:"max"`
	N   int     `json:"n"`
}

// pointOf summarizes the runs of one point (median, min, max).
func pointOf(x float64, runs []float64) ScalePoint {
	if len(runs) == 0 {
		return ScalePoint{X: x}
	}
	s := slices.Clone(runs)
	sort.Float64s(s)
	return ScalePoint{X: x, Y: median(s), Min: s[0], Max: s[len(s)-1], N: len(s)}
}

// cellOf renders a point as "median (min–max)" in unit's format, or "median" for one run.
func cellOf(p ScalePoint, unit string) string {
	if p.N == 0 {
		return "–"
	}
	if p.Min == p.Max {
		return format(p.Y, unit)
	}
	return fmt.Sprintf("%s (%s–%s)", format(p.Y, unit), format(p.Min, unit), format(p.Max, unit))
}

// scaleRun is what a curve gets: the server of the pass, the options and the run count.
type scaleRun struct {
	ctx   context.Context
	o     options
	dsn   string
	pass  string
	quick bool
	runs  int
	sizes Sizes
}

// open gives system name a fresh database bench_<name> on the pass's server, set up, as
// the workloads get it (env.sys, env.pool, env.sizes). done stops nothing the curve
// started: it closes the pool and drops the database (unless -keep). tune, if given,
// adjusts the pool's configuration before it connects (e.g. a pgx QueryTracer that times
// the claim statement).
func (sr *scaleRun) open(name string, tune ...func(*pgxpool.Config)) (e *env, done func(), err error) {
	f := registry[name]
	if f == nil {
		return nil, nil, fmt.Errorf("system %q is not compiled in", name)
	}
	sys := f()
	pool, err := openSystem(sr.ctx, sr.o, sr.dsn, sys, tune...)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	e = &env{ctx: sr.ctx, sys: sys, pool: pool, sizes: sr.sizes}
	done = func() {
		pool.Close()
		if !sr.o.keep {
			_ = dropDB(context.WithoutCancel(sr.ctx), sr.dsn, "bench_"+name)
		}
	}
	return e, done, nil
}

// progress prints one line of a curve's progress to stderr.
func (sr *scaleRun) progress(curve, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s scale %-8s %s  (load %s)\n", time.Now().UTC().Format("15:04:05"), curve, fmt.Sprintf(format, args...), loadAvg())
}

// scaleOptions are the -scale flags.
var scaleOpts struct {
	curves string // -scale: comma-separated curve names, or "all"
	runs   int    // -scale-runs: runs per point (0: -runs)
}

// scaleReport is the JSON of a -scale run (results/scale.json).
type scaleReport struct {
	Started  time.Time    `json:"started"`
	Seconds  float64      `json:"seconds"`
	Quick    bool         `json:"quick"`
	Runs     int          `json:"runs"`
	Complete bool         `json:"complete"`
	Passes   []*scalePass `json:"passes"`
}

type scalePass struct {
	Pass       string              `json:"pass"` // autovacuum: "", "off", "on"
	Env        EnvInfo             `json:"env"`
	LoadBefore string              `json:"load_before"`
	LoadAfter  string              `json:"load_after"`
	Curves     []*scaleCurveReport `json:"curves"`
}

type scaleCurveReport struct {
	Name       string       `json:"name"`
	Desc       string       `json:"desc"`
	Started    time.Time    `json:"started"`
	Seconds    float64      `json:"seconds"`
	LoadBefore string       `json:"load_before"`
	LoadAfter  string       `json:"load_after"`
	Result     *ScaleResult `json:"result,omitempty"`
	Error      string       `json:"error,omitempty"`
}

// runScale runs the chosen curves on every -autovacuum pass and writes results/scale.*.
func runScale(ctx context.Context, o options) error {
	var names []string
	if scaleOpts.curves == "all" {
		for _, c := range scaleCurves {
			names = append(names, c.Name)
		}
	} else {
		names = splitList(scaleOpts.curves)
	}
	for _, n := range names {
		if !slices.ContainsFunc(scaleCurves, func(c ScaleCurve) bool { return c.Name == n }) {
			var have []string
			for _, c := range scaleCurves {
				have = append(have, c.Name)
			}
			return fmt.Errorf("-scale: unknown curve %q (have %s, or all)", n, strings.Join(have, ", "))
		}
	}
	runs := o.runs
	if scaleOpts.runs > 0 {
		runs = scaleOpts.runs
	}
	sizes := sizesFor(o.quick)
	rep := &scaleReport{Started: time.Now().UTC(), Quick: o.quick, Runs: runs}
	servers := &passServers{o: o}
	defer servers.close(ctx)
	var errs []error
	for _, pass := range o.passes {
		dsn, err := servers.dsn(ctx, pass)
		if err != nil {
			return err
		}
		sp := &scalePass{Pass: pass, LoadBefore: loadAvg()}
		probe := &Report{}
		if err := probe.collectEnv(ctx, dsn); err != nil {
			return err
		}
		sp.Env = probe.Env
		sp.Env.OwnCluster = dsn != o.dsn
		rep.Passes = append(rep.Passes, sp)
		sr := &scaleRun{ctx: ctx, o: o, dsn: dsn, pass: pass, quick: o.quick, runs: runs, sizes: sizes}
		for _, c := range scaleCurves {
			if !slices.Contains(names, c.Name) || ctx.Err() != nil {
				continue
			}
			cr := &scaleCurveReport{Name: c.Name, Desc: c.Desc(o.quick), Started: time.Now().UTC(), LoadBefore: loadAvg()}
			sp.Curves = append(sp.Curves, cr)
			sr.progress(c.Name, "start (pass %q)", pass)
			res, err := c.Run(sr)
			cr.Seconds = time.Since(cr.Started).Seconds()
			cr.LoadAfter = loadAvg()
			cr.Result = res
			if err != nil {
				cr.Error = err.Error()
				errs = append(errs, fmt.Errorf("%s: %w", c.Name, err))
				sr.progress(c.Name, "error: %v", err)
			} else {
				sr.progress(c.Name, "done in %.0f s", cr.Seconds)
			}
			if o.out != "" {
				if err := rep.write(o.out); err != nil {
					return err
				}
			}
		}
		sp.LoadAfter = loadAvg()
		if ctx.Err() != nil {
			break
		}
	}
	rep.Seconds = time.Since(rep.Started).Seconds()
	rep.Complete = ctx.Err() == nil
	md := rep.markdown()
	fmt.Print(md)
	if o.out != "" {
		if err := rep.write(o.out); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote %s/scale.md, %s/scale.json and the plots %s/scale-*.png\n", o.out, o.out, o.out)
	}
	return errors.Join(errs...)
}

// plotFile is a plot's file name in a pass: the pass's autovacuum setting is part of it
// when the run has one, so the passes do not overwrite each other.
func plotFile(pass, file string) string {
	if pass == "" {
		return file
	}
	ext := filepath.Ext(file)
	return strings.TrimSuffix(file, ext) + "-av" + pass + ext
}

// write writes scale.md, scale.json and every plot to dir.
func (r *scaleReport) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	files := map[string][]byte{"scale.json": js, "scale.md": []byte(r.markdown())}
	for _, p := range r.Passes {
		for _, c := range p.Curves {
			if c.Result == nil {
				continue
			}
			for _, pl := range c.Result.Plots {
				png, err := pl.png()
				if err != nil {
					return fmt.Errorf("plot %s: %w", pl.File, err)
				}
				files[plotFile(p.Pass, pl.File)] = png
			}
		}
	}
	return writeFiles(dir, files)
}

// markdown renders the run: the machine, then one section per pass and curve.
func (r *scaleReport) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# skiplock scale curves\n\n")
	state := "complete"
	if !r.Complete {
		state = "incomplete (interrupted or still running)"
	}
	size := "full sizes"
	if r.Quick {
		size = "-quick sizes"
	}
	fmt.Fprintf(&b, "Started %s, %.0f s, %s, %d run(s) per point, %s. Each cell is the median (min–max) over the runs.\n\n",
		r.Started.Format("2006-01-02 15:04 UTC"), r.Seconds, size, r.Runs, state)
	for _, p := range r.Passes {
		pass := "the server as it is"
		if p.Pass != "" {
			pass = "autovacuum " + p.Pass
		}
		fmt.Fprintf(&b, "## Pass: %s\n\n", pass)
		fmt.Fprintf(&b, "%s, %s; %d CPUs (%s); load average %s at the start, %s at the end.\n\n",
			firstWords(p.Env.Postgres, 2), settingsLine(p.Env.PGSettings), p.Env.CPUs, p.Env.CPUModel, p.LoadBefore, p.LoadAfter)
		for _, c := range p.Curves {
			fmt.Fprintf(&b, "### %s\n\n%s\n\n", c.Name, c.Desc)
			fmt.Fprintf(&b, "Ran %s, %.0f s; load average %s → %s.\n\n", c.Started.Format("15:04 UTC"), c.Seconds, c.LoadBefore, c.LoadAfter)
			if c.Error != "" {
				fmt.Fprintf(&b, "**Error:** %s\n\n", c.Error)
			}
			if c.Result == nil {
				continue
			}
			if len(c.Result.Header) > 0 {
				b.WriteString("| " + strings.Join(c.Result.Header, " | ") + " |\n|")
				for i := range c.Result.Header {
					if i == 0 {
						b.WriteString(" --- |")
					} else {
						b.WriteString(" ---: |")
					}
				}
				b.WriteString("\n")
				for _, row := range c.Result.Rows {
					b.WriteString("| " + strings.Join(row, " | ") + " |\n")
				}
				b.WriteString("\n")
			}
			for _, pl := range c.Result.Plots {
				f := plotFile(p.Pass, pl.File)
				fmt.Fprintf(&b, "![%s](%s)\n\n", pl.Title, f)
			}
			for _, n := range c.Result.Notes {
				fmt.Fprintf(&b, "- %s\n", n)
			}
			if len(c.Result.Notes) > 0 {
				b.WriteString("\n")
			}
		}
	}
	return b.String()
}

// settingsLine lists the server settings that shape the figures.
func settingsLine(s map[string]string) string {
	var parts []string
	for _, k := range []string{"autovacuum", "shared_buffers", "synchronous_commit", "max_connections"} {
		if v, ok := s[k]; ok {
			parts = append(parts, k+" = "+v)
		}
	}
	return strings.Join(parts, ", ")
}

// png draws the plot: lines with points, the min–max of each point as error bars, a log
// X axis when asked.
func (pl ScalePlot) png() ([]byte, error) {
	p := plot.New()
	p.Title.Text = pl.Title
	p.X.Label.Text = pl.XLabel
	p.Y.Label.Text = pl.YLabel
	if pl.LogX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if len(pl.XTicks) > 0 {
		ticks := make(plot.ConstantTicks, len(pl.XTicks))
		for i, x := range pl.XTicks {
			ticks[i] = plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'f', -1, 64)}
		}
		p.X.Tick.Marker = ticks
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Y.Min = 0
	for i, s := range pl.Series {
		var xys plotter.XYs
		type xyErr struct {
			plotter.XYs
			plotter.YErrors
		}
		var ye plotter.YErrors
		for _, pt := range s.Points {
			if pt.N == 0 || (pl.LogX && pt.X <= 0) {
				continue
			}
			xys = append(xys, plotter.XY{X: pt.X, Y: pt.Y})
			ye = append(ye, struct{ Low, High float64 }{pt.Y - pt.Min, pt.Max - pt.Y})
		}
		if len(xys) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1.5)
		points.Color = plotutil.Color(i)
		points.Shape = plotutil.Shape(i)
		p.Add(line, points)
		p.Legend.Add(s.Name, line, points)
		if bars, err := plotter.NewYErrorBars(xyErr{xys, ye}); err == nil {
			bars.Color = plotutil.Color(i)
			p.Add(bars)
		}
		for _, pt := range xys {
			p.Y.Max = math.Max(p.Y.Max, pt.Y)
		}
		for j := range ye {
			p.Y.Max = math.Max(p.Y.Max, xys[j].Y+ye[j].High)
		}
	}
	p.Y.Max *= 1.1
	w, err := p.WriterTo(8*vg.Inch, 4.5*vg.Inch, "png")
	if err != nil {
		return nil, err
	}
	var buf strings.Builder
	if _, err := w.WriteTo(&buf); err != nil {
		return nil, err
	}
	return []byte(buf.String()), nil
}
