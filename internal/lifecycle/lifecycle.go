// Package lifecycle holds the one interface every background part of a skiplock Worker
// implements (Service), the ordered group that starts and stops them (Group), and Loop,
// the Service of a part that is one goroutine. It needs none of skiplock's types, so the
// compiler keeps it from reaching back into the root package. River's startstop.Service
// is the model: start with a context, stop and wait.
package lifecycle

import (
	"context"
	"sync"
	"time"
)

// Service is a background part of a worker.
type Service interface {
	// Start starts the part's goroutines (it may first run start-up statements) and
	// returns once the part runs, or with an error, in which case nothing of it runs.
	// A part whose goroutines must end with ctx derives their context from it; a part
	// that must outlive ctx (the shutdown sequence still needs it) ends only at Stop.
	Start(ctx context.Context) error
	// Stop ends the part and returns once every goroutine it started has returned. It is
	// called once, after a Start that returned nil.
	Stop()
}

// Group starts services in the order given and stops them in the reverse order.
type Group struct {
	started []Service
}

// Start starts services one after the other. If one fails, those already started are
// stopped, in reverse order, and its error is returned.
func (g *Group) Start(ctx context.Context, services ...Service) error {
	for _, s := range services {
		if err := s.Start(ctx); err != nil {
			g.Stop()
			return err
		}
		g.started = append(g.started, s)
	}
	return nil
}

// Stop stops the started services, last started first, each one once the one after it
// in the start order has returned.
func (g *Group) Stop() {
	for i := len(g.started) - 1; i >= 0; i-- {
		g.started[i].Stop()
	}
	g.started = nil
}

// Until says when a Loop's goroutine is told to end.
type Until int

const (
	// UntilCancel: when Start's ctx ends (or at Stop, whichever comes first).
	UntilCancel Until = iota
	// UntilStop: at Stop only; Start's ctx ending does not end it.
	UntilStop
)

// Loop is the Service of a part that is one goroutine running fn until its context ends.
type Loop struct {
	fn     func(ctx context.Context)
	until  Until
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewLoop returns the Service that runs fn in one goroutine, told to end as until says.
func NewLoop(fn func(ctx context.Context), until Until) *Loop {
	return &Loop{fn: fn, until: until}
}

// Start starts the goroutine.
func (l *Loop) Start(ctx context.Context) error {
	if l.until == UntilStop {
		ctx = context.WithoutCancel(ctx)
	}
	ctx, l.cancel = context.WithCancel(ctx)
	l.wg.Go(func() { l.fn(ctx) })
	return nil
}

// Stop ends the goroutine and waits for it.
func (l *Loop) Stop() {
	l.cancel()
	l.wg.Wait()
}

// Goroutines is the Service of a part that is several goroutines sharing one context:
// the part calls Begin in its Start, then Go for each goroutine.
type Goroutines struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Begin returns the context of the goroutines, ended as until says.
func (g *Goroutines) Begin(ctx context.Context, until Until) context.Context {
	if until == UntilStop {
		ctx = context.WithoutCancel(ctx)
	}
	ctx, g.cancel = context.WithCancel(ctx)
	return ctx
}

// Go runs fn in a goroutine of the part.
func (g *Goroutines) Go(fn func()) { g.wg.Go(fn) }

// Stop ends the goroutines' context and waits for them.
func (g *Goroutines) Stop() {
	if g.cancel != nil {
		g.cancel()
	}
	g.wg.Wait()
}

// WaitAtMost waits until ch is closed (true), or d passes or ctx ends (false): a
// Service's Start that waits for its part to be ready, without hanging the start.
func WaitAtMost(ctx context.Context, ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}
