// This file holds the Worker: its configuration, the handler registry (Handle), Run and
// its graceful shutdown, and the execution of one job. It composes the parts that live in
// their own files: the claim loops (claim.go), the lease and heartbeat (lease.go), success
// batching (complete.go), failure recording (retry.go), the listener (notify.go), the
// leader election (leader.go) and an embedded Sweeper (sweeper.go).

package skiplock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of [WorkerConfig], [QueueConfig] and [SweeperConfig]; each field's doc says
// when its default applies.
const (
	// DefaultMaxWorkers is the default of [QueueConfig].MaxWorkers.
	DefaultMaxWorkers = 100
	// DefaultPollInterval is the default of [WorkerConfig].PollInterval.
	DefaultPollInterval = time.Second
	// DefaultFetchCooldown is the default of [WorkerConfig].FetchCooldown.
	DefaultFetchCooldown = time.Millisecond
	// DefaultShutdownTimeout is the default of [WorkerConfig].ShutdownTimeout.
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultVisibilityTimeout is the default of [WorkerConfig].VisibilityTimeout and
	// [SweeperConfig].VisibilityTimeout.
	DefaultVisibilityTimeout = time.Minute
	// DefaultSweepInterval is the default of [WorkerConfig].SweepInterval and
	// [SweeperConfig].Interval.
	DefaultSweepInterval = 30 * time.Second
	// DefaultArchiveRetention is the default of [WorkerConfig].ArchiveRetention and
	// [SweeperConfig].ArchiveRetention.
	DefaultArchiveRetention = 7 * 24 * time.Hour
	// DefaultCompleteBatchSize is the default of [WorkerConfig].CompleteBatchSize.
	DefaultCompleteBatchSize = 500
	// DefaultCompleteFlushInterval is the default of [WorkerConfig].CompleteFlushInterval.
	DefaultCompleteFlushInterval = 2 * time.Millisecond
	// DefaultJobTimeout is the default of [WorkerConfig].JobTimeout.
	DefaultJobTimeout = time.Minute
)

// QueueConfig configures one queue of a [Worker].
type QueueConfig struct {
	// MaxWorkers is how many jobs of this queue run at once in this worker. Defaults to
	// [DefaultMaxWorkers] (100); zero means the default; negative or more than 100000 is
	// an error.
	MaxWorkers int
	// Limits are the queue's flow-control limits across all workers (global and per-key
	// concurrency, rate, fair sharing). Defaults to none: the zero value takes the plain
	// claim path. Limits set at run time with [Client.SetQueueLimits] replace them. Every
	// worker of a limited queue should declare the same limits.
	Limits QueueLimits
}

