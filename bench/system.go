package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// NoopArgs is the one job every system runs. T is the enqueue timestamp in
// nanoseconds since the process's monotonic base (see Sink.Now); 0 means the
// job is not part of a latency measurement. The handler does nothing but
// report to the Sink, so every figure measures the queue, not the work.
type NoopArgs struct {
	T int64 `json:"t"`
}

// Kind satisfies both skiplock.JobArgs and river.JobArgs.
func (NoopArgs) Kind() string { return "noop" }

// System is what the harness needs from a job queue. One adapter per system
// implements it; each adapter works in a database of its own.
type System interface {
	// Name is the short name used in flags and output ("river").
	Name() string
	// Setup creates the system's tables (migrations) in the empty database
	// behind pool and builds its client. Called once per process.
	Setup(ctx context.Context, pool *pgxpool.Pool) error
	// Reset empties every job table. Workers are stopped when it is called.
	Reset(ctx context.Context) error
	// Bulk prepares n jobs due at runAt (zero: now) for the system's fastest
	// bulk insert path and returns the call that inserts them, so building
	// the parameters is not timed. queues > 1 spreads the jobs round-robin over
	// that many queues (queueName), for Spec.Queues.
	Bulk(n int, runAt time.Time, queues int) func(ctx context.Context) error
	// Insert enqueues one job in its own transaction (the system's ordinary
	// autocommit insert call), through the running client if there is one.
	Insert(ctx context.Context, args NoopArgs) error
	// Start runs workers that report every job to sink, as spec says; it
	// returns once they are started. Stop shuts them down gracefully and waits.
	// A system that cannot run spec returns errUnsupported.
	Start(ctx context.Context, sink *Sink, spec Spec) error
	Stop(ctx context.Context) error
	// Pending counts jobs that are due (run_at <= now) and not yet in a final
	// state in the database.
	Pending(ctx context.Context) (int64, error)
	// HotTable is the table claims run against; JobTables lists every table
	// that holds jobs (hot table first), e.g. an archive.
	HotTable() string
	JobTables() []string
	// Config describes the non-default settings used, for the report.
	Config() string
}

// Spec says what workers a workload needs. The zero value is the system's
// workers on its default queue, every job succeeding.
type Spec struct {
	// Queues > 1 runs workers on that many queues (queueName), PerQueue each.
	Queues, PerQueue int
	// FailOnce makes the handler fail each job's first attempt, with a retry
	// policy that retries at once; the second attempt succeeds.
	FailOnce bool
	// OneAtATime says jobs arrive one at a time (the latency workload). The
	// queues run as always; it lets bare run its latency floor, and nothing else.
	OneAtATime bool
	// Backlog says every job was inserted before the workers started (drain,
	// storm). The queues run as always; it lets bare run its drain floor.
	Backlog bool
}

// queueName is the name of the i-th queue of a many-queue workload.
func queueName(i int) string { return fmt.Sprintf("q%03d", i) }

// errUnsupported is returned by a system for a workload it cannot run; the
// harness leaves its cells empty.
var errUnsupported = errors.New("not supported by this system")

// registry holds the adapters compiled in, in report order.
var registry = map[string]func() System{}

var systemOrder = []string{"skiplock", "river", "gue", "bare"}

func register(name string, f func() System) { registry[name] = f }

// base is the process's monotonic time origin for enqueue timestamps.
var base = time.Now()

// Sink receives every handled job. It counts them, records enqueue→start
// latencies while recording is on, and signals when a target count is
// reached. Safe for concurrent use.
type Sink struct {
	done    atomic.Int64
	target  int64
	reached chan struct{}
	once    sync.Once
	at      time.Time // when target was reached; written before reached closes
	rec     atomic.Bool

	mu   sync.Mutex
	lats []time.Duration
}

// NewSink returns a Sink whose Reached channel closes when target jobs were
// handled (never, if target is 0).
func NewSink(target int64) *Sink {
	return &Sink{target: target, reached: make(chan struct{})}
}

// Now is the timestamp put into NoopArgs.T just before an enqueue call.
func Now() int64 { return int64(time.Since(base)) }

// Handle is called first thing in every system's handler.
func (s *Sink) Handle(a NoopArgs) {
	if s.rec.Load() && a.T > 0 {
		lat := time.Duration(Now() - a.T)
		s.mu.Lock()
		s.lats = append(s.lats, lat)
		s.mu.Unlock()
	}
	if n := s.done.Add(1); s.target > 0 && n >= s.target {
		s.once.Do(func() { s.at = time.Now(); close(s.reached) })
	}
}

// ReachedAt is when the target was reached; call it after Reached closed.
func (s *Sink) ReachedAt() time.Time {
	<-s.reached
	return s.at
}

// Done is the number of jobs handled so far.
func (s *Sink) Done() int64 { return s.done.Load() }

// Reached closes once the target count was handled.
func (s *Sink) Reached() <-chan struct{} { return s.reached }

// Record turns latency recording on or off.
func (s *Sink) Record(on bool) { s.rec.Store(on) }

// Latencies returns a sorted copy of the recorded latencies.
func (s *Sink) Latencies() []time.Duration {
	s.mu.Lock()
	out := slices.Clone(s.lats)
	s.mu.Unlock()
	slices.Sort(out)
	return out
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 1) of sorted
// values, or 0 when there are none.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.999999999) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

// waitDrained waits until sink has seen its target and the database shows no
// due, unfinished job, so a system that acknowledges completions lazily does
// not look faster than one that writes them at once.
func waitDrained(ctx context.Context, sys System, sink *Sink, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-sink.Reached():
	case <-t.C:
		return fmt.Errorf("%s: timed out after %s with %d of %d jobs handled", sys.Name(), timeout, sink.Done(), sink.target)
	case <-ctx.Done():
		return ctx.Err()
	}
	for {
		n, err := sys.Pending(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		select {
		case <-t.C:
			return fmt.Errorf("%s: all %d jobs handled but %d still unfinished in the database after %s", sys.Name(), sink.target, n, timeout)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// errFailOnce is the error of a first attempt in the failure storm.
var errFailOnce = errors.New("bench: the first attempt fails (downstream outage)")
