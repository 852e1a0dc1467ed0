package query

// This file holds the wait and run times and the failures of a queue's jobs, per slot
// and kind, as histograms: the queue page's percentiles over 5 minutes, an hour, a day
// and a week, and its charts. The history comes from the rollup the maintenance leader
// writes (ui_timing_rollup, migration 19; internal/maintenance, timingrollup.go); the
// minutes since its mark, at most the last hour, from the archive itself.

import (
	"cmp"
	"context"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/maintenance"
)

// timingSQL counts the archived jobs of queue $1 finished from minute $2 (from the Unix
// epoch) to before minute $3, by minute, kind, measure (wait or run time) and histogram
// bucket, with each group's largest value: the times and buckets the rollup writes
// (internal/maintenance's TimingTimesSQL and TimingBucketsSQL). One scan feeds both
// histograms (GROUPING SETS: the wait rows are those not grouped by the run bucket). The
// archive's BRIN index on finished_at narrows the scan to the pages written since minute
// $2 (rows arrive in finished_at order); a row archived without started_at (before
// migration 18) counts as succeeded with no times (a NULL bucket). The page reads at most the last hour this way (the minutes the rollup has not
// written yet: usually the last one or two). The rollup writes the same buckets.
var timingSQL = `SELECT m, kind, GROUPING(rb) = 1, coalesce(wb, rb), count(*),
	CASE WHEN GROUPING(rb) = 1 THEN max(w) ELSE max(r) END
FROM (
	SELECT floor(date_part('epoch', finished_at) / 60)::bigint AS m, kind,
		` + maintenance.TimingTimesSQL + `
	FROM {s}.jobs_archive
	WHERE queue = $1 AND finished_at >= to_timestamp($2::bigint * 60) AND finished_at < to_timestamp($3::bigint * 60)
) a, LATERAL ` + maintenance.TimingBucketsSQL + ` b
GROUP BY GROUPING SETS ((m, kind, wb), (m, kind, rb))`

// liveFailedSQL counts queue $1's jobs that ended dead or failed from minute $2 to before
// minute $3, by minute and kind, through jobs_ended_idx (migration 19).
const liveFailedSQL = `SELECT floor(date_part('epoch', finished_at) / 60)::bigint, kind, count(*)
FROM {s}.jobs
WHERE status IN ('dead', 'failed') AND queue = $1
	AND finished_at >= to_timestamp($2::bigint * 60) AND finished_at < to_timestamp($3::bigint * 60)
GROUP BY 1, 2`

// rollupSQL reads the database's current minute, the end of the rollup's minutes (NULL:
// none written yet) and queue $1's rows of the last $2 minutes: the quarters before b,
// then the minutes from b to the minutes' mark, so no slot is counted twice. b is the
// quarters' mark or, when that is later, the quarter two hours ago: the last hour is
// summed from minutes (exact), the older history from quarters. Through the primary key
// (queue, width, start_at, kind): a few hundred rows per kind for a week.
const rollupSQL = `WITH k AS (
	SELECT now_m, m1, least(coalesce(m15, now_m), div(now_m - 120, 15) * 15) AS b
	FROM (SELECT floor(date_part('epoch', now()) / 60)::bigint AS now_m,
		(SELECT floor(date_part('epoch', through) / 60)::bigint FROM {s}.ui_timing_rollup_mark WHERE width = 1) AS m1,
		(SELECT floor(date_part('epoch', through) / 60)::bigint FROM {s}.ui_timing_rollup_mark WHERE width = 15) AS m15) c
)
SELECT k.now_m, k.m1, coalesce(floor(date_part('epoch', r.start_at) / 60)::bigint, 0), coalesce(r.kind, ''),
	coalesce(r.succeeded, 0), coalesce(r.failed, 0), coalesce(r.wait_b, '{}'), coalesce(r.wait_n, '{}'), coalesce(r.wait_max, 0),
	coalesce(r.run_b, '{}'), coalesce(r.run_n, '{}'), coalesce(r.run_max, 0)
FROM k LEFT JOIN {s}.ui_timing_rollup r ON r.queue = $1 AND (
	(r.width = 15 AND r.start_at >= to_timestamp(div(k.now_m - $2::bigint + 1, 15) * 15 * 60)
		AND r.start_at < to_timestamp(k.b * 60))
	OR (r.width = 1 AND r.start_at >= to_timestamp(greatest(k.b, k.now_m - $2::bigint + 1) * 60)
		AND r.start_at < to_timestamp(coalesce(k.m1, 0) * 60)))`

// Histogram shape: the rollup's (internal/maintenance), which writes the buckets.
const (
	timingGrowth  = maintenance.TimingGrowth
	timingBuckets = maintenance.TimingBuckets
)

