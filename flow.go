// This file holds flow control: the limits a queue may declare (a global concurrency
// limit, a limit per partition key, a rate limit, fair sharing across keys), their
// validation, and the operator calls that change them at run time. The claim statements
// that keep them exactly at READ COMMITTED are in internal/claim (flowclaim.go); the watcher that tells a
// worker's claim loops which path to take is there too (flowwatch.go).
//
// A queue without limits never reaches this file: its claim loops run claimSQL
// (claim.go), unchanged.

package skiplock

import (
	"context"
	"fmt"
	"maps"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/enqueue"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// QueueLimits are a queue's flow-control limits, kept by the database across every
// worker of every process that works the queue. The zero value means no limit. See
// [jobtype.QueueLimits] for its fields; declare them in [QueueConfig].Limits or set them
// at run time with [Client.SetQueueLimits].
type QueueLimits = jobtype.QueueLimits

// maxConcurrency is the largest QueueLimits.Concurrency: a queue with only a global
// limit keeps one slot row per unit of it, written by every worker that works the queue
// whenever it reads the limits (a limit of 2^31 would be two billion rows, and the
// statement would time out at every read). It is the bound QueueConfig.MaxWorkers has;
// KeyConcurrency and ConcurrencyKeys materialize nothing per unit and keep 2^31-1.
const maxConcurrency = 100_000

// checkLimits validates l and fills the default RatePeriod. [NewWorker] (declared limits)
// and [Client.SetQueueLimits] both call it, so both refuse the same limits.
func checkLimits(l QueueLimits, queue string) (QueueLimits, error) {
	switch {
	case l.Concurrency < 0:
		return l, fmt.Errorf("%w: queue %q: Concurrency %d is negative", ErrInvalidLimits, queue, l.Concurrency)
	case l.KeyConcurrency < 0:
		return l, fmt.Errorf("%w: queue %q: KeyConcurrency %d is negative", ErrInvalidLimits, queue, l.KeyConcurrency)
	case l.Rate < 0:
		return l, fmt.Errorf("%w: queue %q: Rate %d is negative", ErrInvalidLimits, queue, l.Rate)
	case l.RatePeriod < 0:
		return l, fmt.Errorf("%w: queue %q: RatePeriod %s is negative", ErrInvalidLimits, queue, l.RatePeriod)
	case l.KeyRate < 0:
		return l, fmt.Errorf("%w: queue %q: KeyRate %d is negative", ErrInvalidLimits, queue, l.KeyRate)
	case l.KeyRatePeriod < 0:
		return l, fmt.Errorf("%w: queue %q: KeyRatePeriod %s is negative", ErrInvalidLimits, queue, l.KeyRatePeriod)
	case l.Concurrency > maxConcurrency:
		return l, fmt.Errorf("%w: queue %q: Concurrency %d is above %d: the queue keeps a slot row per unit of it; use at most %d",
			ErrInvalidLimits, queue, l.Concurrency, maxConcurrency, maxConcurrency)
	case l.KeyConcurrency > math.MaxInt32 || l.Rate > math.MaxInt32 || l.KeyRate > math.MaxInt32:
		return l, fmt.Errorf("%w: queue %q: a limit is above %d", ErrInvalidLimits, queue, math.MaxInt32)
	case l.RatePeriod > 0 && (l.RatePeriod < time.Millisecond || l.RatePeriod%time.Millisecond != 0):
		return l, fmt.Errorf("%w: queue %q: RatePeriod %s is not a whole number of milliseconds: use 1ms or more, in whole milliseconds",
			ErrInvalidLimits, queue, l.RatePeriod)
	case l.KeyRatePeriod > 0 && (l.KeyRatePeriod < time.Millisecond || l.KeyRatePeriod%time.Millisecond != 0):
		return l, fmt.Errorf("%w: queue %q: KeyRatePeriod %s is not a whole number of milliseconds: use 1ms or more, in whole milliseconds",
			ErrInvalidLimits, queue, l.KeyRatePeriod)
	}
	if err := enqueue.CheckDimensionLimits(l.ConcurrencyKeys); err != nil {
		return l, fmt.Errorf("%w: queue %q: %v", ErrInvalidLimits, queue, err)
	}
	l.ConcurrencyKeys = maps.Clone(l.ConcurrencyKeys)
	if len(l.ConcurrencyKeys) == 0 {
		l.ConcurrencyKeys = nil
	}
	if l.RatePeriod == 0 {
		l.RatePeriod = time.Second
	}
	if l.Rate == 0 {
		l.RatePeriod = 0
	}
	if l.KeyRatePeriod == 0 {
		l.KeyRatePeriod = time.Second
	}
	if l.KeyRate == 0 {
		l.KeyRatePeriod = 0
	}
	return l, nil
}

// listLimitsSQL reads the limits set at run time.
const listLimitsSQL = `SELECT queue, coalesce(concurrency, 0), coalesce(key_concurrency, 0),
	coalesce(rate, 0), rate_period_ms, fair, coalesce(key_rate, 0), key_rate_period_ms, concurrency_keys
	FROM {s}.queue_limits ORDER BY queue`

// setLimitsSQL stores limits set at run time and tells every worker, at commit.
const setLimitsSQL = `WITH up AS (
	INSERT INTO {s}.queue_limits AS l (queue, concurrency, key_concurrency, rate, rate_period_ms, fair,
		key_rate, key_rate_period_ms, concurrency_keys, updated_at)
	VALUES ($1, $2, $3, $4, $5, $6, $9, $10, $11, now())
	ON CONFLICT (queue) DO UPDATE SET concurrency = excluded.concurrency,
		key_concurrency = excluded.key_concurrency, rate = excluded.rate,
		rate_period_ms = excluded.rate_period_ms, fair = excluded.fair,
		key_rate = excluded.key_rate, key_rate_period_ms = excluded.key_rate_period_ms,
		concurrency_keys = excluded.concurrency_keys, updated_at = now()
	RETURNING queue
)
SELECT pg_notify($7, $8) FROM up`

// resetLimitsSQL drops the limits set at run time and tells every worker, at commit.
const resetLimitsSQL = `WITH del AS (
	DELETE FROM {s}.queue_limits WHERE queue = $1 RETURNING queue
)
SELECT pg_notify($2, $3) FROM (SELECT 1) one`

// SetQueueLimits replaces, for every worker of every process, the limits of queue with l
// until [Client.ResetQueueLimits]: the limits declared in [QueueConfig].Limits no longer
// apply to it, even after a restart. A zero l lifts every limit. Workers hear of the
// change at once (a notification on the schema's control channel) or, if they missed it,
// within a few seconds.
//
// After a limit is set or lowered, no job of the queue starts until fewer than the new
// limit are running, counting every running job of the queue, whatever claimed it (under
// other limits, or none): see docs/flow-control.md for how, and for the moment it
// holds from (once every worker has heard of the change).
func (c *Client) SetQueueLimits(ctx context.Context, queue string, l QueueLimits) error {
	if err := validQueue(queue); err != nil {
		return err
	}
	l, err := checkLimits(l, queue)
	if err != nil {
		return err
	}
	// checkLimits let only whole milliseconds through: the table stores them exactly.
	periodMs, keyPeriodMs := int64(1000), int64(1000)
	if l.RatePeriod > 0 {
		periodMs = l.RatePeriod.Milliseconds()
	}
	if l.KeyRatePeriod > 0 {
		keyPeriodMs = l.KeyRatePeriod.Milliseconds()
	}
	var dims any // NULL: no dimension
	if l.ConcurrencyKeys != nil {
		dims = l.ConcurrencyKeys
	}
	_, err = c.pool.Exec(ctx, pgutil.Render(c.schema, setLimitsSQL), queue, nullInt(l.Concurrency),
		nullInt(l.KeyConcurrency), nullInt(l.Rate), periodMs, l.Fair,
		c.notify.Control, notify.ControlMsg{Op: notify.ControlLimits, Queue: queue}.Payload(),
		nullInt(l.KeyRate), keyPeriodMs, dims)
	if err != nil {
		return c.wrapErr("set queue limits", err)
	}
	return nil
}

// ResetQueueLimits drops the limits set with [Client.SetQueueLimits] for queue: every
// worker goes back to the limits its [QueueConfig] declares.
func (c *Client) ResetQueueLimits(ctx context.Context, queue string) error {
	if err := validQueue(queue); err != nil {
		return err
	}
	_, err := c.pool.Exec(ctx, pgutil.Render(c.schema, resetLimitsSQL), queue,
		c.notify.Control, notify.ControlMsg{Op: notify.ControlLimits, Queue: queue}.Payload())
	if err != nil {
		return c.wrapErr("reset queue limits", err)
	}
	return nil
}

// QueueLimitsSet returns the limits set at run time with [Client.SetQueueLimits], by
// queue. Queues that only have the limits their workers declare are not in it.
func (c *Client) QueueLimitsSet(ctx context.Context) (map[string]QueueLimits, error) {
	rows, err := c.pool.Query(ctx, pgutil.Render(c.schema, listLimitsSQL))
	if err != nil {
		return nil, c.wrapErr("list queue limits", err)
	}
	out := map[string]QueueLimits{}
	var (
		q           string
		l           QueueLimits
		periodMs    int64
		keyPeriodMs int64
	)
	_, err = pgx.ForEachRow(rows, []any{&q, &l.Concurrency, &l.KeyConcurrency, &l.Rate, &periodMs, &l.Fair,
		&l.KeyRate, &keyPeriodMs, &l.ConcurrencyKeys}, func() error {
		if l.Rate > 0 {
			l.RatePeriod = time.Duration(periodMs) * time.Millisecond
		} else {
			l.RatePeriod = 0
		}
		if l.KeyRate > 0 {
			l.KeyRatePeriod = time.Duration(keyPeriodMs) * time.Millisecond
		} else {
			l.KeyRatePeriod = 0
		}
		out[q] = l
		l.ConcurrencyKeys = nil // the next row's, scanned into a new map
		return nil
	})
	if err != nil {
		return nil, c.wrapErr("list queue limits", err)
	}
	return out, nil
}

// nullInt is n as a query argument, nil for zero (no limit).
func nullInt(n int) any {
	if n == 0 {
		return nil
	}
	return int32(n)
}

// The rest of this file holds pausing queues: Client.PauseQueue and ResumeQueue, which write the
// queues table and tell every worker on the control channel, and the worker's
// pauseWatcher, which keeps the set of paused queues its claim loops skip.

// pauseSQL marks queue $1 paused (keeping the time of a pause already in force) and
// notifies the control channel $2 with payload $3 in the same statement, so the
// notification goes out exactly when the pause commits.
const pauseSQL = `WITH up AS (
	INSERT INTO {s}.queues AS q (name, paused_at, updated_at) VALUES ($1, now(), now())
	ON CONFLICT (name) DO UPDATE SET paused_at = coalesce(q.paused_at, now()), updated_at = now()
	RETURNING 1
)
SELECT pg_notify($2, $3) FROM up`

// resumeSQL clears the pause of queue $1 and notifies, as pauseSQL. A data-modifying CTE
// runs whether or not a row matched, so the notification is sent either way.
const resumeSQL = `WITH up AS (
	UPDATE {s}.queues SET paused_at = NULL, updated_at = now() WHERE name = $1 AND paused_at IS NOT NULL
)
SELECT pg_notify($2, $3)`

// PauseQueue pauses queue: every worker stops claiming its jobs, within about 100ms
// through a notification on the control channel, and within one poll interval
// (WorkerConfig.PollInterval) when that notification is lost. Jobs already running
// finish, as do the claims a worker had in flight when it learnt of the pause (their
// jobs run); enqueueing into a paused queue still works. The pause is stored in the
// database, so workers started later see it, until [Client.ResumeQueue]. Pausing a
// paused queue changes nothing.
func (c *Client) PauseQueue(ctx context.Context, queue string) error {
	return c.setPaused(ctx, queue, true)
}

// ResumeQueue ends a pause of queue: workers claim from it again at once (or within a
// poll interval without the notification). Resuming a queue that is not paused changes
// nothing.
func (c *Client) ResumeQueue(ctx context.Context, queue string) error {
	return c.setPaused(ctx, queue, false)
}

func (c *Client) setPaused(ctx context.Context, queue string, paused bool) error {
	if err := validQueue(queue); err != nil {
		return err
	}
	q, op, name := c.db.Render(pauseSQL), notify.ControlPause, "pause queue"
	if !paused {
		q, op, name = c.db.Render(resumeSQL), notify.ControlResume, "resume queue"
	}
	if _, err := c.pool.Exec(ctx, q, queue, c.notify.Control, notify.ControlMsg{Op: op, Queue: queue}.Payload()); err != nil {
		return c.wrapErr(name, err)
	}
	return nil
}
