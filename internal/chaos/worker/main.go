// Command worker is one worker process of the chaos harness (package
// github.com/skiplock/skiplock/internal/chaos). The harness builds it, starts several,
// kills some with SIGKILL and starts new ones; it is not meant to be run by hand.
//
// It runs a skiplock Worker on the default queue, and on a queue with a global
// concurrency limit (audit.LimitedQueue), with one handler, for [audit.Args]
// jobs, that leaves one row per execution in chaos.executions: the row is inserted before
// a short random amount of work (a sleep) and its end time is written after it, so the
// harness can see executions that overlap, that ran twice, or that were cut off by a kill.
// Workflow tasks and batch jobs ([audit.FlowArgs]) and batch callbacks ([audit.CallbackArgs])
// are recorded the same way; a callback also writes the counts it was given to
// chaos.callbacks. Durable jobs ([audit.DurableArgs]) run five steps, with a durable sleep
// or a wait for a signal between two, and record each execution of a step in
// chaos.durable_execs (durable.go).
//
// With -ends, it also appends each execution's end to a file of its own before it writes
// it to the table: an end whose write cannot get through before the process exits (a
// deploy's SIGKILL after its grace, a database still out of reach) is still known.
//
// With -spin, it runs no worker: it keeps one CPU busy until it is killed. The harness
// starts several as the stressor of its CPU-starvation fault. With -held, it runs the
// held-pool fault's worker instead (held.go).
//
// It logs to stderr, stops gracefully on SIGTERM or SIGINT, and keeps trying to start
// while the database is unreachable (a Worker's Run fails when it cannot reach the
// database at start; a supervisor would restart it, and this loop is that supervisor).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/chaos/audit"
	"github.com/skiplock/skiplock/internal/claim"
)

// writeTimeout bounds how long a handler keeps retrying an audit write through a lost
// connection or a restarting server. It must outlast every outage a run injects, counted
// from before it: an end that cannot be written is taken to last until the worker exits,
// which the analysis then counts as an overlap with the job's next attempt. At 10 s, a
// reduced run under CI load reported 27 such overlaps, all of one worker started just
// before the Postgres restart, each with its work (at most MaxWork, 20 ms) long done
// and its end unwritten: their end writes, queued for a pooled connection and then
// refused by the restarting server, most likely ran out of time just before it
// accepted again (the run's logs were not kept).
const writeTimeout = time.Minute

