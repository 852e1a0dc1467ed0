package ui

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock"
)

// ClientControl connects the dashboard's extension points to skiplock's own job
// control: it is a [QueueSource] and [QueueController] (the queues table, pause and
// resume through [skiplock.Client.PauseQueue] and ResumeQueue) and a [PeriodicSource]
// ([skiplock.Client.ListPeriodic]). Set it as both [Config].Queues and [Config].Periodic:
//
//	ctl := ui.NewClientControl(client)
//	h, err := ui.New(ui.Config{Client: client, Queues: ctl, Periodic: ctl})
type ClientControl struct {
	client *skiplock.Client
	queues string // queueInfoSQL, rendered
}

// NewClientControl returns the ClientControl of client.
func NewClientControl(client *skiplock.Client) *ClientControl {
	return &ClientControl{client: client,
		queues: strings.ReplaceAll(queueInfoSQL, "{s}", pgx.Identifier{client.Schema()}.Sanitize())}
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

// PauseQueue pauses queue on every worker ([skiplock.Client.PauseQueue]).
func (c *ClientControl) PauseQueue(ctx context.Context, queue string) error {
	return c.client.PauseQueue(ctx, queue)
}

// ResumeQueue resumes queue ([skiplock.Client.ResumeQueue]).
func (c *ClientControl) ResumeQueue(ctx context.Context, queue string) error {
	return c.client.ResumeQueue(ctx, queue)
}

// Schedules returns the periodic schedules workers declared; an inactive one (no running
// worker declares it) shows as paused, without a next run.
func (c *ClientControl) Schedules(ctx context.Context) ([]Schedule, error) {
	list, err := c.client.ListPeriodic(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Schedule, 0, len(list))
	for _, p := range list {
		s := Schedule{Name: p.Name, Kind: p.Kind, Queue: p.Queue, Spec: p.Schedule, LastRun: p.LastRunAt, Paused: !p.Active}
		if p.Active {
			s.NextRun = p.NextRunAt
		}
		out = append(out, s)
	}
	return out, nil
}
