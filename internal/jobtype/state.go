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
	// Row is the job of the attempt, as claimed (its Fence set); nil outside a worker.
	Row *JobRow

	mu       sync.Mutex
	progress string  // latest progress as JSON; "" when none
	output   string  // output as JSON; "" when none
	logs     *logBuf // what the handler logged (skiplock.Logger); nil until it logs
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
