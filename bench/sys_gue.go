package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/vgarvardt/gue/v5"
	"github.com/vgarvardt/gue/v5/adapter/pgxv5"
)

// gue settings (flags can change the variables). gue holds a transaction,
// and so a pooled connection, for every job it works, so its worker count is
// bounded by the pool; 100 ms is the poll interval the peers measured
// with (gue has no LISTEN). The run_at poll strategy, not gue's default
// priority one: gue's default claim (ORDER BY priority) cannot use gue's index
// (queue, run_at, priority) for its order and sorts every due job on every
// claim, which drains a 20k backlog at ~250 jobs/s; with ORDER BY run_at,
// priority the index gives the order and gue drains ~15x faster. Our jobs all
// have one priority, so both strategies run them in the same order.
var (
	gueWorkers      = 16
	guePollInterval = 100 * time.Millisecond
)

// gueBatch keeps one multi-row INSERT under Postgres' 65535 bind parameters
// (gue binds 8 per job).
const gueBatch = 5000

// gueSchema is gue v5's table, from its migrations/schema.sql.
const gueSchema = `
CREATE TABLE IF NOT EXISTS gue_jobs
(
  job_id      TEXT        NOT NULL PRIMARY KEY,
  priority    SMALLINT    NOT NULL,
  run_at      TIMESTAMPTZ NOT NULL,
  job_type    TEXT        NOT NULL,
  args        BYTEA       NOT NULL,
  error_count INTEGER     NOT NULL DEFAULT 0,
  last_error  TEXT,
  queue       TEXT        NOT NULL,
  created_at  TIMESTAMPTZ NOT NULL,
  updated_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_gue_jobs_selector ON gue_jobs (queue, run_at, priority);`

func init() { register("gue", func() System { return &gueSystem{} }) }

type gueSystem struct {
	pool   *pgxpool.Pool
	client *gue.Client
	cancel context.CancelFunc
	done   chan error
}

func (g *gueSystem) Name() string        { return "gue" }
func (g *gueSystem) HotTable() string    { return "gue_jobs" }
func (g *gueSystem) JobTables() []string { return []string{"gue_jobs"} }
func (g *gueSystem) Config() string {
	return fmt.Sprintf("WorkerPool of %d, poll interval %s, RunAtPollStrategy, EnqueueBatch (multi-row INSERT, %d per statement) for bulk",
		gueWorkers, guePollInterval, gueBatch)
}

func (g *gueSystem) Setup(ctx context.Context, pool *pgxpool.Pool) error {
	g.pool = pool
	if _, err := pool.Exec(ctx, gueSchema); err != nil {
		return fmt.Errorf("gue schema: %w", err)
	}
	var err error
	g.client, err = gue.NewClient(pgxv5.NewConnPool(pool))
	return err
}

func (g *gueSystem) Reset(ctx context.Context) error {
	_, err := g.pool.Exec(ctx, "TRUNCATE gue_jobs")
	return err
}

func gueJob(a NoopArgs, runAt time.Time) (*gue.Job, error) {
	b, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	return &gue.Job{Type: a.Kind(), Args: b, RunAt: runAt}, nil
}

func (g *gueSystem) Bulk(n int, runAt time.Time, queues int) func(context.Context) error {
	if queues > 1 {
		return func(context.Context) error { return errUnsupported }
	}
	jobs := make([]*gue.Job, n)
	var err error
	for i := range jobs {
		if jobs[i], err = gueJob(NoopArgs{}, runAt); err != nil {
			break
		}
	}
	return func(ctx context.Context) error {
		if err != nil {
			return err
		}
		for i := 0; i < len(jobs); i += gueBatch {
			if err := g.client.EnqueueBatch(ctx, jobs[i:min(i+gueBatch, len(jobs))]); err != nil {
				return err
			}
		}
		return nil
	}
}

func (g *gueSystem) Insert(ctx context.Context, args NoopArgs) error {
	j, err := gueJob(args, time.Time{})
	if err != nil {
		return err
	}
	return g.client.Enqueue(ctx, j)
}

// Start runs gue's worker pool; the many-queue and failure workloads are not
// written for gue.
func (g *gueSystem) Start(ctx context.Context, sink *Sink, spec Spec) error {
	// Checked by what gue cannot do, not by comparing specs: a hint for bare
	// (OneAtATime, Backlog) must not turn gue's workloads off.
	if spec.Queues > 1 || spec.FailOnce {
		return errUnsupported
	}
	wm := gue.WorkMap{NoopArgs{}.Kind(): func(_ context.Context, j *gue.Job) error {
		var a NoopArgs
		if err := json.Unmarshal(j.Args, &a); err != nil {
			return err
		}
		sink.Handle(a)
		return nil
	}}
	wp, err := gue.NewWorkerPool(g.client, wm, gueWorkers, gue.WithPoolPollInterval(guePollInterval), gue.WithPoolPollStrategy(gue.RunAtPollStrategy))
	if err != nil {
		return err
	}
	ctx, g.cancel = context.WithCancel(ctx)
	g.done = make(chan error, 1)
	go func() { g.done <- wp.Run(ctx) }()
	return nil
}

func (g *gueSystem) Stop(ctx context.Context) error {
	if g.cancel == nil {
		return nil
	}
	g.cancel()
	g.cancel = nil
	select {
	case err := <-g.done:
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gueSystem) Pending(ctx context.Context) (int64, error) {
	var n int64
	err := g.pool.QueryRow(ctx, "SELECT count(*) FROM gue_jobs WHERE queue = '' AND run_at <= now()").Scan(&n)
	return n, err
}
