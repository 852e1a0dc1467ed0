// This file holds pausing queues: Client.PauseQueue and ResumeQueue, which write the
// queues table and tell every worker on the control channel, and the worker's
// pauseWatcher, which keeps the set of paused queues its claim loops skip.

package skiplock

import (
	"context"

	"github.com/skiplock/skiplock/internal/notify"
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
