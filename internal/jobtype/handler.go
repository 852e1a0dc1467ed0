package jobtype

import (
	"context"
	"fmt"
	"time"
)

// JobHandler runs one job: the handler [Handle] registered (its args still JSON in
// job.Payload: the handler decodes them), or that handler wrapped by [Middleware].
type JobHandler func(ctx context.Context, job *JobRow) error

// Middleware wraps the handler of a job with code of its own: a transaction per job, a
// tenant put in the context, a recover-and-report. It returns a JobHandler that calls
// next (or does not: its return is then the attempt's result). It runs in the job's
// goroutine, under the job's timeout and after the hooks' JobStarted, so ctx carries
// what they added; a panic in it, or in the Middleware itself as it builds the
// JobHandler, is recovered like one in the handler. It is called once per job, so it
// should not block beyond the job's own work.
type Middleware func(next JobHandler) JobHandler

// PanicError is the error of an attempt whose handler (or middleware) panicked: the
// value it panicked with and the stack where it did. Its message, which is what the
// job's last_error records, is "panic: <value>" followed by the stack. Get it with
// errors.As from the error an [ErrorHandler] or a [Hook] ([JobResult].Err) sees.
type PanicError struct {
	Value any
	Stack []byte
}

// Error returns "panic: <value>", a blank line and the stack.
func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v\n\n%s", e.Value, e.Stack) }

// ErrorHandler is told of a worker's failures, for an error tracker or a pager: one
// place that sees them all. Its methods are called from the worker's goroutines and must
// be safe for concurrent use and return quickly. A panic in them is recovered and
// logged, and changes nothing else.
type ErrorHandler interface {
	// HandleError is called after every failed attempt, in the job's goroutine, once the
	// failure is handed to be recorded: the handler returned an error (a Permanent one
	// included), panicked (errors.As(err, **PanicError) gives the value and the stack) or
	// ran past its timeout (errors.Is(err, ErrJobTimeout)). job.Attempts is the attempt
	// that failed and status the job's new state (queued for a retry, failed or dead).
	// Successes, snoozes, cancellations, and results the worker no longer holds or cut
	// off by shutdown and put back are not failures and are not reported.
	HandleError(ctx context.Context, job *JobRow, status JobStatus, err error)
	// HandleStuck is called, from a timer goroutine, when a handler is still running a
	// grace period (the worker's heartbeat interval) after its job's timeout cancelled
	// its context: it ignores its context. The job stays with the worker, its lease
	// renewed, until the handler returns; the attempt is then recorded as a timed-out
	// failure (HandleError). It is called once per such attempt.
	HandleStuck(ctx context.Context, job *JobRow, timeout time.Duration)
}
