package skiplock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/cron"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// exampleTB lets runnable examples use the test harness to find a database. Examples
// have no *testing.T; the harness only logs through it or fails.
type exampleTB struct{ testing.TB }

func (exampleTB) Helper()                   {}
func (exampleTB) Logf(string, ...any)       {}
func (exampleTB) Cleanup(func())            {}
func (exampleTB) Fatal(args ...any)         { fmt.Fprintln(os.Stderr, args...); os.Exit(1) }
func (exampleTB) Fatalf(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...); os.Exit(1) }

// examplePool connects to the test database and makes a fresh schema; cleanup drops it.
func examplePool() (pool *pgxpool.Pool, schema string, cleanup func()) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.URL(exampleTB{}))
	if err != nil {
		panic(err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	schema = "example_" + hex.EncodeToString(b[:])
	return pool, schema, func() {
		_, _ = pool.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`)
		pool.Close()
	}
}

// waitUntil checks cond every 10 ms until it holds, for at most 30 seconds (the
// example's output then shows what is missing).
func waitUntil(cond func() bool) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(30 * time.Second); !cond() && time.Now().Before(deadline); {
		<-tick.C
	}
}

// SendEmail is a job kind: its Kind names the handler, its fields are the JSON payload.
type SendEmail struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func (SendEmail) Kind() string { return "send_email" }

// Enqueue inside the caller's transaction: the job exists exactly when the transaction
// commits.
func ExampleClient_EnqueueTx() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	if err := skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}); err != nil {
		panic(err)
	}
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})

	tx, _ := pool.Begin(ctx)
	_, _ = client.EnqueueTx(ctx, tx, SendEmail{To: "ada@example.com"}, nil)
	_ = tx.Rollback(ctx) // rolled back: no job

	tx, _ = pool.Begin(ctx)
	job, _ := client.EnqueueTx(ctx, tx, SendEmail{To: "bob@example.com"}, &skiplock.EnqueueOptions{Queue: "mail"})
	_ = tx.Commit(ctx) // committed: one queued job

	stats, _ := client.Stats(ctx)
	fmt.Println(job.Kind, job.Queue, job.Status)
	fmt.Println(stats[0].Queue, stats[0].Counts[skiplock.StatusQueued])
	// Output:
	// send_email mail queued
	// mail 1
}

// Enqueue from many goroutines: concurrent calls share one INSERT and one commit (a
// group commit), and each call returns its own job once it is committed.
// Config.CoalesceWindow bounds how long a call may wait for others (negative: off).
func ExampleClient_Enqueue_concurrent() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	_ = skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema})
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema, CoalesceWindow: time.Millisecond})

	var wg sync.WaitGroup
	ids := make([]int64, 50)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			job, err := client.Enqueue(ctx, SendEmail{To: fmt.Sprintf("user%d@example.com", i)}, nil)
			if err != nil {
				panic(err)
			}
			ids[i] = job.ID // committed: any session can read it now
		}()
	}
	wg.Wait()
	var n int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.jobs WHERE id = ANY ($1)`, ids).Scan(&n)
	fmt.Println(n, "jobs, each returned to its own caller")
	// Output:
	// 50 jobs, each returned to its own caller
}

// Register a typed handler and run a worker until the job is done.
func ExampleHandle() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	_ = skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema})
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})

	w, _ := skiplock.NewWorker(client, skiplock.WorkerConfig{
		Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 10}},
	})
	done := make(chan struct{})
	_ = skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[SendEmail]) error {
		fmt.Printf("sending %q to %s (attempt %d)\n", job.Args.Subject, job.Args.To, job.Attempts)
		close(done)
		return nil
	})
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- w.Run(runCtx) }()

	_, _ = client.Enqueue(ctx, SendEmail{To: "ada@example.com", Subject: "Your order"}, nil)
	<-done
	stop() // graceful shutdown: waits for running handlers
	<-stopped
	// Output:
	// sending "Your order" to ada@example.com (attempt 1)
}

// A handler's error decides what happens next: retry with backoff, fail for good, or
// come back later.
func ExamplePermanent() {
	handler := func(ctx context.Context, job *skiplock.Job[SendEmail]) error {
		switch {
		case job.Args.To == "":
			return skiplock.Permanent(errors.New("no recipient")) // status failed, no retry
		case time.Now().Hour() < 6:
			return skiplock.Snooze(time.Hour) // try later, without using an attempt
		}
		return nil // succeeded
	}
	err := handler(context.Background(), &skiplock.Job[SendEmail]{JobRow: &skiplock.JobRow{}, Args: SendEmail{}})
	fmt.Println(err)
	// Output:
	// permanent: no recipient
}

