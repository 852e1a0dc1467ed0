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
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Job is a claimed job with its args decoded into T, as a handler receives it.
type Job[T JobArgs] struct {
	*JobRow
	Args T
}

// Completion says what happens to a job row when its handler succeeds.
type Completion int

// The completion modes.
const (
	// CompletionArchive moves the row to jobs_archive with status succeeded: the hot table
	// stays small and the history stays queryable until the archive retention deletes it.
	CompletionArchive Completion = iota
	// CompletionDelete deletes the row: the least work per job, no history.
	CompletionDelete
	// CompletionKeep keeps the row in the jobs table with status succeeded; the sweeper
	// deletes it after the archive retention.
	CompletionKeep
)

// QueueConfig configures one queue of a [Worker].
type QueueConfig struct {
	// MaxWorkers is how many jobs of this queue run at once in this worker. Defaults to 100.
	MaxWorkers int
}

// WorkerConfig configures a [Worker]. The zero value works: it runs the "default" queue.
type WorkerConfig struct {
	// Queues to work, by name. Defaults to {"default": {MaxWorkers: 100}}.
	Queues map[string]QueueConfig
	// ID identifies this worker in locked_by; it must be unique among live workers.
	// Defaults to hostname-pid-random.
	ID string
	// PollInterval is the fallback poll: a queue is claimed from at least this often even
	// when no notification arrives (notifications are lost while nobody listens, and
	// scheduled, retried and reclaimed jobs send none). Defaults to 1s.
	PollInterval time.Duration
	// FetchCooldown is how long the claim loop may wait for more free slots when only a few
	// are free and the queue has a backlog, so that it claims in batches. Defaults to 1ms;
	// negative means never wait.
	FetchCooldown time.Duration
	// ShutdownTimeout is how long Run waits for running handlers after its context is
	// cancelled, before cancelling their contexts and putting their jobs back in the queue.
	// Defaults to 10s.
	ShutdownTimeout time.Duration
	// VisibilityTimeout is how long a running job may go without a heartbeat before the
	// sweeper takes it back from its (presumably dead) worker. The worker refreshes its
	// jobs every VisibilityTimeout/3, so this bounds the time to recover from a crash, not
	// the length of a job. Defaults to 1m: three heartbeat periods of 20s, long enough to
	// ride out a database failover or a long GC pause without running a job twice.
	VisibilityTimeout time.Duration
	// SweepInterval is how often this worker's embedded [Sweeper] runs. Defaults to 30s;
	// negative disables the embedded sweeper (run a [Sweeper] elsewhere then).
	SweepInterval time.Duration
	// ArchiveRetention is how long finished jobs are kept before the sweeper deletes them.
	// Defaults to 7 days.
	ArchiveRetention time.Duration
	// Completion says what happens to succeeded jobs. Defaults to CompletionArchive.
	Completion Completion
	// CompleteBatchSize is the most successes recorded by one statement. Defaults to 500.
	CompleteBatchSize int
	// CompleteFlushInterval is how long a success may wait to be batched with others.
	// Defaults to 2ms.
	CompleteFlushInterval time.Duration
	// RetryPolicy computes the delay before a failed job runs again. Defaults to
	// BackoffPolicy{}. A kind's args type may override it with a RetryPolicy() method.
	RetryPolicy RetryPolicy
	// ListenURL is a connection string for the LISTEN connection, for setups where the
	// pool goes through a transaction-pooling PgBouncer (LISTEN needs a real session).
	// Defaults to the pool's own connection settings.
	ListenURL string
	// Logger receives the worker's logs. Defaults to the client's logger.
	Logger *slog.Logger
	// Hooks are told when each job starts and ends, for metrics and tracing.
	Hooks []Hook
}

// Hook observes job execution. Methods are called from the job's goroutine and must be
// safe for concurrent use.
type Hook interface {
	// JobStarted is called before the handler; the context it returns is the handler's
	// (return ctx unchanged if there is nothing to add, e.g. a tracing span).
	JobStarted(ctx context.Context, job *JobRow) context.Context
	// JobFinished is called after the handler with the outcome.
	JobFinished(ctx context.Context, job *JobRow, res JobResult)
}

