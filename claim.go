// This file holds the worker's claim side, built over internal/claim: the claim loops of
// each queue (one atomic claim statement, FOR UPDATE SKIP LOCKED, batched up to the free
// slots), the fallback poll, the paused flags and the flow-control watch. A claimed job
// goes to the starter (internal/execute) and its attempt is then held by the worker's
// lease (internal/ownership).

package skiplock

import (
	"cmp"

	"github.com/skiplock/skiplock/internal/claim"
	"github.com/skiplock/skiplock/internal/ownership"
)

// buildClaims builds the claim loops of the configured queues and what steers them: the
// pause watcher, the poller and the flow watch (declared: the queues' declared limits).
// The starter and the lease are built before it.
func (w *Worker) buildClaims(declared map[string]QueueLimits) {
	c, cfg := w.client, w.cfg
	// conns holds maxClaimConns tokens: each queue's loops have at most fetchersPerQueue
	// claims in flight anyway, so a worker of fewer queues uses claimConns of them, and
	// a queue added at run time finds its tokens there.
	w.loops = claim.ClaimLoopConfig{
		Claimer: claim.NewClaimer(c.db, cfg.VisibilityTimeout), WorkerID: cfg.ID, FetchCooldown: cfg.FetchCooldown,
		Logger: w.logger, Conns: make(chan struct{}, claim.MaxClaimConns), Gate: w.gate,
		Start: w.starter.Start, StaleAfter: cfg.VisibilityTimeout - cfg.VisibilityTimeout/ownership.CancelMargin,
		Release:     w.lease.ReleaseJobs,
		LeaseEnding: w.lease.OwnLeaseEnding,
	}
	for name, q := range cfg.Queues {
		w.queues.Put(claim.NewQueueRunner(name, cmp.Or(q.MaxWorkers, DefaultMaxWorkers), w.loops), q.Completion)
	}
	w.claims = &claim.ClaimLoops{Queues: w.queues}
	w.pause = claim.NewPauseWatcher(c.db, w.queues, w.logger)
	w.poller = claim.NewPoller(c.db, cfg.PollInterval, w.queues, w.pause, w.logger)
	w.flow = claim.NewFlowWatch(c.db, c.QueueLimitsSet, w.queues, declared, cfg.VisibilityTimeout, w.logger)
}
