// This file holds the execution of claimed jobs: the start of each one (its context, its
// place among the held attempts), the runners that take the jobs a queue's claim loops
// hand over, one attempt's timeout (WorkerConfig.JobTimeout, a per-kind Timeout method,
// EnqueueOptions.Timeout), the call of the handler with panic recovery (and the record
// of a handler that ends its goroutine with runtime.Goexit), and the drain of
// the runners at shutdown. Each finished attempt goes to the outcome recorder
// (internal/record, outcome.go), in one call.

package execute

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/claim"
	"github.com/skiplock/skiplock/internal/durable"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/ownership"
	"github.com/skiplock/skiplock/internal/record"
)

type Handler struct {
	Run     func(ctx context.Context, row *jobtype.JobRow) error
	Policy  jobtype.RetryPolicy
	Timeout time.Duration // the kind's Timeout(); 0: the worker's
}

// TimeoutArgs is implemented by args types with a kind-specific job timeout.
type TimeoutArgs interface {
	Timeout() time.Duration
}

// JobStarter registers claimed jobs: the claim loops call it for each job they claim,
// before handing it to a runner.
type JobStarter struct {
	Held     *ownership.HeldJobs
	Slots    *record.SlotJobs
	MaxBytes int                // the client's MaxPayloadBytes, for outputs (the root's progress.go)
	Attempt  *record.AttemptRef // given to every claimed row, for CompleteTx
	Durable  *durable.Engine    // records the steps of every attempt (Step, Sleep, AwaitSignal); nil: none

	// Base is the context job contexts derive from: set by the executor's Start, before
	// any claim loop runs, and cancelled (cause errShutdown) at its Stop.
	Base      context.Context
	Cancel    context.CancelCauseFunc
	HandlerWG sync.WaitGroup // jobs started whose handlers have not returned
}

// SetBase makes a context derived from ctx, but not cancelled with it, the base of the
// job contexts, and returns it; Cancel ends it and the contexts of every held attempt.
func (s *JobStarter) SetBase(ctx context.Context) context.Context {
	base, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	s.Base = base
	s.Cancel = func(cause error) {
		cancel(cause)
		// The job contexts derived from base do not watch it (StartIn): they end here.
		s.Held.CancelAll(context.Cause(base))
	}
	return base
}

// Start registers the claimed job cj with a context derived from the executor's base.
// slot: it was claimed under a concurrency limit (queueRunner.holdsSlot). False, with
// nothing registered, when the worker holds the attempt already (a claim handed out a
// token this worker runs: claim.ClaimLoopConfig.Start).
func (s *JobStarter) Start(cj claim.ClaimedJob, slot bool) (claim.Dispatched, bool) {
	return s.StartIn(s.Base, cj, slot)
}

// StartIn registers the claimed job cj: its context (a jobtype.JobCtx, which carries its
// state and ends with base), and its place among the held jobs, with the lease its claim
// wrote. Its slot was reserved before the claim. False, with nothing registered, when the
// worker holds the attempt already.
func (s *JobStarter) StartIn(base context.Context, cj claim.ClaimedJob, slot bool) (claim.Dispatched, bool) {
	// A context derived from the starter's own base does not watch it: Cancel ends every
	// held attempt's context with it, and one that starts meanwhile sees it ended below.
	ownBase := base == s.Base
	jobCtx := jobtype.NewJobCtx(base, s.MaxBytes, !ownBase)
	st := jobCtx.State()
	st.Row = cj.Row
	if s.Durable != nil {
		st.Durable = s.Durable
	}
	key := jobtype.AttemptKey{ID: cj.Row.ID, Fence: cj.Fence}
	if !s.Held.Add(key, jobCtx, cj.Leased, st, cj.Row) {
		jobCtx.Cancel(context.Canceled) // ends its watch of base, if any; no one saw it
		return claim.Dispatched{}, false
	}
	cj.Row.Fence = cj.Fence
	if s.Attempt != nil {
		jobtype.SetAttempt(cj.Row, s.Attempt)
	}
	if ownBase && base.Err() != nil {
		jobCtx.Cancel(context.Cause(base)) // Cancel ran before Add: it did not see this attempt
	}
	s.HandlerWG.Add(1)
	if slot {
		s.Slots.Take()
	}
	return claim.Dispatched{Job: jobCtx, Key: key, Row: cj.Row, Timeout: cj.Timeout, Slot: slot}, true
}

