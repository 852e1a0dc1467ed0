package groupcommit

import (
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"
)

// With hold, a batch is not sent because nothing is in flight: it waits for an item
// given with PostLast (or for maxRows, or its window), so that the items of one burst go
// together (the completer's successes of jobs holding a concurrency slot).
func TestBatcher_HoldSendsOnLastOrMaxRows(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var writes [][]int
	g := &Batcher[int]{Window: time.Hour, MaxRows: 3, MaxInFlight: 2, Hold: true, Write: func(items []int) {
		mu.Lock()
		defer mu.Unlock()
		writes = append(writes, slices.Clone(items))
	}}
	sent := func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.open == nil
	}
	g.Post(1, 1)
	g.Post(2, 1)
	if sent() {
		t.Fatal("a held batch was sent before its last item")
	}
	g.PostLast(3, 1)
	g.Wait()
	g.Post(4, 1)
	g.Post(5, 1)
	g.Post(6, 1) // maxRows
	g.Wait()
	mu.Lock()
	defer mu.Unlock()
	if want := [][]int{{1, 2, 3}, {4, 5, 6}}; !reflect.DeepEqual(writes, want) {
		t.Fatalf("batches written: %v, want %v", writes, want)
	}
}
