package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Report is everything one invocation measured; it is written as JSON and
// rendered as Markdown.
type Report struct {
	Started  time.Time `json:"started"`
	Seconds  float64   `json:"seconds"`
	Complete bool      `json:"complete"` // false while running or when interrupted
	Quick    bool      `json:"quick"`
	// Pass is the autovacuum setting this pass ran with ("off", "on"), or "" for
	// the server as it was.
	Pass      string         `json:"pass"`
	Runs      int            `json:"runs"`
	Sizes     Sizes          `json:"sizes"`
	Env       EnvInfo        `json:"env"`
	Systems   []SystemInfo   `json:"systems"`
	Workloads []WorkloadInfo `json:"workloads"`
	Results   []Result       `json:"results"`
	Notes     []string       `json:"notes,omitempty"`
	Errors    []string       `json:"errors,omitempty"`
}

// EnvInfo describes the machine and the server.
type EnvInfo struct {
	Go         string            `json:"go"`
	OS         string            `json:"os"`
	CPUs       int               `json:"cpus"`
	CPUModel   string            `json:"cpu_model"`
	MemoryGB   float64           `json:"memory_gb"`
	Postgres   string            `json:"postgres"`
	PGSettings map[string]string `json:"pg_settings"`
	DSN        string            `json:"dsn"`
	LoadAvg    string            `json:"loadavg"` // /proc/loadavg at the start
	// OwnCluster says the server is a throwaway cluster the bench started.
	OwnCluster bool `json:"own_cluster"`
}

// Reports is every pass of one invocation.
type Reports struct {
	Passes []*Report `json:"passes"`
}

// Markdown renders every pass, one after the other, and the chart's reference.
func (rs *Reports) Markdown() string {
	var b strings.Builder
	for _, r := range rs.Passes {
		b.WriteString(r.Markdown())
		b.WriteString("\n")
	}
	b.WriteString("Chart of the skiplock/River ratios: `ratios.svg` beside this file.\n")
	return b.String()
}

// Write stores latest.json, latest.md and ratios.svg in dir, each through a
// temporary file so a reader never sees half a report.
func (rs *Reports) Write(dir, md string) error {
	js, err := json.MarshalIndent(rs, "", "  ")
	if err != nil {
		return err
	}
	return writeFiles(dir, map[string][]byte{
		"latest.json": append(js, '\n'),
		"latest.md":   []byte(md),
		"ratios.svg":  []byte(rs.ChartSVG()),
	})
}

// SystemInfo says which version of a system ran, how it was configured, and
// how long its part of the run took.
type SystemInfo struct {
	Name    string  `json:"name"`
	Version string  `json:"version"`
	Config  string  `json:"config"`
	Seconds float64 `json:"seconds"`
	// Load averages (1, 5, 15 min) before and after the system's runs: other
	// work on the machine skews every figure.
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
}

// WorkloadInfo describes a workload at the sizes used.
type WorkloadInfo struct {
	Name string `json:"name"`
	Desc string `json:"desc"`
}

// Result is one metric of one workload for one system over all its runs.
type Result struct {
	Workload    string    `json:"workload"`
	Metric      string    `json:"metric"`
	Label       string    `json:"label"`
	Unit        string    `json:"unit"`
	LowerBetter bool      `json:"lower_is_better"`
	System      string    `json:"system"`
	Runs        []float64 `json:"runs"`
	Median      float64   `json:"median"`
	Min         float64   `json:"min"`
	Max         float64   `json:"max"`
}

func (r *Report) add(workload string, m Metric, system string, vals []float64) {
	s := slices.Clone(vals)
	slices.Sort(s)
	r.Results = append(r.Results, Result{
		Workload: workload, Metric: m.Key, Label: m.Label, Unit: m.Unit, LowerBetter: m.LowerBetter,
		System: system, Runs: vals, Median: median(s), Min: s[0], Max: s[len(s)-1],
	})
}

// median of sorted values; the mean of the middle two for an even count.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

var pgSettingNames = []string{
	"synchronous_commit", "fsync", "full_page_writes", "wal_level", "shared_buffers", "work_mem",
	"max_connections", "max_wal_size", "checkpoint_timeout", "autovacuum", "autovacuum_naptime",
	"autovacuum_vacuum_scale_factor", "autovacuum_vacuum_cost_delay", "effective_io_concurrency", "jit",
}