// Requeue dead jobs after fixing what killed them.
func ExampleClient_Requeue() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	_ = skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema})
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	job, _ := client.Enqueue(ctx, SendEmail{To: "ada@example.com"}, nil)
	// Pretend it ran out of attempts.
	_, _ = pool.Exec(ctx, `UPDATE `+schema+`.jobs SET status = 'dead', attempts = 20 WHERE id = $1`, job.ID)

	res, _ := client.Requeue(ctx, skiplock.RequeueFilter{Kind: "send_email"})
	again, _ := client.Get(ctx, job.ID)
	fmt.Println(res.Requeued, res.Skipped, again.Status, again.Attempts)
	// Output:
	// 1 0 queued 0
}

// A unique job: enqueueing the same args again while the first is queued returns the
// existing job, marked Duplicate, and no error.
func ExampleUniqueOpts() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	_ = skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema})
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})

	// At most one welcome email per address per hour, counting those already sent.
	opts := &skiplock.EnqueueOptions{Unique: &skiplock.UniqueOpts{
		ArgsFields: []string{"to"},
		ByPeriod:   time.Hour,
		States:     []skiplock.JobStatus{skiplock.StatusQueued, skiplock.StatusRunning, skiplock.StatusSucceeded},
	}}
	first, _ := client.Enqueue(ctx, SendEmail{To: "ada@example.com", Subject: "Welcome"}, opts)
	again, err := client.Enqueue(ctx, SendEmail{To: "ada@example.com", Subject: "Welcome!"}, opts)
	fmt.Println(err, again.Duplicate, again.ID == first.ID)
	// Output:
	// <nil> true true
}

// Pause a queue during an incident: workers stop claiming its jobs, enqueueing goes on.
func ExampleClient_PauseQueue() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	_ = skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema})
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})

	_ = client.PauseQueue(ctx, "email")
	_, _ = client.Enqueue(ctx, SendEmail{To: "ada@example.com"}, &skiplock.EnqueueOptions{Queue: "email"})
	stats, _ := client.Stats(ctx)
	fmt.Println(stats[0].Queue, stats[0].Paused, stats[0].Counts[skiplock.StatusQueued])
	_ = client.ResumeQueue(ctx, "email")
	stats, _ = client.Stats(ctx)
	fmt.Println(stats[0].Queue, stats[0].Paused)
	// Output:
	// email true 1
	// email false
}

// Periodic jobs: every worker declares the same schedules; each occurrence is enqueued
// once, by whichever worker gets to it, and survives restarts.
func ExamplePeriodicJob() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	_ = skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema})
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})

	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{
		PeriodicJobs: []skiplock.PeriodicJob{
			{Name: "digest", Schedule: cron.MustParse("0 8 * * MON-FRI"), Args: SendEmail{To: "team@example.com", Subject: "Digest"}},
			{Name: "heartbeat", Schedule: skiplock.Every(time.Hour), Args: SendEmail{To: "ops@example.com"}, Misfire: skiplock.MisfireSkip},
		},
	})
	if err != nil {
		panic(err)
	}
	_ = skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[SendEmail]) error { return nil })
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- w.Run(runCtx) }()
	var list []skiplock.PeriodicInfo
	waitUntil(func() bool { // Run records the schedules before it starts working
		list, _ = client.ListPeriodic(ctx)
		return len(list) >= 2
	})
	stop()
	<-done
	for _, p := range list {
		fmt.Println(p.Name, p.Schedule, p.Misfire, p.Active)
	}
	// Output:
	// digest 0 8 * * MON-FRI run_once true
	// heartbeat every 1h0m0s skip true
}

// Report is a slow job kind: its Timeout method gives every attempt of the kind longer
// than the worker's JobTimeout.
type Report struct {
	Month string `json:"month"`
}

func (Report) Kind() string           { return "report" }
func (Report) Timeout() time.Duration { return 20 * time.Minute }

// Bound each attempt of a job: the handler's context is cancelled with cause
// ErrJobTimeout when the attempt's time is up, and the attempt counts as failed.
func ExampleErrJobTimeout() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	_ = skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema})
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})

	w, _ := skiplock.NewWorker(client, skiplock.WorkerConfig{JobTimeout: time.Minute})
	done := make(chan struct{})
	_ = skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[Report]) error {
		defer close(done)
		<-ctx.Done() // a report that never finishes
		fmt.Println(errors.Is(context.Cause(ctx), skiplock.ErrJobTimeout))
		return ctx.Err()
	})
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- w.Run(runCtx) }()

	// This job's own limit beats the kind's 20 minutes and the worker's minute.
	job, _ := client.Enqueue(ctx, Report{Month: "2026-11"}, &skiplock.EnqueueOptions{Timeout: 50 * time.Millisecond})
	<-done
	stop()
	<-stopped
	j, _ := client.Get(ctx, job.ID)
	fmt.Println(j.Status, j.Attempts, j.LastError)
	// Output:
	// true
	// queued 1 skiplock: job timeout after 50ms: context deadline exceeded
}

