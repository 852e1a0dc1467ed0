// This file holds flow control: the limits a queue may declare (a global concurrency
// limit, a limit per partition key, a rate limit, fair sharing across keys), the claim
// statements that keep them exactly at READ COMMITTED, the operator calls that change them
// at run time, and the watcher that tells a worker's claim loops which path to take.
//
// A queue without limits never reaches this file: its claim loops run claimSQL
// (claim.go), unchanged.

package skiplock

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// QueueLimits are a queue's flow-control limits. They hold across every worker of every
// process that works the queue: they are kept by the database, not by one process. The
// zero value means no limit at all: the queue takes the plain claim path, whose cost
// flow control does not change.
//
// Limits are declared per queue in [QueueConfig].Limits, and may be replaced at run time
// with [Client.SetQueueLimits] (every worker picks the change up at once through the
// control channel, and after a reconnect of its listener, or within a minute otherwise).
//
// A queue whose only limit is Concurrency claims through slot rows, side by side with
// other claims; any other limit makes the queue's claims take turns under a lock (see
// the README, "Flow control", for both and their costs).
type QueueLimits struct {
	// Concurrency is the most jobs of the queue running at once, across all workers.
	// Zero means no global limit; negative is an error. [QueueConfig].MaxWorkers still
	// bounds each worker.
	Concurrency int
	// KeyConcurrency is the most jobs running at once per partition key
	// ([EnqueueOptions].PartitionKey), across all workers. Jobs without a key share one
	// key of their own. Zero means no per-key limit; negative is an error.
	KeyConcurrency int
	// Rate is the most job starts per RatePeriod, across all workers: a token bucket in
	// the database that holds at most Rate tokens and refills at Rate per RatePeriod;
	// every start takes one token. Starts are counted, not completions: a retry is a new
	// start. Zero means no rate limit; negative is an error.
	Rate int
	// RatePeriod is the window of Rate. Defaults to one second when Rate is set; zero
	// means the default, negative is an error.
	RatePeriod time.Duration
	// Fair hands the queue's jobs out round-robin across partition keys: each claim takes
	// an equal share from every key that has due jobs (and free per-key slots), so a key
	// with a huge backlog cannot starve a key with a few jobs. Within a key, jobs go in
	// priority and run_at order; across keys, priority does not apply.
	Fair bool
}

// none reports whether l limits nothing.
func (l QueueLimits) none() bool {
	return l.Concurrency == 0 && l.KeyConcurrency == 0 && l.Rate == 0 && !l.Fair
}

// keyed reports whether the claim must walk partition keys.
func (l QueueLimits) keyed() bool { return l.KeyConcurrency > 0 || l.Fair }

// check validates l and fills the default RatePeriod.
func (l QueueLimits) check(queue string) (QueueLimits, error) {
	switch {
	case l.Concurrency < 0:
		return l, fmt.Errorf("%w: queue %q: Concurrency %d is negative", ErrInvalidLimits, queue, l.Concurrency)
	case l.KeyConcurrency < 0:
		return l, fmt.Errorf("%w: queue %q: KeyConcurrency %d is negative", ErrInvalidLimits, queue, l.KeyConcurrency)
	case l.Rate < 0:
		return l, fmt.Errorf("%w: queue %q: Rate %d is negative", ErrInvalidLimits, queue, l.Rate)
	case l.RatePeriod < 0:
		return l, fmt.Errorf("%w: queue %q: RatePeriod %s is negative", ErrInvalidLimits, queue, l.RatePeriod)
	case l.Concurrency > math.MaxInt32 || l.KeyConcurrency > math.MaxInt32 || l.Rate > math.MaxInt32:
		return l, fmt.Errorf("%w: queue %q: a limit is above %d", ErrInvalidLimits, queue, math.MaxInt32)
	case l.RatePeriod > 0 && l.RatePeriod < time.Millisecond:
		return l, fmt.Errorf("%w: queue %q: RatePeriod %s is under 1ms", ErrInvalidLimits, queue, l.RatePeriod)
	}
	if l.RatePeriod == 0 {
		l.RatePeriod = time.Second
	}
	if l.Rate == 0 {
		l.RatePeriod = 0
	}
	return l, nil
}

// flowQueue is the limited claim path of one queue, as its claim loops see it.
type flowQueue struct {
	claimer *flowClaimer
	limits  QueueLimits

	mu      sync.Mutex
	adopted bool // guarded by mu: adopt has run for this path
}

// adoptRunningSQL marks the running jobs of queue $1 that no limited claim took (the
// plain claim took them, before the queue had limits) as limited, so that the limited
// claims count them: a limit set on a busy queue holds from the start, not once the jobs
// running without it have ended. It reads the running jobs of every queue (through
// jobs_running_idx), once per worker and queue when the queue gets limits.
const adoptRunningSQL = `UPDATE {s}.jobs SET limited = true
WHERE queue = $1 AND status = 'running' AND limited IS NOT TRUE`