// Timing spans and bounds.
const (
	// TimingDayMinutes and TimingWeekMinutes are the spans the queue page reads, in minutes.
	TimingDayMinutes  = 24 * 60
	TimingWeekMinutes = 7 * TimingDayMinutes
	// liveMinutes bounds what is read from the archive itself: the minutes since the
	// rollup's mark, at most the last hour (a rollup that is not written keeps the page
	// quick, and shows the hour).
	liveMinutes = 60
	// MaxTimingKinds bounds the kinds a summary lists (the busiest first); the totals
	// count every kind.
	MaxTimingKinds = 50
	// OtherKinds is the kind the rollup writes for a slot's kinds past the busiest 50.
	OtherKinds = maintenance.RollupOtherKinds
)

// Hist is a histogram of durations in log-spaced buckets, with the largest value.
type Hist struct {
	N       int64
	Buckets [timingBuckets]int64
	MaxMS   float64
}

// add counts n values of bucket b, the largest mx milliseconds.
func (h *Hist) add(b int, n int64, mx float64) {
	h.N += n
	h.Buckets[min(max(b, 0), timingBuckets-1)] += n
	h.MaxMS = max(h.MaxMS, mx)
}

// Quantile returns the q-quantile (0 < q <= 1): the geometric middle of the bucket that
// holds it, never above the largest value; 0 for an empty histogram.
func (h *Hist) Quantile(q float64) time.Duration {
	if h.N == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(h.N)))
	var seen int64
	for b, n := range h.Buckets {
		seen += n
		if seen >= max(rank, 1) {
			ms := 0.5
			if b > 0 {
				ms = math.Pow(timingGrowth, float64(b)-0.5)
			}
			return msDuration(min(ms, h.MaxMS))
		}
	}
	return h.Max()
}

// Max is the largest value counted.
func (h *Hist) Max() time.Duration { return msDuration(h.MaxMS) }

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// Times are the wait and run histograms of a set of jobs, and how many of them
// succeeded (archived) and failed for good (dead or failed).
type Times struct {
	Wait, Run         Hist
	Succeeded, Failed int64
}

// FailRate is the failed share of the jobs that ended, in [0, 1]; -1 when none ended.
func (t *Times) FailRate() float64 {
	if t.Succeeded+t.Failed == 0 {
		return -1
	}
	return float64(t.Failed) / float64(t.Succeeded+t.Failed)
}

// KindTimes are the times of one kind.
type KindTimes struct {
	Kind string
	Times
}

// measure says what a timingCell counts.
type measure int8

const (
	measureWait measure = iota
	measureRun
	measureSucceeded // n: archived jobs (bucket unused)
	measureFailed    // n: dead or failed jobs (bucket unused)
)

// timingCell is one bucket of one histogram, or one count, of a kind in a slot.
type timingCell struct {
	kind   string
	what   measure
	bucket int
	n      int64
	max    float64
}

// Timing reads the queue page's histograms: the rollup's, and the archive's newest
// minutes. It keeps nothing: every process reads the same rows.
type Timing struct {
	pool                     *pgxpool.Pool
	rollup, live, liveFailed string
}

func newTiming(pool *pgxpool.Pool, x func(string) string) *Timing {
	return &Timing{pool: pool, rollup: x(rollupSQL), live: x(timingSQL), liveFailed: x(liveFailedSQL)}
}

// QueueTimes are a queue's slots (keyed by their first minute: a quarter of an hour
// from the rollup, or a minute), ready to be summed over any span of the last Minutes.
type QueueTimes struct {
	Now     int64 // the current minute, from the Unix epoch (still filling)
	Minutes int64 // the span read
	// RollupAt is the end of the rollup's minutes (from the Unix epoch; 0: none written):
	// the archive was read from there, or from an hour ago when it is older (Behind).
	RollupAt int64
	Behind   bool
	slots    map[int64][]timingCell
}

// Read returns the histograms of queue's jobs over the last minutes minutes (at most
// TimingWeekMinutes), the current one included: the rollup's slots, then the archive's
// minutes since the rollup's mark (at most the last hour).
func (t *Timing) Read(ctx context.Context, queue string, minutes int64) (*QueueTimes, error) {
	minutes = min(max(minutes, 1), TimingWeekMinutes)
	qt := &QueueTimes{Minutes: minutes, slots: map[int64][]timingCell{}}
	if err := t.readRollup(ctx, queue, qt); err != nil {
		return nil, err
	}
	from := max(qt.RollupAt, qt.Now-liveMinutes+1)
	qt.Behind = qt.RollupAt < qt.Now-liveMinutes+1
	if err := t.readLive(ctx, queue, qt, from); err != nil {
		return nil, err
	}
	return qt, nil
}

