// This file holds the dashboard's timing rollup: once a minute is over, the leader
// summarizes the archive's jobs of that minute (and of each quarter of an hour) per
// queue and kind into ui_timing_rollup (migration 19), so the queue page reads a week of
// wait and run times and failures from a few hundred rows per kind instead of the archive.

package maintenance

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// Rollup slots: their width in minutes, how long their rows are kept, and how many slots
// one statement writes at most (a leader that was away catches up a chunk per check).
var rollupWidths = []struct {
	width, keep, chunk int64
}{
	{1, 180, 60},          // minutes: the last 3 hours (the hour's view and its edges)
	{15, 7 * 24 * 60, 24}, // quarters: the last 7 days, 6 hours per statement
}

// RollupMaxKinds bounds the kinds of a queue in one slot: the rest are written together
// as RollupOtherKinds, so a queue whose jobs each have a kind of their own stays bounded.
const (
	RollupMaxKinds   = 50
	RollupOtherKinds = "(other kinds)"
)

// The histograms' shape, which the dashboard's reader (ui/internal/query) shares:
// TimingGrowth is the ratio of a bucket's bounds (a percentile read from a histogram is
// within about 7 % of the exact one), TimingBuckets their number (bucket 0 below 1 ms,
// the last from about 12 years on).
const (
	TimingGrowth  = 1.15
	TimingBuckets = 200
)

// TimingTimesSQL is the select list of a jobs_archive row's times in milliseconds, at
// least 0: its wait w (started_at - run_at) and its run time r (finished_at -
// started_at). Both are NULL for a row archived without started_at (before migration
// 18): it counts as succeeded with no times. greatest skips a NULL, hence the CASE.
const TimingTimesSQL = `CASE WHEN started_at IS NOT NULL THEN greatest(date_part('epoch', started_at - run_at) * 1000, 0) END AS w,
		CASE WHEN started_at IS NOT NULL THEN greatest(date_part('epoch', finished_at - started_at) * 1000, 0) END AS r`

// TimingBucketsSQL is a LATERAL subquery over w and r (TimingTimesSQL): their histogram
// buckets wb and rb, 0 below 1 ms, b for [g^(b-1), g^b) ms with g = TimingGrowth, the
// last (TimingBuckets - 1) holding everything longer; NULL for a NULL time (least skips
// a NULL, hence the first test).
var TimingBucketsSQL = `(SELECT
		CASE WHEN w IS NULL THEN NULL WHEN w < 1 THEN 0 ELSE least(floor(ln(w) / ln(` + timingGrowthSQL + `))::int + 1, ` + timingLastSQL + `) END AS wb,
		CASE WHEN r IS NULL THEN NULL WHEN r < 1 THEN 0 ELSE least(floor(ln(r) / ln(` + timingGrowthSQL + `))::int + 1, ` + timingLastSQL + `) END AS rb)`

var (
	timingGrowthSQL = strconv.FormatFloat(TimingGrowth, 'f', -1, 64)
	timingLastSQL   = strconv.Itoa(TimingBuckets - 1)
)

