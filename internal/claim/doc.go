// Package claim takes jobs for a worker: the claim statement (one atomic CTE, FOR UPDATE
// SKIP LOCKED, in claim order through the partial index), the limited claims of queues
// under flow control (FlowClaimer, and the FlowWatch that keeps each queue on the right
// path), the claim loops that claim while slots are free and jobs are due (QueueRunner,
// ClaimLoops), the fallback poll (Poller), the paused flags (PauseWatcher), and the set
// of queues a worker works (QueueSet).
package claim
