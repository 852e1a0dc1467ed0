package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
)

// The archive curve: what an archive of N rows (skiplock.jobs_archive) costs the success
// path, which moves every succeeded job into it, and how long one sweeper pass over it
// takes.
//
// Per point the archive is filled once, untimed: one job runs through a skiplock worker
// at its defaults and is archived; its archive row is the template, and INSERT ... SELECT
// generate_series writes N copies with ids 1..N (the jobs' identity sequence is then set
// past N, so new jobs never collide) and finished_at spread evenly over the retention
// window ([now - 7 days + 1 h, now - 10 min]; the row's other times keep their distance
// to finished_at), so the archive is what a system archiving N jobs a week holds. The
// timing rollup's marks (ui_timing_rollup_mark) are set to the current slot, as a leader
// that has kept up leaves them, and the archive is analyzed.
//
// Each run then drains a batch of jobs with a skiplock worker at its defaults (rate,
// server CPU and WAL per job, from start until every job is archived), the bare floor
// drains as many beside it (it has no archive: its figure shows the machine), and one
// Sweep of a fresh Sweeper whose ArchiveRetention makes exactly the batch's worth of the
// oldest rows expire is timed: the archive stays at N (the batch goes in, as many old
// rows go out).

func init() {
	registerScale(ScaleCurve{Name: "archive", Desc: archiveDesc, Run: runArchiveCurve})
	flag.BoolVar(&archiveNoJIT, "scale-archive-nojit", false, "-scale archive: skiplock's pool sessions run with jit = off (the leader's timing rollup is planned dear enough over a big archive that JIT compiles it, about 1.3 s of CPU a statement)")
	flag.StringVar(&archiveSizesFlag, "scale-archive", "", "-scale archive: comma-separated archive sizes, e.g. 1e6,1e7,1e8 (empty: 1e6,1e7; with -quick 1e5,1e6)")
}

// archiveNoJIT is -scale-archive-nojit.
var archiveNoJIT bool

// archiveSizesFlag is -scale-archive.
var archiveSizesFlag string

// archiveSizes are the curve's points. 10^8 rows (about 30 GB of table, indexes and
// WAL to fill) is opt-in through -scale-archive.
func archiveSizes(quick bool) ([]int, error) {
	if archiveSizesFlag != "" {
		return parseSizes(archiveSizesFlag)
	}
	if quick {
		return []int{1e5, 1e6}, nil
	}
	return []int{1e6, 1e7}, nil
}

// archiveBatch is the jobs drained per run (and the rows one sweep deletes).
func archiveBatch(quick bool) int {
	if quick {
		return 10_000
	}
	return 50_000
}

// archiveWindow is where the filled rows' finished_at lie: the default retention (7
// days), less an hour at the old end (nothing expires under the worker's own sweeper
// while the curve runs) and ten minutes at the new end.
const (
	archiveOldMargin = time.Hour
	archiveNewMargin = 10 * time.Minute
)

func archiveDesc(quick bool) string {
	sizes, _ := archiveSizes(quick)
	var s []string
	for _, n := range sizes {
		s = append(s, thousands(int64(n)))
	}
	k := thousands(int64(archiveBatch(quick)))
	jit := ""
	if archiveNoJIT {
		jit = " skiplock's pool sessions run with jit = off (-scale-archive-nojit)."
	}
	return "The success path and one sweeper pass with an archive (skiplock.jobs_archive) of " + strings.Join(s, ", ") + " rows. " +
		"Per point the archive is filled once, untimed: one job archived by a skiplock worker is copied N times by INSERT ... SELECT generate_series (ids 1..N, the jobs' id sequence set past N; finished_at spread evenly over the default 7-day retention less an hour at the old end and 10 minutes at the new; the timing rollup's marks set to the current slot as a leader that kept up leaves them; ANALYZE, CHECKPOINT). " +
		"Then one sweep (as below) is timed with the archive's BRIN index on finished_at as autovacuum off leaves it, unsummarized (skiplock neither vacuums the archive nor summarizes the index: every scan by finished_at reads the whole archive), and brin_summarize_new_values writes the summary autovacuum would (timed, in the notes). " +
		"Each run: " + k + " jobs enqueued (EnqueueMany, untimed), CHECKPOINT, then drained by a skiplock worker at its defaults (archive on success) from start until all are archived: jobs/s, server CPU and WAL bytes per job; the bare floor drains " + k + " jobs beside it (no archive: it shows the machine); then one Sweep of a fresh Sweeper (defaults but ArchiveRetention) whose retention makes the " + k + " oldest archive rows expire is timed (its first purge walks the BRIN index from the archive's start; autovacuum off: the pages earlier runs emptied are read again): the archive stays at N." + jit
}

