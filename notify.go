// This file holds the worker's side of the notifications, built over internal/notify:
// the LISTEN session that wakes a queue's claim loops when a job is enqueued, and that
// carries the control messages (pause, resume, remote cancel, changed limits). The
// sending side is the client's notifier, throttled by [Config].NotifyInterval.

package skiplock

import (
	"log/slog"

	"github.com/skiplock/skiplock/internal/claim"
	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/ownership"
)

// newWorkerListener builds a worker's LISTEN session: a notification wakes its queue's claim loops;
// a control message goes to the pause watcher, the held jobs (a remote cancel) and the
// flow watcher; after every (re)connect, the poller and the flow watcher look at once,
// since what was sent while the listener was away is lost.
func newWorkerListener(c *Client, cfg WorkerConfig, logger *slog.Logger, queues *claim.QueueSet, pause *claim.PauseWatcher,
	lease *ownership.Lease, flow *claim.FlowWatch, poller *claim.Poller) (*notify.Listener, error) {
	return notify.NewListener(notify.ListenerConfig{
		Pool: c.pool, ListenURL: cfg.ListenURL, WorkerID: cfg.ID,
		Channel: c.notify.Channel, Control: c.notify.Control, Logger: logger,
		OnNotify: func(queue string) {
			if q := queues.Get(queue); q != nil {
				q.Signal()
			}
		},
		OnControl: func(msg notify.ControlMsg) {
			pause.Control(msg)
			lease.Control(msg)
			flow.Notify(msg)
		},
		OnListen: func() {
			poller.Kick() // the poll reads the paused queues too
			flow.Kick()   // limits changed while the listener was away
		},
	})
}
