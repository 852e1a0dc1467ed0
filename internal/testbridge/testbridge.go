// Package testbridge hands package skiplocktest the synchronous run of a Worker's jobs,
// and the opening of a Client's encrypted args, without adding those calls to
// skiplock's public API: package skiplock provides them with Provide and ProvideOpen, in
// the declarations of package variables (so before any of their callers runs), and
// skiplocktest, which imports skiplock, takes them with Sync and Open. Nothing else may
// use them.
//
// This package cannot name skiplock's types (skiplock imports it), so their types,
// WorkOne and OpenArgs, are generic in them: both sides spell out the same
// instantiation, and Sync and Open report false if they ever disagree.
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

// OpenArgs returns the args of a job of kind as JSON from its stored payload, opened
// with the client c's Keyring when they are encrypted (as the client's workers open
// them). C is skiplock's *Client.
type OpenArgs[C any] func(c C, kind string, payload []byte) ([]byte, error)

// opener is the OpenArgs package skiplock provided.
var opener any

// ProvideOpen records f as the opening of stored args. Package skiplock calls it once.
func ProvideOpen[C any](f OpenArgs[C]) struct{} {
	opener = f
	return struct{}{}
}

// Open returns the opening of stored args, and false when none of this type was
// provided.
func Open[C any]() (OpenArgs[C], bool) {
	f, ok := opener.(OpenArgs[C])
	return f, ok
}
