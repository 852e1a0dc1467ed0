package jobtype

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
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

	// returned is set once the handler has returned and its outcome is on its way to
	// the database (MarkReturned): the held attempts (internal/ownership) read it here,
	// where the runner sets it without looking the attempt up among them.
	returned atomic.Bool

	mu       sync.Mutex
	progress string  // latest progress as JSON; "" when none
	output   string  // output as JSON; "" when none
	run      any     // the attempt's durable run (internal/durable), made by its first step
	logs     *logBuf // what the handler logged (skiplock.Logger); nil until it logs
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

// MarkReturned records that the attempt's handler returned: its outcome waits in a batch
// to be written, and there is no handler left to cancel (internal/ownership, held.go:
// its lease is still renewed). It does nothing on a nil State (an attempt the worker
// does not hold).
func (s *State) MarkReturned() {
	if s != nil {
		s.returned.Store(true)
	}
}

// Returned reports whether MarkReturned was called; false for a nil State.
func (s *State) Returned() bool { return s != nil && s.returned.Load() }

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

// LogRecord is one record a handler logged through the logger of its context
// (skiplock.Logger), as kept for its job.
type LogRecord struct {
	JobID   int64
	Attempt int   // the attempt that logged it, from 1
	Fence   int64 // the attempt's claim token: (Fence, Seq) orders a job's records in time
	Seq     int   // the record's place in its attempt, from 1
	At      time.Time
	Level   slog.Level
	Message string
	// Attrs are the record's attributes (and the logger's, from With and WithGroup) as a
	// JSON object; nil when none.
	Attrs json.RawMessage
}

// The bounds of one attempt's records: the first record past either, and every record
// after it, are dropped, and one marker record (LogsTruncated) says how many.
const (
	MaxLogRecords = 1000      // records per attempt
	MaxLogBytes   = 64 * 1024 // bytes of messages and attributes per attempt
)

// LogsTruncated starts the message of the marker record that ends an attempt's records
// when some were dropped.
const LogsTruncated = "skiplock: log records dropped"

// logBuf is one attempt's records, kept in its State until the attempt ends.
type logBuf struct {
	recs    []LogRecord
	bytes   int
	dropped int
	// The latest record's time and attempt, for the marker.
	last    time.Time
	job     int64
	attempt int
	fence   int64
}

// AddLog keeps r, unless the attempt's bound is reached: r does not fit, or a record
// before it did not. Then r is counted as dropped, so the records kept are the attempt's
// first ones and the marker's count is of the records logged after them.
func (s *State) AddLog(r LogRecord) {
	n := len(r.Message) + len(r.Attrs)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logs == nil {
		s.logs = &logBuf{}
	}
	b := s.logs
	b.last, b.job, b.attempt, b.fence = r.At, r.JobID, r.Attempt, r.Fence
	if b.dropped > 0 || len(b.recs) >= MaxLogRecords || b.bytes+n > MaxLogBytes {
		b.dropped++
		return
	}
	b.bytes += n
	b.recs = append(b.recs, r)
}

// TakeLogs returns the records kept so far, numbered, with a marker record at the end
// when some were dropped, and forgets them; nil when none (a nil State has none).
func (s *State) TakeLogs() []LogRecord {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	b := s.logs
	s.logs = nil
	s.mu.Unlock()
	if b == nil {
		return nil
	}
	out := b.recs
	if b.dropped > 0 {
		out = append(out, LogRecord{JobID: b.job, Attempt: b.attempt, Fence: b.fence, At: b.last, Level: slog.LevelWarn,
			Message: fmt.Sprintf("%s: %d more (the limit is %d records or %d KiB per attempt)", LogsTruncated, b.dropped, MaxLogRecords, MaxLogBytes/1024)})
	}
	for i := range out {
		out[i].Seq = i + 1
	}
	return out
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
