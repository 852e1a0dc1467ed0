// Package testbridge hands package skiplocktest the synchronous run of a Worker's jobs
// without adding that call to skiplock's public API: package skiplock provides it with
// Provide, in the declaration of a package variable (so before any of its callers runs),
// and skiplocktest, which imports skiplock, takes it with Sync. Nothing else may use it.
//
// This package cannot name skiplock's types (skiplock imports it), so the run's type,
// WorkOne, is generic in them: both sides spell out the same instantiation, and Sync
// reports false if they ever disagree.
package testbridge

import "context"

// WorkOne claims one due job of queue with the worker w's claim statement and runs it
// with w's handlers, hooks and recording, in the calling goroutine; a nil row means no
// job was due. W, Row and Result are skiplock's *Worker, *JobRow and JobResult.
type WorkOne[W, Row, Result any] func(ctx context.Context, w W, queue string) (Row, Result, error)

// provided is the WorkOne package skiplock provided.
var provided any

// Provide records f as the synchronous run. Package skiplock calls it once.
func Provide[W, Row, Result any](f WorkOne[W, Row, Result]) struct{} {
	provided = f
	return struct{}{}
}

// Sync returns the synchronous run, and false when none of these types was provided.
func Sync[W, Row, Result any]() (WorkOne[W, Row, Result], bool) {
	f, ok := provided.(WorkOne[W, Row, Result])
	return f, ok
}
