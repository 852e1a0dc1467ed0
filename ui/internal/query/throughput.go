package query

// This file holds the throughput of the last hour, per minute and queue, for the queues
// page's plot and sparklines, and the cache that keeps a refresh small.

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// nowMinuteSQL is the database clock's current minute, counted from the Unix epoch: the
// plot's minutes are the database's, like every time skiplock records.
const nowMinuteSQL = `SELECT floor(extract(epoch FROM now()) / 60)::bigint`

// finishedSQL counts the archived jobs by queue and minute (from the Unix epoch) of
// their finished_at, from minute $1 on. The archive's BRIN index on finished_at narrows
// the scan to the pages written since then (rows arrive in finished_at order).
const finishedSQL = `SELECT queue, floor(extract(epoch FROM finished_at) / 60)::bigint AS minute, count(*)
FROM {s}.jobs_archive
WHERE finished_at >= to_timestamp($1::bigint * 60)
GROUP BY 1, 2`

// failuresSQL counts the jobs that failed for good (dead or failed) by minute of their
// finished_at, from minute $1 on. No index holds finished_at in the jobs table: the
// scan reads every dead and failed row through jobs_stuck_idx (about 0.2 s with 120,000
// of them among a million jobs), so its result is kept for failuresMaxAge, and it does
// not run at all when the stats say no job failed in the last hour.
const failuresSQL = `SELECT floor(extract(epoch FROM finished_at) / 60)::bigint, count(*)
FROM {s}.jobs
WHERE status IN ('dead', 'failed') AND finished_at >= to_timestamp($1::bigint * 60)
GROUP BY 1`

// failuresMaxAge is how long the failure series is reused before it is read again.
const failuresMaxAge = time.Minute

// plotMinutes is the span of the throughput plot.
const plotMinutes = 60

// Hour is the jobs finished per minute over the last hour, oldest minute first; the
// last minute is the current one, still filling.
type Hour struct {
	First   time.Time // the start of the oldest minute
	Total   [plotMinutes]int64
	Fails   [plotMinutes]int64 // jobs that ended dead or failed, by minute
	ByQueue map[string]*[plotMinutes]int64
}

// Throughput reads the last hour and keeps the per-minute counts of the minutes that are
// over, so a refresh of the queues page reads only the archive rows of the last two
// minutes instead of a whole hour's (which took 0.55 s with 500,000 rows in the hour).
// A refresh holds its lock, so concurrent pages wait for one query and share it.
type Throughput struct {
	pool                         *pgxpool.Pool
	nowMinute, finished, failure string

	lock    chan struct{}              // a mutex whose wait respects the request's context
	minutes map[int64]map[string]int64 // minute → queue → jobs finished
	through int64                      // the current minute at the last refresh; 0 before any
	fails   map[int64]int64            // minute → jobs failed for good, read at failsAt
	failsAt time.Time
}

func newThroughput(pool *pgxpool.Pool, x func(string) string) *Throughput {
	return &Throughput{pool: pool, nowMinute: nowMinuteSQL, finished: x(finishedSQL), failure: x(failuresSQL),
		lock: make(chan struct{}, 1), minutes: map[int64]map[string]int64{}}
}

// Read refreshes the cache and returns the last hour. anyFailed says whether the stats
// count a job that failed for good in the last hour.
func (c *Throughput) Read(ctx context.Context, anyFailed bool) (*Hour, error) {
	select {
	case c.lock <- struct{}{}:
		defer func() { <-c.lock }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var now int64
	if err := c.pool.QueryRow(ctx, c.nowMinute).Scan(&now); err != nil {
		return nil, err
	}
	first := now - plotMinutes + 1
	if err := c.refreshFinished(ctx, first, now); err != nil {
		return nil, err
	}
	if err := c.refreshFailures(ctx, anyFailed, first); err != nil {
		return nil, err
	}
	return c.hour(first), nil
}

// refreshFinished reads the finished jobs of the minutes from first to now that the
// cache does not hold for good, and drops the minutes before first.
func (c *Throughput) refreshFinished(ctx context.Context, first, now int64) error {
	from := first
	if c.through > 0 && c.through <= now {
		// The minute current at the last refresh was still filling, and a transaction
		// that began in the minute before may have committed since: read both again.
		from = max(first, c.through-1)
	}
	rows, err := c.pool.Query(ctx, c.finished, from)
	if err != nil {
		return err
	}
	fresh := map[int64]map[string]int64{}
	var (
		queue  string
		minute int64
		n      int64
	)
	_, err = pgx.ForEachRow(rows, []any{&queue, &minute, &n}, func() error {
		if fresh[minute] == nil {
			fresh[minute] = map[string]int64{}
		}
		fresh[minute][queue] = n
		return nil
	})
	if err != nil {
		return err
	}
	for m := range c.minutes {
		if m < first || m >= from {
			delete(c.minutes, m)
		}
	}
	for m, byQueue := range fresh {
		if m >= first && m <= now {
			c.minutes[m] = byQueue
		}
	}
	c.through = now
	return nil
}

// refreshFailures reads the failures from minute first on when the kept series is older
// than failuresMaxAge, or forgets it when no job failed in the last hour.
func (c *Throughput) refreshFailures(ctx context.Context, anyFailed bool, first int64) error {
	if !anyFailed {
		c.fails, c.failsAt = nil, time.Time{}
		return nil
	}
	if time.Since(c.failsAt) <= failuresMaxAge {
		return nil
	}
	rows, err := c.pool.Query(ctx, c.failure, first)
	if err != nil {
		return err
	}
	fails := map[int64]int64{}
	var minute, n int64
	_, err = pgx.ForEachRow(rows, []any{&minute, &n}, func() error {
		fails[minute] = n
		return nil
	})
	if err != nil {
		return err
	}
	c.fails, c.failsAt = fails, time.Now()
	return nil
}

// hour lays the cached counts out as the hour from minute first.
func (c *Throughput) hour(first int64) *Hour {
	t := &Hour{First: time.Unix(first*60, 0).UTC(), ByQueue: map[string]*[plotMinutes]int64{}}
	for m, n := range c.fails {
		if i := m - first; i >= 0 && i < plotMinutes {
			t.Fails[i] = n
		}
	}
	for m, byQueue := range c.minutes {
		i := m - first
		for q, n := range byQueue {
			series := t.ByQueue[q]
			if series == nil {
				series = new([plotMinutes]int64)
				t.ByQueue[q] = series
			}
			series[i] += n
			t.Total[i] += n
		}
	}
	return t
}
