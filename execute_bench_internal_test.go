//go:build unix

package skiplock

// Benchmarks of the Go work a worker does per job between a claim's result and the
// success batch (execute.go, outcome.go, complete.go).

import (
	"context"
	"log/slog"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/claim"
	"github.com/skiplock/skiplock/internal/record"
	"github.com/stretchr/testify/require"
)

// benchArgs is the args type of the executor benchmarks: no field (its payload is
// "{}"), a handler that does nothing.
type benchArgs struct{}

func (benchArgs) Kind() string { return "bench_noop" }

// benchWorker returns a Worker at the defaults (JobTimeout 1m, no middleware, no hook
// but the error hook every worker has) with a no-op handler of benchArgs. Its completer's
// batching loops do not run: benchBatches takes their place.
func benchWorker(b *testing.B) *Worker {
	b.Helper()
	c, _, _ := claimSetup(b)
	w, err := NewWorker(c, WorkerConfig{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(b, err)
	require.NoError(b, Handle(w, func(context.Context, *Job[benchArgs]) error { return nil }))
	w.starter.SetBase(context.Background())
	b.Cleanup(func() { w.starter.Cancel(nil) })
	benchBatches(b, w.completer)
	return w
}

// benchBatches reads the successes added to c into batches of c.batchSize, as c's loops
// do, builds each batch's statement arguments and ends the batch as written (the worker
// stops holding its attempts) without sending it: the statement is per batch, and on a
// database it is server work. Its goroutine ends with the benchmark.
func benchBatches(b *testing.B, c *record.Completer) {
	stop, done := make(chan struct{}), make(chan struct{})
	b.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		batch := make([]record.Success, 0, c.BatchSize)
		end := func() {
			if len(batch) > 0 {
				c.Args(batch, false)
				c.Finish(batch, true)
				batch = batch[:0]
			}
		}
		for {
			select {
			case k := <-c.Ch:
				if batch = append(batch, k); len(batch) == c.BatchSize {
					end()
				}
			case <-stop:
				end()
				return
			}
		}
	}()
}

// benchClaimed returns the claimed job i of a benchmark: what the claim hands the
// starter, a fresh row each (as scanJob makes), none of them in the database.
func benchClaimed(i int, now time.Time) claim.ClaimedJob {
	return claim.ClaimedJob{
		Row: &JobRow{ID: int64(i + 1), Queue: DefaultQueue, Kind: "bench_noop", Payload: []byte("{}"),
			Status: StatusRunning, Attempts: 1, MaxAttempts: 25, RunAt: now, CreatedAt: now, LockedAt: now, LockedBy: "w"},
		Fence: 1, Leased: now,
	}
}

// BenchmarkExecutor_PerJob measures the Go work per job from a claim's result to the
// success batch, at the worker's defaults, with a handler that does nothing: the
// starter (the job's context and state, its place among the held attempts), the
// executor (the attempt's timeout and overrun watch, the hooks, the handler call with
// its payload decoding and panic recovery), the outcome recorder, the completer's add,
// and the job's share of its batch (benchBatches: the batch's arguments built, its
// attempts no longer held), but not the batch's statement. ns/op, B/op and allocs/op
// are per job; cpu-ns/op is the process's CPU time (user and system, every goroutine,
// the garbage collector's included) per job, which a loaded machine inflates less than
// ns/op. Each job's JobRow is made in the loop, as the claim's scan makes it: one
// of the allocations counted belongs to the claim, not to the path measured.
//
// sequential runs each job in the benchmark's goroutine, as a runner does; runners
// hands the jobs through a queue's Handoff to its MaxWorkers (100) runner goroutines,
// as the claim loops do, and adds the hand-off and the scheduling.
func BenchmarkExecutor_PerJob(b *testing.B) {
	b.Run("sequential", func(b *testing.B) {
		w := benchWorker(b)
		o := w.executor.NewOverrunWatch()
		defer o.Close()
		now := time.Now()
		b.ReportAllocs()
		cpu := startCPU(b)
		for i := range b.N {
			d, _ := w.starter.Start(benchClaimed(i, now), false)
			w.executor.Execute(d, o)
			d.Job.Cancel(nil)
			w.starter.HandlerWG.Done()
		}
		w.starter.HandlerWG.Wait()
		cpu.report()
	})
	b.Run("runners", func(b *testing.B) {
		w := benchWorker(b)
		q := claim.NewQueueRunner(DefaultQueue, DefaultMaxWorkers, w.loops)
		w.executor.Grow(q)
		now := time.Now()
		b.ReportAllocs()
		cpu := startCPU(b)
		for i := range b.N {
			d, _ := w.starter.Start(benchClaimed(i, now), false)
			q.Jobs.Put(d)
		}
		w.starter.HandlerWG.Wait()
		cpu.report()
		q.CloseJobs()
		q.Ran.Wait()
	})
}

// benchCPU reports the process's CPU time per op of a benchmark.
type benchCPU struct {
	b     *testing.B
	start time.Duration
}

// startCPU resets b's timer and starts counting the process's CPU time.
func startCPU(b *testing.B) benchCPU {
	b.ResetTimer()
	return benchCPU{b: b, start: processCPU(b)}
}

// report stops b's timer and reports the CPU time per op as cpu-ns/op.
func (c benchCPU) report() {
	c.b.StopTimer()
	c.b.ReportMetric(float64(processCPU(c.b)-c.start)/float64(c.b.N), "cpu-ns/op")
}

// processCPU returns the user and system CPU time the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkClaim_PerJob measures the worker's own CPU per job claimed (cpu-ns/op): the
// claim statement's encoding, the decoding of its rows into claimed jobs, for claims of
// 100 jobs of benchArgs from a queue of b.N. The server's work is not counted: it runs in
// other processes. ns/op counts the server's time too.
func BenchmarkClaim_PerJob(b *testing.B) {
	c, pool, schema := claimSetup(b)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "jobs"}.Sanitize()+` (kind, payload)
		SELECT 'bench_noop', '{"t": 1}' FROM generate_series(1, $1)`, b.N)
	require.NoError(b, err)
	cl := claim.NewClaimer(c.db, time.Minute)
	b.ReportAllocs()
	cpu := startCPU(b)
	for n := 0; n < b.N; {
		jobs, err := cl.Claim(ctx, DefaultQueue, 100, "w", nil)
		require.NoError(b, err)
		require.NotEmpty(b, jobs)
		n += len(jobs)
	}
	cpu.report()
}