// JobResult is what a handler run came to, as a [Hook] sees it.
type JobResult struct {
	// Status is the job's new state: succeeded, queued (retry or snooze), failed, dead or
	// cancelled.
	Status   JobStatus
	Err      error         // the handler's error, nil on success
	Duration time.Duration // time spent in the handler
	Panicked bool
}

// ErrWorkerStarted is returned by Run on a Worker that already ran.
var ErrWorkerStarted = errors.New("skiplock: worker already started: a Worker runs once")

// errShutdown is the cancel cause of job contexts cut off by shutdown.
var errShutdown = errors.New("skiplock: worker shutting down")

// errJobLost is the cancel cause of a job whose lease this worker no longer holds
// (reclaimed by the sweeper, or cancelled).
var errJobLost = errors.New("skiplock: job is no longer held by this worker (cancelled or reclaimed)")

type handler struct {
	run    func(ctx context.Context, row *JobRow) error
	policy RetryPolicy
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

	queues map[string]*queueRunner

	running   sync.Map // jobKey -> context.CancelCauseFunc of the job's context
	handlerWG sync.WaitGroup
	completer *completer
}

type jobKey struct {
	id       int64
	attempts int
}

// NewWorker returns a Worker for client configured by cfg.
func NewWorker(client *Client, cfg WorkerConfig) (*Worker, error) {
	if client == nil {
		return nil, errors.New("skiplock: NewWorker: client is nil")
	}
	if len(cfg.Queues) == 0 {
		cfg.Queues = map[string]QueueConfig{DefaultQueue: {}}
	}
	for name, q := range cfg.Queues {
		if err := validQueue(name); err != nil {
			return nil, err
		}
		if q.MaxWorkers < 0 {
			return nil, fmt.Errorf("skiplock: queue %q: MaxWorkers %d is negative", name, q.MaxWorkers)
		}
	}
	if cfg.ID == "" {
		cfg.ID = defaultWorkerID()
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.FetchCooldown == 0 {
		cfg.FetchCooldown = time.Millisecond
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 10 * time.Second
	}
	if cfg.VisibilityTimeout <= 0 {
		cfg.VisibilityTimeout = time.Minute
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = 30 * time.Second
	}
	if cfg.ArchiveRetention <= 0 {
		cfg.ArchiveRetention = 7 * 24 * time.Hour
	}
	if cfg.Completion < CompletionArchive || cfg.Completion > CompletionKeep {
		return nil, fmt.Errorf("skiplock: unknown Completion %d", cfg.Completion)
	}
	if cfg.CompleteBatchSize <= 0 {
		cfg.CompleteBatchSize = 500
	}
	if cfg.CompleteFlushInterval <= 0 {
		cfg.CompleteFlushInterval = 2 * time.Millisecond
	}
	if cfg.RetryPolicy == nil {
		cfg.RetryPolicy = BackoffPolicy{}
	}
	if cfg.Logger == nil {
		cfg.Logger = client.logger
	}
	w := &Worker{
		client:   client,
		cfg:      cfg,
		id:       cfg.ID,
		logger:   cfg.Logger.With("worker", cfg.ID),
		handlers: map[string]handler{},
		queues:   map[string]*queueRunner{},
	}
	for name, q := range cfg.Queues {
		n := q.MaxWorkers
		if n == 0 {
			n = 100
		}
		q := &queueRunner{w: w, name: name, max: int64(n), jobs: make(chan dispatched, n)}
		for range fetchersPerQueue {
			q.wakes = append(q.wakes, make(chan struct{}, 1))
		}
		w.queues[name] = q
	}
	w.completer = newCompleter(w)
	return w, nil
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

// Run claims and runs jobs until ctx is cancelled, then shuts down gracefully: it stops
// claiming, waits up to ShutdownTimeout for running handlers, then cancels their contexts
// and puts the jobs that did not finish back in the queue at once, due now. Putting a job
// back this way does not use up an attempt. Run returns nil after a graceful shutdown, or
// an error if it cannot start (schema not migrated, already run). A Worker runs once.
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
	_, err := w.client.pool.Exec(cctx, w.client.sql.checkSchema)
	cancel()
	if err != nil {
		return w.client.wrapErr("worker start", err)
	}

	// Job contexts outlive ctx: they end only at the shutdown deadline.
	jobBase, cancelJobs := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelJobs(errShutdown)
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var bgWG, fetchWG sync.WaitGroup

	bgWG.Add(1)
	go func() { defer bgWG.Done(); w.completer.run() }()
	bgWG.Add(1)
	go func() { defer bgWG.Done(); w.heartbeatLoop(bg) }()
	if w.cfg.SweepInterval > 0 {
		sw, _ := NewSweeper(w.client, SweeperConfig{
			Interval: w.cfg.SweepInterval, VisibilityTimeout: w.cfg.VisibilityTimeout,
			ArchiveRetention: w.cfg.ArchiveRetention, Logger: w.logger,
		})
		bgWG.Add(1)
		go func() { defer bgWG.Done(); _ = sw.Run(bg) }()
	}
	l, err := w.newListener()
	if err != nil {
		stopBG()
		w.completer.stop()
		bgWG.Wait()
		return err
	}
	bgWG.Add(1)
	go func() { defer bgWG.Done(); l.run(bg) }()

	var runnersWG sync.WaitGroup
	for _, q := range w.queues {
		for range q.max {
			runnersWG.Add(1)
			go func() { defer runnersWG.Done(); q.runner() }()
		}
		for _, wake := range q.wakes {
			fetchWG.Add(1)
			go func() { defer fetchWG.Done(); q.run(ctx, jobBase, wake) }()
		}
	}
	w.logger.Info("skiplock: worker started", "queues", len(w.queues))

	<-ctx.Done()
	fetchWG.Wait() // no more claims
	for _, q := range w.queues {
		close(q.jobs) // runners exit once their current job is done
	}
	w.logger.Info("skiplock: worker shutting down", "running", w.countRunning())

	allReturned := waitTimeout(&w.handlerWG, w.cfg.ShutdownTimeout)
	if !allReturned {
		cancelJobs(errShutdown)
		// Handlers that honour their context return now; give them a moment.
		allReturned = waitTimeout(&w.handlerWG, min(w.cfg.ShutdownTimeout, 2*time.Second))
	}
	if allReturned {
		runnersWG.Wait()
	}
	w.completer.stop() // flushes the successes already reported
	<-w.completer.done
	w.releaseRunning()
	stopBG()
	bgWG.Wait()
	w.logger.Info("skiplock: worker stopped")
	return nil
}

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

func (w *Worker) countRunning() int {
	n := 0
	w.running.Range(func(_, _ any) bool { n++; return true })
	return n
}

// runningKeys lists the jobs this worker runs, by ascending id: batched statements lock
// rows in the order given, and one order everywhere means they cannot deadlock.
func (w *Worker) runningKeys() (ids []int64, attempts []int32) {
	var keys []jobKey
	w.running.Range(func(k, _ any) bool {
		keys = append(keys, k.(jobKey))
		return true
	})
	sort.Slice(keys, func(i, j int) bool { return keys[i].id < keys[j].id })
	for _, k := range keys {
		ids = append(ids, k.id)
		attempts = append(attempts, int32(k.attempts))
	}
	return ids, attempts
}

// releaseRunning puts the jobs whose handlers did not finish back in the queue.
func (w *Worker) releaseRunning() {
	ids, attempts := w.runningKeys()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tag, err := w.client.pool.Exec(ctx, w.client.sql.release, ids, attempts, w.id)
	if err != nil {
		w.logger.Error("skiplock: putting unfinished jobs back failed; the sweeper will reclaim them after the visibility timeout",
			"jobs", len(ids), "err", err)
		return
	}
	w.logger.Info("skiplock: unfinished jobs put back in the queue", "jobs", tag.RowsAffected())
	for i := range ids {
		w.running.Delete(jobKey{ids[i], int(attempts[i])})
	}
}

// releaseSQL gives jobs cut off by shutdown back to the queue, due now, and gives back the
// attempt (the job did not fail; the worker stopped). Fenced like every other update.
var releaseSQL = `UPDATE {s}.jobs SET
	status = 'queued', run_at = now(), attempts = attempts - 1, locked_at = NULL, locked_by = NULL
WHERE ` + heldSQL

// heartbeatSQL refreshes the lease of this worker's running jobs and returns the ones it
// still holds; a job missing from the result was cancelled or reclaimed. The refresh locks
// with SKIP LOCKED: a row locked by another statement (its success being recorded, the
// sweeper) is one the heartbeat need not touch, and never waiting means the heartbeat can
// never deadlock with them. Skipped rows are still reported as held: they are, as far as
// this snapshot can tell, and the next heartbeat looks again.
var heartbeatSQL = `WITH lockable AS (
	SELECT id FROM {s}.jobs WHERE ` + heldSQL + `
	FOR UPDATE SKIP LOCKED
), refreshed AS (
	UPDATE {s}.jobs SET locked_at = now() WHERE id IN (SELECT id FROM lockable)
)
SELECT id, attempts FROM {s}.jobs WHERE ` + heldSQL

func (w *Worker) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.VisibilityTimeout / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.heartbeat(ctx)
		}
	}
}