// TimingRollupSQL writes the slots of width $1 minutes from the first not written yet
// (ui_timing_rollup_mark; without a mark, the slot of the first job that ended in the last
// $3 minutes, found with one read of each table, so that a new schema's leader does not
// walk a week of empty slots a chunk at a time, each chunk reading the archive's
// unsummarized pages; nothing to do when no job ended) up to the last slot that ended before the
// current minute began (a transaction that archived a job in the minute before may
// still commit: the minute after a slot is its grace), at most $2 slots; deletes the rows
// of that width older than $3 minutes; moves the mark; and returns the new mark and the
// last slot end it could have reached (less: call again). One statement:
//   - the archive's rows of the span through its BRIN index on finished_at (rows arrive
//     in finished_at order); wait and run time (TimingTimesSQL) into the histogram
//     buckets the dashboard reads (TimingBucketsSQL), both from one scan (GROUPING
//     SETS); a row archived without started_at counts as succeeded with no times, as in
//     the dashboard's own read of the newest minutes;
//   - the jobs that ended dead or failed in the span through jobs_ended_idx;
//   - per queue and slot, the $4 kinds with the most jobs by name, the rest as $5;
//   - ON CONFLICT replaces a slot's row (a leader that wrote it and lost its mark before
//     committing, or two leaders overlapping for an instant, write the same figures);
//     the mark never moves back (greatest).
var TimingRollupSQL = `WITH clock AS (
	SELECT floor(date_part('epoch', now()) / 60)::bigint AS now_m
), bounds AS (
	SELECT greatest(coalesce((SELECT floor(date_part('epoch', through) / 60)::bigint
			FROM {s}.ui_timing_rollup_mark WHERE width = $1),
			div(floor(date_part('epoch', least(
				(SELECT min(finished_at) FROM {s}.jobs_archive
				 WHERE finished_at >= to_timestamp((now_m - $3::bigint) * 60)),
				(SELECT min(finished_at) FROM {s}.jobs
				 WHERE status IN ('dead', 'failed') AND finished_at IS NOT NULL
				   AND finished_at >= to_timestamp((now_m - $3::bigint) * 60)))) / 60)::bigint,
				$1::bigint) * $1::bigint,
			div(now_m - 1, $1::bigint) * $1::bigint),
		div(now_m - $3::bigint, $1::bigint) * $1::bigint) AS lo,
		div(now_m - 1, $1::bigint) * $1::bigint AS hi_max
	FROM clock
), span AS (
	SELECT lo, least(hi_max, lo + $1::bigint * $2::bigint) AS hi, hi_max FROM bounds WHERE lo < hi_max
), a AS (
	SELECT queue, kind, div(floor(date_part('epoch', finished_at) / 60)::bigint, $1::bigint) * $1::bigint AS m,
		` + TimingTimesSQL + `
	FROM {s}.jobs_archive, span
	WHERE finished_at >= to_timestamp(span.lo * 60) AND finished_at < to_timestamp(span.hi * 60)
), cells AS (
	SELECT queue, kind, m, GROUPING(rb) = 1 AS wait, coalesce(wb, rb) AS b, count(*) AS n,
		CASE WHEN GROUPING(rb) = 1 THEN max(w) ELSE max(r) END AS mx
	FROM a, LATERAL ` + TimingBucketsSQL + ` hb
	GROUP BY GROUPING SETS ((queue, kind, m, wb), (queue, kind, m, rb))
), fails AS (
	SELECT queue, kind, div(floor(date_part('epoch', finished_at) / 60)::bigint, $1::bigint) * $1::bigint AS m, count(*) AS n
	FROM {s}.jobs, span
	WHERE status IN ('dead', 'failed') AND finished_at >= to_timestamp(span.lo * 60) AND finished_at < to_timestamp(span.hi * 60)
	GROUP BY 1, 2, 3
), kinds AS (
	SELECT queue, m, kind, rank() OVER (PARTITION BY queue, m ORDER BY sum(n) DESC, kind) AS rk
	FROM (SELECT queue, m, kind, n FROM cells WHERE wait UNION ALL SELECT queue, m, kind, n FROM fails) u
	GROUP BY queue, m, kind
), hist AS (
	SELECT queue, kind, m, sum(n) FILTER (WHERE wait) AS succeeded,
		array_agg(b::smallint ORDER BY b) FILTER (WHERE wait AND b IS NOT NULL) AS wait_b,
		array_agg(n ORDER BY b) FILTER (WHERE wait AND b IS NOT NULL) AS wait_n,
		max(mx) FILTER (WHERE wait) AS wait_max,
		array_agg(b::smallint ORDER BY b) FILTER (WHERE NOT wait AND b IS NOT NULL) AS run_b,
		array_agg(n ORDER BY b) FILTER (WHERE NOT wait AND b IS NOT NULL) AS run_n,
		max(mx) FILTER (WHERE NOT wait) AS run_max
	FROM (
		SELECT c.queue, CASE WHEN k.rk <= $4 THEN c.kind ELSE $5 END AS kind, c.m, c.wait, c.b,
			sum(c.n)::bigint AS n, max(c.mx) AS mx
		FROM cells c JOIN kinds k USING (queue, m, kind)
		GROUP BY 1, 2, 3, 4, 5
	) capped
	GROUP BY 1, 2, 3
), failed AS (
	SELECT f.queue, CASE WHEN k.rk <= $4 THEN f.kind ELSE $5 END AS kind, f.m, sum(f.n)::bigint AS n
	FROM fails f JOIN kinds k USING (queue, m, kind)
	GROUP BY 1, 2, 3
), ins AS (
	INSERT INTO {s}.ui_timing_rollup AS t (queue, width, start_at, kind, succeeded, failed,
		wait_b, wait_n, wait_max, run_b, run_n, run_max)
	SELECT queue, $1, to_timestamp(m * 60), kind, coalesce(h.succeeded, 0), coalesce(failed.n, 0),
		coalesce(h.wait_b, '{}'), coalesce(h.wait_n, '{}'), coalesce(h.wait_max, 0),
		coalesce(h.run_b, '{}'), coalesce(h.run_n, '{}'), coalesce(h.run_max, 0)
	FROM hist h FULL JOIN failed USING (queue, kind, m)
	ON CONFLICT (queue, width, start_at, kind) DO UPDATE SET succeeded = excluded.succeeded,
		failed = excluded.failed, wait_b = excluded.wait_b, wait_n = excluded.wait_n,
		wait_max = excluded.wait_max, run_b = excluded.run_b, run_n = excluded.run_n, run_max = excluded.run_max
	RETURNING 1
), del AS (
	DELETE FROM {s}.ui_timing_rollup
	WHERE width = $1 AND start_at < (SELECT to_timestamp(div(now_m - $3::bigint, $1::bigint) * $1::bigint * 60) FROM clock)
	RETURNING 1
)
INSERT INTO {s}.ui_timing_rollup_mark AS mk (width, through)
SELECT $1, to_timestamp(hi * 60) FROM span
ON CONFLICT (width) DO UPDATE SET through = greatest(mk.through, excluded.through)
RETURNING (SELECT hi FROM span), (SELECT hi_max FROM span), (SELECT count(*) FROM ins), (SELECT count(*) FROM del)`

