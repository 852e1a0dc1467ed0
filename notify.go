package skiplock

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// listener holds the worker's LISTEN session. LISTEN is session state, so it runs on a
// dedicated connection of its own, never a pooled one (a transaction-pooling PgBouncer
// would hand the session to someone else); WorkerConfig.ListenURL may point it straight
// at Postgres. On any error it reconnects with backoff, and after every (re)connect it
// wakes all queues: notifications sent while it was away are lost, so a claim must look.
type listener struct {
	config   *pgx.ConnConfig
	channel  string
	logger   *slog.Logger
	onNotify func(queue string)
	onListen func()
}

func (w *Worker) newListener() (*listener, error) {
	var cfg *pgx.ConnConfig
	if w.cfg.ListenURL != "" {
		c, err := pgx.ParseConfig(w.cfg.ListenURL)
		if err != nil {
			return nil, fmt.Errorf("skiplock: WorkerConfig.ListenURL: %w", err)
		}
		cfg = c
	} else {
		cfg = w.client.pool.Config().ConnConfig.Copy()
	}
	// Name the session so operators (and tests) can find it in pg_stat_activity.
	cfg.RuntimeParams["application_name"] = listenerAppName(w.id)
	return &listener{
		config:  cfg,
		channel: w.client.channel,
		logger:  w.logger,
		onNotify: func(queue string) {
			if q, ok := w.queues[queue]; ok {
				q.signal()
			}
		},
		onListen: func() {
			for _, q := range w.queues {
				q.signal()
			}
		},
	}, nil
}

func (l *listener) run(ctx context.Context) {
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		began := time.Now()
		err := l.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > 30*time.Second {
			delay = 100 * time.Millisecond // it had been healthy: retry quickly
		}
		l.logger.Warn("skiplock: listener connection lost; reconnecting (the fallback poll keeps jobs moving)",
			"err", err, "retry_in", delay)
		sleepCtx(ctx, delay)
		delay = min(delay*2, 5*time.Second)
	}
}

// session runs one LISTEN connection until it fails or ctx ends.
func (l *listener) session(ctx context.Context) error {
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
	l.onListen()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		l.onNotify(n.Payload)
	}
}

// listenerAppName is the application_name of a worker's LISTEN session.
func listenerAppName(workerID string) string {
	name := "skiplock-listen " + workerID
	if len(name) > 63 {
		name = name[:63]
	}
	return name
}
