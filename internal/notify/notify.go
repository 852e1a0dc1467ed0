// Package notify holds both ends of the notifications: the sending side (the Notifier: the
// wake-up channel per schema, the throttle of Enqueue's notifications, and the control
// channel) and the receiving side (the Listener: one LISTEN session that calls back per
// queue woken and per control message).

package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/lifecycle"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// notifyOneSQL wakes the workers of one queue. The payload is the queue name.
const notifyOneSQL = `SELECT pg_notify($1, $2)`

// notifyQueuesSQL wakes the workers of several queues in one statement.
const notifyQueuesSQL = `SELECT pg_notify($1, q) FROM unnest($2::text[]) AS q`

// Execer is what sending a notification needs: a pool, or the caller's transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Notifier sends the wake-ups of one schema's channel.
type Notifier struct {
	pool     *pgxpool.Pool
	Channel  string // "<schema>_jobs"
	Control  string // "<schema>_control": ControlMsg payloads
	logger   *slog.Logger
	Throttle *Throttle
}

// JobsChannel is the channel that wakes the workers of schema's queues; the payload is
// the queue's name.
func JobsChannel(schema string) string { return schema + "_jobs" }

// New returns the notifier of schema's channels; Enqueue's notifications are throttled to
// one per queue per interval.
func New(pool *pgxpool.Pool, schema string, interval time.Duration, logger *slog.Logger) *Notifier {
	n := &Notifier{pool: pool, Channel: JobsChannel(schema), Control: schema + "_control", logger: logger}
	n.Throttle = &Throttle{interval: interval, last: map[string]time.Time{}, pending: map[string]bool{}, send: n.SendOne}
	return n
}

// Queues notifies each of queues through db. Inside a transaction the notifications are
// delivered at its commit, and not at all if it rolls back.
func (n *Notifier) Queues(ctx context.Context, db Execer, queues []string) error {
	_, err := db.Exec(ctx, notifyQueuesSQL, n.Channel, queues)
	return err
}

// SendOne sends a wake-up for queue outside any transaction.
func (n *Notifier) SendOne(queue string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := n.pool.Exec(ctx, notifyOneSQL, n.Channel, queue); err != nil {
		n.logger.Debug("skiplock: trailing notify failed", "queue", queue, "err", err)
	}
}

// Throttle lets one notification per queue through per interval; the enqueues it
// holds back are covered by a trailing notification at the end of the interval.
type Throttle struct {
	interval time.Duration
	send     func(queue string)

	mu      sync.Mutex
	last    map[string]time.Time
	pending map[string]bool
}

