// This file holds the flow watcher (flowWatch): it keeps each of a worker's queues on
// the claim path its limits call for (the plain claim of claim.go, or a limited one of
// flowclaim.go), reading the limits set at run time at start, on every control message
// that says they changed, and once a minute regardless. The limits themselves and the
// calls that set them are in the root's flow.go.

package claim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/lifecycle"
	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// flowRefreshInterval is how often a worker reads the limits set at run time regardless.
// The control notification tells it of a change at once, and it reads them again after
// every reconnect of its listener (a change told meanwhile was missed): this is only a
// last resort, kept rare so that an idle worker costs the database next to nothing.
const flowRefreshInterval = time.Minute

// FlowWatch keeps a worker's queues on the right claim path: the limited one with the
// effective limits (set at run time, else declared), or the plain one.
type FlowWatch struct {
	db        pgutil.DB
	limitsSet func(ctx context.Context) (map[string]jobtype.QueueLimits, error) // the limits set at run time
	claimer   *flowClaimer
	queues    *QueueSet
	logger    *slog.Logger
	// mu is held by each refresh and by the queues' changes at run time (add, remove):
	// one at a time puts queues on their paths, from declared.
	mu       sync.Mutex
	declared map[string]jobtype.QueueLimits
	wake     chan struct{} // a control message said limits changed; capacity 1
	loop     *lifecycle.Loop
}

func NewFlowWatch(db pgutil.DB, limitsSet func(ctx context.Context) (map[string]jobtype.QueueLimits, error), queues *QueueSet, declared map[string]jobtype.QueueLimits, visibility time.Duration, logger *slog.Logger) *FlowWatch {
	fw := &FlowWatch{db: db, limitsSet: limitsSet, claimer: NewFlowClaimer(db, visibility), declared: declared, queues: queues,
		logger: logger, wake: make(chan struct{}, 1)}
	for _, q := range queues.All() {
		fw.apply(q.name, q, declared[q.name])
	}
	return fw
}

// Declare sets the declared limits of q, a queue added before Run.
func (fw *FlowWatch) Declare(name string, q *QueueRunner, l jobtype.QueueLimits) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	fw.declared[name] = l
	fw.apply(name, q, l)
}

// Add puts q, a queue added while the worker runs, on the path of its limits (set at
// run time, else declared, l), before it claims.
func (fw *FlowWatch) Add(ctx context.Context, q *QueueRunner, l jobtype.QueueLimits) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	fw.mu.Lock()
	defer fw.mu.Unlock()
	set, err := fw.limitsSet(ctx)
	if err != nil {
		return err
	}
	if err := fw.applyQueue(ctx, q, set, l); err != nil {
		return err
	}
	fw.declared[q.name] = l
	return nil
}

// Remove forgets the declared limits of a removed queue.
func (fw *FlowWatch) Remove(name string) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	delete(fw.declared, name)
}

// apply puts queue q on the path its limits l call for.
func (fw *FlowWatch) apply(name string, q *QueueRunner, l jobtype.QueueLimits) {
	if none(l) {
		if q.flow.Swap(nil) != nil {
			q.claimsDrained()
			fw.logger.Info("skiplock: queue has no limits now", "queue", name)
		}
		return
	}
	// Only a holder of fw.mu (and the constructor, before Run) swaps q.flow.
	prev := q.flow.Load()
	adopted := false
	if prev != nil {
		prev.mu.Lock()
		adopted = prev.adopted
		prev.mu.Unlock()
	}
	old := q.flow.Swap(&flowQueue{claimer: fw.claimer, limits: l, adopted: adopted})
	if old == nil || !sameLimits(old.limits, l) {
		// The new limits are in force once the claims that read the old ones have ended.
		q.claimsDrained()
		fw.logger.Info("skiplock: queue limits", "queue", name, "concurrency", l.Concurrency,
			"key_concurrency", l.KeyConcurrency, "rate", l.Rate, "rate_period", l.RatePeriod,
			"key_rate", l.KeyRate, "key_rate_period", l.KeyRatePeriod, "fair", l.Fair,
			"concurrency_keys", l.ConcurrencyKeys)
	}
	q.Signal()
}

// refreshTimeout bounds the read of the limits set at run time, and each queue's
// application of its limits.
const refreshTimeout = 10 * time.Second