func (r *Report) collectEnv(ctx context.Context, dsn string) error {
	e := &r.Env
	e.Go = runtime.Version()
	e.OS = runtime.GOOS + "/" + runtime.GOARCH
	e.CPUs = runtime.NumCPU()
	e.CPUModel = procField("/proc/cpuinfo", "model name")
	if kb, err := strconv.ParseFloat(strings.TrimSuffix(procField("/proc/meminfo", "MemTotal"), " kB"), 64); err == nil {
		e.MemoryGB = math.Round(kb/(1<<20)*10) / 10
	}
	e.DSN = redact(dsn)
	e.LoadAvg = loadAvg()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect to %s: %w (set -dsn or DATABASE_URL)", redact(dsn), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&e.Postgres); err != nil {
		return err
	}
	rows, err := conn.Query(ctx, `SELECT name, setting || coalesce(' ' || unit, '') FROM pg_settings WHERE name = ANY($1)`, pgSettingNames)
	if err != nil {
		return err
	}
	e.PGSettings = map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return err
		}
		e.PGSettings[k] = v
	}
	return rows.Err()
}

// loadAvg returns the 1, 5 and 15 minute load averages, or "".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// procField returns the value of the first "key: value" line of a /proc file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

var modulePaths = map[string]string{
	"skiplock": "github.com/skiplock/skiplock",
	"river":    "github.com/riverqueue/river",
	"gue":      "github.com/vgarvardt/gue/v5",
}

// moduleVersion reports the version of a system's module compiled in; for
// skiplock (replaced by ../) the git commit of the working tree.
func moduleVersion(system string) string {
	if system == "bare" {
		return "(plain SQL)"
	}
	if system == "skiplock" {
		out, err := exec.Command("git", "-C", "..", "log", "-1", "--format=%h %cs").Output()
		if err != nil {
			return "../ (working tree)"
		}
		v := "../ at " + strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "-C", "..", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench").Output(); err == nil && len(st) > 0 {
			v += " + uncommitted changes"
		}
		return v
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == modulePaths[system] {
			return d.Version
		}
	}
	return ""
}

// redact drops the password from a URL DSN.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return dsn
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxx")
	}
	return u.String()
}

var displayName = map[string]string{"skiplock": "skiplock", "river": "River", "gue": "gue", "bare": "bare SQL"}

