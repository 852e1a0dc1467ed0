// This file holds the Worker: NewWorker, which builds its parts, the handler registry
// (Handle), and Run, which starts the parts in one declared order (Worker.services) and
// stops them in reverse, and the synchronous run of one job (workOne) that package
// skiplocktest offers users' tests. The parts live in their own files; a job goes through
// them in the order docs/architecture.md walks.

package skiplock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/claim"
	"github.com/skiplock/skiplock/internal/durable"
	"github.com/skiplock/skiplock/internal/execute"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/lifecycle"
	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/ownership"
	"github.com/skiplock/skiplock/internal/periodic"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/internal/record"
	"github.com/skiplock/skiplock/internal/testbridge"
	"github.com/skiplock/skiplock/internal/waiting"
)

// ErrWorkerStarted is returned by Run on a Worker that already ran.
var ErrWorkerStarted = errors.New("skiplock: worker already started: a Worker runs once")

// Worker claims jobs and runs their handlers. Create it with [NewWorker], register
// handlers with [Handle], then call Run once.
type Worker struct {
	client *Client
	cfg    WorkerConfig
	id     string
	logger *slog.Logger

	mu        sync.Mutex
	handlers  map[string]execute.Handler
	started   atomic.Bool
	cancelRun context.CancelFunc // ends Run's context: set by Run (under mu), used by StopAndCancel
	runDone   chan struct{}      // closed when Run returns
	runErr    error              // ErrHandlersStillRunning, ErrOutcomesNotRecorded, both, or nil: set before runDone is closed

	queues  *claim.QueueSet
	loops   claim.ClaimLoopConfig // what a queue's claim loops need, for queues added later
	sweeper *Sweeper              // the embedded sweeper; nil when SweepInterval is negative
	// qmu serializes the run-time queue changes (workerqueues.go) with Run's start and stop;
	// qstate says which of them they meet.
	qmu      sync.Mutex
	qstate   queueState
	checkSQL string // checkSchemaSQL, rendered
	// The parts, each built with the collaborators it needs (NewWorker), started and
	// stopped by Run in the order of services.
	lease       *ownership.Lease
	completer   *record.Completer
	failures    *record.FailureRecorder
	pause       *claim.PauseWatcher    // the paused flags of the queues
	flow        *claim.FlowWatch       // which queues claim under limits, and with which
	elector     *ownership.Elector     // registers the worker, and campaigns when it has leaderTasks
	leaderTasks *ownership.LeaderTasks // per-fleet work, run only while this worker leads (internal/ownership)
	listener    *notify.Listener
	executor    *execute.Executor
	periodic    *periodic.Runner     // nil without PeriodicJobs
	mw          *execute.Middlewares // Use, UseKind, HandleErrors (middleware.go); the executor reads it once Run started
	poller      *claim.Poller
	claims      *claim.ClaimLoops
	// The executor's collaborators, which a synchronous run (workOne) uses alone.
	starter  *execute.JobStarter
	outcomes *record.OutcomeRecorder
	gate     *pgutil.Gate // bounds the statements on the queues' rows by the fleet's size (fleet.go)
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
	cfg = cfg.withDefaults(client.logger)
	declared := map[string]QueueLimits{}
	for name, q := range cfg.Queues {
		l, err := checkLimits(q.Limits, name)
		if err != nil {
			return nil, fmt.Errorf("%w: WorkerConfig.Queues[%q].Limits: %w", ErrInvalidConfig, name, err)
		}
		declared[name] = l
	}
	var schedules map[string]*periodic.Entry
	if len(cfg.PeriodicJobs) > 0 {
		var err error
		if schedules, err = periodicEntries(client, cfg.PeriodicJobs); err != nil {
			return nil, err
		}
	}
	logger := cfg.Logger.With("worker", cfg.ID)
	var tasks []func(ctx context.Context)
	var sw *Sweeper
	if cfg.SweepInterval > 0 {
		queueKeep, kindKeep := retentionRules(cfg)
		var err error
		sw, err = NewSweeper(client, SweeperConfig{
			Interval: cfg.SweepInterval, VisibilityTimeout: cfg.VisibilityTimeout,
			ArchiveRetention: cfg.ArchiveRetention, QueueRetention: queueKeep, KindRetention: kindKeep,
			DeadRetention: cfg.DeadRetention, Logger: logger,
		})
		if err != nil {
			return nil, err
		}
		tasks = append(tasks, sw.s.Maintain)
	}
	w := &Worker{client: client, cfg: cfg, id: cfg.ID, logger: logger, handlers: map[string]execute.Handler{},
		checkSQL: pgutil.Render(client.schema, checkSchemaSQL), mw: &execute.Middlewares{}, sweeper: sw, runDone: make(chan struct{})}
	w.buildExecution(declared, len(tasks) > 0)
	if schedules != nil {
		w.periodic = periodic.NewRunner(client.db, client.enq, schedules, logger)
	}
	w.leaderTasks = &ownership.LeaderTasks{Elector: w.elector, Tasks: tasks}
	l, err := newWorkerListener(client, cfg, w.logger, w.queues, w.pause, w.lease, w.flow, w.poller)
	if err != nil {
		return nil, err
	}
	w.listener = l
	return w, nil
}

