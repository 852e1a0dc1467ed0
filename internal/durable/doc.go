// Package durable is the engine of durable execution (docs/durable.md): the steps a
// handler runs through its context (Step, StepTx, Sleep, AwaitSignal), recorded per job in
// job_steps and fenced on the attempt's token, and the client's side: signals, the
// listing of a job's steps and signals, and Fork. It imports only the leaf packages; the
// worker hands each attempt its Engine through the attempt's state (jobtype.State), and
// the outcome recorder writes nothing for an attempt a wait suspended
// (jobtype.MarkSuspended).
package durable
