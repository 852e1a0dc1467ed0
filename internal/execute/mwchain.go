// This file holds a worker's middleware chain and error handlers as the executor runs them.

package execute

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/skiplock/skiplock/internal/jobtype"
)

// Middlewares is a worker's middleware and error handlers, set before Run, read-only
// after (as the handlers are).
type Middlewares struct {
	All    []jobtype.Middleware
	ByKind map[string][]jobtype.Middleware
	Errs   []jobtype.ErrorHandler
}

// wrap returns run wrapped by the middleware for kind; run itself when there is none,
// so a worker without middleware pays nothing. Building the chain costs one closure
// per middleware and job.
func (m *Middlewares) wrap(run func(context.Context, *jobtype.JobRow) error, kind string) func(context.Context, *jobtype.JobRow) error {
	kindMW := m.ByKind[kind]
	if len(m.All) == 0 && len(kindMW) == 0 {
		return run
	}
	h := jobtype.JobHandler(run)
	for i := len(kindMW) - 1; i >= 0; i-- {
		h = kindMW[i](h)
	}
	for i := len(m.All) - 1; i >= 0; i-- {
		h = m.All[i](h)
	}
	return h
}

// ErrorHook turns the outcomes hooks see into ErrorHandler calls. Every worker has one,
// after the other hooks (NewWorker); it does nothing without error handlers.
type ErrorHook struct {
	M      *Middlewares
	Logger *slog.Logger // logs an error handler's panic
}

// JobStarted returns ctx: the error handlers see only outcomes.
func (ErrorHook) JobStarted(ctx context.Context, _ *jobtype.JobRow) context.Context { return ctx }

// JobFinished tells each error handler of a failed attempt. A handler that panics is
// logged and skipped: the failure is recorded already, and the others are still told.
func (h ErrorHook) JobFinished(ctx context.Context, job *jobtype.JobRow, res jobtype.JobResult) {
	switch res.Outcome {
	case jobtype.OutcomeRetry, jobtype.OutcomeDead, jobtype.OutcomeFailed, jobtype.OutcomeTimedOut:
		for _, eh := range h.M.Errs {
			handleError(ctx, h.Logger, eh, job, res)
		}
	}
}

// handleError calls eh's HandleError, recovering a panic in it, which it logs.
func handleError(ctx context.Context, logger *slog.Logger, eh jobtype.ErrorHandler, job *jobtype.JobRow, res jobtype.JobResult) {
	callErrorHandler(logger, "HandleError", eh, job, func() { eh.HandleError(ctx, job, res.Status, res.Err) })
}

// stuck tells the error handlers of a handler running past its timeout (execute.go). It
// runs on the overrun watch's timer goroutine: a handler that panics is logged and
// skipped, not left to end the process.
func (m *Middlewares) stuck(ctx context.Context, logger *slog.Logger, job *jobtype.JobRow, timeout time.Duration) {
	for _, eh := range m.Errs {
		callErrorHandler(logger, "HandleStuck", eh, job, func() { eh.HandleStuck(context.WithoutCancel(ctx), job, timeout) })
	}
}

// callErrorHandler runs call, eh's method method about job, recovering a panic in it,
// which it logs: the outcome is decided already, and the other handlers are still told.
func callErrorHandler(logger *slog.Logger, method string, eh jobtype.ErrorHandler, job *jobtype.JobRow, call func()) {
	defer func() {
		if r := recover(); r != nil {
			logger.Error("skiplock: an error handler's "+method+" panicked; the panic is ignored",
				"job", job.ID, "kind", job.Kind, "attempt", job.Attempts, "handler", fmt.Sprintf("%T", eh),
				"panic", r, "stack", string(debug.Stack()))
		}
	}()
	call()
}