// queueState says where a Worker is in its life, for the run-time queue changes.
type queueState int

const (
	queuesBeforeRun queueState = iota // changes only edit the configuration
	queuesRunning                     // changes start and stop the queues' parts
	queuesStopped                     // Run is shutting down or returned: changes are refused
)

// buildExecution builds the parts a job goes through, each with its collaborators: the
// claim loops hand claimed jobs to the starter and the runners (executor); the outcome
// recorder hands each result to the success or failure batches, which tell the lease and
// the flow watcher what they wrote.
func (w *Worker) buildExecution(declared map[string]QueueLimits, campaign bool) {
	c, cfg := w.client, w.cfg
	w.gate = pgutil.NewGate(cfg.FleetStatements)
	held := ownership.NewHeldJobs()
	w.queues = claim.NewQueueSet() // filled below; the elector reads its names when it registers
	// The worker's row in the workers table is its lease (internal/ownership): a worker that leaves
	// while handlers still run expires it rather than deleting it, and the job lease
	// cancels the handlers before that row can end (internal/ownership).
	w.elector = ownership.NewWorkerElector(c.db, c.flows, w.id, w.queues.Names, campaign, w.gate.SetFleet,
		func() bool { return held.Count() > 0 }, w.logger)
	w.lease = ownership.NewLease(c.pool, c.schema, cfg.ID, cfg.VisibilityTimeout, held, w.elector.SinceRenewal, w.logger)
	// CompleteTx (completetx.go) writes an attempt's success as the completer would.
	modeOf := completionModeOf(cfg, w.queues)
	attempt := &record.AttemptRef{WorkerID: cfg.ID, Stmts: record.RenderCompleteStmts(c.schema), ModeOf: modeOf, Lost: record.AttemptLostSQL, Wake: waiting.NewWaking(c.schema),
		Flows: c.flows}
	w.starter = &execute.JobStarter{Held: held, Slots: &record.SlotJobs{}, MaxBytes: c.maxBytes, Attempt: attempt,
		Durable: durable.NewEngine(c.db, cfg.ID)} // Step, Sleep, AwaitSignal (durable.go)
	cl := buildClaims(c, cfg, w.logger, w.queues, w.gate, w.starter, w.lease, w.elector.LapsedSince, declared)
	w.loops, w.claims, w.pause, w.poller, w.flow = cl.loops, cl.claims, cl.pause, cl.poller, cl.flow
	done := record.BatchListeners{Written: held.RemoveKeys, Freed: w.flow.SlotsFreed, Unrecorded: w.lease.PutBackUnrecorded}
	// Outcome batches that hold workflow tasks settle them in the batch's transaction.
	flows := attempt.Flows
	w.completer = record.NewCompleter(c.pool, c.schema, modeOf, cfg.ID, cfg.CompleteBatchSize, cfg.CompleteFlushInterval, w.gate, done, flows, w.logger)
	// A job retried or snoozed without delay is due again once its failure is written:
	// claim it now rather than at the next poll (nothing notifies a retry).
	queues := w.queues
	dueAgain := func(queue string) {
		if q := queues.Get(queue); q != nil {
			q.Signal()
		}
	}
	w.failures = record.NewFailureRecorder(c.pool, c.schema, cfg.ID, cfg.CompleteBatchSize, cfg.CompleteFlushInterval, w.gate, done, dueAgain, flows, w.logger)
	// The client's hooks, then the worker's, then the one that calls HandleErrors' handlers.
	hooks := append(append(c.hooks[:len(c.hooks):len(c.hooks)], cfg.Hooks...), execute.ErrorHook{M: w.mw, Logger: w.logger})
	w.outcomes = record.NewOutcomeRecorder(held, w.completer, w.failures, w.lease.ReleaseJobs, w.starter.Slots, hooks, w.logger)
	w.outcomes.Logs = record.NewLogWriter(c.pool, c.schema, w.logger)
	w.outcomes.LostReturned = w.lease.EndCancelled
	w.outcomes.Freed = w.flow.SlotsFreed // a durable wait frees its slot
	w.executor = execute.NewExecutor(execute.ExecutorConfig{
		Handlers: w.handlers, Hooks: hooks, JobTimeout: cfg.JobTimeout, RetryPolicy: cfg.RetryPolicy,
		LeaseInterval: w.lease.Interval, ShutdownTimeout: cfg.ShutdownTimeout, Logger: w.logger, MW: w.mw,
		Marks: ownership.NewOverrunMarks(c.pool, c.schema, cfg.ID, w.logger),
	}, w.starter, w.outcomes, w.queues)
}