func (w *Worker) heartbeat(ctx context.Context) {
	ids, attempts := w.runningKeys()
	if len(ids) == 0 {
		return
	}
	rows, err := w.client.pool.Query(ctx, w.client.sql.heartbeat, ids, attempts, w.id)
	if err != nil {
		w.logger.Warn("skiplock: heartbeat failed", "jobs", len(ids), "err", err)
		return
	}
	held := map[jobKey]bool{}
	var key jobKey
	_, err = pgx.ForEachRow(rows, []any{&key.id, &key.attempts}, func() error {
		held[key] = true
		return nil
	})
	if err != nil {
		w.logger.Warn("skiplock: heartbeat failed", "jobs", len(ids), "err", err)
		return
	}
	for i := range ids {
		k := jobKey{ids[i], int(attempts[i])}
		if held[k] {
			continue
		}
		if v, ok := w.running.Load(k); ok {
			w.logger.Warn("skiplock: job no longer held by this worker; cancelling its context", "job", k.id, "attempt", k.attempts)
			v.(context.CancelCauseFunc)(errJobLost)
		}
	}
}

// fetchersPerQueue is how many claim loops each queue runs. While one loop's claim is in
// flight, another can claim the slots that free up meanwhile: the claims pipeline, and a
// busy database gives the worker's claims a fairer share of its CPU.
const fetchersPerQueue = 2