// WorkerConfig configures a [Worker]. The zero value works: it runs the "default" queue.
type WorkerConfig struct {
	// Queues to work, by name. Defaults to {"default": {}}: the default queue with
	// [DefaultMaxWorkers] slots.
	Queues map[string]QueueConfig
	// ID identifies this worker in locked_by; it must be unique among live workers, and at
	// most 255 bytes of UTF-8 without NUL. Defaults to hostname-pid-random.
	ID string
	// PollInterval is the fallback poll: this often, one statement asks which of the
	// worker's queues have due jobs, and wakes their claim loops, even when no
	// notification arrives (notifications are lost while nobody listens, and scheduled,
	// retried and reclaimed jobs send none). It is one statement per interval however
	// many queues the worker has. Defaults to [DefaultPollInterval] (1s); zero or negative
	// means the default; a positive value under 1ms is an error.
	PollInterval time.Duration
	// FetchCooldown is how long the claim loop may wait for more free slots when only a few
	// are free and the queue has a backlog, so that it claims in batches. Defaults to
	// [DefaultFetchCooldown] (1ms); zero means the default, negative means never wait.
	FetchCooldown time.Duration
	// ShutdownTimeout is how long Run waits for running handlers after its context is
	// cancelled, before cancelling their contexts. Handlers that then return within
	// min(ShutdownTimeout, 5s) have their jobs put back in the queue (or their results
	// recorded); the jobs of handlers still running after that are left to their lease,
	// which is no longer renewed (see [Worker.Run]). Defaults to [DefaultShutdownTimeout]
	// (10s); zero or negative means the default.
	ShutdownTimeout time.Duration
	// VisibilityTimeout is the lease this worker takes on each job it claims: the claim
	// writes the lease end (now() + VisibilityTimeout) in the job's row, and heartbeats
	// renew it every VisibilityTimeout/3, each heartbeat given at most that long. The
	// sweeper takes a job back only once its lease has ended, so this bounds the time to
	// recover from a crash, not the length of a job; workers with different settings
	// agree. If this worker's heartbeats stop landing, it cancels its own handlers
	// VisibilityTimeout/3 before their leases can end. Defaults to
	// [DefaultVisibilityTimeout] (1m): three heartbeat periods of 20s, long enough to ride
	// out a database failover or a long GC pause without running a job twice. Zero or
	// negative means the default; a positive value under 1ms is an error.
	VisibilityTimeout time.Duration
	// JobTimeout bounds one attempt of a job: when it passes, the handler's context is
	// cancelled with cause [ErrJobTimeout] (read it with context.Cause) and the attempt
	// counts as failed, retried by the retry policy. A kind overrides it with a method
	// Timeout() time.Duration on its args type (negative: no timeout for the kind), a job
	// with [EnqueueOptions].Timeout. A
	// handler that ignores the cancellation is no longer heartbeated VisibilityTimeout/3
	// after the timeout, so its lease ends and the job is retried elsewhere with the
	// attempt counted. Defaults to [DefaultJobTimeout] (1m); zero means the default,
	// negative means no timeout; a positive value under 1ms is an error.
	JobTimeout time.Duration
	// SweepInterval is how often this worker's embedded [Sweeper] runs when this worker
	// is the elected leader of the fleet's maintenance (one worker per schema at a time;
	// see [Sweeper]). Defaults to [DefaultSweepInterval] (30s); zero means the default,
	// negative disables the embedded sweeper, and this worker then takes no part in the
	// election (run a [Sweeper] elsewhere then); a positive value under 1ms is an error.
	SweepInterval time.Duration
	// ArchiveRetention is how long finished jobs are kept before the embedded sweeper
	// deletes them. Defaults to [DefaultArchiveRetention] (7 days); zero or negative means
	// the default.
	ArchiveRetention time.Duration
	// Completion says what happens to succeeded jobs. Defaults to CompletionArchive.
	Completion Completion
	// CompleteBatchSize is the most successes, and the most failures, recorded by one
	// statement. Defaults to
	// [DefaultCompleteBatchSize] (500); zero or negative means the default; more than
	// 100000 is an error.
	CompleteBatchSize int
	// CompleteFlushInterval is how long a success may wait to be batched with others. A
	// failure (retry, dead, failed, cancelled, snooze) is written at once when no other
	// failure is being written, and otherwise waits at most this long for others to share
	// its statement; its runner waits until it is written. Defaults to
	// [DefaultCompleteFlushInterval] (2ms); zero or negative means the default.
	CompleteFlushInterval time.Duration
	// RetryPolicy computes the delay before a failed job runs again. Defaults to
	// BackoffPolicy{}. A kind's args type may override it with a RetryPolicy() method.
	RetryPolicy RetryPolicy
	// ListenURL is a connection string for the LISTEN connection, for setups where the
	// pool goes through a transaction-pooling PgBouncer (LISTEN needs a real session).
	// Defaults to the pool's own connection settings. NewWorker refuses one pgx cannot parse.
	ListenURL string
	// Logger receives the worker's logs. Defaults to the client's logger.
	Logger *slog.Logger
	// Hooks are told when each job starts and ends, for metrics and tracing; they run
	// after the client's [Config].Hooks. Nil means none; a nil entry is an error.
	Hooks []Hook
	// PeriodicJobs are the jobs this worker enqueues on a schedule (see [PeriodicJob]).
	// Declare the same set in every worker that may enqueue them: each occurrence is
	// enqueued once, by whichever of them gets to it first. A schedule that no running
	// worker declares for a minute is marked inactive. Defaults to none.
	PeriodicJobs []PeriodicJob
}

