package skiplock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock"
)

// A deploy with a kill deadline: StopAndCancel cancels the running handlers at once and
// waits for them until its own context ends. A handler that honours its context returns,
// and its job is put back in the queue without using up an attempt; had one ignored it,
// StopAndCancel would return ErrHandlersStillRunning and the process would have to exit.
func ExampleWorker_StopAndCancel() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	if err := skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}); err != nil {
		panic(err)
	}
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	w, _ := skiplock.NewWorker(client, skiplock.WorkerConfig{SweepInterval: -1, PollInterval: 50 * time.Millisecond})
	started := make(chan struct{})
	_ = skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[ChargeOrder]) error {
		close(started)
		<-ctx.Done() // a long job that stops when told
		return context.Cause(ctx)
	})
	job, _ := client.Enqueue(ctx, ChargeOrder{Order: 7}, nil)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	<-started

	deadline, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	fmt.Println("StopAndCancel:", w.StopAndCancel(deadline))
	fmt.Println("Run:", <-ran)
	j, _ := client.Get(ctx, job.ID)
	fmt.Println(j.Status, j.Attempts)
	// Output:
	// StopAndCancel: <nil>
	// Run: <nil>
	// queued 0
}