// Markdown renders the report: one row per metric, one column per system,
// each cell the median with min–max, and skiplock's ratio to River.
func (r *Report) Markdown() string {
	var b strings.Builder
	mode := "full"
	if r.Quick {
		mode = "quick"
	}
	server := "the server at -dsn"
	if r.Env.OwnCluster {
		server = "a throwaway cluster started by the bench"
	}
	pass := ""
	if r.Pass != "" {
		pass = ", autovacuum " + r.Pass
	}
	fmt.Fprintf(&b, "## Results (%s, %d run(s) each, interleaved%s: %s, %s)\n\n", mode, r.Runs, pass, server, r.Started.Format("2006-01-02 15:04 MST"))
	if !r.Complete {
		b.WriteString("**Incomplete: the run was still going or was interrupted.**\n\n")
	}
	fmt.Fprintf(&b, "Machine: %d CPU (%s), %.0f GB RAM, %s, %s, load average %s at the start. Server: %s on the same machine.\n\n",
		r.Env.CPUs, r.Env.CPUModel, r.Env.MemoryGB, r.Env.OS, r.Env.Go, r.Env.LoadAvg, firstWords(r.Env.Postgres, 2))
	var keys []string
	for k := range r.Env.PGSettings {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var set []string
	for _, k := range keys {
		set = append(set, k+"="+r.Env.PGSettings[k])
	}
	fmt.Fprintf(&b, "Postgres settings: %s.\n\n", strings.Join(set, ", "))

	var systems []string
	for _, s := range r.Systems {
		systems = append(systems, s.Name)
	}
	b.WriteString("| workload | metric | unit | better |")
	for _, s := range systems {
		fmt.Fprintf(&b, " %s |", displayName[s])
	}
	ratio := slices.Contains(systems, "skiplock") && slices.Contains(systems, "river")
	if ratio {
		b.WriteString(" skiplock / River |")
	}
	b.WriteString("\n|---|---|---|---|")
	for range systems {
		b.WriteString("---:|")
	}
	if ratio {
		b.WriteString("---:|")
	}
	b.WriteString("\n")

	type rowKey struct{ workload, metric string }
	var rows []rowKey
	cells := map[rowKey]map[string]Result{}
	for _, res := range r.Results {
		k := rowKey{res.Workload, res.Metric}
		if cells[k] == nil {
			cells[k] = map[string]Result{}
			rows = append(rows, k)
		}
		cells[k][res.System] = res
	}
	order := map[string]int{}
	for i, w := range workloads {
		order[w.Name] = i
	}
	slices.SortStableFunc(rows, func(a, b rowKey) int { return order[a.workload] - order[b.workload] })
	for _, k := range rows {
		var first Result
		for _, res := range cells[k] {
			first = res
			break
		}
		better := "higher"
		if first.LowerBetter {
			better = "lower"
		}
		if first.Unit == "x" {
			better = "≈1"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |", k.workload, first.Label, first.Unit, better)
		for _, s := range systems {
			res, ok := cells[k][s]
			if !ok {
				b.WriteString(" – |")
				continue
			}
			fmt.Fprintf(&b, " %s |", cell(res))
		}
		if ratio {
			sl, ok1 := cells[k]["skiplock"]
			rv, ok2 := cells[k]["river"]
			switch {
			case !ok1 || !ok2 || rv.Median == 0:
				b.WriteString(" – |")
			default:
				fmt.Fprintf(&b, " %.2f× |", sl.Median/rv.Median)
			}
		}
		b.WriteString("\n")
	}

	if slices.Contains(systems, "skiplock") && slices.Contains(systems, "bare") {
		var parts []string
		for _, k := range rows {
			sl, ok1 := cells[k]["skiplock"]
			bare, ok2 := cells[k]["bare"]
			if ok1 && ok2 && bare.Median > 0 {
				parts = append(parts, fmt.Sprintf("%s %.2f×", sl.Label, sl.Median/bare.Median))
			}
		}
		if len(parts) > 0 {
			fmt.Fprintf(&b, "\nskiplock / bare SQL (the floors: a commit per INSERT, one COPY, two commits and a notification per job, two commits per claimed batch; same server, same run): %s.\n", strings.Join(parts, ", "))
		}
	}
	b.WriteString("\nCells: median (min–max) over the runs. Ratio: skiplock median / River median — above 1 is better for \"higher\" rows, below 1 for \"lower\" rows.\n\n")
	b.WriteString("Workloads:\n\n")
	for _, w := range r.Workloads {
		only := ""
		for _, wl := range workloads {
			if wl.Name == w.Name && wl.SkiplockOnly {
				only = " (skiplock only unless -all-systems)"
			}
		}
		fmt.Fprintf(&b, "- **%s**: %s%s\n", w.Name, w.Desc, only)
	}
	b.WriteString("\nSystems:\n\n")
	for _, s := range r.Systems {
		fmt.Fprintf(&b, "- **%s** %s: %s (its part of the run: %.0f s; load average %s before, %s after)\n",
			displayName[s.Name], s.Version, s.Config, s.Seconds, s.LoadBefore, s.LoadAfter)
	}
	if len(r.Notes) > 0 {
		b.WriteString("\nNotes:\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	if len(r.Errors) > 0 {
		b.WriteString("\nErrors:\n\n")
		for _, e := range r.Errors {
			fmt.Fprintf(&b, "- %s\n", e)
		}
	}
	return b.String()
}

func cell(r Result) string {
	med, lo, hi := format(r.Median, r.Unit), format(r.Min, r.Unit), format(r.Max, r.Unit)
	if len(r.Runs) == 1 || lo == hi {
		return med
	}
	return fmt.Sprintf("%s (%s–%s)", med, lo, hi)
}

// format renders a value with a precision suited to its unit.
func format(v float64, unit string) string {
	switch {
	case unit == "x" || unit == "cores":
		return strconv.FormatFloat(v, 'f', 2, 64)
	case unit == "MB" || unit == "commits/s":
		return strconv.FormatFloat(v, 'f', 1, 64)
	case unit == "ms" && v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case unit == "ms" && v < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return thousands(int64(math.Round(v)))
}

func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

func firstWords(s string, n int) string {
	f := strings.Fields(s)
	return strings.Join(f[:min(n, len(f))], " ")
}

// writeFiles writes each file into dir through a temporary file and a rename.
func writeFiles(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p+".tmp", data, 0o644); err != nil {
			return err
		}
		if err := os.Rename(p+".tmp", p); err != nil {
			return err
		}
	}
	return nil
}
