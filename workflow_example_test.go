package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/skiplock/skiplock"
)

// Step is a job kind of the workflow examples: one step of an order's processing.
type Step struct {
	Name string `json:"name"`
}

func (Step) Kind() string { return "order_step" }

// Run "charge" first, then "reserve" and "invoice" side by side, then "ship" once both
// have succeeded; "ship" reads what its dependencies recorded.
func ExampleClient_EnqueueWorkflow() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	_ = skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema})
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})

	w, _ := skiplock.NewWorker(client, skiplock.WorkerConfig{})
	var (
		mu    sync.Mutex
		order []string
		saw   []string
	)
	_ = skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[Step]) error {
		if job.Args.Name == "ship" {
			outs, err := client.DependencyOutputs(ctx, job.JobRow)
			if err != nil {
				return err
			}
			mu.Lock()
			for name, out := range outs {
				saw = append(saw, name+"="+string(out))
			}
			sort.Strings(saw)
			mu.Unlock()
		}
		mu.Lock()
		order = append(order, job.Args.Name)
		mu.Unlock()
		return skiplock.SetOutput(ctx, job.Args.Name+" done")
	})
	wf, _ := client.EnqueueWorkflow(ctx, skiplock.Workflow{Name: "order 42", Tasks: []skiplock.WorkflowTask{
		{Name: "charge", Args: Step{"charge"}},
		{Name: "reserve", Args: Step{"reserve"}, DependsOn: []string{"charge"}},
		{Name: "invoice", Args: Step{"invoice"}, DependsOn: []string{"charge"}},
		{Name: "ship", Args: Step{"ship"}, DependsOn: []string{"reserve", "invoice"}},
	}})

	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- w.Run(runCtx) }()
	waitUntil(func() bool { // the last task has run
		info, _ := client.GetWorkflow(ctx, wf.ID)
		return info.Task("ship").State == "succeeded"
	})
	stop()
	<-stopped
	fmt.Println("first:", order[0], "last:", order[3])
	fmt.Println("ship saw:", saw)
	// Output:
	// first: charge last: ship
	// ship saw: [invoice="invoice done" reserve="reserve done"]
}

// Thumbnail is a job of the batch example.
type Thumbnail struct {
	Image int `json:"image"`
}

func (Thumbnail) Kind() string { return "thumbnail" }

// AlbumReady is the batch's callback.
type AlbumReady struct{}

func (AlbumReady) Kind() string { return "album_ready" }

// Enqueue 10 jobs as a batch; the callback runs once, when all have finished, with the
// counts by outcome.
func ExampleClient_EnqueueBatch() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	_ = skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema})
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})

	w, _ := skiplock.NewWorker(client, skiplock.WorkerConfig{})
	_ = skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[Thumbnail]) error {
		if job.Args.Image == 7 {
			return skiplock.Permanent(errors.New("corrupt image"))
		}
		return nil
	})
	done := make(chan skiplock.BatchCounts, 1)
	_ = skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[AlbumReady]) error {
		counts, _ := skiplock.BatchCountsOf(job.JobRow)
		done <- counts
		return nil
	})
	jobs := make([]skiplock.EnqueueParams, 10)
	for i := range jobs {
		jobs[i] = skiplock.EnqueueParams{Args: Thumbnail{Image: i}}
	}
	_, _ = client.EnqueueBatch(ctx, skiplock.Batch{Name: "album 7", Jobs: jobs, Callback: AlbumReady{}})

	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- w.Run(runCtx) }()
	fmt.Printf("%+v\n", <-done)
	stop()
	<-stopped
	// Output:
	// {Succeeded:9 Failed:1 Dead:0 Cancelled:0}
}

// AccountEvent is a job of the sequence example: one event of one account, to apply in
// order.
type AccountEvent struct {
	Account string `json:"account"`
	Seq     int    `json:"seq"`
}