// services lists the worker's background parts in the order Run starts them; Run stops
// them in the reverse order, each once the one started after it has stopped. Why this
// order, read from the end (the first to stop):
//
//   - the claim loops, the poller and the periodic runner end with Run's ctx: a worker
//     shutting down claims and enqueues nothing more;
//   - then the executor drains the runners (the claim loops no longer hand it jobs): it
//     waits for the handlers, cancels those that overrun, and puts back the jobs cut off;
//   - the per-fleet tasks end before the elector, which then resigns and unregisters;
//     it starts before the executor and returns once the worker's row is written, so
//     that every job the worker claims has an owner the reclaim by liveness can judge;
//   - the flow watcher and the pause watcher are read by the claims, so they start
//     before them (their start-up reads apply from the first claim);
//   - the listener starts before those two and returns once it listens: what they read
//     at their start is then never older than what a notification would have told them.
//     It stops after the executor, so that a remote cancel reaches a handler that
//     shutdown is waiting for;
//   - the failure and success batches stop once no handler can hand them a result, and
//     write what they hold;
//   - the lease stops last: every attempt whose outcome is still being written keeps
//     its lease renewed until then, and only then do the leases of handlers that ignored
//     their cancellation run out.
func (w *Worker) services() []lifecycle.Service {
	s := []lifecycle.Service{
		w.lease, w.completer, w.failures, w.listener, w.pause, w.flow,
		ownership.NewRegisteredElector(w.elector), w.leaderTasks, w.executor,
	}
	if w.periodic != nil {
		s = append(s, w.periodic)
	}
	return append(s, lifecycle.NewLoop(w.poller.Run, lifecycle.UntilCancel), w.claims)
}

// Overrunning returns how many of the worker's handlers are running past their job
// timeout now: their contexts were cancelled and they have not returned. Their jobs stay
// with this worker, their leases renewed, until they return; each is logged once per
// lease interval and reported once to the error handlers' HandleStuck (HandleErrors).
func (w *Worker) Overrunning() int { return int(w.executor.Overrunning.Load()) }

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
	isPointer := reflect.TypeFor[T]().Kind() == reflect.Pointer
	h := execute.Handler{Run: func(ctx context.Context, row *JobRow) error {
		job := &Job[T]{JobRow: row, ctx: ctx} // the args are decoded in place: one allocation
		into := any(&job.Args)
		if isPointer {
			// Decoded into the value it points to: a JSON null (the SQL enqueue function
			// takes any JSON value) then leaves that value zero, as it leaves a T that is
			// not a pointer, instead of setting job.Args to nil for the handler to
			// dereference.
			job.Args = reflect.New(reflect.TypeFor[T]().Elem()).Interface().(T)
			into = any(job.Args)
		}
		payload, err := w.client.keyring.Open(row.Kind, row.Payload)
		if err != nil {
			return err // another worker may hold the key: retried like any failure
		}
		row.Payload = payload
		// As json.Unmarshal, through a reused decoder (internal/jobtype, args.go).
		if err := jobtype.DecodeArgs(payload, into); err != nil {
			return Permanent(fmt.Errorf("decoding payload of kind %q into %T: %w", row.Kind, job.Args, err))
		}
		return fn(ctx, job)
	}}
	if p, ok := kindOf.(retryPolicyArgs); ok {
		h.Policy = p.RetryPolicy()
	}
	if p, ok := kindOf.(execute.TimeoutArgs); ok {
		h.Timeout = p.Timeout()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started.Load() {
		return w.startedErr(fmt.Sprintf("Handle(%q)", kind))
	}
	if _, dup := w.handlers[kind]; dup {
		return fmt.Errorf("skiplock: Handle: kind %q already has a handler", kind)
	}
	w.handlers[kind] = h
	return nil
}