// ExecutorConfig is what the executor is built from.
type ExecutorConfig struct {
	Handlers        map[string]Handler // the Worker's registry; read-only once Run started
	Hooks           []jobtype.Hook
	JobTimeout      time.Duration
	RetryPolicy     jobtype.RetryPolicy
	LeaseInterval   time.Duration // a handler past its timeout by this much is reported overrunning, and every interval after
	ShutdownTimeout time.Duration
	Logger          *slog.Logger
	MW              *Middlewares            // Use, UseKind, HandleErrors (the root's middleware.go)
	Marks           *ownership.OverrunMarks // marks overrunning attempts in the database (internal/ownership, overrunmark.go)
}

// Executor runs the handlers of one worker's claimed jobs. As a Service, its Start sets
// the base of the job contexts and starts each queue's runners; its Stop drains them
// (Worker.Run says how).
type Executor struct {
	cfg      ExecutorConfig
	starter  *JobStarter
	outcomes *record.OutcomeRecorder
	held     *ownership.HeldJobs
	queues   *claim.QueueSet
	runners  sync.WaitGroup
	// startHooks are the hooks whose JobStarted does something: cfg.Hooks less the
	// error hook (ErrorHook), which every worker has and whose JobStarted returns its
	// context as it is.
	startHooks []jobtype.Hook
	// Overrunning counts the handlers running past their timeout (overrun).
	Overrunning atomic.Int64
	// The shutdown: hard is closed by a hard stop (cancel the handlers at once), giveUp
	// when the caller stops waiting for them; done once every handler has returned.
	hard, giveUp         chan struct{}
	hardOnce, giveUpOnce sync.Once
	doneOnce             sync.Once
	done                 chan struct{}
}

func NewExecutor(cfg ExecutorConfig, starter *JobStarter, outcomes *record.OutcomeRecorder, queues *claim.QueueSet) *Executor {
	var startHooks []jobtype.Hook
	for _, hk := range cfg.Hooks {
		if _, errorHook := hk.(ErrorHook); !errorHook {
			startHooks = append(startHooks, hk)
		}
	}
	return &Executor{cfg: cfg, starter: starter, outcomes: outcomes, held: starter.Held, queues: queues, startHooks: startHooks,
		hard: make(chan struct{}), giveUp: make(chan struct{})}
}

// Start sets the base of the job contexts — it outlives ctx: job contexts end only at the
// shutdown deadline — and lets each queue start up to MaxWorkers runners as its jobs come.
func (e *Executor) Start(ctx context.Context) error {
	e.starter.SetBase(ctx)
	for _, q := range e.queues.All() {
		e.Grow(q)
	}
	return nil
}

// Grow lets q's hand-off start runners up to one per slot (MaxWorkers, which may have been
// raised at run time), as jobs come and find none free (claim.Handoff). Lowered,
// MaxWorkers leaves the extra runners idle: the queue claims no more than its slots, so
// they only wait.
func (e *Executor) Grow(q *claim.QueueRunner) {
	q.Jobs.SetSpawn(int(q.Max.Load()), func() {
		q.Ran.Add(1)
		e.runners.Go(func() { defer q.Ran.Done(); e.runner(q) })
	})
}