// ErrWorkerStarted is returned by Run on a Worker that already ran.
var ErrWorkerStarted = errors.New("skiplock: worker already started: a Worker runs once")

// ErrJobTimeout is the cause (see context.Cause) of a handler's context cancelled because
// the attempt ran past its timeout ([WorkerConfig].JobTimeout, a kind's Timeout method or
// [EnqueueOptions].Timeout). The attempt counts as failed.
var ErrJobTimeout = errors.New("skiplock: job timeout")

// errShutdown is the cancel cause of job contexts cut off by shutdown.
var errShutdown = errors.New("skiplock: worker shutting down")

// errJobLost is the cancel cause of a job whose lease this worker no longer holds
// (reclaimed by the sweeper, or cancelled).
var errJobLost = errors.New("skiplock: job is no longer held by this worker (cancelled or reclaimed)")

type handler struct {
	run     func(ctx context.Context, row *JobRow) error
	policy  RetryPolicy
	timeout time.Duration // the kind's Timeout(); 0: the worker's
}

// timeoutArgs is implemented by args types with a kind-specific job timeout.
type timeoutArgs interface {
	Timeout() time.Duration
}

// Worker claims jobs and runs their handlers. Create it with [NewWorker], register
// handlers with [Handle], then call Run once.
type Worker struct {
	client *Client
	cfg    WorkerConfig
	id     string
	logger *slog.Logger

	mu       sync.Mutex
	handlers map[string]handler
	started  atomic.Bool

	queues  map[string]*queueRunner
	poller  *poller
	elector *elector // made by Run; nil when the worker has no per-fleet task
	// leaderTasks run only while this worker leads the fleet's maintenance, each in a
	// goroutine of its own: the embedded sweeper, and any other once-per-fleet work
	// (registered with whileLeader).
	leaderTasks []func(ctx context.Context)
	flow        *flowWatch // which queues claim under limits, and with which
	held        *heldJobs  // the attempts this worker runs
	lease       *lease
	completer   *completer
	failures    *failureRecorder
	pause       *pauseWatcher   // the paused flags of the queues
	periodic    *periodicRunner // nil without PeriodicJobs
	checkSQL    string          // checkSchemaSQL, rendered
	allHooks    []Hook          // the client's hooks, then cfg.Hooks
	handlerWG   sync.WaitGroup

	// Shutdown: the jobs cut off by it whose handlers returned, to put back in the queue.
	relMu     sync.Mutex
	toRelease []jobKey
	relClosed bool        // the release is done; later returns are left to their leases
	stopped   atomic.Bool // Run has returned: late results are logged, not recorded
}

