package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skiplock/skiplock"
)

// exampleWorker migrates a fresh schema and returns a client and a worker whose
// SendEmail handler reports each job's queue on ran; cleanup drops the schema.
func exampleWorker(cfg skiplock.WorkerConfig) (*skiplock.Client, *skiplock.Worker, <-chan string, func()) {
	pool, schema, cleanup := examplePool()
	ctx := context.Background()
	if err := skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}); err != nil {
		panic(err)
	}
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	w, err := skiplock.NewWorker(client, cfg)
	if err != nil {
		panic(err)
	}
	ran := make(chan string, 10)
	_ = skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[SendEmail]) error {
		ran <- job.Queue
		return nil
	})
	return client, w, ran, cleanup
}

// Add a queue to a running worker: its jobs run at once, no restart.
func ExampleWorker_AddQueue() {
	client, w, ran, cleanup := exampleWorker(skiplock.WorkerConfig{})
	defer cleanup()
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- w.Run(ctx) }()

	_, _ = client.Enqueue(ctx, SendEmail{To: "ada@example.com"}, &skiplock.EnqueueOptions{Queue: "mail"})
	if err := w.AddQueue(ctx, "mail", skiplock.QueueConfig{MaxWorkers: 5}); err != nil {
		panic(err)
	}
	fmt.Println("ran a job of", <-ran)
	stop()
	<-stopped
	// Output: ran a job of mail
}

// Remove a queue from a running worker: it claims no more of its jobs, and RemoveQueue
// returns once the queue's running jobs are done and recorded.
func ExampleWorker_RemoveQueue() {
	client, w, ran, cleanup := exampleWorker(skiplock.WorkerConfig{
		Queues: map[string]skiplock.QueueConfig{"default": {}, "mail": {}},
	})
	defer cleanup()
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- w.Run(ctx) }()

	if err := w.RemoveQueue(ctx, "mail"); err != nil {
		panic(err)
	}
	mail, _ := client.Enqueue(ctx, SendEmail{To: "ada@example.com"}, &skiplock.EnqueueOptions{Queue: "mail"})
	_, _ = client.Enqueue(ctx, SendEmail{To: "bob@example.com"}, nil)
	fmt.Println("ran a job of", <-ran) // the default queue's, enqueued after mail's
	job, _ := client.Get(ctx, mail.ID)
	fmt.Println("mail:", job.Status)
	stop()
	<-stopped
	// Output:
	// ran a job of default
	// mail: queued
}

// Change how many jobs of a queue run at once, while the worker runs. Lowering it cuts
// no running handler: the queue claims less until fewer run.
func ExampleWorker_SetMaxWorkers() {
	_, w, _, cleanup := exampleWorker(skiplock.WorkerConfig{
		Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 10}},
	})
	defer cleanup()
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- w.Run(ctx) }()

	fmt.Println(w.SetMaxWorkers("default", 2))
	fmt.Println(w.SetMaxWorkers("reports", 2))
	stop()
	<-stopped
	// Output:
	// <nil>
	// skiplock: the worker does not work this queue: "reports"
}

// Record and keep jobs per kind and per queue: one kind leaves no history, one queue
// keeps its succeeded jobs in the jobs table for a day, the rest are archived for the
// default 7 days.
func ExampleKindConfig() {
	client, w, ran, cleanup := exampleWorker(skiplock.WorkerConfig{
		Queues: map[string]skiplock.QueueConfig{
			"default": {},
			"audit":   {Completion: skiplock.CompletionKeep, Retention: 24 * time.Hour},
		},
		Kinds: map[string]skiplock.KindConfig{
			"send_email": {Completion: skiplock.CompletionDelete}, // no history of emails
		},
	})
	defer cleanup()
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- w.Run(ctx) }()
	email, _ := client.Enqueue(ctx, SendEmail{To: "ada@example.com"}, &skiplock.EnqueueOptions{Queue: "audit"})
	<-ran
	stop() // the success is recorded before Run returns
	<-stopped
	_, err := client.Get(context.Background(), email.ID)
	fmt.Println("email kept:", !errors.Is(err, skiplock.ErrJobNotFound))
	// Output: email kept: false
}

// A Sweeper run on its own applies per-queue and per-kind retentions too.
func ExampleSweeperConfig() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	_ = skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema})
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	sw, err := skiplock.NewSweeper(client, skiplock.SweeperConfig{
		ArchiveRetention: 30 * 24 * time.Hour,                         // most jobs: 30 days
		QueueRetention:   map[string]time.Duration{"bulk": time.Hour}, // the bulk queue: an hour
		KindRetention:    map[string]time.Duration{"invoice": 365 * 24 * time.Hour},
	})
	if err != nil {
		panic(err)
	}
	res, err := sw.Sweep(ctx)
	fmt.Println(res.Purged, err)
	// Output: 0 <nil>
}
