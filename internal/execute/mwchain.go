// This file holds a worker's middleware chain and error handlers as the executor runs them.

package execute

import (
	"context"
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
type ErrorHook struct{ M *Middlewares }

func (ErrorHook) JobStarted(ctx context.Context, _ *jobtype.JobRow) context.Context { return ctx }

func (h ErrorHook) JobFinished(ctx context.Context, job *jobtype.JobRow, res jobtype.JobResult) {
	switch res.Outcome {
	case jobtype.OutcomeRetry, jobtype.OutcomeDead, jobtype.OutcomeFailed, jobtype.OutcomeTimedOut:
		for _, eh := range h.M.Errs {
			eh.HandleError(ctx, job, res.Status, res.Err)
		}
	}
}

// stuck tells the error handlers of a handler running past its timeout (execute.go).
func (m *Middlewares) stuck(ctx context.Context, job *jobtype.JobRow, timeout time.Duration) {
	for _, eh := range m.Errs {
		eh.HandleStuck(context.WithoutCancel(ctx), job, timeout)
	}
}
