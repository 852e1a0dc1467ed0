package jobtype

import (
	"context"
	"sync"
)

// State is what one attempt's handler reported, carried in its context: its latest
// progress and its output, both as JSON. It is safe for concurrent use.
type State struct {
	// MaxBytes is the client's MaxPayloadBytes, the limit of the output.
	MaxBytes int
	// Row is the attempt's job as claimed, and Durable the worker's durable-execution
	// engine (internal/durable): both set when the attempt starts, read by Step, Sleep
	// and AwaitSignal through the handler's context. Durable is nil outside a worker.
	Row     *JobRow
	Durable any

	mu       sync.Mutex
	progress string // latest progress as JSON; "" when none
	output   string // output as JSON; "" when none
	run      any    // the attempt's durable run (internal/durable), made by its first step
}

// RunOf returns the attempt's durable run, made by newRun at the first call.
func (s *State) RunOf(newRun func() any) any {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run == nil {
		s.run = newRun()
	}
	return s.run
}

type stateKey struct{}

// stateCtx is a context carrying a State: what context.WithValue would make, with the
// state in the same allocation.
type stateCtx struct {
	context.Context
	st State
}

// Value returns the state for stateKey, and asks the parent for any other key.
func (c *stateCtx) Value(key any) any {
	if key == (stateKey{}) {
		return &c.st
	}
	return c.Context.Value(key)
}

// WithState returns ctx carrying a fresh state for one attempt.
func WithState(ctx context.Context, maxBytes int) (context.Context, *State) {
	c := &stateCtx{Context: ctx}
	c.st.MaxBytes = maxBytes
	return c, &c.st
}

// StateOf returns the attempt state ctx carries, or nil.
func StateOf(ctx context.Context) *State {
	st, _ := ctx.Value(stateKey{}).(*State)
	return st
}

// SetProgress stores the progress, as JSON.
func (s *State) SetProgress(p string) {
	s.mu.Lock()
	s.progress = p
	s.mu.Unlock()
}

// SetOutput stores the output, as JSON.
func (s *State) SetOutput(o string) {
	s.mu.Lock()
	s.output = o
	s.mu.Unlock()
}

// Reported returns the progress and output as statement arguments: nil for none. A nil
// State reports nothing.
func (s *State) Reported() (progress, output *string) {
	if s == nil {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.progress != "" {
		p := s.progress
		progress = &p
	}
	if s.output != "" {
		o := s.output
		output = &o
	}
	return progress, output
}

type batchCallKey struct{}

// WithBatchCall marks ctx as the context of one call of a batch handler, which carries
// its first job's values: durable steps refuse it (they need one job's own context).
func WithBatchCall(ctx context.Context) context.Context {
	return context.WithValue(ctx, batchCallKey{}, true)
}

// InBatchCall reports whether ctx is, or derives from, a batch handler's call context.
func InBatchCall(ctx context.Context) bool {
	b, _ := ctx.Value(batchCallKey{}).(bool)
	return b
}
