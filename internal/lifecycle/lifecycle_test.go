package lifecycle_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/lifecycle"
)

// recorder notes the order of starts and stops.
type recorder struct {
	mu  sync.Mutex
	log []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	r.log = append(r.log, s)
	r.mu.Unlock()
}

type part struct {
	name string
	r    *recorder
	fail error
}

func (p *part) Start(context.Context) error {
	if p.fail != nil {
		p.r.add("fail " + p.name)
		return p.fail
	}
	p.r.add("start " + p.name)
	return nil
}

func (p *part) Stop() { p.r.add("stop " + p.name) }

func TestGroup_StartsInOrderAndStopsInReverse(t *testing.T) {
	t.Parallel()
	r := &recorder{}
	var g lifecycle.Group
	if err := g.Start(t.Context(), &part{name: "a", r: r}, &part{name: "b", r: r}, &part{name: "c", r: r}); err != nil {
		t.Fatal(err)
	}
	g.Stop()
	want := []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}
	if !slices.Equal(r.log, want) {
		t.Fatalf("got %v, want %v", r.log, want)
	}
}

func TestGroup_FailedStartStopsWhatStarted(t *testing.T) {
	t.Parallel()
	r := &recorder{}
	boom := errors.New("boom")
	var g lifecycle.Group
	err := g.Start(t.Context(), &part{name: "a", r: r}, &part{name: "b", r: r}, &part{name: "c", r: r, fail: boom}, &part{name: "d", r: r})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want %v", err, boom)
	}
	want := []string{"start a", "start b", "fail c", "stop b", "stop a"}
	if !slices.Equal(r.log, want) {
		t.Fatalf("got %v, want %v", r.log, want)
	}
}

func TestLoop_UntilCancelEndsWithStartContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	ended := make(chan struct{})
	l := lifecycle.NewLoop(func(ctx context.Context) { <-ctx.Done(); close(ended) }, lifecycle.UntilCancel)
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-ended // ends without Stop
	l.Stop()
}

func TestLoop_UntilStopOutlivesStartContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // Start's context has ended before the loop even starts
	loopCtx := make(chan context.Context, 1)
	exited := make(chan struct{})
	l := lifecycle.NewLoop(func(lctx context.Context) {
		defer close(exited)
		loopCtx <- lctx
		<-lctx.Done()
	}, lifecycle.UntilStop)
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := (<-loopCtx).Err(); err != nil {
		t.Fatalf("the loop's context ended with Start's: %v", err)
	}
	l.Stop() // only Stop ends it
	<-exited
}

func TestGoroutines_StopWaitsForEveryGoroutine(t *testing.T) {
	t.Parallel()
	var g lifecycle.Goroutines
	ctx := g.Begin(t.Context(), lifecycle.UntilStop)
	var mu sync.Mutex
	done := 0
	for range 3 {
		g.Go(func() {
			<-ctx.Done()
			mu.Lock()
			done++
			mu.Unlock()
		})
	}
	g.Stop()
	if done != 3 {
		t.Fatalf("Stop returned with %d of 3 goroutines done", done)
	}
}

func TestWaitAtMost_ReadyTimeoutOrCancelled(t *testing.T) {
	ready := make(chan struct{})
	close(ready)
	if !lifecycle.WaitAtMost(context.Background(), ready, time.Hour) {
		t.Fatal("a closed channel is ready")
	}
	never := make(chan struct{})
	began := time.Now()
	if lifecycle.WaitAtMost(context.Background(), never, 20*time.Millisecond) || time.Since(began) < 20*time.Millisecond {
		t.Fatal("the wait ends, false, once its bound passed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if lifecycle.WaitAtMost(ctx, never, time.Hour) {
		t.Fatal("a cancelled context ends the wait, false")
	}
}
