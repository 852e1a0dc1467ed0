// This file holds what the run checks of claiming ahead (internal/claim, "Claiming
// ahead"): the workers of odd slots claim ahead of their free slots while their default
// queue has a backlog (Options.NoClaimAhead), so they hold more jobs than they run
// handlers. The run counts how large their claims were, from the executions that share
// a claim's start, and how many of a worker's executions ran at once, which the queue's
// MaxWorkers bounds whatever the worker held.

package chaos

import (
	"slices"
	"strings"
	"time"
)

// claimAheadBelow is the claim-ahead threshold the workers of odd slots run with: above
// the average of these handlers, so that they claim ahead whenever their queue has a
// backlog.
const claimAheadBelow = time.Second

// claimAheadFigures fills rep.ClaimMax, rep.ClaimMaxPlain and rep.RunningMax from the
// executions of the default queue's jobs (jobs) by the workers of the slots (procs by
// id): the most jobs executed from one claim (the executions of one worker that share
// the claim's start, claimed_at) by a worker of an odd slot (claiming ahead unless
// Options.NoClaimAhead) and of an even one, and the most executions that ran at once in
// any one worker, a killed worker's ending at its kill (endOf).
func (r *runner) claimAheadFigures(rep *Report, execs []*execution, jobs map[int64]bool,
	procs map[string]*proc, endOf func(*execution) time.Time,
) {
	type claimKey struct {
		worker string
		at     time.Time
	}
	claims := map[claimKey]map[int64]bool{}
	byWorker := map[string][]*execution{}
	for _, e := range execs {
		p := procs[e.worker]
		if p == nil || p.slot < 0 || !jobs[e.job] {
			continue
		}
		byWorker[e.worker] = append(byWorker[e.worker], e) // keeps execs' order: by job, then start
		if e.claimed == nil {
			continue
		}
		k := claimKey{e.worker, e.claimed.UTC()}
		if claims[k] == nil {
			claims[k] = map[int64]bool{}
		}
		claims[k][e.job] = true
	}
	for k, js := range claims {
		if procs[k.worker].slot%2 == 1 {
			rep.ClaimMax = max(rep.ClaimMax, len(js))
		} else {
			rep.ClaimMaxPlain = max(rep.ClaimMaxPlain, len(js))
		}
	}
	ids := make([]string, 0, len(byWorker))
	for id := range byWorker {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, strings.Compare)
	for _, id := range ids {
		if n := maxConcurrent(byWorker[id], jobs, endOf); n > rep.RunningMax {
			rep.RunningMax, rep.RunningMaxWorker = n, id
		}
	}
}