// startedErr is the error of a registration (op: Handle, Use, HandleErrors) on a worker
// whose Run was called: it is running, or it ran and returned, and a Worker runs once.
func (w *Worker) startedErr(op string) error {
	select {
	case <-w.runDone:
		return fmt.Errorf("skiplock: %s: the worker has already run (a Worker runs once): register on a new Worker before its Run", op)
	default:
		return fmt.Errorf("skiplock: %s: the worker is already running: register before Run", op)
	}
}

// Run claims and runs jobs until ctx is cancelled, then shuts down gracefully:
//
//  1. it stops claiming and waits up to ShutdownTimeout for running handlers; the results
//     of those that return are recorded as usual;
//  2. it cancels the contexts of the handlers still running (cause: shutdown) and waits
//     up to min(ShutdownTimeout, 5s) more; the jobs of those that return with an error are
//     put back in the queue at once, due now, without using up an attempt (a nil return
//     is recorded as a success);
//  3. it keeps waiting for the handlers that ignore their context: their jobs stay with
//     this worker, their leases renewed, so no other worker runs them beside them; every
//     ShutdownTimeout it logs which jobs hold it up (id, kind, attempt, running for). As
//     each returns, its job is put back (an error) or its success recorded.
//
// Run returns nil once every handler has returned and its outcome is recorded, or an
// error if it cannot start (schema not migrated, already run). When the database does not
// answer during the shutdown, each outcome batch gives up after its 30 s write limit and
// the put-back of its jobs after 10 s more; Run then returns [ErrOutcomesNotRecorded]
// (their jobs run again elsewhere once the worker's lease lapses). A caller that cannot wait
// that long (a deploy with a kill deadline) calls [Worker.StopAndCancel]: Run then
// returns [ErrHandlersStillRunning] if it gave up on handlers still running, and the
// process must exit. When Run returns nil, none of its goroutines is left.
//
// While running, database errors (lost connections, a restarting server) are logged and
// retried; they do not stop Run, and at start each start-up statement is retried for up to
// 30 seconds, or until ctx is cancelled (or StopAndCancel is called): Run then returns nil
// at once, having run nothing. The parts start in the order of Worker.services and stop in the reverse
// order; a part that cannot start stops those already started.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if !w.started.CompareAndSwap(false, true) {
		w.mu.Unlock()
		return ErrWorkerStarted
	}
	defer close(w.runDone)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.cancelRun = cancel
	w.mu.Unlock()
	// Stopped while starting (ctx cancelled, StopAndCancel): nothing ran, nothing is
	// left to shut down, so Run returns nil at once, even while the database is out of
	// reach and the start-up statements are being retried.
	if err := pgutil.RetryAtStart(ctx, func(ctx context.Context) error {
		_, err := w.client.pool.Exec(ctx, w.checkSQL)
		return err
	}); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return w.client.wrapErr("worker start", err)
	}
	var taken int64
	if err := pgutil.RetryAtStart(ctx, func(ctx context.Context) (err error) {
		taken, err = w.elector.Reclaim.Predecessors(ctx, w.id)
		return err
	}); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return w.client.wrapErr("worker start", err)
	}
	if taken > 0 {
		w.logger.Info("skiplock: took back the running jobs an earlier process left under this worker's id", "jobs", taken)
	}
	w.checkConns()
	var parts lifecycle.Group
	w.qmu.Lock() // queues added or removed meanwhile wait, then meet the running parts
	if err := parts.Start(ctx, w.services()...); err != nil {
		w.qstate = queuesStopped
		w.qmu.Unlock()
		if ctx.Err() != nil {
			return nil // stopped while starting, as above
		}
		return err
	}
	w.qstate = queuesRunning
	w.qmu.Unlock()
	w.logger.Info("skiplock: worker started", "queues", w.queues.Len(), "version", moduleVersion())
	<-ctx.Done()
	stranded := w.lease.Stranded()
	w.qmu.Lock() // a queue change in progress ends first; later ones are refused
	w.qstate = queuesStopped
	w.qmu.Unlock()
	parts.Stop()
	w.outcomes.Stop()
	if n := w.held().Count(); n > 0 {
		w.logger.Error("skiplock: worker stopped with handlers still running; the process must exit", "running", n)
		w.runErr = fmt.Errorf("%w: %d", ErrHandlersStillRunning, n)
	}
	// The jobs whose outcome the shutdown could not write, nor put them back.
	if n := w.lease.Stranded() - stranded; n > 0 {
		w.logger.Error("skiplock: worker stopped without recording the outcomes of some jobs; they run again elsewhere once its lease lapses", "jobs", n)
		w.runErr = errors.Join(w.runErr, fmt.Errorf("%w: %d job(s) left running under worker %q, neither recorded nor put back: they will run again elsewhere once its lease lapses",
			ErrOutcomesNotRecorded, n, w.id))
	}
	if w.runErr != nil {
		return w.runErr
	}
	w.logger.Info("skiplock: worker stopped")
	return nil
}