func main() {
	var (
		url         = flag.String("url", "", "connection string of the database (required)")
		id          = flag.String("id", "", "worker id, as recorded in locked_by (required)")
		vt          = flag.Duration("visibility-timeout", 3*time.Second, "WorkerConfig.VisibilityTimeout")
		sweep       = flag.Duration("sweep-interval", time.Second, "WorkerConfig.SweepInterval")
		concurrency = flag.Int("concurrency", 32, "handlers running at once (QueueConfig.MaxWorkers)")
		maxConns    = flag.Int("max-conns", 16, "pool size")
		maxWork     = flag.Duration("max-work", 20*time.Millisecond, "each handler sleeps a random time in [0, max-work]")
		limitedWork = flag.Duration("limited-work", 40*time.Millisecond, "the limited queue's handlers sleep a random time in [0, limited-work]")
		durableWork = flag.Duration("durable-work", 200*time.Millisecond, "each step of a durable job sleeps a random time in [0, durable-work]")
		endsPath    = flag.String("ends", "", "file to append each execution's end to (audit.EndLine) before writing it to the table")
		spinOnly    = flag.Bool("spin", false, "run no worker: keep one CPU busy until killed (the harness's CPU stressor)")
		held        = flag.Duration("held", 0, "run the held-pool worker instead (held.go): handlers on the held queue hold a transaction on the pool this long")
		aheadBelow  = flag.Duration("claim-ahead-below", 0, "claim ahead of the free slots while the handlers average under this (0: the library's 1ms, which these handlers, writing two audit rows each, never reach)")
	)
	flag.Parse()
	if *aheadBelow > 0 {
		claim.ClaimAheadBelow = *aheadBelow // before any Worker starts
	}
	if *spinOnly {
		spin()
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if *url == "" || *id == "" {
		logger.Error("chaos worker: -url and -id are required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var ends *os.File
	if *endsPath != "" {
		f, err := os.OpenFile(*endsPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			logger.Error("chaos worker: opening the ends file", "err", err)
			os.Exit(2)
		}
		defer f.Close()
		ends = f
	}
	work := func() error {
		return run(ctx, logger, *url, *id, *vt, *sweep, *concurrency, int32(*maxConns), *maxWork, *limitedWork, *durableWork, ends)
	}
	if *held > 0 {
		work = func() error {
			return runHeld(ctx, logger, *url, *id, *vt, *sweep, *concurrency, int32(*maxConns), *held, ends)
		}
	}
	if err := work(); err != nil {
		logger.Error("chaos worker: failed", "err", err)
		os.Exit(1)
	}
	logger.Info("chaos worker: stopped")
}

func run(ctx context.Context, logger *slog.Logger, url, id string, vt, sweep time.Duration,
	concurrency int, maxConns int32, maxWork, limitedWork, durableWork time.Duration, ends *os.File,
) error {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.RuntimeParams["application_name"] = "chaos-worker " + id
	pool, err := pgxpool.NewWithConfig(ctx, cfg) // connects lazily
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := skiplock.NewClient(pool, skiplock.Config{Logger: logger})
	if err != nil {
		return err
	}
	// The durable steps' audit writes go through a pool of their own: a step's function
	// runs inside its transaction, which holds a connection of the main pool, and must not
	// wait for a second one from it.
	auditPool, err := newPool(ctx, url, "chaos-worker "+id+" audit", auditConns)
	if err != nil {
		return err
	}
	defer auditPool.Close()
	h := &handler{pool: pool, audit: auditPool, id: id, pid: os.Getpid(), maxWork: maxWork, limitedWork: limitedWork,
		durableWork: durableWork, ends: ends, logger: logger}
	for {
		w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{
			ID: id,
			Queues: map[string]skiplock.QueueConfig{
				skiplock.DefaultQueue: {MaxWorkers: concurrency},
				// A flow-controlled queue: more slots in every process than the global limit.
				audit.LimitedQueue: {MaxWorkers: audit.LimitedConcurrency + 2,
					Limits: skiplock.QueueLimits{Concurrency: audit.LimitedConcurrency}},
			},
			VisibilityTimeout: vt,
			SweepInterval:     sweep,
			ShutdownTimeout:   5 * time.Second,
			Logger:            logger,
		})
		if err != nil {
			return err
		}
		if err := skiplock.Handle(w, h.run); err != nil {
			return err
		}
		if err := skiplock.Handle(w, h.runFlow); err != nil {
			return err
		}
		if err := skiplock.Handle(w, h.runCallback); err != nil {
			return err
		}
		if err := skiplock.Handle(w, h.runDurable); err != nil {
			return err
		}
		err = w.Run(ctx)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		// Run fails only when it cannot start (the database is restarting): try again.
		logger.Warn("chaos worker: cannot start; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// handler runs chaos jobs and records each execution in chaos.executions (a durable job's
// steps in chaos.durable_execs, durable.go).
type handler struct {
	pool    *pgxpool.Pool
	audit   *pgxpool.Pool // the durable steps' audit writes
	id      string
	pid     int
	maxWork time.Duration
	// limitedWork bounds the work of the limited queue's jobs, longer so that they pile up
	// against its limit as the run changes it.
	limitedWork time.Duration
	// durableWork bounds the work inside each step of a durable job (durable.go).
	durableWork time.Duration
	n           atomic.Int64
	logger      *slog.Logger

	endsMu sync.Mutex
	ends   *os.File // nil: ends go to the table only
}

func (h *handler) run(ctx context.Context, job *skiplock.Job[audit.Args]) error {
	_, err := h.execute(ctx, job.JobRow, job.Args.Seq)
	return err
}

// runFlow runs a workflow task or a batch job: an execution recorded like a chaos job's,
// with seq -1 (the harness knows the job by its id and payload).
func (h *handler) runFlow(ctx context.Context, job *skiplock.Job[audit.FlowArgs]) error {
	_, err := h.execute(ctx, job.JobRow, -1)
	return err
}

// runCallback runs a batch's callback: an execution recorded like a chaos job's, and the
// counts its job carries in chaos.callbacks, written before the handler returns (so before
// its success is recorded).
func (h *handler) runCallback(ctx context.Context, job *skiplock.Job[audit.CallbackArgs]) error {
	execID, err := h.execute(ctx, job.JobRow, -1)
	if err != nil {
		return err
	}
	counts, ok := skiplock.BatchCountsOf(job.JobRow)
	if !ok {
		return fmt.Errorf("job %d is not a batch callback", job.ID)
	}
	return h.write(audit.CallbackSQL, execID, job.ID, job.Args.Batch,
		counts.Succeeded, counts.Failed, counts.Dead, counts.Cancelled)
}

// claimedAt is the start of the claim that began job's attempt, for audit.StartSQL: nil
// when unknown.
func claimedAt(job *skiplock.JobRow) *time.Time {
	if job.LockedAt.IsZero() {
		return nil
	}
	return &job.LockedAt
}

// execute records one execution of job in chaos.executions around its work, and returns
// the execution's id.
func (h *handler) execute(ctx context.Context, job *skiplock.JobRow, seq int64) (string, error) {
	execID := fmt.Sprintf("%s-%d", h.id, h.n.Add(1))
	start := time.Now()
	args := []any{execID, job.ID, seq, job.Attempts, h.id, h.pid, start, claimedAt(job)}
	_, err := h.pool.Exec(ctx, audit.StartSQL, args...)
	if err != nil {
		// The insert may have committed before the connection broke, or may reach the
		// server later: record the execution as one that did no work (in the file too, as
		// ending where it started, in case the mark cannot reach the table).
		h.noteEnd(execID, start)
		if merr := h.write(audit.AbortSQL, args...); merr != nil {
			err = errors.Join(err, fmt.Errorf("marking the execution aborted: %w", merr))
		}
		return execID, fmt.Errorf("recording the start of execution %s: %w", execID, err)
	}
	// The work. A cancelled context (the job was reclaimed from this worker) cuts it short.
	// The limited queue's jobs work longer, so that they pile up against its limit.
	work := h.maxWork
	if job.Queue == audit.LimitedQueue {
		work = h.limitedWork
	}
	t := time.NewTimer(rand.N(work + 1))
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	end := time.Now()
	h.noteEnd(execID, end)
	if err := h.write(audit.EndSQL, execID, end); err != nil {
		return execID, fmt.Errorf("recording the end of execution %s: %w", execID, err)
	}
	if ctx.Err() != nil {
		return execID, context.Cause(ctx)
	}
	return execID, nil
}

// noteEnd appends the end of an execution's work to the ends file, if there is one. One
// write per line, under a lock, to a file opened for appending: a SIGKILL leaves whole
// lines (the page cache outlives the process).
func (h *handler) noteEnd(execID string, end time.Time) {
	if h.ends == nil {
		return
	}
	h.endsMu.Lock()
	defer h.endsMu.Unlock()
	if _, err := h.ends.WriteString(audit.EndLine(execID, end)); err != nil {
		h.logger.Error("chaos worker: appending to the ends file", "exec", execID, "err", err)
	}
}

// slowWrite is how long an audit write may take before the worker logs it, so that a
// run's logs tell where its handlers waited.
const slowWrite = time.Second

// write runs an idempotent audit statement, retrying through lost connections for up to
// writeTimeout. It does not use the job's context: the end of work that was done must be
// recorded even when the job was taken back meanwhile.
func (h *handler) write(sql string, args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	began := time.Now()
	delay := 20 * time.Millisecond
	var firstErr error
	for tries := 1; ; tries++ {
		_, err := h.pool.Exec(ctx, sql, args...)
		if err == nil {
			if d := time.Since(began); d > slowWrite {
				h.logger.Warn("chaos worker: slow audit write", "exec", args[0], "took", d, "tries", tries, "first_err", firstErr)
			}
			return nil
		}
		if firstErr == nil {
			firstErr = err
		}
		select {
		case <-ctx.Done():
			h.logger.Error("chaos worker: audit write gave up", "exec", args[0], "took", time.Since(began), "tries", tries, "first_err", firstErr, "err", err)
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// spin keeps one CPU busy forever. The counter is published now and then so that the
// loop is not optimised away.
func spin() {
	var sink atomic.Uint64
	for n := uint64(0); ; n++ {
		if n&(1<<24-1) == 0 {
			sink.Store(n)
		}
	}
}
