// Package testbridge lets package skiplocktest run a Worker's jobs in the calling
// goroutine without adding that call to skiplock's public API: package skiplock sets
// WorkOne when it initialises, and skiplocktest (which imports skiplock, so runs after)
// calls it. Nothing else may use it.
package testbridge

// WorkOne is set by package skiplock to a
//
//	func(ctx context.Context, w *skiplock.Worker, queue string) (*skiplock.JobRow, skiplock.JobResult, error)
//
// that claims one due job of queue with the worker's claim statement and runs it with
// the worker's handlers, hooks and recording; a nil row means no job was due. It is an
// any because this package cannot name skiplock's types (skiplock imports it).
var WorkOne any
