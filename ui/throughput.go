package ui

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
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

// throughput is the jobs finished per minute over the last hour, oldest minute first;
// the last minute is the current one, still filling.
type throughput struct {
	First   time.Time // the start of the oldest minute
	Total   [plotMinutes]int64
	Fails   [plotMinutes]int64 // jobs that ended dead or failed, by minute
	ByQueue map[string]*[plotMinutes]int64
}

// finishedCache keeps the per-minute counts of the minutes that are over, so a refresh
// of the queues page reads only the archive rows of the last two minutes instead of a
// whole hour's (which took 0.55 s with 500,000 rows in the hour). It is one per Handler;
// a refresh holds its lock, so concurrent pages wait for one query and share it.
type finishedCache struct {
	lock    chan struct{}              // a mutex whose wait respects the request's context
	minutes map[int64]map[string]int64 // minute → queue → jobs finished
	through int64                      // the current minute at the last refresh; 0 before any
	fails   map[int64]int64            // minute → jobs failed for good, read at failsAt
	failsAt time.Time
}

func newFinishedCache() *finishedCache {
	return &finishedCache{lock: make(chan struct{}, 1), minutes: map[int64]map[string]int64{}}
}

// throughput refreshes the cache and returns the last hour. anyFailed says whether the
// stats count a job that failed for good in the last hour.
func (h *Handler) throughput(ctx context.Context, anyFailed bool) (*throughput, error) {
	c := h.finished
	select {
	case c.lock <- struct{}{}:
		defer func() { <-c.lock }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var now int64
	if err := h.pool.QueryRow(ctx, h.sql.nowMinute).Scan(&now); err != nil {
		return nil, err
	}
	first := now - plotMinutes + 1
	from := first
	if c.through > 0 && c.through <= now {
		// The minute current at the last refresh was still filling, and a transaction
		// that began in the minute before may have committed since: read both again.
		from = max(first, c.through-1)
	}
	rows, err := h.pool.Query(ctx, h.sql.finished, from)
	if err != nil {
		return nil, err
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
		return nil, err
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

	if !anyFailed {
		c.fails, c.failsAt = nil, time.Time{}
	} else if time.Since(c.failsAt) > failuresMaxAge {
		rows, err := h.pool.Query(ctx, h.sql.failures, first)
		if err != nil {
			return nil, err
		}
		fails := map[int64]int64{}
		_, err = pgx.ForEachRow(rows, []any{&minute, &n}, func() error {
			fails[minute] = n
			return nil
		})
		if err != nil {
			return nil, err
		}
		c.fails, c.failsAt = fails, time.Now()
	}

	t := &throughput{First: time.Unix(first*60, 0).UTC(), ByQueue: map[string]*[plotMinutes]int64{}}
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
	return t, nil
}