// drainArgs is the args type of BenchmarkWorker_Drain: one number, as the bench's
// NoopArgs ({"t": …}).
type drainArgs struct {
	T int64 `json:"t"`
}

func (drainArgs) Kind() string { return "bench_drain" }

// BenchmarkWorker_Drain measures a whole worker at its defaults (100 runners, archive on
// success) draining b.N pre-inserted jobs of drainArgs, with a handler that only counts:
// the claims (their statements' encoding, their rows' decoding), the runners, the
// success batches, the lease, the listener and poller, as in bench's drain. cpu-ns/op is
// the process's CPU time per job (the garbage collector's included; the server's not: it
// runs in other processes), from Run's start until every job is handled and Run has
// returned, its last batch written. The insert of the jobs is not counted. Run it with a
// fixed count, e.g. -benchtime 20000x, so that each job is claimed from a backlog.
func BenchmarkWorker_Drain(b *testing.B) {
	c, pool, schema := claimSetup(b)
	ctx := context.Background()
	jobs := pgx.Identifier{schema, "jobs"}.Sanitize()
	_, err := pool.Exec(ctx, `INSERT INTO `+jobs+` (kind, payload)
		SELECT 'bench_drain', jsonb_build_object('t', i) FROM generate_series(1, $1) AS i`, b.N)
	require.NoError(b, err)
	w, err := NewWorker(c, WorkerConfig{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(b, err)
	var handled atomic.Int64
	all := make(chan struct{})
	require.NoError(b, Handle(w, func(_ context.Context, j *Job[drainArgs]) error {
		if handled.Add(1) == int64(b.N) {
			close(all)
		}
		return nil
	}))
	b.ReportAllocs()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	cpu := startCPU(b)
	go func() { done <- w.Run(rctx) }()
	<-all
	cancel()
	require.NoError(b, <-done)
	cpu.report()
	var left int64
	require.NoError(b, pool.QueryRow(ctx, `SELECT count(*) FROM `+jobs).Scan(&left))
	require.Zero(b, left, "jobs left in the hot table")
}
