// Package ownership decides who runs a job: the attempts a worker holds (HeldJobs), the
// per-job lease that heartbeats renew and the watchdog that cancels a handler whose lease
// is ending (Lease), the worker's own lease (its row in the workers table, renewed by the
// Elector, which also runs the fleet's leader election), the reclaim by liveness of the
// jobs of workers whose lease ended, the take-back of orphans and of attempts whose
// outcome could not be written, and the overrun marks of handlers past their timeout.
// See docs/ownership.md.
package ownership