// A handler reports how far it got and what it produced; Get shows both. The heartbeat
// writes progress while the job runs; the output is stored with the success.
func ExampleRecordProgress() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	_ = skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema})
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})

	w, _ := skiplock.NewWorker(client, skiplock.WorkerConfig{})
	done := make(chan struct{})
	_ = skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[SendEmail]) error {
		defer close(done)
		_ = skiplock.RecordProgress(ctx, 100, "sent")
		return skiplock.SetOutput(ctx, map[string]string{"message_id": "m-1"})
	})
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- w.Run(runCtx) }()
	job, _ := client.Enqueue(ctx, SendEmail{To: "ada@example.com"}, &skiplock.EnqueueOptions{
		Metadata: map[string]string{"tenant": "acme"},
	})
	<-done
	stop() // the success is recorded before Run returns
	<-stopped

	got, _ := client.Get(ctx, job.ID)
	fmt.Println(got.Status, got.Metadata["tenant"], got.Progress.Value, got.Progress.Message, string(got.Output))
	// Output:
	// succeeded acme 100 sent {"message_id": "m-1"}
}

// The fleet as the database sees it: every running worker registers with its election
// statement, and the worker that leads the maintenance is marked. A worker that stops
// removes itself.
func ExampleClient_Workers() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	_ = skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema})
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	w, _ := skiplock.NewWorker(client, skiplock.WorkerConfig{
		ID:     "web-1",
		Queues: map[string]skiplock.QueueConfig{"default": {}, "email": {}},
	})
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	waitUntil(func() bool { // registered and elected
		ws, _ := client.Workers(ctx)
		return len(ws) == 1 && ws[0].Leader
	})
	ws, _ := client.Workers(ctx)
	for _, info := range ws {
		fmt.Println(info.ID, info.Queues, info.Alive, info.Leader)
	}
	stop()
	<-done
	ws, _ = client.Workers(ctx)
	fmt.Println(len(ws), "registered after it stopped")
	// Output:
	// web-1 [default email] true true
	// 0 registered after it stopped
}

// Edit a job before it starts: reschedule it, raise its priority, then run it now.
func ExampleClient_Update() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	if err := skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}); err != nil {
		panic(err)
	}
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	job, _ := client.Enqueue(ctx, SendEmail{To: "ada@example.com"}, nil)

	p := 5
	job, err := client.Update(ctx, job.ID, skiplock.JobUpdate{
		RunAt: time.Now().Add(24 * time.Hour), Priority: &p, Args: SendEmail{To: "ada@example.org"},
	})
	fmt.Println(err, job.Priority, job.RunAt.After(time.Now().Add(time.Hour)))
	job, _ = client.Update(ctx, job.ID, skiplock.JobUpdate{RunNow: true})
	fmt.Println(job.RunAt.After(time.Now()), string(job.Payload))
	// Output:
	// <nil> 5 true
	// false {"to": "ada@example.org", "subject": ""}
}

// Debounce and replace: a unique enqueue that meets a queued holder gives it the new
// args and pushes it later, so a burst of enqueues of one key runs once, with the last
// args.
func ExampleUniqueOpts_debounce() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	if err := skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}); err != nil {
		panic(err)
	}
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	opts := &skiplock.EnqueueOptions{Unique: &skiplock.UniqueOpts{
		ArgsFields: []string{"to"}, Replace: true, Debounce: time.Minute, MaxDelay: 10 * time.Minute,
	}}
	for _, subject := range []string{"draft 1", "draft 2", "final"} {
		job, _ := client.Enqueue(ctx, SendEmail{To: "ada@example.com", Subject: subject}, opts)
		fmt.Println(job.ID > 0, job.Duplicate, job.Replaced)
	}
	stats, _ := client.Stats(ctx)
	fmt.Println(stats[0].Counts[skiplock.StatusQueued])
	// Output:
	// true false false
	// true true true
	// true true true
	// 1
}

// Encrypted args: the jobs table holds only ciphertext and the key's id; a worker of a
// client with the key gets the args back.
func ExampleKeyring() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	if err := skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}); err != nil {
		panic(err)
	}
	key := make([]byte, 32) // from your secret store
	ring, _ := skiplock.NewKeyring("k1", map[string][]byte{"k1": key})
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Keyring: ring})
	job, _ := client.Enqueue(ctx, SendEmail{To: "ada@example.com"}, &skiplock.EnqueueOptions{Encrypt: true})

	kid, sealed := skiplock.SealedKey(job.Payload)
	fmt.Println(sealed, kid, strings.Contains(string(job.Payload), "ada@"))
	args, _ := ring.Open(job.Kind, job.Payload)
	fmt.Println(string(args))
	// Output:
	// true k1 false
	// {"to":"ada@example.com","subject":""}
}