// ErrOutcomesNotRecorded is returned by [Worker.Run] (and [Worker.StopAndCancel]) when
// the shutdown could neither write the outcomes of some jobs (their handlers returned)
// nor put them back in the queue: the database did not answer within the write limits
// (30 s for an outcome batch, then 10 s to put its jobs back). Its message says how many.
// Those jobs stay running under this worker, whatever their handlers returned, and run
// again elsewhere once the worker's lease (its row in the workers table, 10 s) lapses, as
// a dead worker's jobs do: they run at least once, none is lost. Test for it with
// [errors.Is].
var ErrOutcomesNotRecorded = errors.New("skiplock: the worker stopped without recording every outcome")

// ErrHandlersStillRunning is returned by [Worker.StopAndCancel] and [Worker.Run] when the
// worker stopped without waiting for handlers that ignore their cancelled context. Their
// goroutines still run and their jobs will run elsewhere once this worker's lease ends
// (the worker ends it as it stops, so at the next renewal of another worker): the
// process must exit now, or their effects may happen twice.
var ErrHandlersStillRunning = errors.New("skiplock: the worker stopped with handlers still running; the process must exit")

// StopAndCancel is the harder stop, for a caller that cannot wait for Run's graceful
// shutdown (a deploy with a kill deadline): it stops claiming, cancels every handler's
// context at once (cause: shutdown) and waits for the handlers until ctx ends, then for
// Run to return. If every handler returned, it returns what Run returns: nil when their
// jobs were put back or their results recorded, as in a graceful shutdown, and
// [ErrOutcomesNotRecorded] when the database did not answer. If ctx ends first, it gives up:
// Run stops renewing the worker's leases and ends its worker lease (its row in the
// workers table), so other workers take its jobs back at once, and both Run and
// StopAndCancel return an error matching [ErrHandlersStillRunning]. StopAndCancel waits
// at most a second more for Run: when the database does not answer, it returns while Run
// still waits for its last statements' time limits.
// The process must then exit: its handlers still run, and their jobs will run
// elsewhere. On a Worker whose Run has not been called, it does nothing.
func (w *Worker) StopAndCancel(ctx context.Context) error {
	w.mu.Lock()
	cancel := w.cancelRun
	w.mu.Unlock()
	if cancel == nil {
		return nil
	}
	w.executor.HardStop()
	cancel()
	select {
	case <-w.runDone:
	case <-ctx.Done():
		w.executor.Abandon() // too late if Run already stopped waiting for handlers: harmless
		// Run now ends the worker's lease and returns; with the database reachable that
		// takes milliseconds. With the database down its statements wait for their time
		// limits, and the caller's deadline has already passed: wait a moment, no more.
		t := time.NewTimer(stopAndCancelGrace)
		defer t.Stop()
		select {
		case <-w.runDone:
		case <-t.C:
			return fmt.Errorf("%w (and Run is still ending: the database did not answer within %s)", ErrHandlersStillRunning, stopAndCancelGrace)
		}
	}
	return w.runErr
}