// queueRunner holds one queue's claim loops, slots and runners.
type queueRunner struct {
	w      *Worker
	name   string
	max    int64
	active atomic.Int64 // slots taken: jobs running, or reserved by a claim in flight
	more   atomic.Bool  // the last claim filled its batch: there may be a backlog
	wakes  []chan struct{}
	jobs   chan dispatched // to the runners
}

// signal wakes the claim loops; wake-ups coalesce.
func (q *queueRunner) signal() {
	for _, c := range q.wakes {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// reserve takes every free slot for one claim and returns how many; the claim gives back
// those it does not fill. Two claim loops never count the same slot.
func (q *queueRunner) reserve() int64 {
	for {
		cur := q.active.Load()
		if cur >= q.max {
			return 0
		}
		if q.active.CompareAndSwap(cur, q.max) {
			return q.max - cur
		}
	}
}

func (q *queueRunner) run(ctx, jobBase context.Context, wake <-chan struct{}) {
	poll := time.NewTimer(0) // claim at once on start
	defer poll.Stop()
	const firstDelay = 10 * time.Millisecond
	errDelay := firstDelay
	for {
		fromPoll := false
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-poll.C:
			fromPoll = true
		}
		if !fromPoll && !poll.Stop() {
			select {
			case <-poll.C:
			default:
			}
		}
		for ctx.Err() == nil {
			if free := q.max - q.active.Load(); free <= 0 {
				break
			} else if free < (q.max+3)/4 && q.more.Load() && q.w.cfg.FetchCooldown > 0 {
				// A backlog and few free slots: let a few more handlers finish so the next
				// claim is a batch, not a trickle.
				sleepCtx(ctx, q.w.cfg.FetchCooldown)
			}
			free := q.reserve()
			if free == 0 {
				break
			}
			// The claim must not be cut off by shutdown: cancelling it mid-flight could commit
			// the claim and lose its result, leaving jobs running for nobody until the
			// sweeper takes them back. Jobs it returns run; shutdown waits for them.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
			jobs, err := q.w.client.claim(cctx, q.name, int(free), q.w.id)
			cancel()
			q.active.Add(int64(len(jobs)) - free) // give back the slots not filled
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				q.w.logger.Warn("skiplock: claim failed; retrying", "queue", q.name, "err", err, "retry_in", errDelay)
				sleepCtx(ctx, errDelay)
				// A terminated server leaves every pooled connection dead: the first retries
				// are quick, each one discards a dead connection; then back off.
				if errDelay < 40*time.Millisecond {
					errDelay += firstDelay / 2
				} else {
					errDelay = min(errDelay*2, 5*time.Second)
				}
				continue
			}
			errDelay = firstDelay
			q.more.Store(int64(len(jobs)) == free)
			for _, j := range jobs {
				q.w.start(jobBase, q, j)
			}
			if int64(len(jobs)) < free {
				break
			}
		}
		poll.Reset(q.w.cfg.PollInterval)
	}
}

