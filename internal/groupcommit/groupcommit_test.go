package groupcommit

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
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

// gatedWriter is a Write that hands each batch to the test and waits until the test
// lets it finish, so that a test decides what is in flight.
type gatedWriter struct {
	batches  chan []int    // each batch, as Write is called
	finish   chan struct{} // one receive per batch lets it finish
	inFlight atomic.Int64
	maxSeen  atomic.Int64 // the most batches written at once
}

func newGatedWriter() *gatedWriter {
	return &gatedWriter{batches: make(chan []int, 16), finish: make(chan struct{})}
}

func (w *gatedWriter) write(items []int) {
	n := w.inFlight.Add(1)
	for {
		m := w.maxSeen.Load()
		if n <= m || w.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	w.batches <- slices.Clone(items)
	<-w.finish
	w.inFlight.Add(-1)
}

// next waits for the next batch written; no window in these tests is due within the limit.
func (w *gatedWriter) next(t *testing.T) []int {
	t.Helper()
	select {
	case b := <-w.batches:
		return b
	case <-time.After(10 * time.Second):
		t.Fatal("no batch was written")
		return nil
	}
}

// post gives g each item, of one row.
func post(g *Batcher[int], items ...int) {
	for _, i := range items {
		g.Post(i, 1)
	}
}

// expect waits for the next batch written and checks it holds want.
func (w *gatedWriter) expect(t *testing.T, want ...int) {
	t.Helper()
	if b := w.next(t); !slices.Equal(b, want) {
		t.Fatalf("batch %v, want %v", b, want)
	}
}

// release lets the oldest batch being written finish.
func (w *gatedWriter) release(t *testing.T) {
	t.Helper()
	select {
	case w.finish <- struct{}{}:
	case <-time.After(10 * time.Second):
		t.Fatal("no batch is being written to finish")
	}
}

// none checks that no further batch is being written.
func (w *gatedWriter) none(t *testing.T) {
	t.Helper()
	select {
	case b := <-w.batches:
		t.Fatalf("batch %v was written, want none", b)
	default:
	}
}

// Without hold, an idle batcher sends an item at once: an idle system adds no latency,
// whatever the window.
func TestBatcher_SendsAtOnceWhenIdle(t *testing.T) {
	t.Parallel()
	w := newGatedWriter()
	g := &Batcher[int]{Window: time.Hour, MaxRows: 100, MaxInFlight: 2, Write: w.write}
	g.Post(1, 1)
	w.expect(t, 1)
	w.release(t)
	g.Wait()
	// Wait returns once the batch's items are written; its goroutine then takes the lock
	// once more to find no next batch and end, so idleness follows shortly after.
	deadline := time.Now().Add(5 * time.Second)
	for !g.Idle() {
		if time.Now().After(deadline) {
			t.Fatal("the batcher is not idle once its only batch was written")
		}
		time.Sleep(time.Millisecond)
	}
}

// With SendAtOnce 2, a batch goes at once beside one in flight; with two in flight, the
// items that arrive wait for one of them to finish, and then go together.
func TestBatcher_SendAtOnceSendsASecondBatchBesideTheFirst(t *testing.T) {
	t.Parallel()
	w := newGatedWriter()
	g := &Batcher[int]{Window: time.Hour, MaxRows: 100, MaxInFlight: 4, SendAtOnce: 2, Write: w.write}
	g.Post(1, 1)
	w.next(t)
	g.Post(2, 1)
	w.expect(t, 2) // beside the first, still in flight
	post(g, 3, 4, 5)
	w.none(t)
	w.release(t)
	w.expect(t, 3, 4, 5)
	w.release(t)
	w.release(t)
	g.Wait()
	if m := w.maxSeen.Load(); m != 2 {
		t.Fatalf("%d batches written at once, want 2", m)
	}
}

// The items that arrive while a batch is written go together once it finishes.
func TestBatcher_ItemsArrivingInFlightGoTogetherWhenItFinishes(t *testing.T) {
	t.Parallel()
	w := newGatedWriter()
	g := &Batcher[int]{Window: time.Hour, MaxRows: 100, MaxInFlight: 1, Write: w.write}
	g.Post(1, 1)
	w.next(t)
	post(g, 2, 3, 4)
	w.none(t)
	w.release(t)
	w.expect(t, 2, 3, 4)
	w.release(t)
	g.Wait()
}

// A batch that reaches MaxRows is sent at once, beside the one in flight, without
// waiting for its window; at most MaxInFlight batches are written at once.
func TestBatcher_SendsAFullBatchAtOnceUpToMaxInFlight(t *testing.T) {
	t.Parallel()
	w := newGatedWriter()
	g := &Batcher[int]{Window: time.Hour, MaxRows: 3, MaxInFlight: 2, Write: w.write}
	g.Post(1, 1)
	w.next(t)
	g.Post(2, 1)
	g.Post(3, 2) // 3 rows: full
	w.expect(t, 2, 3)
	g.Post(4, 3) // full, but both slots are taken
	g.mu.Lock()
	inFlight, ready := g.inFlight, len(g.ready)
	g.mu.Unlock()
	if inFlight != 2 || ready != 1 {
		t.Fatalf("%d batches in flight and %d ready, want 2 and 1 waiting for a slot", inFlight, ready)
	}
	w.none(t)
	w.release(t)
	w.expect(t, 4)
	w.release(t)
	w.release(t)
	g.Wait()
	if m := w.maxSeen.Load(); m != 2 {
		t.Fatalf("%d batches written at once, want at most (and here exactly) 2", m)
	}
}

// A batch collecting while another is in flight is sent when its window ends, beside
// it: the window bounds the latency a batch adds.
func TestBatcher_SendsAWaitingBatchWhenItsWindowEnds(t *testing.T) {
	t.Parallel()
	w := newGatedWriter()
	g := &Batcher[int]{Window: 20 * time.Millisecond, MaxRows: 100, MaxInFlight: 2, Write: w.write}
	g.Post(1, 1)
	w.next(t)
	began := time.Now()
	g.Post(2, 1)
	w.expect(t, 2)
	if waited := time.Since(began); waited < g.Window {
		t.Fatalf("the batch was sent after %s, before its window of %s", waited, g.Window)
	}
	w.release(t)
	w.release(t)
	g.Wait()
}

// A caller whose ctx ends before its batch is sent withdraws its item: it is never
// written, and the others of its batch are.
func TestBatcher_SubmitWithdrawsAnItemNotYetSent(t *testing.T) {
	t.Parallel()
	w := newGatedWriter()
	g := &Batcher[int]{Window: time.Hour, MaxRows: 100, MaxInFlight: 1, Write: w.write}
	g.Post(1, 1)
	w.next(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if sent, err := g.Submit(ctx, 2, 1); sent || !errors.Is(err, context.Canceled) {
		t.Fatalf("Submit = %v, %v; want false, %v", sent, err, context.Canceled)
	}
	g.Post(3, 1)
	w.release(t)
	w.expect(t, 3) // not 2: the withdrawn item is never written
	w.release(t)
	g.Wait()
}

// Submit returns once the batch holding its item was written.
func TestBatcher_SubmitWaitsForItsBatch(t *testing.T) {
	t.Parallel()
	w := newGatedWriter()
	g := &Batcher[int]{Window: time.Hour, MaxRows: 100, MaxInFlight: 1, Write: w.write}
	done := make(chan error, 1)
	go func() {
		_, err := g.Submit(context.Background(), 1, 1)
		done <- err
	}()
	w.next(t)
	select {
	case err := <-done:
		t.Fatalf("Submit returned (%v) before its batch was written", err)
	default:
	}
	w.release(t)
	if err := <-done; err != nil {
		t.Fatalf("Submit = %v, want nil", err)
	}
}
