// Package execute runs attempts: the JobStarter registers a claimed attempt with the
// held jobs and gives it its context, the Executor's runners take dispatched attempts
// from each queue and call the handler through the middleware chain under the job's
// timeout (recovering a panic), watch a handler that overruns its timeout, and hand the
// result to the outcome recorder; at shutdown they wait, then cancel, then put back.
package execute
