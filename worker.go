// This file holds the Worker: NewWorker, the handler registry (Handle), Run and its
// graceful shutdown. It composes the parts that live in their own files: the configuration
// (config.go), the claim loops (claim.go), the execution of one job (execute.go), the lease
// and heartbeat (lease.go), success batching (complete.go), failure recording (retry.go),
// the listener (notify.go), the leader election (leader.go) and an embedded Sweeper
// (sweeper.go).

package skiplock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ErrWorkerStarted is returned by Run on a Worker that already ran.
var ErrWorkerStarted = errors.New("skiplock: worker already started: a Worker runs once")

// errShutdown is the cancel cause of job contexts cut off by shutdown.
var errShutdown = errors.New("skiplock: worker shutting down")

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
	elector *elector // made by Run: registers the worker, and campaigns when it has per-fleet tasks
	// leaderTasks run only while this worker leads the fleet's maintenance, each in a
	// goroutine of its own: the embedded sweeper, and any other once-per-fleet work
	// (registered with whileLeader).
	leaderTasks []func(ctx context.Context)
	flow        *flowWatch // which queues claim under limits, and with which
	held        *heldJobs  // the attempts this worker runs
	lease       *lease
	completer   *completer
	failures    *failureRecorder
	gate        *stmtGate       // bounds the statements on the queues' rows by the fleet's size (fleet.go)
	pause       *pauseWatcher   // the paused flags of the queues
	periodic    *periodicRunner // nil without PeriodicJobs
	checkSQL    string          // checkSchemaSQL, rendered
	allHooks    []Hook          // the client's hooks, then cfg.Hooks
	mw          middlewares     // Use, UseKind, HandleErrors (middleware.go)
	handlerWG   sync.WaitGroup
	slotJobs    atomic.Int64 // claimed jobs of queues with a concurrency limit whose handlers have not returned

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
	if cfg.FleetStatements == 0 {
		cfg.FleetStatements = DefaultFleetStatements
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
	gate := newStmtGate(cfg.FleetStatements)
	w := &Worker{
		gate:      gate,
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
		gate:          gate,
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
	w.failures.freed = w.flow.slotsFreed
	w.completer.gate = gate
	w.failures.gate = gate
	w.completer.written = w.held.removeKeys
	w.failures.written = w.held.removeKeys
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

// startTimeout bounds a worker's start-up statements, retries included.
const startTimeout = 30 * time.Second

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
// retried; they do not stop Run, and at start they are retried for up to 30 seconds.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if !w.started.CompareAndSwap(false, true) {
		w.mu.Unlock()
		return ErrWorkerStarted
	}
	w.mu.Unlock()
	// The start-up statements retry what may pass (a pooled connection the server closed,
	// a server restarting; see transient) for up to startTimeout, and fail at once on the
	// rest (a schema not migrated).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	defer cancel()
	if err := retryDB(sctx, func() error {
		_, err := w.client.pool.Exec(sctx, w.checkSQL)
		return err
	}); err != nil {
		return w.client.wrapErr("worker start", err)
	}
	// Paused queues are known before the first claim.
	if err := retryDB(sctx, func() error { return w.pause.load(sctx) }); err != nil {
		return err
	}
	// Limits set at run time apply from the first claim.
	if err := retryDB(sctx, func() error { return w.flow.refresh(sctx) }); err != nil {
		return w.client.wrapErr("worker start: reading queue limits", err)
	}
	// The schedules are recorded before anything runs: a worker that cannot record them
	// does not start. (Declaring again is harmless: it is what the worker does every
	// periodicDeclareEvery.)
	if w.periodic != nil {
		if err := retryDB(sctx, func() error { return w.periodic.declare(sctx) }); err != nil {
			return err
		}
	}
	cancel()
	// Every worker registers in the workers table, so that the others count it (fleet.go);
	// one with a per-fleet task also campaigns for the lead with the same statement.
	w.elector = newElector(w.client, w.id, maintenanceRole, w.logger)
	w.elector.register(w.client, slices.Sorted(maps.Keys(w.queues)), len(w.leaderTasks) > 0, w.gate.setFleet)
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
	bgWG.Add(1)
	go func() { defer bgWG.Done(); w.elector.run(bg) }()
	for _, task := range w.leaderTasks {
		bgWG.Add(1)
		go func() { defer bgWG.Done(); w.elector.whileLeader(bg, task) }()
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
// leader and workers tables of migrations 6 and 7, which the election needs).
const checkSchemaSQL = `SELECT 1 FROM {s}.jobs, {s}.leader, {s}.workers LIMIT 0`

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
