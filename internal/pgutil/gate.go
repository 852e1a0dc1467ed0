package pgutil

import (
	"context"
	"sync"
)

// StatementsPerProcess is the bound of one of n processes serving the same queues that
// keep budget statements in flight together; 0: no bound (a process alone, or a
// negative budget).
func StatementsPerProcess(n, budget int) int {
	if n <= 1 || budget < 0 {
		return 0
	}
	return max(1, budget/n)
}

// Gate bounds the statements a worker has in flight on its queues' rows. Its bound
// follows the fleet's size (SetFleet); while unbounded, taking and giving back a turn
// costs a lock and nothing more.
type Gate struct {
	mu      sync.Mutex
	budget  int // WorkerConfig.FleetStatements
	limit   int // 0: no bound
	used    int
	peers   int           // processes serving the same queues, this one included
	freed   chan struct{} // closed (and replaced) when a turn is given back or the bound rises
	waiting int
}

// NewGate returns a gate for a fleet that keeps budget statements in flight (negative:
// no bound), unbounded until it learns the fleet's size.
func NewGate(budget int) *Gate {
	return &Gate{budget: budget, peers: 1, freed: make(chan struct{})}
}

// SetFleet sets the bound for a fleet of n processes serving this worker's queues.
func (g *Gate) SetFleet(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.peers = n
	old := g.limit
	g.limit = StatementsPerProcess(n, g.budget)
	if g.waiting > 0 && (g.limit == 0 || g.limit > old) {
		close(g.freed)
		g.freed = make(chan struct{})
	}
}

// Fleet returns the size of the fleet last learned and the bound it gives.
func (g *Gate) Fleet() (peers, limit int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.peers, g.limit
}

// Acquire takes a turn, waiting while the bound is reached, until ctx ends. A nil gate
// has no bound.
func (g *Gate) Acquire(ctx context.Context) error {
	if g == nil {
		return nil
	}
	for {
		g.mu.Lock()
		if g.limit == 0 || g.used < g.limit {
			g.used++
			g.mu.Unlock()
			return nil
		}
		g.waiting++
		ch := g.freed
		g.mu.Unlock()
		select {
		case <-ch:
			g.mu.Lock()
			g.waiting--
			g.mu.Unlock()
		case <-ctx.Done():
			g.mu.Lock()
			g.waiting--
			g.mu.Unlock()
			return ctx.Err()
		}
	}
}

// Release gives back a turn.
func (g *Gate) Release() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.used--
	if g.waiting > 0 {
		close(g.freed)
		g.freed = make(chan struct{})
	}
}

// Do runs fn within a turn; it waits for the turn at most until ctx ends.
func (g *Gate) Do(ctx context.Context, fn func() error) error {
	if err := g.Acquire(ctx); err != nil {
		return err
	}
	defer g.Release()
	return fn()
}
