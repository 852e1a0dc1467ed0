// This file holds what wraps and watches a worker's handlers: middleware (Use, UseKind),
// which runs code of the user's around each job in order, and error handlers
// (HandleErrors), which see every failed attempt, with a panic's value and stack, and
// every handler still running past its timeout. The worker reaches them at one seam in
// internal/execute.

package skiplock

import (
	"errors"
	"fmt"

	"github.com/skiplock/skiplock/internal/jobtype"
)

// JobHandler runs one job: the handler [Handle] registered (its args still JSON in
// job.Payload: the handler decodes them), or that handler wrapped by [Middleware].
type JobHandler = jobtype.JobHandler

// Middleware wraps the handler of a job with code of its own: a transaction per job, a
// tenant put in the context, a recover-and-report. It returns a JobHandler that calls
// next (or does not: its return is then the attempt's result). It runs in the job's
// goroutine, under the job's timeout and after the hooks' JobStarted; a panic in it, or
// in the Middleware itself as it builds the JobHandler, is recovered like one in the
// handler.
type Middleware = jobtype.Middleware

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
		return w.startedErr("Use")
	}
	if kind == "" {
		w.mw.All = append(w.mw.All, mw...)
		return nil
	}
	if w.mw.ByKind == nil {
		w.mw.ByKind = map[string][]Middleware{}
	}
	w.mw.ByKind[kind] = append(w.mw.ByKind[kind], mw...)
	return nil
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
		return w.startedErr("HandleErrors")
	}
	w.mw.Errs = append(w.mw.Errs, eh...)
	return nil
}
