package query

// This file holds the wait and run times of a queue's archived jobs, per minute and
// kind, as histograms: the queue page's percentiles over 5 minutes, an hour and a day,
// and its charts. The minutes that are over are kept, so a refresh reads two minutes of
// the archive instead of a day.

import (
	"cmp"
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// timingSQL counts the archived jobs of queue $1 finished from minute $2 (from the Unix
// epoch) to before minute $3, by minute, kind, measure (wait: started_at - run_at; run: finished_at -
// started_at, both in milliseconds, at least 0) and histogram bucket (0 below 1 ms, b for
// [g^(b-1), g^b) ms with g = timingGrowth, the last holding everything longer), with
// each group's largest value. One scan feeds both histograms (GROUPING SETS: the
// wait rows are those not grouped by the run bucket). The archive's BRIN index on
// finished_at narrows the scan to the pages written since minute $2 (rows arrive in
// finished_at order); rows archived before migration 18 have no started_at and are not
// counted. date_part (float8) rather than extract (numeric): 1.8 s instead of 2.4 s
// over 793,000 rows; one scan rather than a row per measure: faster again in every
// paired run on a shared machine. The first read of a queue reads its whole day (about
// 2 s per million of its archived jobs on a quiet machine); a refresh reads two minutes.
const timingSQL = `SELECT m, kind, GROUPING(rb) = 1, coalesce(wb, rb), count(*),
	CASE WHEN GROUPING(rb) = 1 THEN max(w) ELSE max(r) END
FROM (
	SELECT floor(date_part('epoch', finished_at) / 60)::bigint AS m, kind,
		greatest(date_part('epoch', started_at - run_at) * 1000, 0) AS w,
		greatest(date_part('epoch', finished_at - started_at) * 1000, 0) AS r
	FROM {s}.jobs_archive
	WHERE queue = $1 AND finished_at >= to_timestamp($2::bigint * 60) AND finished_at < to_timestamp($3::bigint * 60)
		AND started_at IS NOT NULL
) a, LATERAL (SELECT
	CASE WHEN w < 1 THEN 0 ELSE least(floor(ln(w) / ln(1.15))::int + 1, 199) END AS wb,
	CASE WHEN r < 1 THEN 0 ELSE least(floor(ln(r) / ln(1.15))::int + 1, 199) END AS rb) b
GROUP BY GROUPING SETS ((m, kind, wb), (m, kind, rb))`

// Histogram shape: timingGrowth is the ratio of a bucket's bounds (a percentile read from
// the histogram is within about 7% of the exact one), timingBuckets their number (the
// last starts at about 12 years).
const (
	timingGrowth  = 1.15
	timingBuckets = 200
)

// Timing spans and bounds.
const (
	// TimingDayMinutes is the longest span the queue page shows, in minutes.
	TimingDayMinutes = 24 * 60
	// maxTimingQueues bounds the queues whose minutes are kept: reading another drops the
	// one read least recently. A queue of a few kinds keeps a few MB (a cell per minute,
	// kind, measure and bucket in use: about 150,000 for 5 kinds over a day).
	maxTimingQueues = 8
	// MaxTimingKinds bounds the kinds a summary lists (the busiest first); the totals
	// count every kind.
	MaxTimingKinds = 50
	// maxKeptKinds bounds the kinds kept per queue: the minutes of further kinds are kept
	// under OtherKinds, so a queue whose jobs each have a kind of their own cannot fill
	// the memory.
	maxKeptKinds = MaxTimingKinds
	// OtherKinds is the kind the page shows for the kinds past maxKeptKinds.
	OtherKinds = "(other kinds)"
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

// Times are the wait and run histograms of a set of jobs.
type Times struct {
	Wait, Run Hist
}

// KindTimes are the times of one kind.
type KindTimes struct {
	Kind string
	Times
}

// timingCell is one row of timingSQL.
type timingCell struct {
	kind   string
	wait   bool
	bucket int
	n      int64
	max    float64
}

// queueMinutes are the kept minutes of one queue.
type queueMinutes struct {
	lock    chan struct{}          // held by the read refreshing it; its wait respects the request's context
	minutes map[int64][]timingCell // minutes before through, from its first on
	kinds   map[string]bool        // the kinds kept by name, at most maxKeptKinds
	through int64                  // the current minute at the last read; 0 before any
	from    int64                  // the oldest minute held completely (with through)
	used    int64                  // the read count at its last read, for eviction (Timing.mu)
}

// Timing reads and keeps the per-minute histograms of the queues the queue page shows.
// A read holds its queue's lock, so concurrent pages of one queue wait for one query and
// share it, and a long first read of one queue does not hold up the pages of another.
type Timing struct {
	pool           *pgxpool.Pool
	nowMinute, sql string

	mu     sync.Mutex // guards queues and reads
	queues map[string]*queueMinutes
	reads  int64
}

func newTiming(pool *pgxpool.Pool, x func(string) string) *Timing {
	return &Timing{pool: pool, nowMinute: nowMinuteSQL, sql: x(timingSQL), queues: map[string]*queueMinutes{}}
}

// queueOf returns queue's kept minutes (new ones when none are kept), marked as read
// now, dropping the queue read least recently past maxTimingQueues. A dropped queue's
// minutes stay with a read still refreshing them, then go.
func (t *Timing) queueOf(queue string) *queueMinutes {
	t.mu.Lock()
	defer t.mu.Unlock()
	qm := t.queues[queue]
	if qm == nil {
		qm = &queueMinutes{lock: make(chan struct{}, 1), minutes: map[int64][]timingCell{}, kinds: map[string]bool{}}
		t.queues[queue] = qm
	}
	t.reads++
	qm.used = t.reads
	if len(t.queues) > maxTimingQueues {
		oldest, used := "", int64(math.MaxInt64)
		for q, m := range t.queues {
			if m.used < used {
				oldest, used = q, m.used
			}
		}
		delete(t.queues, oldest)
	}
	return qm
}

// QueueTimes are a queue's minutes, ready to be summed over any span from From on.
type QueueTimes struct {
	Now     int64 // the current minute, from the Unix epoch (still filling)
	From    int64 // the oldest minute held: spans that start earlier are incomplete
	minutes map[int64][]timingCell
}

// Read returns the histograms of queue's jobs archived in the last minutes minutes (at
// most TimingDayMinutes), the current one included, and whatever older minutes of the
// last day are kept. It reads the minutes the kept ones do not cover: the newest since
// the last read, and the older ones of a longer span than read before; so the hour costs
// an hour's rows once, and the day its rows once.
func (t *Timing) Read(ctx context.Context, queue string, minutes int64) (*QueueTimes, error) {
	qm := t.queueOf(queue)
	select {
	case qm.lock <- struct{}{}:
		defer func() { <-qm.lock }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var now int64
	if err := t.pool.QueryRow(ctx, t.nowMinute).Scan(&now); err != nil {
		return nil, err
	}
	dayFirst := now - TimingDayMinutes + 1
	first := max(dayFirst, now-min(minutes, TimingDayMinutes)+1)
	// What is kept is whole from qm.from to qm.through; a read long ago, or none, keeps
	// nothing this span can use.
	if qm.through == 0 || qm.through > now || qm.through-1 < first {
		qm.minutes = map[int64][]timingCell{}
		if err := t.fill(ctx, queue, qm, first, now+1); err != nil {
			return nil, err
		}
		qm.from, qm.through = first, now
	} else {
		for m := range qm.minutes {
			if m < dayFirst {
				delete(qm.minutes, m)
			}
		}
		qm.from = max(qm.from, dayFirst)
		// The newest minutes: as Throughput, the minute current at the last read was still
		// filling, and a transaction that began in the minute before may have committed
		// since. Then the older minutes a longer span needs.
		if err := t.fill(ctx, queue, qm, qm.through-1, now+1); err != nil {
			return nil, err
		}
		qm.through = now
		if first < qm.from {
			if err := t.fill(ctx, queue, qm, first, qm.from); err != nil {
				return nil, err
			}
			qm.from = first
		}
	}
	out := &QueueTimes{Now: now, From: qm.from, minutes: make(map[int64][]timingCell, len(qm.minutes))}
	for m, cells := range qm.minutes {
		out.minutes[m] = cells // cells are never changed in place: a read replaces them
	}
	return out, nil
}

// fill reads the minutes [from, to) of queue into qm, replacing what it held of them.
func (t *Timing) fill(ctx context.Context, queue string, qm *queueMinutes, from, to int64) error {
	if from >= to {
		return nil
	}
	fresh, err := t.read(ctx, queue, from, to, qm.kinds)
	if err != nil {
		return err
	}
	for m := from; m < to; m++ {
		delete(qm.minutes, m)
	}
	for m, cells := range fresh {
		qm.minutes[m] = cells
	}
	return nil
}

// read runs timingSQL for queue's minutes [from, to). A kind not in kinds is added to it
// while it has room; past that, its cells are merged into OtherKinds.
func (t *Timing) read(ctx context.Context, queue string, from, to int64, kinds map[string]bool) (map[int64][]timingCell, error) {
	rows, err := t.pool.Query(ctx, t.sql, queue, from, to)
	if err != nil {
		return nil, err
	}
	fresh := map[int64][]timingCell{}
	var (
		minute int64
		c      timingCell
	)
	type other struct {
		minute int64
		wait   bool
		bucket int
	}
	others := map[other]*timingCell{}
	_, err = pgx.ForEachRow(rows, []any{&minute, &c.kind, &c.wait, &c.bucket, &c.n, &c.max}, func() error {
		if !kinds[c.kind] && len(kinds) < maxKeptKinds {
			kinds[c.kind] = true
		}
		if kinds[c.kind] {
			fresh[minute] = append(fresh[minute], c)
			return nil
		}
		k := other{minute, c.wait, c.bucket}
		if o := others[k]; o != nil {
			o.n, o.max = o.n+c.n, max(o.max, c.max)
			return nil
		}
		others[k] = &timingCell{kind: OtherKinds, wait: c.wait, bucket: c.bucket, n: c.n, max: c.max}
		return nil
	})
	for k, o := range others {
		fresh[k.minute] = append(fresh[k.minute], *o)
	}
	return fresh, err
}

// Span sums the minutes from minute first to last (both included): the times of every
// kind, and of each kind, the busiest first, at most MaxTimingKinds of them.
func (q *QueueTimes) Span(first, last int64) (all Times, kinds []KindTimes) {
	byKind := map[string]*Times{}
	for m := first; m <= last; m++ {
		for _, c := range q.minutes[m] {
			k := byKind[c.kind]
			if k == nil {
				k = &Times{}
				byKind[c.kind] = k
			}
			if c.wait {
				all.Wait.add(c.bucket, c.n, c.max)
				k.Wait.add(c.bucket, c.n, c.max)
			} else {
				all.Run.add(c.bucket, c.n, c.max)
				k.Run.add(c.bucket, c.n, c.max)
			}
		}
	}
	for kind, t := range byKind {
		kinds = append(kinds, KindTimes{Kind: kind, Times: *t})
	}
	slices.SortFunc(kinds, func(a, b KindTimes) int {
		return cmp.Or(cmp.Compare(b.Wait.N, a.Wait.N), cmp.Compare(a.Kind, b.Kind))
	})
	return all, kinds[:min(len(kinds), MaxTimingKinds)]
}

// Slots sums the minutes of the last n slots of size minutes each, the one holding the
// current minute last, over every kind.
func (q *QueueTimes) Slots(n int, size int64) []Times {
	out := make([]Times, n)
	start := q.Now - int64(n)*size + 1
	for m, cells := range q.minutes {
		if m < start || m > q.Now {
			continue
		}
		i := (m - start) / size
		for _, c := range cells {
			if c.wait {
				out[i].Wait.add(c.bucket, c.n, c.max)
			} else {
				out[i].Run.add(c.bucket, c.n, c.max)
			}
		}
	}
	return out
}