// adopt runs adoptRunningSQL for q before the first limited claim of this path, once the
// plain claims of this worker that were in flight when the path changed have ended (their
// jobs must be marked too). The limited claims of the queue wait for it. It is a no-op on
// a path that replaced another limited one: the running jobs were adopted then, and since
// only limited claims took jobs.
func (f *flowQueue) adopt(ctx context.Context, q *queueRunner) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.adopted {
		return nil
	}
	// The plain claims hold plainMu (read) from the moment they find no limited path to
	// the end of their statement; q.flow was set before this path could be claimed with.
	q.plainMu.Lock()
	q.plainMu.Unlock() //nolint:staticcheck // empty on purpose: a barrier
	// Under the queue's claim lock: the limited claims in flight (of other workers) end
	// first, and those that follow see the jobs marked.
	b := &pgx.Batch{}
	b.Queue(f.claimer.lock, f.claimer.schema+"."+q.name)
	b.Queue(f.claimer.adopt, q.name)
	if err := f.claimer.pool.SendBatch(ctx, b).Close(); err != nil {
		return f.claimer.wrapErr("claim: adopting the running jobs", err)
	}
	f.adopted = true
	return nil
}

// flowRefreshInterval is how often a worker reads the limits set at run time regardless.
// The control notification tells it of a change at once, and it reads them again after
// every reconnect of its listener (a change told meanwhile was missed): this is only a
// last resort, kept rare so that an idle worker costs the database next to nothing.
const flowRefreshInterval = time.Minute

// listLimitsSQL reads the limits set at run time.
const listLimitsSQL = `SELECT queue, coalesce(concurrency, 0), coalesce(key_concurrency, 0),
	coalesce(rate, 0), rate_period_ms, fair FROM {s}.queue_limits ORDER BY queue`

// setLimitsSQL stores limits set at run time and tells every worker, at commit.
const setLimitsSQL = `WITH up AS (
	INSERT INTO {s}.queue_limits AS l (queue, concurrency, key_concurrency, rate, rate_period_ms, fair, updated_at)
	VALUES ($1, $2, $3, $4, $5, $6, now())
	ON CONFLICT (queue) DO UPDATE SET concurrency = excluded.concurrency,
		key_concurrency = excluded.key_concurrency, rate = excluded.rate,
		rate_period_ms = excluded.rate_period_ms, fair = excluded.fair, updated_at = now()
	RETURNING queue
)
SELECT pg_notify($7, $8) FROM up`

// resetLimitsSQL drops the limits set at run time and tells every worker, at commit.
const resetLimitsSQL = `WITH del AS (
	DELETE FROM {s}.queue_limits WHERE queue = $1 RETURNING queue
)
SELECT pg_notify($2, $3) FROM (SELECT 1) one`

// controlLimits is the control op that says a queue's limits changed.
const controlLimits = "limits"

// SetQueueLimits replaces, for every worker of every process, the limits of queue with l
// until [Client.ResetQueueLimits]: the limits declared in [QueueConfig].Limits no longer
// apply to it, even after a restart. A zero l lifts every limit. Workers hear of the
// change at once (a notification on the schema's control channel) or, if they missed it,
// within a few seconds.
//
// After a limit is set or lowered, no job of the queue starts until fewer than the new
// limit are running, counting every running job of the queue, whatever claimed it (under
// other limits, or none): see the README, "Flow control", for how, and for the moment it
// holds from (once every worker has heard of the change).
func (c *Client) SetQueueLimits(ctx context.Context, queue string, l QueueLimits) error {
	if err := validQueue(queue); err != nil {
		return err
	}
	l, err := l.check(queue)
	if err != nil {
		return err
	}
	periodMs := int64(1000)
	if l.RatePeriod > 0 {
		periodMs = l.RatePeriod.Milliseconds()
	}
	_, err = c.pool.Exec(ctx, renderSQL(c.schema, setLimitsSQL), queue, nullInt(l.Concurrency),
		nullInt(l.KeyConcurrency), nullInt(l.Rate), periodMs, l.Fair,
		c.notify.control, controlMsg{Op: controlLimits, Queue: queue}.payload())
	if err != nil {
		return c.wrapErr("set queue limits", err)
	}
	return nil
}

// ResetQueueLimits drops the limits set with [Client.SetQueueLimits] for queue: every
// worker goes back to the limits its [QueueConfig] declares.
func (c *Client) ResetQueueLimits(ctx context.Context, queue string) error {
	if err := validQueue(queue); err != nil {
		return err
	}
	_, err := c.pool.Exec(ctx, renderSQL(c.schema, resetLimitsSQL), queue,
		c.notify.control, controlMsg{Op: controlLimits, Queue: queue}.payload())
	if err != nil {
		return c.wrapErr("reset queue limits", err)
	}
	return nil
}

