package pgutil

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// defaultFleetStatements is the root package's DefaultFleetStatements.
const defaultFleetStatements = 8

func TestStatementsPerProcess_FollowTheFleetSize(t *testing.T) {
	for n, want := range map[int]int{0: 0, 1: 0, 2: 4, 3: 2, 4: 2, 5: 1, 8: 1, 16: 1, 50: 1} {
		assert.Equal(t, want, StatementsPerProcess(n, defaultFleetStatements), "fleet of %d", n)
	}
	assert.Equal(t, 0, StatementsPerProcess(16, -1), "a negative budget: no bound")
	assert.Equal(t, 4, StatementsPerProcess(16, 64))
}

// The gate never lets more than its bound through, lets everyone through at once when
// the fleet shrinks to one process, and gives up a wait when its context ends.
func TestGate_BoundsTurnsAndFollowsTheFleet(t *testing.T) {
	g := NewGate(defaultFleetStatements)
	g.SetFleet(3) // 2 turns
	var in, most atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				assert.NoError(t, g.Do(context.Background(), func() error {
					n := in.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					runtime.Gosched() // hold the turn while the others try to take one
					in.Add(-1)
					return nil
				}))
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int32(2), most.Load(), "turns in flight at most")

	// Bound 1, taken: a waiter gets in once the fleet shrinks to this process alone.
	g.SetFleet(8)
	require.NoError(t, g.Acquire(context.Background()))
	got := make(chan error, 1)
	go func() { got <- g.Acquire(context.Background()) }()
	select {
	case <-got:
		t.Fatal("a second turn was given under a bound of 1")
	case <-time.After(50 * time.Millisecond):
	}
	g.SetFleet(1)
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not let in when the bound went away")
	}
	g.Release()
	g.Release()

	// A cancelled wait returns its context's error and takes no turn.
	g.SetFleet(8)
	require.NoError(t, g.Acquire(context.Background()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, g.Acquire(ctx), context.DeadlineExceeded)
	g.Release()
	g.mu.Lock()
	assert.Equal(t, 0, g.used)
	assert.Equal(t, 0, g.waiting)
	g.mu.Unlock()

	var none *Gate
	require.NoError(t, none.Do(context.Background(), func() error { return nil }), "a nil gate has no bound")
}