// readRollup runs rollupSQL into qt.
func (t *Timing) readRollup(ctx context.Context, queue string, qt *QueueTimes) error {
	rows, err := t.pool.Query(ctx, t.rollup, queue, qt.Minutes)
	if err != nil {
		return err
	}
	var (
		m1                       *int64
		start, succeeded, failed int64
		kind                     string
		waitB, runB              []int16
		waitN, runN              []int64
		waitMax, runMax          float64
	)
	_, err = pgx.ForEachRow(rows, []any{&qt.Now, &m1, &start, &kind, &succeeded, &failed, &waitB, &waitN, &waitMax,
		&runB, &runN, &runMax}, func() error {
		if m1 != nil {
			qt.RollupAt = *m1
		}
		if kind == "" && start == 0 {
			return nil // no row: the marks only
		}
		cells := qt.slots[start]
		cells = append(cells, timingCell{kind: kind, what: measureSucceeded, n: succeeded},
			timingCell{kind: kind, what: measureFailed, n: failed})
		cells = appendHist(cells, kind, measureWait, waitB, waitN, waitMax)
		qt.slots[start] = appendHist(cells, kind, measureRun, runB, runN, runMax)
		return nil
	})
	return err
}

// appendHist appends the cells of a sparse histogram (buckets b, counts n, largest mx).
func appendHist(cells []timingCell, kind string, what measure, b []int16, n []int64, mx float64) []timingCell {
	for i := range min(len(b), len(n)) {
		cells = append(cells, timingCell{kind: kind, what: what, bucket: int(b[i]), n: n[i], max: mx})
	}
	return cells
}

// readLive reads the archive's and the failed jobs' minutes from minute from on into qt.
func (t *Timing) readLive(ctx context.Context, queue string, qt *QueueTimes, from int64) error {
	rows, err := t.pool.Query(ctx, t.live, queue, from, qt.Now+1)
	if err != nil {
		return err
	}
	var (
		minute int64
		c      timingCell
		wait   bool
		bucket *int // NULL: jobs archived without a start, which have no times
		mx     *float64
	)
	_, err = pgx.ForEachRow(rows, []any{&minute, &c.kind, &wait, &bucket, &c.n, &mx}, func() error {
		c.what = measureRun
		if wait {
			c.what = measureWait
			qt.slots[minute] = append(qt.slots[minute], timingCell{kind: c.kind, what: measureSucceeded, n: c.n})
		}
		if bucket != nil {
			c.bucket, c.max = *bucket, *mx
			qt.slots[minute] = append(qt.slots[minute], c)
		}
		return nil
	})
	if err != nil {
		return err
	}
	rows, err = t.pool.Query(ctx, t.liveFailed, queue, from, qt.Now+1)
	if err != nil {
		return err
	}
	_, err = pgx.ForEachRow(rows, []any{&minute, &c.kind, &c.n}, func() error {
		qt.slots[minute] = append(qt.slots[minute], timingCell{kind: c.kind, what: measureFailed, n: c.n})
		return nil
	})
	return err
}

// add counts cell c into t.
func (t *Times) add(c timingCell) {
	switch c.what {
	case measureWait:
		t.Wait.add(c.bucket, c.n, c.max)
	case measureRun:
		t.Run.add(c.bucket, c.n, c.max)
	case measureSucceeded:
		t.Succeeded += c.n
	case measureFailed:
		t.Failed += c.n
	}
}

// Span sums the slots from minute first to last (both included; a quarter counts when
// it starts in the span): the times of every kind, and of each kind, the busiest first,
// at most MaxTimingKinds of them.
func (q *QueueTimes) Span(first, last int64) (all Times, kinds []KindTimes) {
	byKind := map[string]*Times{}
	for m, cells := range q.slots {
		if m < first || m > last {
			continue
		}
		for _, c := range cells {
			k := byKind[c.kind]
			if k == nil {
				k = &Times{}
				byKind[c.kind] = k
			}
			all.add(c)
			k.add(c)
		}
	}
	for kind, t := range byKind {
		kinds = append(kinds, KindTimes{Kind: kind, Times: *t})
	}
	slices.SortFunc(kinds, func(a, b KindTimes) int {
		return cmp.Or(cmp.Compare(b.Wait.N+b.Failed, a.Wait.N+a.Failed), cmp.Compare(a.Kind, b.Kind))
	})
	return all, kinds[:min(len(kinds), MaxTimingKinds)]
}

// Slots sums the slots of the last n slots of size minutes each, the one holding the
// current minute last, over every kind.
func (q *QueueTimes) Slots(n int, size int64) []Times {
	out := make([]Times, n)
	start := q.Now - int64(n)*size + 1
	for m, cells := range q.slots {
		if m < start || m > q.Now {
			continue
		}
		i := (m - start) / size
		for _, c := range cells {
			out[i].add(c)
		}
	}
	return out
}