// QueueLimitsSet returns the limits set at run time with [Client.SetQueueLimits], by
// queue. Queues that only have the limits their workers declare are not in it.
func (c *Client) QueueLimitsSet(ctx context.Context) (map[string]QueueLimits, error) {
	rows, err := c.pool.Query(ctx, renderSQL(c.schema, listLimitsSQL))
	if err != nil {
		return nil, c.wrapErr("list queue limits", err)
	}
	out := map[string]QueueLimits{}
	var (
		q        string
		l        QueueLimits
		periodMs int64
	)
	_, err = pgx.ForEachRow(rows, []any{&q, &l.Concurrency, &l.KeyConcurrency, &l.Rate, &periodMs, &l.Fair}, func() error {
		if l.Rate > 0 {
			l.RatePeriod = time.Duration(periodMs) * time.Millisecond
		} else {
			l.RatePeriod = 0
		}
		out[q] = l
		return nil
	})
	if err != nil {
		return nil, c.wrapErr("list queue limits", err)
	}
	return out, nil
}

// flowWatch keeps a worker's queues on the right claim path: the limited one with the
// effective limits (set at run time, else declared), or the plain one.
type flowWatch struct {
	client   *Client
	claimer  *flowClaimer
	declared map[string]QueueLimits
	queues   map[string]*queueRunner
	logger   *slog.Logger
	wake     chan struct{} // a control message said limits changed; capacity 1
}

func newFlowWatch(c *Client, queues map[string]*queueRunner, declared map[string]QueueLimits, visibility time.Duration, logger *slog.Logger) *flowWatch {
	fw := &flowWatch{client: c, claimer: newFlowClaimer(c, visibility), declared: declared, queues: queues,
		logger: logger, wake: make(chan struct{}, 1)}
	for name, q := range queues {
		fw.apply(name, q, declared[name])
	}
	return fw
}

// apply puts queue q on the path its limits l call for.
func (fw *flowWatch) apply(name string, q *queueRunner, l QueueLimits) {
	if l.none() {
		if q.flow.Swap(nil) != nil {
			fw.logger.Info("skiplock: queue has no limits now", "queue", name)
		}
		return
	}
	// Only the refresh goroutine (and the constructor, before it) swaps q.flow.
	prev := q.flow.Load()
	adopted := false
	if prev != nil {
		prev.mu.Lock()
		adopted = prev.adopted
		prev.mu.Unlock()
	}
	old := q.flow.Swap(&flowQueue{claimer: fw.claimer, limits: l, adopted: adopted})
	if old == nil || old.limits != l {
		fw.logger.Info("skiplock: queue limits", "queue", name, "concurrency", l.Concurrency,
			"key_concurrency", l.KeyConcurrency, "rate", l.Rate, "rate_period", l.RatePeriod, "fair", l.Fair)
	}
	q.signal()
}

// refresh reads the limits set at run time and applies them.
func (fw *flowWatch) refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	set, err := fw.client.QueueLimitsSet(ctx)
	if err != nil {
		return err
	}
	for name, q := range fw.queues {
		l, ok := set[name]
		if !ok {
			l = fw.declared[name]
		}
		if l.slotted() {
			// Before the queue claims through them: a missing slot is a slot not taken.
			if _, err := fw.client.pool.Exec(ctx, fw.claimer.ensure, name, int32(l.Concurrency)); err != nil {
				return fw.client.wrapErr("creating queue slots", err)
			}
		}
		fw.apply(name, q, l)
	}
	return nil
}

// slotsFreed is told that some of this worker's finished jobs are recorded (successes
// or failures), so their slots are free in the database: a limited queue whose last
// claim was cut by its limit claims again now. (The runner's own wake-up, when a handler
// returns, comes before the job's outcome is recorded, while it still counts as running.)
func (fw *flowWatch) slotsFreed(n int) {
	for _, q := range fw.queues {
		if q.flow.Load() != nil && (q.more.Load() || q.slotWait.Load()) {
			q.slotsFreed(n)
		}
	}
}

// kick makes run refresh at once.
func (fw *flowWatch) kick() {
	select {
	case fw.wake <- struct{}{}:
	default:
	}
}

// notify is the control callback: a queue's limits changed.
func (fw *flowWatch) notify(msg controlMsg) {
	if msg.Op != controlLimits {
		return
	}
	if _, ok := fw.queues[msg.Queue]; !ok {
		return
	}
	select {
	case fw.wake <- struct{}{}:
	default:
	}
}

// run refreshes on every control message and every flowRefreshInterval until ctx ends.
func (fw *flowWatch) run(ctx context.Context) {
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
			fw.logger.Warn("skiplock: reading queue limits failed; keeping the current ones", "err", err)
		}
	}
}