// Stop drains the runners, once the claim loops have stopped: it waits up to
// ShutdownTimeout for running handlers, cancels the contexts of those still running
// (cause errShutdown) and waits up to min(ShutdownTimeout, shutdownGrace) more, then
// puts back the jobs cut off whose handlers returned. Then it keeps waiting for the
// handlers still running, their leases renewed (the lease stops after the executor),
// logging every ShutdownTimeout which jobs hold it up, and putting back each job cut
// off as its handler returns — until every handler has returned, or until giveUp
// (Worker.StopAndCancel gave up waiting). A hard stop (Worker.StopAndCancel) cancels
// the handlers at once instead of after ShutdownTimeout.
func (e *Executor) Stop() {
	for _, q := range e.queues.All() {
		q.CloseJobs() // runners exit once their current job is done
	}
	e.cfg.Logger.Info("skiplock: worker shutting down", "running", e.held.Count())
	done := e.handlersDone()
	if !e.waitFor(done, e.cfg.ShutdownTimeout, e.hard) {
		e.starter.Cancel(record.ErrShutdown)
		// Handlers that honour their context return now; give them a moment.
		e.waitFor(done, min(e.cfg.ShutdownTimeout, shutdownGrace), e.giveUp)
	}
	e.outcomes.ReleaseCutOff()
	t := time.NewTicker(e.cfg.ShutdownTimeout)
	defer t.Stop()
	for {
		select {
		case <-done:
			e.starter.Cancel(record.ErrShutdown)
			e.runners.Wait()
			e.cfg.Marks.Wait()
			return
		case <-e.giveUp:
			e.cfg.Logger.Error("skiplock: stopped waiting for handlers that ignore their cancelled context; their jobs run elsewhere once this worker's lease ends: the process must exit now",
				"running", e.held.Running())
			return
		case <-t.C:
			e.cfg.Logger.Warn("skiplock: shutdown waits for handlers that ignore their cancelled context; their jobs stay with this worker, leases renewed, until they return (Worker.StopAndCancel gives up)",
				"running", e.held.Running())
		}
	}
}

// shutdownGrace bounds how long Run waits for handlers to return after it cancelled their
// contexts before it puts back the jobs of those that returned.
const shutdownGrace = 5 * time.Second

// handlersDone returns a channel closed once every started handler has returned. Its
// goroutine ends then.
func (e *Executor) handlersDone() <-chan struct{} {
	e.doneOnce.Do(func() {
		e.done = make(chan struct{})
		go func() { e.starter.HandlerWG.Wait(); close(e.done) }()
	})
	return e.done
}

// waitFor waits until done is closed (true), d passes or early is closed (false).
func (e *Executor) waitFor(done <-chan struct{}, d time.Duration, early <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
	case <-early:
	}
	return false
}

// HardStop makes Stop cancel the handlers at once rather than after ShutdownTimeout.
func (e *Executor) HardStop() { e.hardOnce.Do(func() { close(e.hard) }) }

// Abandon makes Stop return without waiting for the handlers still running.
func (e *Executor) Abandon() { e.giveUpOnce.Do(func() { close(e.giveUp) }) }

// runner is one of a queue's MaxWorkers long-lived goroutines. Reusing them (rather than
// a goroutine per job) keeps their grown stacks: handlers that decode JSON would otherwise
// pay for stack growth on every job; each keeps one overrun watch, and its timer, for all
// its jobs.
func (e *Executor) runner(q *claim.QueueRunner) {
	q.Jobs.Arrived()
	e.runJobs(q)
}

// runJobs runs q's jobs, one at a time, until its hand-off is closed. A handler that
// ends its goroutine (runtime.Goexit: t.FailNow, say) ends this one too, which no
// deferred call can stop: its attempt is recorded as a failure as it ends (Execute), its
// job finished (runJob), and a new goroutine takes its place among q's runners, so the
// queue keeps as many as its hand-off started.
func (e *Executor) runJobs(q *claim.QueueRunner) {
	o := e.NewOverrunWatch()
	defer o.Close()
	s := claim.NewSleeper()
	closed := false
	defer func() {
		if !closed {
			// Added while this runner is still counted in q.Ran and e.runners: a Stop
			// waiting on them waits for the new one too.
			q.Ran.Add(1)
			e.runners.Go(func() { defer q.Ran.Done(); e.runJobs(q) })
		}
	}()
	for {
		d, ok := q.Jobs.Next(s)
		if !ok {
			closed = true
			return
		}
		e.runJob(q, d, o)
	}
}