// refresh reads the limits set at run time and applies them to every queue. A queue
// whose limits fail to apply (its slot rows cannot be written) keeps its current path
// and is logged; the others are applied all the same, each under a timeout of its own,
// so that one queue cannot hold back the limits of the rest. The error joins the
// queues' failures: the worker's start, which must not claim a queue without its
// limits, retries and fails on it; the watch loop only logs it.
func (fw *FlowWatch) refresh(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, refreshTimeout)
	set, err := fw.limitsSet(rctx)
	cancel()
	if err != nil {
		return fmt.Errorf("reading queue limits: %w", err)
	}
	fw.mu.Lock()
	defer fw.mu.Unlock()
	var errs []error
	for _, q := range fw.queues.All() {
		qctx, cancel := context.WithTimeout(ctx, refreshTimeout)
		err := fw.applyQueue(qctx, q, set, fw.declared[q.name])
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fw.logger.Warn("skiplock: applying queue limits failed; the queue keeps its current ones", "queue", q.name, "err", err)
			errs = append(errs, fmt.Errorf("queue %q: %w", q.name, err))
			continue
		}
		fw.pruneKeyBuckets(ctx, q.name, set, fw.declared[q.name])
	}
	return errors.Join(errs...)
}

// pruneKeyBuckets deletes the per-key buckets of queue that have refilled, when its
// limits have a KeyRate (pruneKeyFlowSQL): the queue keeps a row only per key started
// within its last KeyRatePeriod, not per key ever started. A failure is only logged:
// the rows wait for the next refresh.
func (fw *FlowWatch) pruneKeyBuckets(ctx context.Context, queue string, set map[string]jobtype.QueueLimits, declared jobtype.QueueLimits) {
	l, ok := set[queue]
	if !ok {
		l = declared
	}
	if l.KeyRate <= 0 {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, refreshTimeout)
	defer cancel()
	if _, err := fw.db.Pool.Exec(pctx, fw.claimer.pruneKeys, queue, l.KeyRatePeriod.Seconds()); err != nil && ctx.Err() == nil {
		fw.logger.Warn("skiplock: deleting refilled per-key rate buckets failed; retrying at the next refresh", "queue", queue, "err", err)
	}
}

// applyQueue puts q on the path of its limits set at run time (set), else declared.
// fw.mu is held.
func (fw *FlowWatch) applyQueue(ctx context.Context, q *QueueRunner, set map[string]jobtype.QueueLimits, declared jobtype.QueueLimits) error {
	l, ok := set[q.name]
	if !ok {
		l = declared
	}
	if slotted(l) {
		// Before the queue claims through them: a missing slot is a slot not taken.
		if _, err := fw.db.Pool.Exec(ctx, fw.claimer.ensure, q.name, int32(l.Concurrency)); err != nil {
			return fw.db.WrapErr("creating queue slots", err)
		}
	}
	fw.apply(q.name, q, l)
	return nil
}

// SlotsFreed is told that some of this worker's finished jobs are recorded (successes
// or failures), so their slots are free in the database: a limited queue whose last
// claim was cut by its limit claims again now. (The runner's own wake-up, when a handler
// returns, comes before the job's outcome is recorded, while it still counts as running.)
func (fw *FlowWatch) SlotsFreed(n int) {
	for _, q := range fw.queues.All() {
		if q.flow.Load() != nil && (q.more.Load() || q.slotWait.Load()) {
			q.slotsFreed(n)
		}
	}
}

// Kick makes run refresh at once.
func (fw *FlowWatch) Kick() {
	select {
	case fw.wake <- struct{}{}:
	default:
	}
}

// Notify is the control callback: a queue's limits changed.
func (fw *FlowWatch) Notify(msg notify.ControlMsg) {
	if msg.Op != notify.ControlLimits {
		return
	}
	if fw.queues.Get(msg.Queue) == nil {
		return
	}
	select {
	case fw.wake <- struct{}{}:
	default:
	}
}

// run refreshes on every control message and every flowRefreshInterval until ctx ends.
func (fw *FlowWatch) run(ctx context.Context) {
	t := time.NewTicker(flowRefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-fw.wake:
		}
		if err := fw.refresh(ctx); err != nil && ctx.Err() == nil {
			fw.logger.Warn("skiplock: refreshing queue limits failed; the queues concerned keep their current ones", "err", err)
		}
	}
}

// Start reads the limits set at run time, so that they apply from the first claim, then
// watches them until Stop.
func (fw *FlowWatch) Start(ctx context.Context) error {
	if err := pgutil.RetryAtStart(ctx, fw.refresh); err != nil {
		return fw.db.WrapErr("worker start: queue limits", err)
	}
	fw.loop = lifecycle.NewLoop(fw.run, lifecycle.UntilStop)
	return fw.loop.Start(ctx)
}

// Stop stops watching.
func (fw *FlowWatch) Stop() { fw.loop.Stop() }
