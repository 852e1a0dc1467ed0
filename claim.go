// This file holds the worker's claim side, built over internal/claim: the claim loops of
// each queue (one atomic claim statement, FOR UPDATE SKIP LOCKED, batched up to the free
// slots), the fallback poll, the paused flags and the flow-control watch. A claimed job
// goes to the starter (internal/execute) and its attempt is then held by the worker's
// lease (internal/ownership).

package skiplock

import (
	"cmp"
	"log/slog"
	"time"

	"github.com/skiplock/skiplock/internal/claim"
	"github.com/skiplock/skiplock/internal/execute"
	"github.com/skiplock/skiplock/internal/ownership"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// claimSide is the worker's claim side: the claim loops of its queues and what steers
// them.
type claimSide struct {
	loops  claim.ClaimLoopConfig // what a queue's claim loops need, for queues added later
	claims *claim.ClaimLoops
	pause  *claim.PauseWatcher
	poller *claim.Poller
	flow   *claim.FlowWatch
}

// buildClaims builds the claim loops of cfg's queues, putting their runners in queues,
// and what steers them: the pause watcher, the poller and the flow watch (declared: the
// queues' declared limits). A claimed job goes to starter; its attempt is held by lease.
func buildClaims(c *Client, cfg WorkerConfig, logger *slog.Logger, queues *claim.QueueSet, gate *pgutil.Gate,
	starter *execute.JobStarter, lease *ownership.Lease, lapsedSince func(time.Time) bool, declared map[string]QueueLimits) claimSide {
	// conns holds maxClaimConns tokens: each queue's loops have at most fetchersPerQueue
	// claims in flight anyway, so a worker of fewer queues uses claimConns of them, and
	// a queue added at run time finds its tokens there.
	s := claimSide{loops: claim.ClaimLoopConfig{
		Claimer: claim.NewClaimer(c.db, cfg.VisibilityTimeout), WorkerID: cfg.ID, FetchCooldown: cfg.FetchCooldown,
		Logger: logger, Conns: make(chan struct{}, claim.MaxClaimConns), Gate: gate,
		Start: starter.Start, StaleAfter: ownership.StaleClaimAfter(cfg.VisibilityTimeout),
		Release:     lease.ReleaseJobs,
		LeaseEnding: lease.OwnLeaseEnding,
		LapsedSince: lapsedSince,
		Holds:       starter.Held.Holds,
	}}
	for name, q := range cfg.Queues {
		queues.Put(claim.NewQueueRunner(name, cmp.Or(q.MaxWorkers, DefaultMaxWorkers), s.loops), q.Completion)
	}
	s.claims = &claim.ClaimLoops{Queues: queues}
	s.pause = claim.NewPauseWatcher(c.db, queues, logger)
	s.poller = claim.NewPoller(c.db, cfg.PollInterval, queues, s.pause, logger)
	s.flow = claim.NewFlowWatch(c.db, c.QueueLimitsSet, queues, declared, cfg.VisibilityTimeout, logger)
	return s
}