// rollupStatementTimeout bounds one rollup statement (a chunk of the archive).
const rollupStatementTimeout = 10 * time.Second

// rollupRetryAfter is how long the rollup waits after a failed statement.
const rollupRetryAfter = 30 * time.Second

// rollupBudget bounds the chunks one check writes while catching up (a new leader over a
// week of archive), so the leader's other checks are not held up for long.
const rollupBudget = 2 * time.Second

// TimingRollup writes the dashboard's timing rollup of one schema, as its maintenance
// leader's duty: a statement per width when a slot of that width is over (about one a
// minute), and one per check while it catches up.
type TimingRollup struct {
	db   pgutil.DB
	sql  string
	next map[int64]time.Time // per width: when a slot is next due; zero: at once
}

// NewTimingRollup returns the rollup of db's schema.
func NewTimingRollup(db pgutil.DB) *TimingRollup {
	return &TimingRollup{db: db, sql: db.Render(TimingRollupSQL), next: map[int64]time.Time{}}
}

// Run writes the slots that are due now, chunk after chunk for at most rollupBudget; it
// returns whether a width is still behind (call again soon) and the errors.
func (r *TimingRollup) Run(ctx context.Context, now time.Time) (behind bool, err error) {
	began := time.Now()
	for _, w := range rollupWidths {
		if now.Before(r.next[w.width]) {
			continue
		}
		more, werr := r.write(ctx, w.width, w.keep, w.chunk)
		for more && werr == nil && time.Since(began) < rollupBudget {
			more, werr = r.write(ctx, w.width, w.keep, w.chunk)
		}
		switch {
		case werr != nil:
			r.next[w.width] = now.Add(rollupRetryAfter)
			err = errors.Join(err, r.db.WrapErr("timing rollup", werr))
		case more:
			behind = true
		default:
			// The next slot is written once it ended and the minute after it did.
			slot := time.Duration(w.width) * time.Minute
			r.next[w.width] = now.Truncate(slot).Add(slot + time.Minute + time.Second)
		}
	}
	return behind, err
}

// write runs TimingRollupSQL for one width: more says it stopped short of the present.
//
// The statement runs with jit off (SET LOCAL, in its own transaction). Its estimates over
// a big archive pass jit_above_cost, and compiling it cost more than running it: over a
// 10^7-row archive, 1,348 ms of a 1,367 ms execution that read nothing new went to JIT
// (bench -scale archive).
func (r *TimingRollup) write(ctx context.Context, width, keep, chunk int64) (more bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, rollupStatementTimeout)
	defer cancel()
	var hi, hiMax, written, deleted int64
	err = pgx.BeginFunc(ctx, r.db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL jit = off"); err != nil {
			return err
		}
		return tx.QueryRow(ctx, r.sql, width, chunk, keep, RollupMaxKinds, RollupOtherKinds).
			Scan(&hi, &hiMax, &written, &deleted)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil // nothing over since the mark
	}
	return err == nil && hi < hiMax, err
}
