// Package record writes what became of each attempt: the OutcomeRecorder routes a
// handler's result to the Completer (successes, in batches per completion mode, fenced on
// the attempt's token) or the FailureRecorder (retries with backoff, snoozes, failures,
// cancellations, dead ends), releases attempts cut off by shutdown, and tells the hooks.
// AttemptRef is the worker's side of CompleteTx.
package record
