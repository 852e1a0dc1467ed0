package ui

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock"
)

// ClientControl connects the dashboard's extension points to skiplock's own job
// control: it is a [QueueSource] and [QueueController] (the queues table, pause and
// resume through [skiplock.Client.PauseQueue] and ResumeQueue) and a
// [PeriodicController] ([skiplock.Client.ListPeriodic], RunPeriodicNow,
// SetPeriodicEnabled). Set it as both [Config].Queues and [Config].Periodic:
//
//	ctl := ui.NewClientControl(client)
//	h, err := ui.New(ui.Config{Client: client, Queues: ctl, Periodic: ctl})
type ClientControl struct {
	client         *skiplock.Client
	queues         string // queueInfoSQL, rendered
	pause, unpause string // pauseNamedSQL and resumeNamedSQL, rendered
}

// NewClientControl returns the ClientControl of client.
func NewClientControl(client *skiplock.Client) *ClientControl {
	s := pgx.Identifier{client.Schema()}.Sanitize()
	return &ClientControl{client: client,
		queues:  strings.ReplaceAll(queueInfoSQL, "{s}", s),
		pause:   strings.ReplaceAll(pauseNamedSQL, "{s}", s),
		unpause: strings.ReplaceAll(resumeNamedSQL, "{s}", s)}
}

// queueInfoSQL reads the queues that have control state (paused now, or once).
const queueInfoSQL = `SELECT name, paused_at FROM {s}.queues ORDER BY name LIMIT 1000`

// QueueInfo returns the paused state of every queue that was ever paused, and the global
// concurrency limit of every queue that has one set at run time.
func (c *ClientControl) QueueInfo(ctx context.Context) (map[string]QueueInfo, error) {
	rows, err := c.client.Pool().Query(ctx, c.queues)
	if err != nil {
		return nil, err
	}
	out := map[string]QueueInfo{}
	var (
		name string
		at   *time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &at}, func() error {
		info := QueueInfo{}
		if at != nil {
			info.Paused, info.PausedAt = true, *at
		}
		out[name] = info
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The global concurrency limits set at run time (skiplock limits, SetQueueLimits);
	// limits that only the workers' QueueConfig declares are not in the database.
	limits, err := c.client.QueueLimitsSet(ctx)
	if err != nil {
		return nil, err
	}
	for q, l := range limits {
		info := out[q]
		info.Limit = l.Concurrency
		out[q] = info
	}
	return out, nil
}

// pauseNamedSQL and resumeNamedSQL pause and resume queue $1 by its exact name, for a
// name the library refuses ([skiplock.ErrInvalidQueue]) that the tables hold all the same
// (written by SQL or an older version). They write what [skiplock.Client.PauseQueue] and
// ResumeQueue write, without the notification: no worker of this version serves such a
// queue, and a worker that does reads the queues table at each poll.
const (
	pauseNamedSQL = `INSERT INTO {s}.queues AS q (name, paused_at, updated_at) VALUES ($1, now(), now())
ON CONFLICT (name) DO UPDATE SET paused_at = coalesce(q.paused_at, now()), updated_at = now()`
	resumeNamedSQL = `UPDATE {s}.queues SET paused_at = NULL, updated_at = now() WHERE name = $1 AND paused_at IS NOT NULL`
)

// PauseQueue pauses queue on every worker ([skiplock.Client.PauseQueue]); a queue whose
// name the library refuses, by its exact name, with a parameterized statement.
func (c *ClientControl) PauseQueue(ctx context.Context, queue string) error {
	err := c.client.PauseQueue(ctx, queue)
	if errors.Is(err, skiplock.ErrInvalidQueue) {
		_, err = c.client.Pool().Exec(ctx, c.pause, queue)
	}
	return err
}

// ResumeQueue resumes queue ([skiplock.Client.ResumeQueue]); a queue whose name the
// library refuses, by its exact name, as PauseQueue.
func (c *ClientControl) ResumeQueue(ctx context.Context, queue string) error {
	err := c.client.ResumeQueue(ctx, queue)
	if errors.Is(err, skiplock.ErrInvalidQueue) {
		_, err = c.client.Pool().Exec(ctx, c.unpause, queue)
	}
	return err
}

// Schedules returns the periodic schedules workers declared; an inactive one (no running
// worker declares it) or a disabled one shows without a next run.
func (c *ClientControl) Schedules(ctx context.Context) ([]Schedule, error) {
	list, err := c.client.ListPeriodic(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Schedule, 0, len(list))
	for _, p := range list {
		s := Schedule{Name: p.Name, Kind: p.Kind, Queue: p.Queue, Spec: p.Schedule, LastRun: p.LastRunAt,
			Inactive: !p.Active, Disabled: p.Disabled, Paused: !p.Active || p.Disabled, LastJobID: p.LastJobID}
		if !s.Paused {
			s.NextRun = p.NextRunAt
		}
		out = append(out, s)
	}
	return out, nil
}

// RunPeriodicNow makes the schedule's next occurrence due now
// ([skiplock.Client.RunPeriodicNow]).
func (c *ClientControl) RunPeriodicNow(ctx context.Context, name string) error {
	return c.client.RunPeriodicNow(ctx, name)
}

// SetPeriodicEnabled turns the schedule off or on ([skiplock.Client.SetPeriodicEnabled]).
func (c *ClientControl) SetPeriodicEnabled(ctx context.Context, name string, enabled bool) error {
	return c.client.SetPeriodicEnabled(ctx, name, enabled)
}
