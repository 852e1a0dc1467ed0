// This file holds the pause watcher: the paused flags of a worker's queues.

package claim

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// PausedQueuesSQL lists the paused queues. Workers run it once per poll interval (one
// statement per worker, whatever its number of queues) and Stats runs it.
const PausedQueuesSQL = `SELECT name, paused_at FROM {s}.queues WHERE paused_at IS NOT NULL`

// PausedQueues returns the paused queues and when each was paused.
func PausedQueues(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, sql string) (map[string]time.Time, error) {
	rows, err := db.Query(ctx, sql)
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

// PauseWatcher keeps a worker's queues' paused flags: from control messages as they
// arrive, and from the queues table at start and once per poll interval (the poller's
// statement reads it, see poll.go), because a notification is lost when the listener is
// down.
type PauseWatcher struct {
	db     pgutil.DB
	sql    string // pausedQueuesSQL, rendered
	queues *QueueSet
	logger *slog.Logger
	// gen counts the control messages applied. A table read that a message overtook
	// (the read started before it) is dropped: it may predate the message.
	gen atomic.Uint64
}

func NewPauseWatcher(db pgutil.DB, queues *QueueSet, logger *slog.Logger) *PauseWatcher {
	return &PauseWatcher{db: db, sql: db.Render(PausedQueuesSQL), queues: queues, logger: logger}
}

// load reads the paused queues and applies them, unless a control message came in
// meanwhile.
func (p *PauseWatcher) load(ctx context.Context) error {
	gen := p.gen.Load()
	cctx, cancel := context.WithTimeout(ctx, ClaimTimeout)
	paused, err := PausedQueues(cctx, p.db.Pool, p.sql)
	cancel()
	if err != nil {
		return p.db.WrapErr("read paused queues", err)
	}
	if p.gen.Load() != gen {
		return nil
	}
	for _, q := range p.queues.All() {
		_, ok := paused[q.name]
		p.set(q, ok)
	}
	return nil
}

// LoadQueue reads whether q, a queue added at run time, is paused, before it claims.
func (p *PauseWatcher) LoadQueue(ctx context.Context, q *QueueRunner) error {
	cctx, cancel := context.WithTimeout(ctx, ClaimTimeout)
	paused, err := PausedQueues(cctx, p.db.Pool, p.sql)
	cancel()
	if err != nil {
		return p.db.WrapErr("read paused queues", err)
	}
	_, ok := paused[q.name]
	q.paused.Store(ok)
	return nil
}

// set pauses or resumes one queue's claim loops; a resumed queue claims at once.
func (p *PauseWatcher) set(q *QueueRunner, paused bool) {
	if was := q.paused.Swap(paused); was != paused {
		p.logger.Info("skiplock: queue "+map[bool]string{true: "paused", false: "resumed"}[paused], "queue", q.name)
		if !paused {
			q.Signal()
		}
	}
}

// Control applies a pause or resume message.
func (p *PauseWatcher) Control(msg notify.ControlMsg) {
	q := p.queues.Get(msg.Queue)
	if q == nil || msg.Op != notify.ControlPause && msg.Op != notify.ControlResume {
		return
	}
	p.gen.Add(1)
	p.set(q, msg.Op == notify.ControlPause)
}

// Start reads the paused queues, so that they are known before the first claim. The
// watcher owns no goroutine: the listener and the poller bring it what changes.
func (p *PauseWatcher) Start(ctx context.Context) error { return pgutil.RetryAtStart(ctx, p.load) }

// Stop does nothing.
func (p *PauseWatcher) Stop() {}