// claimTimeout bounds one claim statement.
const claimTimeout = 30 * time.Second

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// dispatched is a claimed job on its way to a runner.
type dispatched struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	key    jobKey
	row    *JobRow
}

// start hands one claimed job to the queue's runners. The channel has room for MaxWorkers
// jobs and a job is only claimed for a free slot, so this never blocks.
func (w *Worker) start(jobBase context.Context, q *queueRunner, row *JobRow) {
	jobCtx, cancel := context.WithCancelCause(jobBase)
	key := jobKey{row.ID, row.Attempts}
	w.running.Store(key, cancel)
	w.handlerWG.Add(1) // its slot was reserved before the claim
	q.jobs <- dispatched{ctx: jobCtx, cancel: cancel, key: key, row: row}
}

// runner is one of a queue's MaxWorkers long-lived goroutines. Reusing them (rather than
// a goroutine per job) keeps their grown stacks: handlers that decode JSON would otherwise
// pay for stack growth on every job.
func (q *queueRunner) runner() {
	for d := range q.jobs {
		q.w.execute(d.ctx, d.key, d.row)
		d.cancel(nil)
		q.active.Add(-1)
		if q.more.Load() {
			q.signal()
		}
		q.w.handlerWG.Done()
	}
}

func (w *Worker) execute(ctx context.Context, key jobKey, row *JobRow) {
	// No lock: Handle refuses new kinds once Run has started, so the map is read-only here.
	h, ok := w.handlers[row.Kind]
	for _, hk := range w.cfg.Hooks {
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

	if err != nil && errors.Is(context.Cause(ctx), errShutdown) {
		// Cut off by shutdown: leave it registered so Run puts it back in the queue.
		w.report(ctx, row, JobResult{Status: StatusQueued, Err: err, Duration: dur, Panicked: panicked})
		return
	}
	w.running.Delete(key)
	if errors.Is(context.Cause(ctx), errJobLost) {
		w.logger.Info("skiplock: result of a job this worker no longer holds is dropped", "job", row.ID, "attempt", row.Attempts)
		return
	}
	if err == nil {
		w.completer.add(key)
		w.report(ctx, row, JobResult{Status: StatusSucceeded, Duration: dur})
		return
	}
	policy := w.cfg.RetryPolicy
	if h.policy != nil {
		policy = h.policy
	}
	status := w.recordFailure(row, err, policy)
	w.report(ctx, row, JobResult{Status: status, Err: err, Duration: dur, Panicked: panicked})
}

func (w *Worker) report(ctx context.Context, row *JobRow, res JobResult) {
	for _, hk := range w.cfg.Hooks {
		hk.JobFinished(ctx, row, res)
	}
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

// recordFailure writes a failed attempt (retry, dead, failed, cancelled or snoozed) with
// one fenced statement and returns the job's new status.
func (w *Worker) recordFailure(row *JobRow, herr error, policy RetryPolicy) JobStatus {
	c := w.client
	var (
		q    string
		args = []any{row.ID, row.Attempts, w.id}
		msg  = storableMessage(herr.Error())
		re   *resultError
	)
	verdict := resultKind(0) // a plain error: retry
	if errors.As(herr, &re) {
		verdict = re.kind
	}
	switch verdict {
	case resultSnooze:
		q = c.sql.snooze
		args = append(args, re.snooze)
	case resultPermanent:
		q = c.sql.fail
		args = append(args, string(StatusFailed), msg)
	case resultCancel:
		q = c.sql.fail
		args = append(args, string(StatusCancelled), msg)
	default:
		var delay time.Duration
		if row.Attempts < row.MaxAttempts {
			delay = policy.NextRetry(row)
		}
		q = c.sql.retry
		args = append(args, delay, msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var status string
	var runAt time.Time
	err := retryDB(ctx, func() error { return c.pool.QueryRow(ctx, q, args...).Scan(&status, &runAt) })
	if errors.Is(err, pgx.ErrNoRows) {
		w.logger.Warn("skiplock: stale result ignored: the job was reclaimed or cancelled since this worker claimed it",
			"job", row.ID, "attempt", row.Attempts)
		return row.Status
	}
	if err != nil {
		w.logger.Error("skiplock: recording a failed attempt failed; the sweeper will reclaim the job",
			"job", row.ID, "attempt", row.Attempts, "err", err)
		return StatusRunning
	}
	w.logger.Debug("skiplock: job attempt failed", "job", row.ID, "kind", row.Kind, "attempt", row.Attempts,
		"status", status, "run_at", runAt, "err", msg)
	return JobStatus(status)
}

// maxErrorBytes bounds a recorded error message.
const maxErrorBytes = 8192

// storableMessage makes a handler's error message fit a text column: Postgres refuses
// NUL bytes and invalid UTF-8, and a refused statement would leave the job running for
// nobody until the sweeper took it back. Long messages are cut at a rune boundary.
func storableMessage(msg string) string {
	msg = strings.ToValidUTF8(strings.ReplaceAll(msg, "\x00", ""), "\uFFFD")
	if len(msg) <= maxErrorBytes {
		return msg
	}
	cut := maxErrorBytes
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

// retryDB retries fn while its error is transient (see [transient]), with backoff, until
// ctx ends. Every statement it runs is fenced, so running one twice is harmless.
func retryDB(ctx context.Context, fn func() error) error {
	delay := 20 * time.Millisecond
	for {
		err := fn()
		if err == nil || !transient(err) || ctx.Err() != nil {
			return err
		}
		sleepCtx(ctx, delay)
		if ctx.Err() != nil {
			return err
		}
		delay = min(delay*2, 2*time.Second)
	}
}

// transient reports whether err may go away on retry: a lost or refused connection, a
// server shutting down or restarting, a deadlock or serialization failure. A Postgres
// verdict on the statement itself (a constraint, a syntax error) is not transient.
func transient(err error) bool {
	if err == nil || errors.Is(err, pgx.ErrNoRows) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return true // network errors, closed connections, pool exhaustion
	}
	switch {
	case strings.HasPrefix(pgErr.Code, "08"): // connection exception
		return true
	case strings.HasPrefix(pgErr.Code, "57P"): // admin shutdown, crash shutdown, cannot connect now
		return true
	case pgErr.Code == "40P01", pgErr.Code == "40001", pgErr.Code == "55P03": // deadlock, serialization, lock not available
		return true
	}
	return false
}

// completer batches successes into one statement per flush.
type completer struct {
	w       *Worker
	ch      chan jobKey
	quit    chan struct{}
	done    chan struct{}
	stopped sync.Once
}

func newCompleter(w *Worker) *completer {
	return &completer{w: w, ch: make(chan jobKey, 4096), quit: make(chan struct{}), done: make(chan struct{})}
}

func (c *completer) add(k jobKey) { c.ch <- k }

func (c *completer) stop() { c.stopped.Do(func() { close(c.quit) }) }

// completerLoops is how many success batches may be in flight at once.
const completerLoops = 2

// run runs completerLoops batching loops over the same channel until stop, then closes done.
func (c *completer) run() {
	defer close(c.done)
	var wg sync.WaitGroup
	for range completerLoops {
		wg.Add(1)
		go func() { defer wg.Done(); c.loop() }()
	}
	wg.Wait()
}

func (c *completer) loop() {
	batch := make([]jobKey, 0, c.w.cfg.CompleteBatchSize)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case k := <-c.ch:
			if len(batch) == 0 {
				timer.Reset(c.w.cfg.CompleteFlushInterval)
			}
			batch = append(batch, k)
			if len(batch) >= c.w.cfg.CompleteBatchSize {
				timer.Stop()
				batch = c.flush(batch)
			}
		case <-timer.C:
			batch = c.flush(batch)
		case <-c.quit:
			timer.Stop()
			for {
				select {
				case k := <-c.ch:
					batch = append(batch, k)
					if len(batch) >= c.w.cfg.CompleteBatchSize {
						batch = c.flush(batch)
					}
				default:
					c.flush(batch)
					return
				}
			}
		}
	}
}

func (c *completer) flush(batch []jobKey) []jobKey {
	if len(batch) == 0 {
		return batch
	}
	// Sorted ids take row locks in one order, so concurrent batches cannot deadlock.
	sort.Slice(batch, func(i, j int) bool { return batch[i].id < batch[j].id })
	ids := make([]int64, len(batch))
	attempts := make([]int32, len(batch))
	for i, k := range batch {
		ids[i], attempts[i] = k.id, int32(k.attempts)
	}
	cl := c.w.client
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n int64
	err := retryDB(ctx, func() error {
		tag, err := cl.pool.Exec(ctx, cl.sql.complete[c.w.cfg.Completion], ids, attempts, c.w.id)
		n = tag.RowsAffected()
		return err
	})
	switch {
	case err != nil:
		c.w.logger.Error("skiplock: recording successes failed; the sweeper will reclaim those jobs and they will run again",
			"jobs", len(batch), "err", err)
	case n < int64(len(batch)):
		c.w.logger.Warn("skiplock: stale successes ignored: jobs were reclaimed or cancelled since this worker claimed them",
			"stale", int64(len(batch))-n)
	}
	return batch[:0]
}

// heldSQL is the condition that picks, among the ids in $1 (ascending) with the attempts
// in $2, the rows this worker ($3) still holds: the fence of every batched statement
// about a worker's own jobs.
//
//   - id = ANY($1) is the only index condition the planner can use: status is compared as
//     status || ”, which it cannot match to the partial indexes' predicates. With a
//     table that had no statistics, it once preferred scanning jobs_running_idx once per
//     id — a million rows read for a batch of 500.
//   - The statements act by id, never by a ctid read earlier in the statement: a row
//     updated (by a heartbeat, say) after the statement's snapshot would be invisible at
//     its new ctid, and its success silently dropped. By id, Postgres waits for the other
//     update, rechecks this condition on the newest row version and acts on it.
const heldSQL = `id = ANY ($1::bigint[]) AND (status || '') = 'running' AND locked_by = $3
	AND attempts = ($2::int[])[array_position($1::bigint[], id)]`

// completeSQL records successes, matching the claimed attempts (fencing).
var completeSQL = map[Completion]string{
	// One statement moves the rows: the DELETE's RETURNING feeds the archive INSERT.
	CompletionArchive: `WITH done AS (
	DELETE FROM {s}.jobs WHERE ` + heldSQL + `
	RETURNING *
)
INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts,
	max_attempts, locked_by, last_error, errors, unique_key, created_at, finished_at)
SELECT id, queue, kind, payload, 'succeeded', priority, run_at, attempts,
	max_attempts, locked_by, last_error, errors, unique_key, created_at, now()
FROM done`,
	CompletionDelete: `DELETE FROM {s}.jobs WHERE ` + heldSQL,
	CompletionKeep: `UPDATE {s}.jobs SET status = 'succeeded', finished_at = now(), locked_at = NULL
WHERE ` + heldSQL,
}
