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
	// ErrJobFinished is returned by the calls that need a job that has not finished
	// (Update, Signal).
	ErrJobFinished = errors.New("skiplock: job has finished")
	// ErrJobNotFound is returned when no job has the given id.
	ErrJobNotFound = errors.New("skiplock: job not found")
	// ErrNotInJob is returned by the calls a handler makes through its context
	// (RecordProgress, SetOutput, the durable steps) when the context is not a handler's.
	ErrNotInJob = errors.New("skiplock: the context is not a job handler's")
)