// stopAndCancelGrace is how long StopAndCancel waits for Run after its context ended.
const stopAndCancelGrace = time.Second

// held is the set of attempts the worker runs.
func (w *Worker) held() *ownership.HeldJobs { return w.starter.Held }

// checkSchemaSQL fails with undefined_table when the schema is not migrated (up to the
// leader and workers tables of migrations 6 and 7, which the election needs).
const checkSchemaSQL = `SELECT 1 FROM {s}.jobs, {s}.leader, {s}.workers LIMIT 0`

// connsNeeded is how many pooled connections the worker's own statements can have in
// flight at once, and what each is for. Handlers' statements (and the failures they
// record) come on top.
func (w *Worker) connsNeeded() (int, string) {
	claims := claim.ClaimConns(w.queues.Len())
	n := claims + record.CompleterLoops + 1 + 1 // claims, success flushers, heartbeat, poll
	why := fmt.Sprintf("%d claims + %d success flushers + 1 heartbeat + 1 poll", claims, record.CompleterLoops)
	// The worker lease's renewals (and the election) run on a connection of their own,
	// outside the pool (internal/ownership, leaseconn.go); the reclaim after them, and the
	// leader's maintenance, run on the pool.
	n++
	why += " + 1 reclaim of dead workers' jobs"
	if len(w.leaderTasks.Tasks) > 0 {
		n += len(w.leaderTasks.Tasks)
		why += fmt.Sprintf(" + %d maintenance", len(w.leaderTasks.Tasks))
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

// The synchronous run of one job, in the caller's goroutine, that package skiplocktest
// offers users' tests (through internal/testbridge, so the root API does not grow): the
// real claim statement, the real handlers, hooks and recording; no goroutines to wait on.
var _ = testbridge.Provide(func(ctx context.Context, w *Worker, queue string) (*JobRow, JobResult, error) {
	return w.workOne(ctx, queue)
})

// workOne claims one due job of queue (one of the worker's queues: another name, a typo
// above all, is an error naming the worker's queues rather than an empty queue) and
// runs it to its recorded end: its success or failure is written before it returns. It
// returns a nil row when no job is due. The handler's context is derived from ctx; if ctx
// ends while the handler runs, the handler's error is recorded as a failed attempt like
// any other. It refuses a worker that runs or ran (Run and workOne would share the
// completer and the held jobs).
func (w *Worker) workOne(ctx context.Context, queue string) (*JobRow, JobResult, error) {
	if err := validQueue(queue); err != nil {
		return nil, JobResult{}, err
	}
	w.mu.Lock() // Handle may not add kinds while the job runs
	defer w.mu.Unlock()
	if w.started.Load() {
		return nil, JobResult{}, errors.New("skiplock: a worker that runs (or ran) Run cannot run jobs synchronously")
	}
	q := w.queues.Get(queue)
	if q == nil {
		names := w.queues.Names()
		for i, n := range names {
			names[i] = strconv.Quote(n)
		}
		return nil, JobResult{}, fmt.Errorf("skiplock: queue %q is not one this worker serves (its queues: %s): name one of them, or add it to WorkerConfig.Queues",
			queue, strings.Join(names, ", "))
	}
	jobs, err := claim.NewClaimer(w.client.db, w.cfg.VisibilityTimeout).Claim(ctx, queue, 1, w.id, nil)
	if err != nil || len(jobs) == 0 {
		return nil, JobResult{}, err
	}
	d, ok := w.starter.StartIn(ctx, jobs[0], q.HoldsSlot())
	if !ok {
		return nil, JobResult{}, claim.ErrHeldTwice
	}
	// Deferred, so that a handler that calls runtime.Goexit (t.FailNow in a test) and so
	// ends this goroutine has its recorded failure written too.
	defer func() {
		d.Job.Cancel(nil)
		w.starter.HandlerWG.Done()
		w.completer.FlushNow()
		w.failures.Flush() // a failure, too, is written before workOne returns
	}()
	res := w.executor.Execute(d, nil)
	return d.Row, res, nil
}
