package jobtype

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// JobCtx is the context of one attempt: its state (State), its cancellation with a cause
// (lease lost, job cancelled, shutdown) and its timeout, in one allocation. It behaves as
// the standard library's contexts would, stacked as context.WithCancelCause, a value and
// context.WithTimeoutCause(…, ErrJobTimeout): Err is context.Canceled after Cancel and
// context.DeadlineExceeded after TimeOut, context.Cause reads the cause, Deadline reports
// the timeout set by SetDeadline, and contexts derived from it (through its AfterFunc
// method, which the context package uses for contexts it does not know) end with its Err
// and cause. What it saves is a context, a timer and a map of children per attempt: the
// runner that runs the attempt keeps one timer for all its attempts and calls TimeOut
// (internal/execute).
//
// Its parent's values reach it; its parent's cancellation reaches it through an
// AfterFunc registered by NewJobCtx when watchParent, else through whoever cancels the
// parent (the executor's starter cancels every held attempt when it cancels its base).
type JobCtx struct {
	parent   context.Context
	st       State
	deadline time.Time // zero: the parent's

	done      atomic.Value // chan struct{}: made by the first Done; closedChan once ended before that
	ended     atomic.Bool  // set once err and cause are
	mu        sync.Mutex   // guards the fields below, and the making of done
	err       error        // context.Canceled or context.DeadlineExceeded; nil while running
	cause     error
	causeCtx  context.Context // a stopped standard context with err and cause, for context.Cause; made on demand
	funcs     map[*afterFunc]struct{}
	stopWatch func() bool // ends the watch of the parent; nil: none
}

// Canceler ends the context of one attempt with a cause. A *JobCtx is one, with no
// allocation of its own (a method value, JobCtx.Cancel, would cost one per attempt);
// CancelFunc makes one of any function.
type Canceler interface {
	Cancel(cause error)
}

// CancelFunc is a function as a Canceler, such as the cancel of
// context.WithCancelCause.
type CancelFunc func(cause error)

// Cancel calls f.
func (f CancelFunc) Cancel(cause error) { f(cause) }

// afterFunc is one function registered by AfterFunc.
type afterFunc struct{ f func() }

// closedChan is the Done channel of a JobCtx that ended before anyone asked for it.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// NewJobCtx returns the context of one attempt, derived from parent, with a fresh state
// (MaxBytes set). watchParent: the parent's cancellation ends it (an AfterFunc on
// parent); otherwise the caller sees to it.
func NewJobCtx(parent context.Context, maxBytes int, watchParent bool) *JobCtx {
	c := &JobCtx{parent: parent}
	c.st.MaxBytes = maxBytes
	if err := parent.Err(); err != nil {
		c.end(err, context.Cause(parent))
		return c
	}
	if watchParent && parent.Done() != nil {
		stop := context.AfterFunc(parent, func() { c.end(parent.Err(), context.Cause(parent)) })
		c.mu.Lock()
		if c.err == nil {
			c.stopWatch = stop
		}
		c.mu.Unlock()
	}
	return c
}

// State is the attempt's state, which StateOf finds in the context.
func (c *JobCtx) State() *State { return &c.st }

// SetDeadline sets the deadline Deadline reports: the attempt's timeout, which TimeOut
// enforces. Call it before the context is handed to anyone.
func (c *JobCtx) SetDeadline(d time.Time) { c.deadline = d }

// Deadline returns the earlier of the deadline set and the parent's.
func (c *JobCtx) Deadline() (time.Time, bool) {
	pd, ok := c.parent.Deadline()
	switch {
	case c.deadline.IsZero():
		return pd, ok
	case ok && pd.Before(c.deadline):
		return pd, true
	}
	return c.deadline, true
}

// Done returns a channel closed when the attempt's context ends.
func (c *JobCtx) Done() <-chan struct{} {
	if d := c.done.Load(); d != nil {
		return d.(chan struct{})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := c.done.Load(); d != nil {
		return d.(chan struct{})
	}
	d := closedChan
	if c.err == nil {
		d = make(chan struct{})
	}
	c.done.Store(d)
	return d
}

// Err returns nil while the context runs, then context.Canceled or
// context.DeadlineExceeded.
func (c *JobCtx) Err() error {
	if !c.ended.Load() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Value returns the attempt's state for its key, answers context.Cause once the context
// ended (with a stopped standard context holding its error and cause), and asks the
// parent for anything else.
func (c *JobCtx) Value(key any) any {
	if key == (stateKey{}) {
		return &c.st
	}
	if c.ended.Load() {
		if v := c.stoppedCtx().Value(key); v != nil {
			return v // context.Cause's key: only the standard contexts answer it
		}
	}
	return c.parent.Value(key)
}

// stoppedCtx returns a standard context, derived from nothing, that ended with c's error
// and cause: asked for the context package's own key, it gives context.Cause the cause.
func (c *JobCtx) stoppedCtx() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.causeCtx == nil {
		if c.err == context.DeadlineExceeded {
			ctx, cancel := context.WithDeadlineCause(context.Background(), time.Time{}, c.cause)
			cancel() // it ended already (a deadline past): this changes nothing
			c.causeCtx = ctx
		} else {
			ctx, cancel := context.WithCancelCause(context.Background())
			cancel(c.cause)
			c.causeCtx = ctx
		}
	}
	return c.causeCtx
}

// AfterFunc arranges for f to be called once the context ends (at once, in its own
// goroutine, if it has), and returns a function that unregisters f, reporting whether
// it did so before f was called. The context package registers the contexts derived
// from c this way; each f is called in the goroutine that ends c.
func (c *JobCtx) AfterFunc(f func()) func() bool {
	a := &afterFunc{f: f}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	if c.funcs == nil {
		c.funcs = map[*afterFunc]struct{}{}
	}
	c.funcs[a] = struct{}{}
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.funcs[a]
		delete(c.funcs, a)
		return ok
	}
}

// Cancel ends the context with context.Canceled and cause (nil: context.Canceled), as a
// context.CancelCauseFunc; a context already ended is left as it is.
func (c *JobCtx) Cancel(cause error) { c.end(context.Canceled, cause) }

// TimeOut ends the context with context.DeadlineExceeded and cause ErrJobTimeout, as
// context.WithTimeoutCause(…, ErrJobTimeout) does when its time is up.
func (c *JobCtx) TimeOut() { c.end(context.DeadlineExceeded, ErrJobTimeout) }

// end ends the context with err and cause, once, and calls the functions registered.
func (c *JobCtx) end(err, cause error) {
	if cause == nil {
		cause = err
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err, c.cause = err, cause
	c.ended.Store(true)
	if d := c.done.Load(); d != nil {
		close(d.(chan struct{}))
	} else {
		c.done.Store(closedChan)
	}
	funcs, stop := c.funcs, c.stopWatch
	c.funcs, c.stopWatch = nil, nil
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
	for a := range funcs {
		a.f()
	}
}
