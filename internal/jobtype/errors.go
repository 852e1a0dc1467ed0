package jobtype

import "errors"

// The errors the engine returns that users test for; the root package re-exports them.
var (
	// ErrJobTimeout is the cause of an attempt that ran past its timeout.
	ErrJobTimeout = errors.New("skiplock: job timeout")
	// ErrAttemptLost is returned by CompleteTx when the attempt is no longer held by the
	// worker that runs the handler.
	ErrAttemptLost = errors.New("skiplock: this attempt is no longer held by this worker")
	// ErrShutdown is the cause of a handler cancelled by the worker's shutdown.
	ErrShutdown = errors.New("skiplock: worker shutting down")
	// ErrDeadlineExceeded is the error of a job that reached its deadline
	// (EnqueueOptions.Deadline): no attempt started after it, a running one was
	// cancelled with it as the cause, and a retry due after it ended the job instead.
	ErrDeadlineExceeded = errors.New("skiplock: deadline exceeded")
)
