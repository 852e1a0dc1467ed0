// Package groupcommit holds the Batcher: it groups concurrent callers' items into
// batches that share one statement and one commit. The coalesced enqueues (internal/enqueue, coalesce.go),
// the success batches (internal/record, complete.go) and the failure batches (internal/record, failure.go) use it.
package groupcommit

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Batcher groups concurrent callers' items into batches and writes each batch with one
// statement (write), so one commit serves them all; a caller either waits for the batch
// that holds its item (submit) or leaves it to be written (post, and wait to flush). It
// serves the coalesced enqueues (internal/enqueue, coalesce.go), the urgent successes (internal/record, complete.go) and the
// failure recorder (internal/record, failure.go). A batch is sent
//
//   - at once when fewer than SendAtOnce batches are being written (one when it is 0: an
//     idle system adds no latency),
//   - when a batch in flight finishes (the items that arrived meanwhile go together),
//   - when it holds maxRows rows, or
//   - window after its first item, whatever else is in flight (the bound on added latency),
//
// and at most maxInFlight batches are written at once. With hold set, the first two do
// not apply: a batch waits for its window, for maxRows, or for an item given with
// PostLast, whose caller knows that no other item is coming soon.
//
// It owns no long-lived goroutine: a batch is written by a goroutine started for it, which
// writes the batches that are ready when it finishes and ends when none is; a timer's
// function only seals a batch. So nothing needs closing, and no goroutine outlives the
// statements in flight.
type Batcher[T any] struct {
	Window      time.Duration
	MaxRows     int
	MaxInFlight int
	Hold        bool
	// SendAtOnce: a new batch is sent at once while fewer than SendAtOnce batches are
	// being written (0 counts as 1: only when none is). With 2, busy callers keep a second
	// statement going while the first one runs and commits, rather than all waiting for
	// it to end.
	SendAtOnce int
	// write writes items with one statement and stores each one's result in it. It must
	// bound its own time: the callers wait for it.
	Write func(items []T)

	mu       sync.Mutex
	open     *commitBatch[T]   // collecting items; nil when none
	ready    []*commitBatch[T] // sealed, waiting for a slot
	inFlight int

	posted sync.WaitGroup // items given with post and not yet written
}

// commitBatch is the entries that share one statement.
type commitBatch[T any] struct {
	entries []*commitEntry[T]
	rows    int         // rows of the entries not withdrawn
	sent    bool        // its entries are fixed and being written
	timer   *time.Timer // seals the batch when the window ends
}

// commitEntry is one caller's item in a batch.
type commitEntry[T any] struct {
	item      T
	rows      int
	done      chan struct{}   // closed once the batch is written; nil for a posted item
	batch     *commitBatch[T] // guarded by Batcher.mu
	withdrawn bool            // guarded by Batcher.mu: the caller left before the batch was sent
}

// Submit adds item (rows rows of the statement) to a batch and waits until the batch has
// been written, or until ctx ends. It returns nil once item holds its result. If ctx ends
// first it returns ctx.Err() at once, and sent says whether the item had gone out with its
// batch (which then still commits it, or not, with the others) or was withdrawn (it is
// never written).
func (g *Batcher[T]) Submit(ctx context.Context, item T, rows int) (sent bool, err error) {
	e := &commitEntry[T]{item: item, rows: rows, done: make(chan struct{})}
	g.add(e, false)
	select {
	case <-e.done:
		return true, nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	sent = e.batch.sent
	if !sent {
		e.withdrawn = true
		e.batch.rows -= rows
	}
	g.mu.Unlock()
	return sent, ctx.Err()
}

// Post adds item to a batch and returns at once; wait waits until every posted item has
// been written.
func (g *Batcher[T]) Post(item T, rows int) {
	g.posted.Add(1)
	g.add(&commitEntry[T]{item: item, rows: rows}, false)
}

// PostLast is post, and sends the batch that holds item now, whatever is in flight.
func (g *Batcher[T]) PostLast(item T, rows int) {
	g.posted.Add(1)
	g.add(&commitEntry[T]{item: item, rows: rows}, true)
}

// Wait returns once every item given to post before the call has been written.
func (g *Batcher[T]) Wait() { g.posted.Wait() }

// add puts e in the open batch (opening one if needed) and sends what is due; with
// last, that batch is due.
func (g *Batcher[T]) add(e *commitEntry[T], last bool) {
	rows := e.rows
	g.mu.Lock()
	b := g.open
	fresh := b == nil
	if fresh {
		b = &commitBatch[T]{}
		g.open = b
	}
	b.entries = append(b.entries, e)
	b.rows += rows
	e.batch = b
	switch {
	case b.rows >= g.MaxRows || last || g.inFlight < max(1, g.SendAtOnce) && !g.Hold:
		g.seal(b)
	case fresh:
		b.timer = time.AfterFunc(g.Window, func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.open == b {
				g.seal(b)
				g.dispatch()
			}
		})
	}
	g.dispatch()
	g.mu.Unlock()
}

// seal closes the open batch b to new items and queues it for writing. g.mu is held.
func (g *Batcher[T]) seal(b *commitBatch[T]) {
	if b.timer != nil {
		b.timer.Stop()
	}
	if g.open == b {
		g.open = nil
	}
	g.ready = append(g.ready, b)
}

// dispatch starts a writing goroutine for each ready batch while slots are free. g.mu is
// held.
func (g *Batcher[T]) dispatch() {
	for g.inFlight < g.MaxInFlight {
		b := g.next()
		if b == nil {
			return
		}
		g.inFlight++
		go g.run(b)
	}
}

// next takes the first ready batch and fixes its entries (marks it sent), or returns nil.
// g.mu is held.
func (g *Batcher[T]) next() *commitBatch[T] {
	if len(g.ready) == 0 {
		return nil
	}
	b := g.ready[0]
	g.ready[0] = nil
	g.ready = g.ready[1:]
	b.sent = true
	return b
}

// run writes b, then every batch that is ready, or sealed because this one finished, and
// ends when there is none. An entry's fields are read without the lock once its batch is
// sent: nothing changes them after that.
func (g *Batcher[T]) run(b *commitBatch[T]) {
	for b != nil {
		live := slices.DeleteFunc(b.entries, func(e *commitEntry[T]) bool { return e.withdrawn })
		if len(live) > 0 {
			items := make([]T, len(live))
			for i, e := range live {
				items[i] = e.item
			}
			g.Write(items)
			for _, e := range live {
				if e.done != nil {
					close(e.done)
				} else {
					g.posted.Done()
				}
			}
		}
		g.mu.Lock()
		if len(g.ready) == 0 && g.open != nil && !g.Hold {
			// The items that arrived while this batch was written go now.
			g.seal(g.open)
		}
		b = g.next()
		if b == nil {
			g.inFlight--
		}
		g.mu.Unlock()
	}
}

// Idle reports whether no batch is collecting, waiting or being written.
func (g *Batcher[T]) Idle() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open == nil && len(g.ready) == 0 && g.inFlight == 0
}