// NewWorker returns a Worker for client configured by cfg. A field out of range is an
// error that matches [ErrInvalidConfig] and names the field.
func NewWorker(client *Client, cfg WorkerConfig) (*Worker, error) {
	if client == nil {
		return nil, errors.New("skiplock: NewWorker: client is nil")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if len(cfg.Queues) == 0 {
		cfg.Queues = map[string]QueueConfig{DefaultQueue: {}}
	}
	if cfg.ID == "" {
		cfg.ID = defaultWorkerID()
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.FetchCooldown == 0 {
		cfg.FetchCooldown = DefaultFetchCooldown
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.VisibilityTimeout <= 0 {
		cfg.VisibilityTimeout = DefaultVisibilityTimeout
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = DefaultSweepInterval
	}
	if cfg.ArchiveRetention <= 0 {
		cfg.ArchiveRetention = DefaultArchiveRetention
	}
	if cfg.CompleteBatchSize <= 0 {
		cfg.CompleteBatchSize = DefaultCompleteBatchSize
	}
	if cfg.CompleteFlushInterval <= 0 {
		cfg.CompleteFlushInterval = DefaultCompleteFlushInterval
	}
	if cfg.RetryPolicy == nil {
		cfg.RetryPolicy = BackoffPolicy{}
	}
	if cfg.JobTimeout == 0 {
		cfg.JobTimeout = DefaultJobTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = client.logger
	}
	logger := cfg.Logger.With("worker", cfg.ID)
	pool, schema := client.pool, client.schema
	held := newHeldJobs()
	w := &Worker{
		client:    client,
		cfg:       cfg,
		id:        cfg.ID,
		logger:    logger,
		handlers:  map[string]handler{},
		queues:    map[string]*queueRunner{},
		held:      held,
		lease:     newLease(pool, schema, cfg.ID, cfg.VisibilityTimeout, held, logger),
		completer: newCompleter(pool, schema, cfg.Completion, cfg.ID, cfg.CompleteBatchSize, cfg.CompleteFlushInterval, logger),
		failures:  newFailureRecorder(pool, schema, cfg.ID, cfg.CompleteBatchSize, cfg.CompleteFlushInterval, logger),
		checkSQL:  renderSQL(schema, checkSchemaSQL),
	}
	w.allHooks = w.hooks()
	claims := claimLoopConfig{
		claimer:       newClaimer(client, cfg.VisibilityTimeout),
		workerID:      cfg.ID,
		fetchCooldown: cfg.FetchCooldown,
		logger:        logger,
		conns:         make(chan struct{}, claimConns(len(cfg.Queues))),
		start:         w.start,
		stale: func(cj claimedJob) bool {
			return time.Since(cj.leased) > cfg.VisibilityTimeout-cfg.VisibilityTimeout/cancelMargin
		},
		release: func(jobs []claimedJob) {
			keys := make([]jobKey, len(jobs))
			for i, cj := range jobs {
				keys[i] = jobKey{cj.row.ID, cj.fence}
			}
			w.lease.releaseJobs(keys)
		},
	}
	declared := map[string]QueueLimits{}
	for name, q := range cfg.Queues {
		n := q.MaxWorkers
		if n == 0 {
			n = DefaultMaxWorkers
		}
		w.queues[name] = newQueueRunner(name, n, claims)
		l, err := q.Limits.check(name)
		if err != nil {
			return nil, fmt.Errorf("%w: WorkerConfig.Queues[%q].Limits: %w", ErrInvalidConfig, name, err)
		}
		declared[name] = l
	}
	w.pause = newPauseWatcher(client, w.queues, logger)
	if len(cfg.PeriodicJobs) > 0 {
		entries, err := validPeriodic(client, cfg.PeriodicJobs)
		if err != nil {
			return nil, err
		}
		w.periodic = newPeriodicRunner(client, entries, logger)
	}
	w.poller = newPoller(client, cfg.PollInterval, w.queues, w.pause, logger)
	if cfg.SweepInterval > 0 {
		sw, err := NewSweeper(client, SweeperConfig{
			Interval: cfg.SweepInterval, VisibilityTimeout: cfg.VisibilityTimeout,
			ArchiveRetention: cfg.ArchiveRetention, Logger: logger,
		})
		if err != nil {
			return nil, err
		}
		w.whileLeader(sw.maintain)
	}
	// A job retried or snoozed without delay is due again once its failure is written:
	// claim it now rather than at the next poll (nothing notifies a retry).
	w.failures.dueAgain = func(queue string) {
		if q, ok := w.queues[queue]; ok {
			q.signal()
		}
	}
	w.flow = newFlowWatch(client, w.queues, declared, cfg.VisibilityTimeout, logger)
	w.completer.flushed = w.flow.slotsFreed
	return w, nil
}

// whileLeader registers task to run only while this worker leads the fleet's maintenance
// (one worker per schema at a time, see leader.go): Run starts it each time the worker
// becomes leader, with a context that ends when it stops leading or shuts down. A worker
// with at least one such task takes part in the election. Call it before Run.
func (w *Worker) whileLeader(task func(ctx context.Context)) {
	w.leaderTasks = append(w.leaderTasks, task)
}

func defaultWorkerID() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "worker"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// ID returns the worker's id, as recorded in locked_by.
func (w *Worker) ID() string { return w.id }

// Handle registers fn as the handler for jobs of kind T{}.Kind(). The payload is decoded
// into T; a payload that does not decode fails the job permanently (status failed).
// Register every handler before Run; registering a kind twice is an error.
func Handle[T JobArgs](w *Worker, fn func(ctx context.Context, job *Job[T]) error) error {
	if w == nil || fn == nil {
		return errors.New("skiplock: Handle: nil worker or handler")
	}
	var zero T
	kindOf := any(zero)
	if t := reflect.TypeFor[T](); t.Kind() == reflect.Pointer {
		kindOf = reflect.New(t.Elem()).Interface()
	}
	args, ok := kindOf.(JobArgs)
	if !ok {
		return fmt.Errorf("skiplock: Handle: %T does not implement JobArgs", kindOf)
	}
	kind := args.Kind()
	if kind == "" || len(kind) > MaxKindLength {
		return fmt.Errorf("%w: %q (%T)", ErrInvalidKind, truncate(kind, 40), zero)
	}
	h := handler{run: func(ctx context.Context, row *JobRow) error {
		var a T
		if t := reflect.TypeFor[T](); t.Kind() == reflect.Pointer {
			a = reflect.New(t.Elem()).Interface().(T)
		}
		if err := json.Unmarshal(row.Payload, &a); err != nil {
			return Permanent(fmt.Errorf("decoding payload of kind %q into %T: %w", row.Kind, a, err))
		}
		return fn(ctx, &Job[T]{JobRow: row, Args: a})
	}}
	if p, ok := kindOf.(retryPolicyArgs); ok {
		h.policy = p.RetryPolicy()
	}
	if p, ok := kindOf.(timeoutArgs); ok {
		h.timeout = p.Timeout()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started.Load() {
		return fmt.Errorf("skiplock: Handle(%q): the worker is already running", kind)
	}
	if _, dup := w.handlers[kind]; dup {
		return fmt.Errorf("skiplock: Handle: kind %q already has a handler", kind)
	}
	w.handlers[kind] = h
	return nil
}

// Run claims and runs jobs until ctx is cancelled, then shuts down gracefully:
//
//  1. it stops claiming and waits up to ShutdownTimeout for running handlers; the results
//     of those that return are recorded as usual;
//  2. it cancels the contexts of the handlers still running (cause: shutdown) and waits
//     up to min(ShutdownTimeout, 5s) more; the jobs of those that return with an error are
//     put back in the queue at once, due now, without using up an attempt (a nil return
//     is recorded as a success);
//  3. handlers still running then ignore their context: their jobs are not put back (they
//     still run) and their leases are no longer renewed, so the sweeper takes them back
//     when the leases end, counting the attempt. Such a handler's result, when it comes,
//     is logged and not recorded.
//
// Run returns nil after a graceful shutdown, or an error if it cannot start (schema not
// migrated, already run). When it returns, none of its goroutines is left, except those
// running or waiting for the handlers of step 3, which end when those handlers return. A
// Worker runs once.
//
// While running, database errors (lost connections, a restarting server) are logged and
// retried; they do not stop Run.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if !w.started.CompareAndSwap(false, true) {
		w.mu.Unlock()
		return ErrWorkerStarted
	}
	w.mu.Unlock()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	_, err := w.client.pool.Exec(cctx, w.checkSQL)
	cancel()
	if err != nil {
		return w.client.wrapErr("worker start", err)
	}
	// Paused queues are known before the first claim.
	if err := w.pause.load(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	// Limits set at run time apply from the first claim.
	if err := w.flow.refresh(context.WithoutCancel(ctx)); err != nil {
		return w.client.wrapErr("worker start: reading queue limits", err)
	}
	// The schedules are recorded before anything runs: a worker that cannot record them
	// does not start.
	if w.periodic != nil {
		if err := w.periodic.declare(context.WithoutCancel(ctx)); err != nil {
			return err
		}
	}
	if len(w.leaderTasks) > 0 {
		w.elector = newElector(w.client, w.id, maintenanceRole, w.logger)
	}
	w.checkConns()

	// Job contexts outlive ctx: they end only at the shutdown deadline.
	jobBase, cancelJobs := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelJobs(errShutdown)
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var bgWG, fetchWG sync.WaitGroup

	bgWG.Add(1)
	go func() { defer bgWG.Done(); w.completer.run() }()
	bgWG.Add(1)
	go func() { defer bgWG.Done(); w.lease.run(bg) }()
	bgWG.Add(1)
	go func() { defer bgWG.Done(); w.flow.run(bg) }()
	if w.elector != nil {
		bgWG.Add(1)
		go func() { defer bgWG.Done(); w.elector.run(bg) }()
		for _, task := range w.leaderTasks {
			bgWG.Add(1)
			go func() { defer bgWG.Done(); w.elector.whileLeader(bg, task) }()
		}
	}
	l, err := newListener(listenerConfig{
		pool:      w.client.pool,
		listenURL: w.cfg.ListenURL,
		workerID:  w.id,
		channel:   w.client.notify.channel,
		control:   w.client.notify.control,
		logger:    w.logger,
		onNotify: func(queue string) {
			if q, ok := w.queues[queue]; ok {
				q.signal()
			}
		},
		onControl: func(msg controlMsg) {
			w.pause.control(msg)
			w.control(msg)
			w.flow.notify(msg)
		},
		// Notifications and control messages sent while the listener was away are lost:
		// poll at once (the poll reads the paused queues too).
		onListen: func() {
			w.poller.kick()
			w.flow.kick() // limits changed while the listener was away
		},
	})
	if err != nil {
		stopBG()
		w.completer.stop()
		bgWG.Wait()
		return err
	}
	bgWG.Add(1)
	go func() { defer bgWG.Done(); l.run(bg) }()
	if w.periodic != nil {
		// ctx, not bg: a worker shutting down enqueues nothing more. A transaction cut off
		// by it rolls back whole, and another worker enqueues that occurrence.
		bgWG.Add(1)
		go func() { defer bgWG.Done(); w.periodic.run(ctx) }()
	}

	fetchWG.Add(1)
	go func() { defer fetchWG.Done(); w.poller.run(ctx) }()
	var runnersWG sync.WaitGroup
	for _, q := range w.queues {
		for range q.max {
			runnersWG.Add(1)
			go func() { defer runnersWG.Done(); w.runner(q) }()
		}
		for _, wake := range q.wakes {
			fetchWG.Add(1)
			go func() { defer fetchWG.Done(); q.run(ctx, jobBase, wake) }()
		}
	}
	w.logger.Info("skiplock: worker started", "queues", len(w.queues), "version", moduleVersion())

	<-ctx.Done()
	fetchWG.Wait() // no more claims
	for _, q := range w.queues {
		close(q.jobs) // runners exit once their current job is done
	}
	w.logger.Info("skiplock: worker shutting down", "running", w.held.count())

	allReturned := waitTimeout(&w.handlerWG, w.cfg.ShutdownTimeout)
	if !allReturned {
		cancelJobs(errShutdown)
		// Handlers that honour their context return now; give them a moment.
		allReturned = waitTimeout(&w.handlerWG, min(w.cfg.ShutdownTimeout, shutdownGrace))
	}
	// Put back the jobs cut off by shutdown whose handlers returned. A job whose handler
	// still runs is not put back: another worker would run the same attempt beside it.
	w.relMu.Lock()
	release := w.toRelease
	w.toRelease, w.relClosed = nil, true
	w.relMu.Unlock()
	w.lease.releaseJobs(release)
	for _, k := range release {
		w.held.remove(k)
	}
	if !allReturned {
		w.logger.Warn("skiplock: handlers ignored their cancelled context; their jobs are taken back when their leases end, this attempt counted",
			"running", w.held.count())
	}
	w.failures.stop()  // waits for the failures already reported
	w.completer.stop() // flushes the successes already reported
	<-w.completer.done
	stopBG() // heartbeats end: the leases of jobs still running run out
	bgWG.Wait()
	w.stopped.Store(true)
	if allReturned {
		runnersWG.Wait()
	}
	w.logger.Info("skiplock: worker stopped")
	return nil
}

// shutdownGrace bounds how long Run waits for handlers to return after it cancelled their
// contexts.
const shutdownGrace = 5 * time.Second

// control acts on a control message from another process.
func (w *Worker) control(m controlMsg) {
	switch m.Op {
	case controlCancel:
		if w.held.cancelID(m.ID, errJobLost) {
			w.logger.Info("skiplock: job cancelled remotely; cancelling its context", "job", m.ID)
		}
	}
}

// checkSchemaSQL fails with undefined_table when the schema is not migrated (up to the
// leader table of migration 6, which the election needs).
const checkSchemaSQL = `SELECT 1 FROM {s}.jobs, {s}.leader LIMIT 0`

// connsNeeded is how many pooled connections the worker's own statements can have in
// flight at once, and what each is for. Handlers' statements (and the failures they
// record) come on top.
func (w *Worker) connsNeeded() (int, string) {
	claims := claimConns(len(w.queues))
	n := claims + completerLoops + 1 + 1 // claims, success flushers, heartbeat, poll
	why := fmt.Sprintf("%d claims + %d success flushers + 1 heartbeat + 1 poll", claims, completerLoops)
	if w.elector != nil {
		n += 1 + len(w.leaderTasks)
		why += fmt.Sprintf(" + 1 leader election + %d maintenance", len(w.leaderTasks))
	}
	return n, why
}

// checkConns warns when the pool is smaller than what the worker's own statements can use
// at once. A warning, not an error: pgxpool makes a statement wait for a free connection
// rather than fail, so a small pool makes the worker slower (claims, heartbeats and
// success batches queue behind each other), not stuck, and pgxpool's default size
// (4 connections, or the CPU count) would otherwise refuse the zero-config worker on a
// small machine. The warning says what to set.
func (w *Worker) checkConns() {
	need, why := w.connsNeeded()
	have := int(w.client.pool.Config().MaxConns)
	if have >= need {
		return
	}
	w.logger.Warn("skiplock: the pool is smaller than this worker needs: claims, heartbeats and success batches will wait for each other and jobs will start late; "+
		"raise pgxpool MaxConns (pool_max_conns in the URL) to at least the need plus what your handlers use at once",
		"max_conns", have, "need", need, "for", why)
}

// waitTimeout waits for wg for at most d and reports whether it finished.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// runner is one of a queue's MaxWorkers long-lived goroutines. Reusing them (rather than
// a goroutine per job) keeps their grown stacks: handlers that decode JSON would otherwise
// pay for stack growth on every job.
func (w *Worker) runner(q *queueRunner) {
	for d := range q.jobs {
		w.execute(d)
		d.cancel(nil)
		q.finished()
		w.handlerWG.Done()
	}
}

// start registers one claimed job: its context (derived from jobBase, which shutdown
// cancels) and its place among the held jobs, with the lease its claim wrote. Its slot
// was reserved before the claim.
func (w *Worker) start(jobBase context.Context, cj claimedJob) dispatched {
	jobCtx, cancel := context.WithCancelCause(jobBase)
	jobCtx, st := withJobState(jobCtx, w.client.maxBytes)
	key := jobKey{cj.row.ID, cj.fence}
	w.held.add(key, cancel, cj.leased, st)
	w.handlerWG.Add(1)
	return dispatched{ctx: jobCtx, cancel: cancel, key: key, row: cj.row, timeout: cj.timeout}
}

// timeoutFor returns the timeout of one attempt: the job's own, else its kind's, else the
// worker's. Zero or negative means none.
func (w *Worker) timeoutFor(d dispatched, h handler) time.Duration {
	switch {
	case d.timeout > 0:
		return d.timeout
	case h.timeout != 0:
		return h.timeout
	default:
		return w.cfg.JobTimeout
	}
}

// execute runs one claimed job's handler and hands the outcome on: a success to the
// completer, a failure to the failure recorder, a job cut off by shutdown to Run to put
// back. The result of a job the worker no longer holds is dropped, and so is one that
// comes after Run returned; both are logged. Every write is fenced on the claim's token.
// It returns the result the hooks were told.
func (w *Worker) execute(d dispatched) JobResult {
	ctx, key, row := d.ctx, d.key, d.row
	// No lock: Handle refuses new kinds once Run has started, so the map is read-only here.
	h, ok := w.handlers[row.Kind]
	timeout := w.timeoutFor(d, h)
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, timeout, ErrJobTimeout)
		defer cancel()
		// A handler that ignores its timeout is no longer heartbeated after a grace
		// period: its lease runs out and the job is retried elsewhere, this attempt counted.
		abandon := time.AfterFunc(timeout+w.lease.interval, func() {
			w.held.abandon(key)
			w.logger.Warn("skiplock: handler ignores its job timeout; no longer renewing its lease, the job will be retried when the lease ends",
				"job", row.ID, "attempt", row.Attempts, "timeout", timeout)
		})
		defer abandon.Stop()
	}
	for _, hk := range w.allHooks {
		ctx = hk.JobStarted(ctx, row)
	}
	began := time.Now()
	var err error
	panicked := false
	if !ok {
		err = fmt.Errorf("no handler registered for kind %q", row.Kind)
	} else {
		err, panicked = callHandler(ctx, h.run, row)
	}
	dur := time.Since(began)
	cause := context.Cause(ctx)
	if w.stopped.Load() {
		w.held.remove(key)
		w.logger.Warn("skiplock: a handler returned after the worker stopped; its result is not recorded, and the job is retried when its lease ends, this attempt counted",
			"job", row.ID, "attempt", row.Attempts, "err", err)
		return w.report(ctx, row, JobResult{Status: row.Status, Outcome: OutcomeLost, Err: err, Duration: dur, Panicked: panicked})
	}
	if err != nil && errors.Is(cause, errShutdown) {
		// Cut off by shutdown: Run puts it back once it has stopped waiting for handlers.
		w.relMu.Lock()
		late := w.relClosed
		if !late {
			w.toRelease = append(w.toRelease, key)
		}
		w.relMu.Unlock()
		if late {
			w.held.remove(key)
			w.logger.Warn("skiplock: a handler cut off by shutdown returned too late to put its job back; it is retried when its lease ends, this attempt counted",
				"job", row.ID, "attempt", row.Attempts)
		}
		// Still held, its lease renewed, until Run puts it back.
		return w.report(ctx, row, JobResult{Status: StatusQueued, Outcome: OutcomeReleased, Err: err, Duration: dur, Panicked: panicked})
	}
	w.held.remove(key)
	if errors.Is(cause, errJobLost) {
		w.logger.Info("skiplock: result of a job this worker no longer holds is dropped", "job", row.ID, "attempt", row.Attempts)
		return w.report(ctx, row, JobResult{Status: row.Status, Outcome: OutcomeLost, Err: err, Duration: dur, Panicked: panicked})
	}
	if err == nil {
		if !w.completer.add(key, stateOf(ctx)) {
			w.logger.Warn("skiplock: a success came after the worker stopped recording; the job is retried when its lease ends, this attempt counted",
				"job", row.ID, "attempt", row.Attempts)
			return w.report(ctx, row, JobResult{Status: row.Status, Outcome: OutcomeLost, Duration: dur})
		}
		return w.report(ctx, row, JobResult{Status: StatusSucceeded, Outcome: OutcomeSucceeded, Duration: dur})
	}
	if errors.Is(cause, ErrJobTimeout) && !errors.Is(err, ErrJobTimeout) {
		err = fmt.Errorf("%w after %s: %w", ErrJobTimeout, timeout, err)
	}
	policy := w.cfg.RetryPolicy
	if h.policy != nil {
		policy = h.policy
	}
	status := w.failures.record(key, row, err, policy)
	return w.report(ctx, row, JobResult{Status: status, Outcome: outcomeOf(ctx, status, err), Err: err, Duration: dur, Panicked: panicked})
}

// callHandler runs the handler, turning a panic into an error with its stack.
func callHandler(ctx context.Context, run func(context.Context, *JobRow) error, row *JobRow) (err error, panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n\n%s", r, debug.Stack())
			panicked = true
		}
	}()
	return run(ctx, row), false
}