// TakeNow reports whether the caller should notify with its insert, and if so records it.
func (t *Throttle) TakeNow(queue string) bool {
	if t.interval < 0 {
		return true
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Sub(t.last[queue]) >= t.interval {
		t.last[queue] = now
		return true
	}
	return false
}

// Trailing schedules one notification at the end of the current interval, once.
func (t *Throttle) Trailing(queue string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending[queue] {
		return
	}
	t.pending[queue] = true
	wait := t.interval - time.Since(t.last[queue])
	time.AfterFunc(max(wait, 0), func() {
		t.mu.Lock()
		t.pending[queue] = false
		t.last[queue] = time.Now()
		t.mu.Unlock()
		t.send(queue)
	})
}

// ControlMsg is the payload of a notification on the control channel, as JSON:
// {"op":"pause","queue":"q"}, {"op":"resume","queue":"q"}, {"op":"cancel","id":123}.
// Receivers ignore ops they do not know, so senders may add new ones.
type ControlMsg struct {
	Op    string `json:"op"`
	Queue string `json:"queue,omitempty"`
	ID    int64  `json:"id,omitempty"`
}

// The control ops.
const (
	ControlPause  = "pause"
	ControlResume = "resume"
	// ControlCancel: job ID was cancelled; the worker running it cancels its handler's
	// context at once rather than at its next heartbeat.
	ControlCancel = "cancel"
	// ControlLimits: the limits of Queue changed; workers read them again.
	ControlLimits = "limits"
)

// SendControl sends m on the control channel through db. Inside a transaction it is
// delivered at its commit.
func (n *Notifier) SendControl(ctx context.Context, db Execer, m ControlMsg) error {
	_, err := db.Exec(ctx, notifyOneSQL, n.Control, m.Payload())
	return err
}

// Payload returns m as the JSON a control notification carries.
func (m ControlMsg) Payload() string {
	b, _ := json.Marshal(m) // strings and an int: cannot fail
	return string(b)
}

// Listener holds a worker's LISTEN session. LISTEN is session state, so it runs on a
// dedicated connection of its own, never a pooled one (a transaction-pooling PgBouncer
// would hand the session to someone else); WorkerConfig.ListenURL may point it straight
// at Postgres. On any error it reconnects with backoff, and after every (re)connect it
// calls onListen: notifications sent while it was away are lost, so a claim must look.
type Listener struct {
	config    *pgx.ConnConfig
	channel   string
	control   string // the control channel; empty: not listened to
	logger    *slog.Logger
	onNotify  func(queue string)   // a notification for queue arrived
	onControl func(msg ControlMsg) // a control message arrived
	onListen  func()               // the session (re)started listening
	// tried is closed once the first session listens, or has failed: Start returns then.
	tried     chan struct{}
	triedOnce sync.Once
	loop      *lifecycle.Loop
}

// ListenerConfig is what a Listener is built from.
type ListenerConfig struct {
	Pool      *pgxpool.Pool // its connection settings are used when listenURL is empty
	ListenURL string
	WorkerID  string // names the session in pg_stat_activity
	Channel   string
	Control   string // the control channel; empty: not listened to
	Logger    *slog.Logger
	OnNotify  func(queue string)
	OnControl func(msg ControlMsg) // nil when control is empty
	OnListen  func()
}

// NewListener builds a listener from lc; it connects when started.
func NewListener(lc ListenerConfig) (*Listener, error) {
	var cfg *pgx.ConnConfig
	if lc.ListenURL != "" {
		c, err := pgx.ParseConfig(lc.ListenURL)
		if err != nil {
			return nil, fmt.Errorf("skiplock: WorkerConfig.ListenURL: %w", err)
		}
		cfg = c
	} else {
		cfg = lc.Pool.Config().ConnConfig.Copy()
	}
	// Name the session so operators (and tests) can find it in pg_stat_activity.
	cfg.RuntimeParams["application_name"] = AppName(lc.WorkerID)
	l := &Listener{config: cfg, channel: lc.Channel, control: lc.Control, logger: lc.Logger,
		onNotify: lc.OnNotify, onControl: lc.OnControl, onListen: lc.OnListen, tried: make(chan struct{})}
	l.loop = lifecycle.NewLoop(l.run, lifecycle.UntilStop)
	return l, nil
}

// listenStartWait bounds how long Start waits for the first session to listen.
const listenStartWait = 5 * time.Second

// Start starts the Listener and returns once its first session listens (or has failed,
// or listenStartWait passed; the fallback poll then keeps jobs moving). The parts started
// after it read, at their start, what a notification would change (the paused queues,
// the limits set at run time): read after LISTEN, nothing changed in between is missed.
// Read before, a change committed before the session listened reached them only at its
// first (re)connect's look, while the claims already ran under the old limits.
func (l *Listener) Start(ctx context.Context) error {
	if err := l.loop.Start(ctx); err != nil {
		return err
	}
	lifecycle.WaitAtMost(ctx, l.tried, listenStartWait)
	return nil
}

// Stop ends the session and waits for it; the Listener runs until Stop, so that a
// remote cancel still reaches a handler that the shutdown waits for.
func (l *Listener) Stop() { l.loop.Stop() }

func (l *Listener) run(ctx context.Context) {
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		began := time.Now()
		err := l.session(ctx)
		l.triedOnce.Do(func() { close(l.tried) })
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > 30*time.Second {
			delay = 100 * time.Millisecond // it had been healthy: retry quickly
		}
		l.logger.Warn("skiplock: Listener connection lost; reconnecting (the fallback poll keeps jobs moving)",
			"err", err, "retry_in", delay)
		pgutil.Sleep(ctx, delay)
		delay = min(delay*2, 5*time.Second)
	}
}

// session runs one LISTEN connection until it fails or ctx ends.
func (l *Listener) session(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := pgx.ConnectConfig(cctx, l.config)
	cancel()
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		return err
	}
	if l.control != "" {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.control}.Sanitize()); err != nil {
			return err
		}
	}
	l.triedOnce.Do(func() { close(l.tried) })
	l.onListen()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Channel != l.control || l.control == "" {
			l.onNotify(n.Payload)
			continue
		}
		var msg ControlMsg
		if err := json.Unmarshal([]byte(n.Payload), &msg); err != nil {
			l.logger.Warn("skiplock: ignoring a control message that is not JSON", "payload", truncate(n.Payload, 100))
			continue
		}
		l.onControl(msg)
	}
}

// AppName is the application_name of a worker's LISTEN session.
func AppName(workerID string) string {
	name := "skiplock-listen " + workerID
	if len(name) > 63 {
		name = name[:63]
	}
	return name
}

// truncate cuts s to at most n bytes, at a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
