package skiplock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock"
)

// Resize is a job kind whose handler reports an output and logs.
type Resize struct {
	Image int `json:"image"`
}

func (Resize) Kind() string { return "resize" }

// Wait for a job's result from the process that enqueued it (or any other): the worker's
// batch that records the outcome notifies the waiter.
func ExampleClient_Wait() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	if err := skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}); err != nil {
		panic(err)
	}
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	w, _ := skiplock.NewWorker(client, skiplock.WorkerConfig{})
	_ = skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[Resize]) error {
		return skiplock.SetOutput(ctx, map[string]string{"url": fmt.Sprintf("/thumbs/%d.png", job.Args.Image)})
	})
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(runCtx) }()
	defer func() { stop(); <-stopped }()

	row, _ := client.Enqueue(ctx, Resize{Image: 7}, nil)
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	done, err := client.Wait(waitCtx, row.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println(done.Status, string(done.Output))
	// Output: succeeded {"url": "/thumbs/7.png"}
}

// A handler's log records are kept with its job, per attempt, and read back with Logs
// (or `skiplock logs ID`, or the dashboard's job page).
func ExampleLogger() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	if err := skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}); err != nil {
		panic(err)
	}
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	w, _ := skiplock.NewWorker(client, skiplock.WorkerConfig{})
	_ = skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[Resize]) error {
		log := skiplock.Logger(ctx).With("image", job.Args.Image)
		log.Info("resizing", "width", 128)
		log.Warn("no EXIF data")
		return nil
	})
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(runCtx) }()
	defer func() { stop(); <-stopped }()

	row, _ := client.Enqueue(ctx, Resize{Image: 7}, nil)
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := client.Wait(waitCtx, row.ID); err != nil {
		panic(err)
	}
	recs, _ := client.Logs(ctx, row.ID)
	for _, r := range recs {
		fmt.Println(r.Attempt, r.Level, r.Message, string(r.Attrs))
	}
	// Output:
	// 1 INFO resizing {"image": 7, "width": 128}
	// 1 WARN no EXIF data {"image": 7}
}