// archiveTemplate holds the archived row a fill copies.
const archiveTemplate = "scale_archive_template"

// fillArchive runs one job through a worker, keeps its archive row as the template, and
// writes n copies of it into the archive (ids 1..n, finished_at spread over the window),
// in statements of at most a million rows. It sets the jobs' id sequence past n.
func fillArchive(sr *scaleRun, e *env, n int) error {
	archive := pgx.Identifier{skiplockSchema, "jobs_archive"}.Sanitize()
	if _, _, err := e.drain(1); err != nil {
		return fmt.Errorf("template job: %w", err)
	}
	if _, err := e.pool.Exec(e.ctx, `DROP TABLE IF EXISTS public.`+archiveTemplate+`;
		CREATE TABLE public.`+archiveTemplate+` AS SELECT * FROM `+archive+`;
		DELETE FROM `+archive); err != nil {
		return err
	}
	var rows int
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM public.`+archiveTemplate+` WHERE status = 'succeeded' AND finished_at IS NOT NULL`).Scan(&rows); err != nil {
		return err
	}
	if rows != 1 {
		return fmt.Errorf("template: %d succeeded rows archived, want 1", rows)
	}
	cols, err := copyColumns(e, archive)
	if err != nil {
		return err
	}
	// Each column of the copy: the id from the series, finished_at from the window, the
	// other times at their distance to finished_at, the rest as archived.
	exprs := make([]string, len(cols))
	for i, c := range cols {
		switch c {
		case `"id"`:
			exprs[i] = "g"
		case `"finished_at"`:
			exprs[i] = "f.at"
		case `"run_at"`, `"created_at"`, `"started_at"`, `"locked_at"`:
			exprs[i] = "f.at - (t.finished_at - t." + c + ")"
		default:
			exprs[i] = "t." + c
		}
	}
	var from time.Time
	var step time.Duration
	window := skiplock.DefaultArchiveRetention - archiveOldMargin - archiveNewMargin
	if err := e.pool.QueryRow(e.ctx, `SELECT now() - $1::interval`, skiplock.DefaultArchiveRetention-archiveOldMargin).Scan(&from); err != nil {
		return err
	}
	step = window / time.Duration(n)
	q := `INSERT INTO ` + archive + ` (` + strings.Join(cols, ", ") + `)
		SELECT ` + strings.Join(exprs, ", ") + `
		FROM public.` + archiveTemplate + ` t, generate_series($1::bigint, $2::bigint) g,
			LATERAL (SELECT $3::timestamptz + (g - 1) * $4::interval AS at) f`
	t0 := time.Now()
	for done := 0; done < n; {
		k := min(1_000_000, n-done)
		if _, err := e.pool.Exec(e.ctx, q, done+1, done+k, from, step); err != nil {
			return err
		}
		done += k
		if done%10_000_000 == 0 && done < n {
			sr.progress("archive", "filled %s of %s rows in %.0f s", thousands(int64(done)), thousands(int64(n)), time.Since(t0).Seconds())
		}
	}
	_, err = e.pool.Exec(e.ctx, `SELECT setval(pg_get_serial_sequence($1, 'id'), $2)`,
		pgx.Identifier{skiplockSchema, "jobs"}.Sanitize(), int64(n)+1)
	if err != nil {
		return err
	}
	// The rollup of a leader that kept up: marked through the current slot of each width.
	if _, err := e.pool.Exec(e.ctx, `INSERT INTO `+pgx.Identifier{skiplockSchema, "ui_timing_rollup_mark"}.Sanitize()+` (width, through)
		SELECT w, to_timestamp(floor(date_part('epoch', now()) / (60 * w)) * 60 * w) FROM unnest('{1,15}'::int[]) w
		ON CONFLICT (width) DO UPDATE SET through = excluded.through`); err != nil {
		return fmt.Errorf("rollup mark: %w", err)
	}
	if _, err := e.pool.Exec(e.ctx, "ANALYZE "+archive); err != nil {
		return err
	}
	_, err = e.pool.Exec(e.ctx, "CHECKPOINT")
	return err
}

// archiveRun is one run of an archive point.
type archiveRun struct {
	rate, cpuServer, cpuClient, wal float64
	bare                            float64
	sweep                           time.Duration
	purged                          int64
	sweepWAL                        float64
}

// drainArchived enqueues k jobs (untimed) and times a skiplock worker at its defaults
// until all are archived: rate, CPU and WAL per job.
func drainArchived(e *env, k int) (rate, cpuServer, cpuClient, wal float64, err error) {
	if err := e.sys.Bulk(k, time.Time{}, 1)(e.ctx); err != nil {
		return 0, 0, 0, 0, err
	}
	if _, err := e.pool.Exec(e.ctx, "CHECKPOINT"); err != nil {
		return 0, 0, 0, 0, err
	}
	lsn0, err := e.walLSN()
	if err != nil {
		return 0, 0, 0, 0, err
	}
	sink := NewSink(int64(k))
	c0 := e.cpuNow()
	t0 := time.Now()
	if err := e.sys.Start(e.ctx, sink, Spec{Backlog: true}); err != nil {
		return 0, 0, 0, 0, err
	}
	werr := waitDrained(e.ctx, e.sys, sink, timeoutFor(k, 1000))
	el := time.Since(t0)
	cpu := map[string]float64{}
	cpuPerJob(cpu, c0, e.cpuNow(), k)
	if err := errors.Join(werr, e.stop()); err != nil {
		return 0, 0, 0, 0, err
	}
	lsn1, err := e.walLSN()
	if err != nil {
		return 0, 0, 0, 0, err
	}
	return float64(k) / el.Seconds(), cpu[cpuServerMetric.Key], cpu[cpuClientMetric.Key], float64(lsn1-lsn0) / float64(k), nil
}

// sweepOldest times one Sweep of a fresh Sweeper whose retention makes the k oldest
// archive rows (by id, which is finished_at order in the filled archive) expire.
func sweepOldest(e *env, k int) (time.Duration, int64, float64, error) {
	archive := pgx.Identifier{skiplockSchema, "jobs_archive"}.Sanitize()
	var keep time.Duration
	if err := e.pool.QueryRow(e.ctx, `SELECT now() - finished_at FROM `+archive+` ORDER BY id OFFSET $1 LIMIT 1`, k-1).Scan(&keep); err != nil {
		return 0, 0, 0, fmt.Errorf("retention: %w", err)
	}
	sw, err := skiplock.NewSweeper(e.sys.(*skiplockSystem).client, skiplock.SweeperConfig{ArchiveRetention: keep, Logger: quietLogger()})
	if err != nil {
		return 0, 0, 0, err
	}
	if _, err := e.pool.Exec(e.ctx, "CHECKPOINT"); err != nil {
		return 0, 0, 0, err
	}
	lsn0, err := e.walLSN()
	if err != nil {
		return 0, 0, 0, err
	}
	t0 := time.Now()
	res, err := sw.Sweep(e.ctx)
	el := time.Since(t0)
	if err != nil {
		return el, res.Purged, 0, err
	}
	if res.Skipped {
		return 0, 0, 0, errors.New("sweep skipped: another sweeper held the lock")
	}
	lsn1, err := e.walLSN()
	if err != nil {
		return 0, 0, 0, err
	}
	return el, res.Purged, float64(lsn1-lsn0) / math.Max(1, float64(res.Purged)), nil
}

func runArchiveCurve(sr *scaleRun) (*ScaleResult, error) {
	sizes, err := archiveSizes(sr.quick)
	if err != nil {
		return nil, fmt.Errorf("-scale-archive: %w", err)
	}
	k := archiveBatch(sr.quick)
	res := &ScaleResult{Header: []string{"archive rows", "skiplock jobs/s", "bare jobs/s (no archive)", "skiplock / bare",
		"skiplock server µs/job", "skiplock client µs/job", "skiplock WAL bytes/job", "sweep s", "rows purged", "sweep WAL bytes/row", "sweep s, BRIN unsummarized", "archive GB"}}
	var sRate, sBare, sCPU, sWAL, sSweep, sSweepU ScaleSeries
	sRate.Name, sBare.Name, sCPU.Name, sWAL.Name, sSweep.Name = "skiplock jobs/s", "bare jobs/s (no archive)", "skiplock server µs/job", "skiplock WAL bytes/job", "one sweep, BRIN summarized"
	sSweepU.Name = "one sweep, BRIN unsummarized (autovacuum off)"
	var first, last map[string]float64
	for _, n := range sizes {
		x := float64(n)
		var runs []archiveRun
		var gb float64
		var unsummarized, summarize time.Duration
		var unsummarizedNote string
		var purged int64
		err := func() error {
			var tune []func(*pgxpool.Config)
			if archiveNoJIT {
				tune = append(tune, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["jit"] = "off" })
			}
			e, done, err := sr.open("skiplock", tune...)
			if err != nil {
				return err
			}
			defer done()
			b, bdone, err := sr.open("bare")
			if err != nil {
				return err
			}
			defer bdone()
			t0 := time.Now()
			if err := fillArchive(sr, e, n); err != nil {
				return fmt.Errorf("fill %d: %w", n, err)
			}
			mbs, err := relSize(e, skiplockSchema+".jobs_archive")
			if err != nil {
				return err
			}
			gb = mbs / 1024
			sr.progress("archive", "filled %s archive rows in %.0f s (%.2f GB)", thousands(int64(n)), time.Since(t0).Seconds(), gb)
			res.Notes = append(res.Notes, fmt.Sprintf("%s archive rows: filled in %.0f s, archive table + indexes %.2f GB.", thousands(int64(n)), time.Since(t0).Seconds(), gb))
			// The archive's BRIN index as autovacuum off leaves it: the fill's ranges are not
			// summarized (a VACUUM, autovacuum's or not, or brin_summarize_new_values does
			// that, and skiplock calls neither), so a scan by finished_at reads every page.
			// One sweep in that state, then the summary autovacuum would write, timed.
			unsummarized, purged, _, err = sweepOldest(e, k)
			var pgErr *pgconn.PgError
			switch {
			case err != nil && (errors.As(err, &pgErr) && pgErr.Code == "57014" || strings.Contains(err.Error(), "SQLSTATE 57014")): // query_canceled
				// The sweeper's statement_timeout (10 s) ended a purge batch: the batch that
				// must find nothing more to delete reads the whole unsummarized archive, so
				// the pass errors, records no progress, and the next sweep starts over.
				unsummarizedNote = fmt.Sprintf(" (%s after %.1f s: %v)", "gave up", unsummarized.Seconds(), err)
			case err != nil:
				return fmt.Errorf("sweep at %d, BRIN unsummarized: %w", n, err)
			}
			t1 := time.Now()
			var ranges int64
			if err := e.pool.QueryRow(e.ctx, `SELECT brin_summarize_new_values($1::regclass)`,
				pgx.Identifier{skiplockSchema, "jobs_archive_finished_idx"}.Sanitize()).Scan(&ranges); err != nil {
				return err
			}
			summarize = time.Since(t1)
			sr.progress("archive", "%s rows: one sweep with the BRIN index unsummarized %.2f s (%d purged)%s; brin_summarize_new_values %.1f s (%d ranges)",
				thousands(int64(n)), unsummarized.Seconds(), purged, unsummarizedNote, summarize.Seconds(), ranges)
			res.Notes = append(res.Notes, fmt.Sprintf("%s archive rows: before the runs, one sweep with the archive's BRIN index unsummarized (as autovacuum off leaves it) took %.2f s for %s rows%s; brin_summarize_new_values then took %.1f s (%s ranges of 128 pages).",
				thousands(int64(n)), unsummarized.Seconds(), thousands(purged), unsummarizedNote, summarize.Seconds(), thousands(ranges)))
			for r := range sr.runs {
				var ar archiveRun
				bareFirst := r%2 == 1
				bareRun := func() error {
					final, _, err := b.drain(k)
					if err != nil {
						return fmt.Errorf("bare: %w", err)
					}
					ar.bare = float64(k) / final.Seconds()
					return nil
				}
				if bareFirst {
					if err := bareRun(); err != nil {
						return err
					}
				}
				if ar.rate, ar.cpuServer, ar.cpuClient, ar.wal, err = drainArchived(e, k); err != nil {
					return fmt.Errorf("skiplock at %d, run %d: %w", n, r+1, err)
				}
				if !bareFirst {
					if err := bareRun(); err != nil {
						return err
					}
				}
				if ar.sweep, ar.purged, ar.sweepWAL, err = sweepOldest(e, k); err != nil {
					return fmt.Errorf("sweep at %d, run %d: %w", n, r+1, err)
				}
				runs = append(runs, ar)
				sr.progress("archive", "%s rows run %d: skiplock %s jobs/s (bare %s), server %.1f µs/job, WAL %.0f B/job; sweep %.2f s, %d purged",
					thousands(int64(n)), r+1, thousands(int64(ar.rate)), thousands(int64(ar.bare)), ar.cpuServer, ar.wal, ar.sweep.Seconds(), ar.purged)
			}
			return nil
		}()
		if err != nil {
			return res, err
		}
		col := func(f func(archiveRun) float64) ScalePoint {
			var v []float64
			for _, r := range runs {
				v = append(v, f(r))
			}
			return pointOf(x, v)
		}
		rate, bare := col(func(r archiveRun) float64 { return r.rate }), col(func(r archiveRun) float64 { return r.bare })
		ratio := col(func(r archiveRun) float64 { return r.rate / r.bare })
		cpu, ccpu := col(func(r archiveRun) float64 { return r.cpuServer }), col(func(r archiveRun) float64 { return r.cpuClient })
		wal, sweep := col(func(r archiveRun) float64 { return r.wal }), col(func(r archiveRun) float64 { return r.sweep.Seconds() })
		npurged, swal := col(func(r archiveRun) float64 { return float64(r.purged) }), col(func(r archiveRun) float64 { return r.sweepWAL })
		res.Rows = append(res.Rows, []string{thousands(int64(n)), cellOf(rate, "jobs/s"), cellOf(bare, "jobs/s"), cellOf(ratio, "x"),
			cellOf(cpu, "µs"), cellOf(ccpu, "µs"), cellOf(wal, "bytes"), cellOf(sweep, "x"), cellOf(npurged, "rows"), cellOf(swal, "bytes"),
			strFloat(unsummarized.Seconds(), 2) + map[bool]string{true: " (gave up: statement timeout)"}[unsummarizedNote != ""], strFloat(gb, 2)})
		sRate.Points, sBare.Points = append(sRate.Points, rate), append(sBare.Points, bare)
		sCPU.Points, sWAL.Points, sSweep.Points = append(sCPU.Points, cpu), append(sWAL.Points, wal), append(sSweep.Points, sweep)
		sSweepU.Points = append(sSweepU.Points, pointOf(x, []float64{unsummarized.Seconds()}))
		m := map[string]float64{"rate": rate.Y, "ratio": ratio.Y, "cpu": cpu.Y, "wal": wal.Y}
		if first == nil {
			first = m
		}
		last = m
	}
	if len(sizes) > 1 {
		res.Notes = append(res.Notes, fmt.Sprintf("Issue 45's target: the archive at its largest size costs the success path at most 10 %% more than at its smallest. From %s to %s rows (medians): server CPU per job %+.1f %%, WAL per job %+.1f %%, rate %+.1f %%, rate as a share of the bare floor's %+.1f %%.",
			thousands(int64(sizes[0])), thousands(int64(sizes[len(sizes)-1])),
			100*(last["cpu"]/first["cpu"]-1), 100*(last["wal"]/first["wal"]-1), 100*(last["rate"]/first["rate"]-1), 100*(last["ratio"]/first["ratio"]-1)))
	}
	res.Plots = []ScalePlot{
		{File: "scale-archive-rate.png", Title: "Drain rate (archive on success) by archive size", XLabel: "archive rows", YLabel: "jobs/s", LogX: true, Series: []ScaleSeries{sRate, sBare}},
		{File: "scale-archive-cpu.png", Title: "Server CPU per job by archive size", XLabel: "archive rows", YLabel: "µs/job", LogX: true, Series: []ScaleSeries{sCPU}},
		{File: "scale-archive-wal.png", Title: "WAL per job by archive size", XLabel: "archive rows", YLabel: "bytes/job", LogX: true, Series: []ScaleSeries{sWAL}},
		{File: "scale-archive-sweep.png", Title: "One sweeper pass deleting the batch's worth of old rows", XLabel: "archive rows", YLabel: "s", LogX: true, Series: []ScaleSeries{sSweep, sSweepU}},
	}
	return res, nil
}

// strFloat formats v with prec decimals.
func strFloat(v float64, prec int) string { return fmt.Sprintf("%.*f", prec, v) }
