// This file holds the Worker: NewWorker, which builds its parts (buildExecution) and
// declares the order they start and stop in (Worker.services), and the check of the pool
// against what they need. Handler registration is in handle.go, Run and the shutdown in
// run.go, the synchronous run of one job for package skiplocktest in workone.go; the
// parts live in their own files, and a job goes through them in the order
// docs/architecture.md walks.

package skiplock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/skiplock/skiplock/internal/claim"
	"github.com/skiplock/skiplock/internal/durable"
	"github.com/skiplock/skiplock/internal/execute"
	"github.com/skiplock/skiplock/internal/lifecycle"
	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/ownership"
	"github.com/skiplock/skiplock/internal/periodic"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/internal/record"
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
	gate     *pgutil.Gate // bounds the statements on the queues' rows by the fleet's size (admin.go, the fleet part)
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
	w.lease.Flows = c.flows // a workflow task sent dead by the put-back of an unwritable outcome is settled
	// CompleteTx (handle.go) writes an attempt's success as the completer would.
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
// timeout now: their contexts were cancelled and they have not returned. A handler is
// counted from one lease interval (VisibilityTimeout/3, 20s at defaults) after its
// timeout, so one that returns soon after its context ends is never counted. Their jobs
// stay with this worker, their leases renewed, until they return; each is logged once per
// lease interval and reported once to the error handlers' HandleStuck (HandleErrors).
func (w *Worker) Overrunning() int { return int(w.executor.Overrunning.Load()) }

// ID returns the worker's id, as recorded in locked_by.
func (w *Worker) ID() string { return w.id }

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
