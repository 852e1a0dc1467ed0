package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
)

// River's tuned settings, as the peers used them: its defaults
// (100 ms fetch cooldown, 1 s poll, 100 workers) cost it 10x in drain rate and
// latency, and we compare against its best.
// They are variables so flags can change them.
var (
	riverFetchCooldown     = 2 * time.Millisecond
	riverFetchPollInterval = 20 * time.Millisecond
	riverMaxWorkers        = 200
)

func init() { register("river", func() System { return &riverSystem{} }) }

type riverSystem struct {
	pool   *pgxpool.Pool
	idle   *river.Client[pgx.Tx]                // inserts while no worker runs
	active atomic.Pointer[river.Client[pgx.Tx]] // the started client, if any
	queues []string                             // the queues the last bulk insert used
}

type riverNoopWorker struct {
	river.WorkerDefaults[NoopArgs]
	sink     *Sink
	failOnce bool
}

func (w *riverNoopWorker) Work(_ context.Context, job *river.Job[NoopArgs]) error {
	w.sink.Handle(job.Args)
	if w.failOnce && job.Attempt == 1 {
		return errFailOnce
	}
	return nil
}

// riverRetryAtOnce is the failure storm's retry policy: due again at once. River
// then makes the job available right away (its executor does so for any retry
// sooner than the scheduler's interval), as a user retrying at once would get.
type riverRetryAtOnce struct{}

func (riverRetryAtOnce) NextRetry(*rivertype.JobRow) time.Time { return time.Now() }

func (r *riverSystem) Name() string        { return "river" }
func (r *riverSystem) HotTable() string    { return "river_job" }
func (r *riverSystem) JobTables() []string { return []string{"river_job"} }
func (r *riverSystem) Config() string {
	return fmt.Sprintf("FetchCooldown %s, FetchPollInterval %s, MaxWorkers %d, insert-only client for bulk/single, InsertManyFast (COPY) for bulk",
		riverFetchCooldown, riverFetchPollInterval, riverMaxWorkers)
}

func (r *riverSystem) Setup(ctx context.Context, pool *pgxpool.Pool) error {
	r.pool = pool
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: quietLogger()})
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	r.idle, err = r.newClient(nil, Spec{})
	return err
}

func (r *riverSystem) newClient(sink *Sink, spec Spec) (*river.Client[pgx.Tx], error) {
	cfg := &river.Config{Logger: quietLogger()}
	if sink != nil {
		workers := river.NewWorkers()
		if err := river.AddWorkerSafely(workers, &riverNoopWorker{sink: sink, failOnce: spec.FailOnce}); err != nil {
			return nil, err
		}
		cfg.Workers = workers
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverMaxWorkers}}
		if spec.Queues > 1 {
			cfg.Queues = map[string]river.QueueConfig{}
			for i := range spec.Queues {
				cfg.Queues[queueName(i)] = river.QueueConfig{MaxWorkers: spec.PerQueue}
			}
		}
		if spec.FailOnce {
			cfg.RetryPolicy = riverRetryAtOnce{}
		}
		cfg.FetchCooldown = riverFetchCooldown
		cfg.FetchPollInterval = riverFetchPollInterval
	}
	return river.NewClient(riverpgxv5.New(r.pool), cfg)
}

func (r *riverSystem) client() *river.Client[pgx.Tx] {
	if c := r.active.Load(); c != nil {
		return c
	}
	return r.idle
}

func (r *riverSystem) Reset(ctx context.Context) error {
	_, err := r.pool.Exec(ctx, "TRUNCATE river_job")
	return err
}

func (r *riverSystem) Bulk(n int, runAt time.Time, queues int) func(context.Context) error {
	params := make([]river.InsertManyParams, n)
	r.queues = []string{river.QueueDefault}
	if queues > 1 {
		r.queues = make([]string, queues)
		for i := range r.queues {
			r.queues[i] = queueName(i)
		}
	}
	for i := range params {
		params[i].Args = NoopArgs{}
		if !runAt.IsZero() || queues > 1 {
			params[i].InsertOpts = &river.InsertOpts{ScheduledAt: runAt}
			if queues > 1 {
				params[i].InsertOpts.Queue = r.queues[i%queues]
			}
		}
	}
	return func(ctx context.Context) error {
		_, err := r.client().InsertManyFast(ctx, params)
		return err
	}
}

func (r *riverSystem) Insert(ctx context.Context, args NoopArgs) error {
	_, err := r.client().Insert(ctx, args, nil)
	return err
}

func (r *riverSystem) Start(ctx context.Context, sink *Sink, spec Spec) error {
	c, err := r.newClient(sink, spec)
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	r.active.Store(c)
	return nil
}

func (r *riverSystem) Stop(ctx context.Context) error {
	c := r.active.Swap(nil)
	if c == nil {
		return nil
	}
	return c.Stop(ctx)
}

// Pending spells out queue and priority (every bench job has River's
// defaults) so future jobs are skipped by index while the harness polls.
func (r *riverSystem) Pending(ctx context.Context) (int64, error) {
	var n int64
	queues := r.queues
	if len(queues) == 0 {
		queues = []string{river.QueueDefault}
	}
	err := r.pool.QueryRow(ctx, `SELECT count(*) FROM river_job
		WHERE state IN ('available', 'running', 'retryable', 'scheduled', 'pending')
		  AND queue = ANY ($1) AND priority = 1 AND scheduled_at <= now()`, queues).Scan(&n)
	return n, err
}

// quietLogger keeps the libraries' routine logs out of the report but shows
// errors.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}