// runJob runs d and gives back what it held: its context, its slot in q, its place
// among the running handlers. Deferred, so that a handler's runtime.Goexit does it too.
func (e *Executor) runJob(q *claim.QueueRunner, d claim.Dispatched, o *overrunWatch) {
	var took time.Duration
	defer func() {
		d.Job.Cancel(nil)
		q.Finished(took)
		e.starter.HandlerWG.Done()
	}()
	if cause := e.endedBeforeStart(d); cause != nil {
		// The job waited for a runner (claimed ahead of the free slots, or by a claim
		// in flight at shutdown) and meanwhile the worker's shutdown cut its handlers
		// off, or the worker lost it. Its handler does not start: the recorder puts it
		// back, its attempt given back, or drops what another worker now holds.
		e.outcomes.Record(d.Key, record.AttemptResult{Ctx: d.Job, State: d.Job.State(), Row: d.Row, Policy: e.cfg.RetryPolicy, Slot: d.Slot, Err: cause})
		return
	}
	took = e.Execute(d, o).Duration
}

// endedBeforeStart returns why d's handler must not start, or nil: the shutdown cut the
// handlers off (its base context ended; d's own context is ended here with that cause,
// if the cut has not reached it yet), or the worker lost the job.
func (e *Executor) endedBeforeStart(d claim.Dispatched) error {
	select {
	case <-e.starter.Base.Done():
		d.Job.Cancel(context.Cause(e.starter.Base))
	default:
		if d.Job.Err() == nil {
			return nil
		}
	}
	if cause := context.Cause(d.Job); errors.Is(cause, record.ErrShutdown) || errors.Is(cause, ownership.ErrJobLost) {
		return cause
	}
	return nil
}

// timeoutFor returns the timeout of one attempt: the job's own, else its kind's, else the
// worker's. Zero or negative means none.
func (e *Executor) timeoutFor(d claim.Dispatched, h Handler) time.Duration {
	switch {
	case d.Timeout > 0:
		return d.Timeout
	case h.Timeout != 0:
		return h.Timeout
	default:
		return e.cfg.JobTimeout
	}
}

// Execute runs one claimed job's handler, under its timeout and the hooks' JobStarted,
// and hands the result to the outcome recorder. It returns the result the hooks were
// told. o watches the handler past its timeout (nil: a watch of its own). A handler that
// calls runtime.Goexit ends the calling goroutine: Execute records the attempt as a
// failure (ErrHandlerExited) as it ends, and does not return; the caller's deferred
// calls must give back what the job held.
func (e *Executor) Execute(d claim.Dispatched, o *overrunWatch) jobtype.JobResult {
	ctx, row := context.Context(d.Job), d.Row
	// No lock: Handle refuses new kinds once Run has started, so the map is read-only here.
	h, ok := e.cfg.Handlers[row.Kind]
	policy := e.cfg.RetryPolicy
	if h.Policy != nil {
		policy = h.Policy
	}
	left, hasDeadline := jobtype.TimeLeft(row)
	if hasDeadline && left <= 0 {
		// Past its deadline: no attempt starts; the recorder ends the job, the attempt
		// given back (internal/record, failure.go).
		return e.outcomes.Record(d.Key, record.AttemptResult{Ctx: ctx, State: d.Job.State(), Row: row, Policy: policy, Slot: d.Slot,
			Err: &jobtype.NotStartedError{Deadline: row.Deadline, ClaimedAt: row.LockedAt}})
	}
	timeout := e.timeoutFor(d, h)
	var began time.Time // when the attempt's timeout began; zero: no timeout
	if timeout > 0 {
		// The attempt's JobCtx is timed out by the overrun watch's timer, armed for each
		// attempt: no timer, context or map per attempt.
		began = time.Now()
		d.Job.SetDeadline(began.Add(timeout))
		if o == nil {
			o = e.NewOverrunWatch()
			defer o.Close()
		}
		o.watch(d, timeout, began)
		defer o.stop()
	}
	if hasDeadline {
		// The time left is measured on the database clock (deadline and claim) and
		// counted on this process's monotonic clock: a skewed wall clock changes nothing.
		// Set after the timeout, it reports the earlier of the two as its deadline.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, left, jobtype.ErrDeadlineExceeded)
		defer cancel()
	}
	var startErr error // a panic in a hook's JobStarted: the attempt's, the handler not run
	if len(e.startHooks) > 0 {
		ctx, startErr = startHooks(ctx, e.startHooks, row)
	}
	// The handler's duration counts from here. With a timeout, it is measured from the
	// timeout's start (began), less the time until here when a deadline or hooks took
	// some: a reading of the monotonic clock (time.Since), where a second time.Now would
	// read the wall clock too (about 0.1 µs on a virtual machine's clock, per job).
	// Without them, all that lies between is the overrun watch's arming, tens of
	// nanoseconds, counted in the duration rather than paid for with a clock reading per
	// job (the two time.Since here took about 1 % of the client CPU in bench drain's
	// profile).
	var before time.Duration
	switch {
	case began.IsZero():
		began = time.Now()
	case hasDeadline || len(e.startHooks) > 0:
		before = time.Since(began)
	}
	a := record.AttemptResult{Ctx: ctx, State: d.Job.State(), Row: row, Timeout: timeout, Policy: policy, Slot: d.Slot}
	switch {
	case !ok:
		a.Err = fmt.Errorf("no handler registered for kind %q", row.Kind)
	case startErr != nil:
		a.Err, a.Panicked = startErr, true
	default:
		returned := false
		defer func() {
			if !returned {
				// Neither a return nor a panic (callHandler recovers those): the handler
				// called runtime.Goexit, which ends this goroutine once the deferred calls
				// have run. Its stack, still whole here, says where.
				a.Err = fmt.Errorf("%w\n\n%s", ErrHandlerExited, debug.Stack())
				a.Duration = time.Since(began) - before
				e.outcomes.Record(d.Key, a)
			}
		}()
		a.Err, a.Panicked = callHandler(ctx, e.cfg.MW, h.Run, row)
		returned = true
	}
	a.Duration = time.Since(began) - before
	return e.outcomes.Record(d.Key, a)
}

