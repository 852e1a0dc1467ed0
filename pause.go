// This file holds pausing queues: Client.PauseQueue and ResumeQueue, which write the
// queues table and tell every worker on the control channel, and the worker's
// pauseWatcher, which keeps the set of paused queues its claim loops skip.

package skiplock

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/pgutil"
)

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

// pausedQueuesSQL lists the paused queues. Workers run it once per poll interval (one
// statement per worker, whatever its number of queues) and Stats runs it.
const pausedQueuesSQL = `SELECT name, paused_at FROM {s}.queues WHERE paused_at IS NOT NULL`

// PauseQueue pauses queue: every worker stops claiming its jobs, within about 100ms
// through a notification on the control channel, and within one poll interval
// (WorkerConfig.PollInterval) when that notification is lost. Jobs already running
// finish; enqueueing into a paused queue still works. The pause is stored in the
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
	q, op, name := c.admin.pause, notify.ControlPause, "pause queue"
	if !paused {
		q, op, name = c.admin.resume, notify.ControlResume, "resume queue"
	}
	if _, err := c.pool.Exec(ctx, q, queue, c.notify.Control, notify.ControlMsg{Op: op, Queue: queue}.Payload()); err != nil {
		return c.wrapErr(name, err)
	}
	return nil
}

// pausedQueues returns the paused queues and when each was paused.
func (c *Client) pausedQueues(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) (map[string]time.Time, error) {
	rows, err := db.Query(ctx, c.admin.paused)
	if err != nil {
		return nil, err
	}
	out := map[string]time.Time{}
	var (
		name string
		at   time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &at}, func() error {
		out[name] = at
		return nil
	})
	return out, err
}

// pauseWatcher keeps a worker's queues' paused flags: from control messages as they
// arrive, and from the queues table at start and once per poll interval (the poller's
// statement reads it, see poll.go), because a notification is lost when the listener is
// down.
type pauseWatcher struct {
	client *Client
	pool   *pgxpool.Pool
	queues *queueSet
	logger *slog.Logger
	// gen counts the control messages applied. A table read that a message overtook
	// (the read started before it) is dropped: it may predate the message.
	gen atomic.Uint64
}

func newPauseWatcher(c *Client, queues *queueSet, logger *slog.Logger) *pauseWatcher {
	return &pauseWatcher{client: c, pool: c.pool, queues: queues, logger: logger}
}

// load reads the paused queues and applies them, unless a control message came in
// meanwhile.
func (p *pauseWatcher) load(ctx context.Context) error {
	gen := p.gen.Load()
	cctx, cancel := context.WithTimeout(ctx, claimTimeout)
	paused, err := p.client.pausedQueues(cctx, p.pool)
	cancel()
	if err != nil {
		return p.client.wrapErr("read paused queues", err)
	}
	if p.gen.Load() != gen {
		return nil
	}
	for _, q := range p.queues.all() {
		_, ok := paused[q.name]
		p.set(q, ok)
	}
	return nil
}

// loadQueue reads whether q, a queue added at run time, is paused, before it claims.
func (p *pauseWatcher) loadQueue(ctx context.Context, q *queueRunner) error {
	cctx, cancel := context.WithTimeout(ctx, claimTimeout)
	paused, err := p.client.pausedQueues(cctx, p.pool)
	cancel()
	if err != nil {
		return p.client.wrapErr("read paused queues", err)
	}
	_, ok := paused[q.name]
	q.paused.Store(ok)
	return nil
}

// set pauses or resumes one queue's claim loops; a resumed queue claims at once.
func (p *pauseWatcher) set(q *queueRunner, paused bool) {
	if was := q.paused.Swap(paused); was != paused {
		p.logger.Info("skiplock: queue "+map[bool]string{true: "paused", false: "resumed"}[paused], "queue", q.name)
		if !paused {
			q.signal()
		}
	}
}

// control applies a pause or resume message.
func (p *pauseWatcher) control(msg notify.ControlMsg) {
	q := p.queues.get(msg.Queue)
	if q == nil || msg.Op != notify.ControlPause && msg.Op != notify.ControlResume {
		return
	}
	p.gen.Add(1)
	p.set(q, msg.Op == notify.ControlPause)
}

// Start reads the paused queues, so that they are known before the first claim. The
// watcher owns no goroutine: the listener and the poller bring it what changes.
func (p *pauseWatcher) Start(ctx context.Context) error { return pgutil.RetryAtStart(ctx, p.load) }

// Stop does nothing.
func (p *pauseWatcher) Stop() {}
