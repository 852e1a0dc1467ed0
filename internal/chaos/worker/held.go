package main

// This file holds the worker of the held-pool fault (the harness's heldpool.go): a
// healthy worker kept busy by handlers that hold its pool's connections. It serves only
// audit.HeldQueue, with more slots than its pool has connections; each handler begins a
// transaction on the worker's own pool, holds it, then commits its job's success in it
// (CompleteTx), so that most handlers wait for a connection while the others hold one.
// Its audit writes go through a pool of their own: the pool under test is the one the
// handlers hold.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/chaos/audit"
)

// auditConns is the size of an audit pool: the held-pool worker's, and the durable steps'
// of the ordinary worker's (main.go).
const auditConns = 4

// runHeld runs the held-pool worker until ctx ends: slots handlers on a pool of maxConns
// connections, each holding a transaction for hold.
func runHeld(ctx context.Context, logger *slog.Logger, url, id string, vt, sweep time.Duration,
	slots int, maxConns int32, hold time.Duration, ends *os.File,
) error {
	work, err := newPool(ctx, url, "chaos-worker "+id, maxConns)
	if err != nil {
		return err
	}
	defer work.Close()
	auditPool, err := newPool(ctx, url, "chaos-worker "+id+" audit", auditConns)
	if err != nil {
		return err
	}
	defer auditPool.Close()
	client, err := skiplock.NewClient(work, skiplock.Config{Logger: logger})
	if err != nil {
		return err
	}
	hh := &heldHandler{h: &handler{pool: auditPool, id: id, pid: os.Getpid(), ends: ends, logger: logger}, work: work, hold: hold}
	for {
		w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{
			ID:                id,
			Queues:            map[string]skiplock.QueueConfig{audit.HeldQueue: {MaxWorkers: slots}},
			VisibilityTimeout: vt,
			SweepInterval:     sweep,
			ShutdownTimeout:   5 * time.Second,
			Logger:            logger,
		})
		if err != nil {
			return err
		}
		if err := skiplock.Handle(w, hh.run); err != nil {
			return err
		}
		err = w.Run(ctx)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		logger.Warn("chaos worker: cannot start; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// newPool opens a pool of maxConns connections to url, named application for the server.
func newPool(ctx context.Context, url, application string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.RuntimeParams["application_name"] = application
	return pgxpool.NewWithConfig(ctx, cfg) // connects lazily
}

// heldHandler runs held-pool jobs: h records the executions, through its own pool; work
// is the worker's pool, which the handlers hold.
type heldHandler struct {
	h    *handler
	work *pgxpool.Pool
	hold time.Duration
}

// run records one execution of job around its transaction (transact), and how it went
// in chaos.held.
func (hh *heldHandler) run(ctx context.Context, job *skiplock.Job[audit.HeldArgs]) error {
	h := hh.h
	execID := fmt.Sprintf("%s-%d", h.id, h.n.Add(1))
	start := time.Now()
	if err := h.write(audit.StartSQL, execID, job.ID, int64(-1), job.Attempts, h.id, h.pid, start, claimedAt(job.JobRow)); err != nil {
		return fmt.Errorf("recording the start of execution %s: %w", execID, err)
	}
	waited, early, err := hh.transact(ctx, job)
	end := time.Now()
	h.noteEnd(execID, end)
	return errors.Join(err,
		h.write(audit.EndSQL, execID, end),
		h.write(audit.HeldSQL, execID, job.ID, job.Attempts, h.id, waited.Milliseconds(), early))
}

// transact is the job's work: it begins a transaction on the worker's pool (waiting for
// a connection), holds it for hold, writes the job's success in it and commits. It
// returns how long Begin waited and, when it did not commit, why (early).
func (hh *heldHandler) transact(ctx context.Context, job *skiplock.Job[audit.HeldArgs]) (waited time.Duration, early *string, err error) {
	why := func(err error) *string {
		s := "error: " + err.Error()
		if ctx.Err() != nil {
			s = "cancelled: " + context.Cause(ctx).Error()
		}
		return &s
	}
	began := time.Now()
	tx, err := hh.work.Begin(ctx)
	waited = time.Since(began)
	if err != nil {
		return waited, why(err), err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	t := time.NewTimer(hh.hold)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return waited, why(ctx.Err()), context.Cause(ctx)
	}
	if err := skiplock.CompleteTx(ctx, tx, job); err != nil {
		return waited, why(err), err
	}
	if err := tx.Commit(ctx); err != nil {
		return waited, why(err), err
	}
	return waited, nil, nil
}