// ErrHandlerExited is the error of an attempt whose handler (or middleware) ended its
// goroutine with runtime.Goexit instead of returning — what t.FailNow, t.Fatal and
// testify's require call: a failed attempt, retried like any error. The recorded
// message is this error's, followed by the stack where the handler exited.
var ErrHandlerExited = errors.New("skiplock: handler exited without returning (runtime.Goexit: t.FailNow or require.* called in a handler?)")

// overrunWatch watches the handler of one attempt at a time past its timeout. Its job is
// not taken from it: the lease is renewed until the handler returns, and the attempt is
// then recorded as a timed-out failure (internal/record, outcome.go). Meanwhile the handler is reported
// overrunning: a warning per lease interval from its timeout plus one interval on, the
// error handlers' HandleStuck once, and a count (Worker.Overrunning). A runner keeps one
// for all its jobs, so watching costs no allocation per job; and its timer is not reset
// for each attempt: once armed, it stays armed for the attempt it was armed for, and when
// it fires for a later attempt, which is not yet due, it is armed again for that one
// (fire). A run of short jobs touches the timer once per timeout, not twice per job.
type overrunWatch struct {
	e *Executor
	t *time.Timer // runs fire; armed by watch (or fire) when not armed early enough

	mu       sync.Mutex
	armed    time.Time // when t fires; zero: not armed
	gen      uint64    // counts the attempts watched: a report is for the attempt it began with
	d        claim.Dispatched
	timedOut bool // fire has timed out the attempt's context (d.Job)
	timeout  time.Duration
	began    time.Time // when the watch of the attempt began
	due      time.Time // the next report; zero: no attempt watched
	counted  bool      // counted in executor.overrunning
}

func (e *Executor) NewOverrunWatch() *overrunWatch {
	o := &overrunWatch{e: e}
	o.t = time.AfterFunc(time.Hour, o.fire)
	o.t.Stop()
	return o
}

// every is the interval between reports, and the grace after the timeout before the first.
func (o *overrunWatch) every() time.Duration { return max(o.e.cfg.LeaseInterval, time.Millisecond) }

// watch starts watching d's handler, whose timeout is timeout from began: when the
// timeout passes, it times out the attempt's context (JobCtx.TimeOut), and reports the
// handler from one interval on.
func (o *overrunWatch) watch(d claim.Dispatched, timeout time.Duration, began time.Time) {
	o.mu.Lock()
	o.gen++
	o.d, o.timedOut, o.timeout, o.began, o.counted = d, false, timeout, began, false
	o.due = began.Add(timeout)
	if o.armed.IsZero() || o.armed.After(o.due) {
		// Not armed, or armed for later than this attempt's due time (a shorter timeout):
		// armed early enough, it fires early and fire arms it again.
		o.armed = o.due
		o.t.Reset(time.Until(o.due))
	}
	o.mu.Unlock()
}

