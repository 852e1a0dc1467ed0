package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
)

// skiplock runs at its defaults: an empty Config and WorkerConfig (schema
// "skiplock", queue "default" with 100 workers, archive on success).
func init() { register("skiplock", func() System { return &skiplockSystem{} }) }

const skiplockSchema = "skiplock"

// skiplockCompletion is -skiplock-completion: what a success does to the row. The default,
// archive, is skiplock's; delete shows what the history costs.
var skiplockCompletion = "archive"

// skiplockWorkers is -skiplock-workers: MaxWorkers of the default queue (0: the default,
// 100).
var skiplockWorkers int

// skiplockNotifyInterval is -skiplock-notify-interval: Config.NotifyInterval of the bench's
// client (0: the default, 5ms; negative: a notification with every Enqueue).
var skiplockNotifyInterval time.Duration

func init() {
	flag.DurationVar(&skiplockNotifyInterval, "skiplock-notify-interval", 0, "skiplock's Config.NotifyInterval (0: its default, 5ms; negative: notify on every Enqueue)")
}

// completions maps -skiplock-completion's values to the library's modes.
var completions = map[string]skiplock.Completion{
	"archive": skiplock.CompletionArchive, "delete": skiplock.CompletionDelete, "keep": skiplock.CompletionKeep,
}

type skiplockSystem struct {
	pool   *pgxpool.Pool
	client *skiplock.Client
	cancel context.CancelFunc
	done   chan error
	queues []string // the queues the last bulk insert used (Pending counts them)
}

// retryAtOnce is the retry policy of the failure storm: the failed job is due again
// at once.
type retryAtOnce struct{}

func (retryAtOnce) NextRetry(*skiplock.JobRow) time.Duration { return 0 }

func (s *skiplockSystem) Name() string     { return "skiplock" }
func (s *skiplockSystem) HotTable() string { return skiplockSchema + ".jobs" }
func (s *skiplockSystem) JobTables() []string {
	return []string{skiplockSchema + ".jobs", skiplockSchema + ".jobs_archive"}
}
func (s *skiplockSystem) Config() string {
	var except []string
	if skiplockCompletion != "archive" {
		except = append(except, "Completion "+skiplockCompletion)
	}
	if skiplockNotifyInterval != 0 {
		except = append(except, fmt.Sprintf("NotifyInterval %s", skiplockNotifyInterval))
	}
	if skiplockWorkers > 0 {
		except = append(except, fmt.Sprintf("MaxWorkers %d on the default queue", skiplockWorkers))
	}
	if len(except) > 0 {
		return "defaults (Config{}, WorkerConfig{}) except " + strings.Join(except, ", ") + ", EnqueueMany (COPY) for bulk"
	}
	return "defaults (Config{}, WorkerConfig{}), EnqueueMany (COPY) for bulk"
}

func (s *skiplockSystem) Setup(ctx context.Context, pool *pgxpool.Pool) error {
	s.pool = pool
	if err := skiplock.Migrate(ctx, pool); err != nil {
		return err
	}
	var err error
	s.client, err = skiplock.NewClient(pool, skiplock.Config{Logger: quietLogger(), NotifyInterval: skiplockNotifyInterval})
	return err
}

func (s *skiplockSystem) Reset(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, "TRUNCATE "+pgx.Identifier{skiplockSchema, "jobs"}.Sanitize()+", "+
		pgx.Identifier{skiplockSchema, "jobs_archive"}.Sanitize())
	return err
}

func (s *skiplockSystem) Bulk(n int, runAt time.Time, queues int) func(context.Context) error {
	params := make([]skiplock.EnqueueParams, n)
	opts := []*skiplock.EnqueueOptions{nil}
	s.queues = []string{skiplock.DefaultQueue}
	if queues > 1 {
		opts, s.queues = make([]*skiplock.EnqueueOptions, queues), make([]string, queues)
		for i := range opts {
			s.queues[i] = queueName(i)
			opts[i] = &skiplock.EnqueueOptions{Queue: s.queues[i]}
		}
	}
	for i := range opts {
		if !runAt.IsZero() {
			if opts[i] == nil {
				opts[i] = &skiplock.EnqueueOptions{}
			}
			opts[i].RunAt = runAt
		}
	}
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: NoopArgs{}, Options: opts[i%len(opts)]}
	}
	return func(ctx context.Context) error {
		_, err := s.client.EnqueueMany(ctx, params)
		return err
	}
}

func (s *skiplockSystem) Insert(ctx context.Context, args NoopArgs) error {
	_, err := s.client.Enqueue(ctx, args, nil)
	return err
}

func (s *skiplockSystem) Start(ctx context.Context, sink *Sink, spec Spec) error {
	cfg := skiplock.WorkerConfig{Logger: quietLogger(), Completion: completions[skiplockCompletion]}
	if spec.Queues > 1 {
		cfg.Queues = map[string]skiplock.QueueConfig{}
		for i := range spec.Queues {
			cfg.Queues[queueName(i)] = skiplock.QueueConfig{MaxWorkers: spec.PerQueue}
		}
	}
	if skiplockWorkers > 0 && spec.Queues <= 1 {
		cfg.Queues = map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: skiplockWorkers}}
	}
	if spec.FailOnce {
		cfg.RetryPolicy = retryAtOnce{}
	}
	w, err := skiplock.NewWorker(s.client, cfg)
	if err != nil {
		return err
	}
	if err := skiplock.Handle(w, func(_ context.Context, job *skiplock.Job[NoopArgs]) error {
		sink.Handle(job.Args)
		if spec.FailOnce && job.Attempts == 1 {
			return errFailOnce
		}
		return nil
	}); err != nil {
		return err
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.done = make(chan error, 1)
	go func() { s.done <- w.Run(ctx) }()
	return nil
}

func (s *skiplockSystem) Stop(ctx context.Context) error {
	if s.cancel == nil {
		return nil
	}
	s.cancel()
	s.cancel = nil
	select {
	case err := <-s.done:
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Pending spells out queue and priority (every bench job has the defaults)
// so the count walks only the due part of the claim index, not a million
// future jobs, while the harness polls it.
func (s *skiplockSystem) Pending(ctx context.Context) (int64, error) {
	jobs := pgx.Identifier{skiplockSchema, "jobs"}.Sanitize()
	var n int64
	queues := s.queues
	if len(queues) == 0 {
		queues = []string{skiplock.DefaultQueue}
	}
	err := s.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM `+jobs+` WHERE status = 'running') +
		(SELECT count(*) FROM `+jobs+` WHERE status = 'queued' AND queue = ANY ($1) AND priority = 0 AND run_at <= now())`, queues).Scan(&n)
	return n, err
}
