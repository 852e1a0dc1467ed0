// This file holds the worker's side of the notifications, built over internal/notify:
// the LISTEN session that wakes a queue's claim loops when a job is enqueued, and that
// carries the control messages (pause, resume, remote cancel, changed limits). The
// sending side is the client's notifier, throttled by [Config].NotifyInterval.

package skiplock

import "github.com/skiplock/skiplock/internal/notify"

// buildListener builds the LISTEN session: a notification wakes its queue's claim loops;
// a control message goes to the pause watcher, the held jobs (a remote cancel) and the
// flow watcher; after every (re)connect, the poller and the flow watcher look at once,
// since what was sent while the listener was away is lost.
func (w *Worker) buildListener() error {
	// The callbacks hold the parts they call, not the Worker.
	queues, pause, lease, flow, poller := w.queues, w.pause, w.lease, w.flow, w.poller
	l, err := notify.NewListener(notify.ListenerConfig{
		Pool: w.client.pool, ListenURL: w.cfg.ListenURL, WorkerID: w.id,
		Channel: w.client.notify.Channel, Control: w.client.notify.Control, Logger: w.logger,
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
	w.listener = l
	return err
}