// stop ends the watch of the current attempt: its handler returned. The timer stays
// armed (watch): fired with no attempt watched, it does nothing.
func (o *overrunWatch) stop() {
	o.mu.Lock()
	if o.counted {
		o.e.Overrunning.Add(-1)
	}
	o.d, o.timedOut, o.due, o.counted = claim.Dispatched{}, false, time.Time{}, false
	o.mu.Unlock()
}

// Close stops the timer for good.
func (o *overrunWatch) Close() { o.t.Stop() }

// fire reports the watched handler overrunning. A fire that comes early — one that was
// on its way when the previous attempt's watch stopped — arms the timer again for the
// current attempt's report.
func (o *overrunWatch) fire() {
	o.mu.Lock()
	now := time.Now()
	o.armed = time.Time{}
	if o.due.IsZero() {
		o.mu.Unlock()
		return
	}
	if now.Before(o.due) {
		o.rearm(now)
		o.mu.Unlock()
		return
	}
	if !o.timedOut {
		// The timeout passed: the attempt's context ends (what context.WithTimeoutCause
		// would do), and the first report is due one interval on. Ending it under mu
		// keeps it the current attempt's: stop waits.
		o.d.Job.TimeOut()
		o.timedOut = true
		o.due = o.began.Add(o.timeout + o.every())
		o.rearm(now)
		o.mu.Unlock()
		return
	}
	first := !o.counted
	if first {
		o.counted = true
		o.e.Overrunning.Add(1)
		o.e.cfg.Marks.Begin() // while the handler runs: before Stop waits for the marks
	}
	gen, d, timeout, overBy := o.gen, o.d, o.timeout, now.Sub(o.began)-o.timeout
	o.mu.Unlock()
	e := o.e
	e.cfg.Logger.Warn("skiplock: handler overruns its job timeout and ignores its cancelled context; its job stays with this worker, its lease renewed, until it returns (then a timed-out failure)",
		"job", d.Row.ID, "kind", d.Row.Kind, "attempt", d.Row.Attempts, "timeout", timeout,
		"over_by", overBy)
	if first {
		e.cfg.Marks.Write(d.Key)                            // counted in Stats (internal/ownership, overrunmark.go)
		e.cfg.MW.stuck(d.Job, e.cfg.Logger, d.Row, timeout) // error handlers (the root's middleware.go)
	}
	o.mu.Lock()
	if o.gen == gen && !o.due.IsZero() {
		now := time.Now()
		o.due = now.Add(o.every())
		o.rearm(now)
	}
	o.mu.Unlock()
}

// rearm arms the timer for the current attempt's due time, now being the time; o.mu is
// held.
func (o *overrunWatch) rearm(now time.Time) {
	o.armed = o.due
	o.t.Reset(o.due.Sub(now))
}

// startHooks calls each hook's JobStarted in turn and returns the context the last one
// gave. A panic in one is recovered and returned as a *jobtype.PanicError: the attempt's
// panic, recorded as a handler's is, without running the handler (the hooks after it are
// not called; every hook is still told the outcome by JobFinished).
func startHooks(ctx context.Context, hooks []jobtype.Hook, row *jobtype.JobRow) (out context.Context, err error) {
	defer func() {
		if r := recover(); r != nil {
			// The context the hooks before the panicking one gave.
			out, err = ctx, &jobtype.PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	for _, hk := range hooks {
		ctx = hk.JobStarted(ctx, row)
	}
	return ctx, nil
}

// callHandler runs the handler wrapped by mw's middleware for its kind (the root's
// middleware.go), turning a panic into an error with its stack: one in the handler, in
// a middleware, or in a middleware's constructor, which runs here for each job.
func callHandler(ctx context.Context, mw *Middlewares, run func(context.Context, *jobtype.JobRow) error, row *jobtype.JobRow) (err error, panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			err = &jobtype.PanicError{Value: r, Stack: debug.Stack()} // "panic: <value>\n\n<stack>"
			panicked = true
		}
	}()
	return mw.wrap(run, row.Kind)(ctx, row), false
}
