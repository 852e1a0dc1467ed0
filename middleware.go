// This file holds what wraps and watches a worker's handlers: middleware (Use, UseKind),
// which runs code of the user's around each job in order, and error handlers
// (HandleErrors), which see every failed attempt, with a panic's value and stack, and
// every handler still running past its timeout. The worker reaches them at one seam in
// execute.go.

package skiplock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/internal/jobtype"
)

// JobHandler runs one job: the handler [Handle] registered (its args still JSON in
// job.Payload: the handler decodes them), or that handler wrapped by [Middleware].
type JobHandler = jobtype.JobHandler

// Middleware wraps the handler of a job with code of its own: a transaction per job, a
// tenant put in the context, a recover-and-report. It returns a JobHandler that calls
// next (or does not: its return is then the attempt's result). It runs in the job's
// goroutine, under the job's timeout and after the hooks' JobStarted; a panic in it is
// recovered like one in the handler.
type Middleware = jobtype.Middleware

// middlewares is a worker's middleware and error handlers, set before Run, read-only
// after (as the handlers are).
type middlewares struct {
	all    []Middleware
	byKind map[string][]Middleware
	errs   []ErrorHandler
}

// Use adds middleware that wraps the handler of every job w runs, in order: the first
// given is the outermost, and middleware added by an earlier Use call wraps that of a
// later one. Those added with [UseKind] run inside all of them. Jobs of a kind without a
// handler fail before any middleware runs. Call it before [Worker.Run], like [Handle].
func Use(w *Worker, mw ...Middleware) error {
	return w.addMiddleware("", mw)
}

// UseKind adds middleware that wraps only the handler of kind, inside those of [Use],
// in the same order rules. The kind need not have a handler yet.
func UseKind(w *Worker, kind string, mw ...Middleware) error {
	if kind == "" || len(kind) > MaxKindLength {
		return fmt.Errorf("%w: UseKind: %q", ErrInvalidKind, truncate(kind, 40))
	}
	return w.addMiddleware(kind, mw)
}

func (w *Worker) addMiddleware(kind string, mw []Middleware) error {
	if w == nil {
		return errors.New("skiplock: Use: nil worker")
	}
	for i, m := range mw {
		if m == nil {
			return fmt.Errorf("skiplock: Use: middleware %d is nil", i)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started.Load() {
		return errors.New("skiplock: Use: the worker is already running")
	}
	if kind == "" {
		w.mw.all = append(w.mw.all, mw...)
		return nil
	}
	if w.mw.byKind == nil {
		w.mw.byKind = map[string][]Middleware{}
	}
	w.mw.byKind[kind] = append(w.mw.byKind[kind], mw...)
	return nil
}

// wrap returns run wrapped by the middleware for kind; run itself when there is none,
// so a worker without middleware pays nothing. Building the chain costs one closure
// per middleware and job.
func (m *middlewares) wrap(run func(context.Context, *JobRow) error, kind string) func(context.Context, *JobRow) error {
	kindMW := m.byKind[kind]
	if len(m.all) == 0 && len(kindMW) == 0 {
		return run
	}
	h := JobHandler(run)
	for i := len(kindMW) - 1; i >= 0; i-- {
		h = kindMW[i](h)
	}
	for i := len(m.all) - 1; i >= 0; i-- {
		h = m.all[i](h)
	}
	return h
}

// PanicError is the error of an attempt whose handler (or middleware) panicked: the
// value it panicked with and the stack where it did. Get it with errors.As from the
// error an [ErrorHandler] or a [Hook] ([JobResult].Err) sees.
type PanicError = jobtype.PanicError

// ErrorHandler is told of a worker's failures, for an error tracker or a pager: every
// failed attempt (HandleError) and every handler still running past its timeout
// (HandleStuck). Its methods must be safe for concurrent use and return quickly.
type ErrorHandler = jobtype.ErrorHandler

// HandleErrors adds error handlers to w, called in order. Call it before [Worker.Run].
func HandleErrors(w *Worker, eh ...ErrorHandler) error {
	if w == nil {
		return errors.New("skiplock: HandleErrors: nil worker")
	}
	for i, h := range eh {
		if h == nil {
			return fmt.Errorf("skiplock: HandleErrors: error handler %d is nil", i)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started.Load() {
		return errors.New("skiplock: HandleErrors: the worker is already running")
	}
	w.mw.errs = append(w.mw.errs, eh...)
	return nil
}

// errorHook turns the outcomes hooks see into ErrorHandler calls. Every worker has one,
// after the other hooks (NewWorker); it does nothing without error handlers.
type errorHook struct{ m *middlewares }

func (errorHook) JobStarted(ctx context.Context, _ *JobRow) context.Context { return ctx }

func (h errorHook) JobFinished(ctx context.Context, job *JobRow, res JobResult) {
	switch res.Outcome {
	case OutcomeRetry, OutcomeDead, OutcomeFailed, OutcomeTimedOut:
		for _, eh := range h.m.errs {
			eh.HandleError(ctx, job, res.Status, res.Err)
		}
	}
}

// stuck tells the error handlers of a handler running past its timeout (execute.go).
func (m *middlewares) stuck(ctx context.Context, job *JobRow, timeout time.Duration) {
	for _, eh := range m.errs {
		eh.HandleStuck(context.WithoutCancel(ctx), job, timeout)
	}
}
