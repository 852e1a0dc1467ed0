package skiplock_test

import (
	"context"
	"fmt"

	"github.com/skiplock/skiplock"
)

// Page through finished jobs of a kind, in the jobs table and the archive alike, with
// the cursor each page hands; then delete them.
func ExampleClient_ListPage() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	_ = skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema})
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})

	w, _ := skiplock.NewWorker(client, skiplock.WorkerConfig{})
	done := make(chan struct{}, 5)
	_ = skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[SendEmail]) error {
		done <- struct{}{}
		return nil
	})
	for i := range 5 {
		_, _ = client.Enqueue(ctx, SendEmail{To: fmt.Sprintf("user%d@example.com", i)}, nil)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- w.Run(runCtx) }()
	for range 5 {
		<-done
	}
	stop() // the successes are archived before Run returns
	<-stopped

	p := skiplock.ListParams{Kind: "send_email", Status: skiplock.StatusSucceeded, Limit: 2}
	for page := 1; ; page++ {
		res, err := client.ListPage(ctx, p)
		if err != nil {
			panic(err)
		}
		fmt.Printf("page %d: %d jobs\n", page, len(res.Jobs))
		if res.Next == "" {
			break
		}
		p.Cursor = res.Next
	}
	n, _ := client.DeleteMany(ctx, skiplock.ListParams{Kind: "send_email", Status: skiplock.StatusSucceeded})
	fmt.Println("deleted", n)
	// Output:
	// page 1: 2 jobs
	// page 2: 2 jobs
	// page 3: 1 jobs
	// deleted 5
}
