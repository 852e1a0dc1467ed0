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
	// ErrNotMigrated is returned when the schema's tables do not exist.
	ErrNotMigrated = errors.New("skiplock: schema is not migrated")
)