func (AccountEvent) Kind() string { return "account_event" }

// Apply each account's events one at a time, in the order they were enqueued, even with
// many runners: an event starts only once the previous one of its account has finished.
func ExampleClient_EnqueueSequence() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	_ = skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema})
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})

	w, _ := skiplock.NewWorker(client, skiplock.WorkerConfig{
		Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 10}},
	})
	var (
		mu      sync.Mutex
		applied []int
		done    sync.WaitGroup
	)
	_ = skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[AccountEvent]) error {
		mu.Lock()
		applied = append(applied, job.Args.Seq)
		mu.Unlock()
		done.Done()
		return nil
	})
	for i := 1; i <= 5; i++ {
		done.Add(1)
		_, _ = client.EnqueueSequence(ctx, "account-7", AccountEvent{Account: "account-7", Seq: i}, nil)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- w.Run(runCtx) }()
	done.Wait()
	stop()
	<-stopped
	fmt.Println(applied)
	// Output:
	// [1 2 3 4 5]
}

// Let an account's sequence move on past a failing event: its first failed attempt releases
// the next event at once, and its retry runs whenever it is due, out of order.
func ExampleSequenceMoveOn() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	_ = skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema})
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})

	w, _ := skiplock.NewWorker(client, skiplock.WorkerConfig{
		Queues:      map[string]skiplock.QueueConfig{"default": {MaxWorkers: 10}},
		RetryPolicy: skiplock.BackoffPolicy{Base: time.Millisecond},
	})
	var (
		mu   sync.Mutex
		log  []string
		done sync.WaitGroup
	)
	_ = skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[AccountEvent]) error {
		mu.Lock()
		defer mu.Unlock()
		if job.Args.Seq == 2 && job.Attempts == 1 {
			log = append(log, "event 2 failed")
			return errors.New("downstream timeout")
		}
		log = append(log, fmt.Sprintf("event %d applied", job.Args.Seq))
		done.Done()
		return nil
	})
	opts := &skiplock.EnqueueOptions{SequenceOnFailure: skiplock.SequenceMoveOn}
	for i := 1; i <= 3; i++ {
		done.Add(1)
		_, _ = client.EnqueueSequence(ctx, "account-7", AccountEvent{Account: "account-7", Seq: i}, opts)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- w.Run(runCtx) }()
	done.Wait()
	stop()
	<-stopped
	for _, l := range log {
		fmt.Println(l)
	}
	// Unordered output:
	// event 1 applied
	// event 2 failed
	// event 2 applied
	// event 3 applied
}

// PageView is a job of the batch-handler example.
type PageView struct {
	Page string `json:"page"`
}

func (PageView) Kind() string { return "page_view" }

// Handle up to 100 jobs in one call, with a result per job: here, one INSERT could store
// every view of the call.
func ExampleHandleBatch() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	_ = skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema})
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})

	w, _ := skiplock.NewWorker(client, skiplock.WorkerConfig{
		Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 100}},
	})
	var (
		mu    sync.Mutex
		saved int
		done  sync.WaitGroup
	)
	_ = skiplock.HandleBatch(w, skiplock.BatchHandlerConfig{MaxJobs: 100},
		func(ctx context.Context, jobs []*skiplock.Job[PageView]) []error {
			errs := make([]error, len(jobs))
			mu.Lock()
			saved += len(jobs) // the place for one multi-row INSERT
			mu.Unlock()
			for range jobs {
				done.Done()
			}
			return errs
		})
	views := make([]skiplock.EnqueueParams, 300)
	for i := range views {
		views[i] = skiplock.EnqueueParams{Args: PageView{Page: "/"}}
	}
	done.Add(len(views))
	_, _ = client.EnqueueMany(ctx, views)

	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- w.Run(runCtx) }()
	done.Wait()
	stop()
	<-stopped
	fmt.Println("saved:", saved)
	// Output:
	// saved: 300
}
