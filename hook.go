// This file holds the hooks a Worker calls around every job, for metrics and tracing.

package skiplock

import (
	"context"
	"time"
)

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

// report tells every hook how a job's run ended.
func (w *Worker) report(ctx context.Context, row *JobRow, res JobResult) {
	for _, hk := range w.cfg.Hooks {
		hk.JobFinished(ctx, row, res)
	}
}
