package skiplock_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/skiplock/skiplock"
)

// BuildReport is a job kind whose partition key is taken from its args: every customer's
// reports form one partition.
type BuildReport struct {
	CustomerID string `json:"customer_id"`
	Month      string `json:"month"`
}

func (BuildReport) Kind() string { return "build_report" }

// EnqueueOptions gives every BuildReport its queue and its partition key.
func (r BuildReport) EnqueueOptions() skiplock.EnqueueOptions {
	return skiplock.EnqueueOptions{Queue: "reports", PartitionKey: r.CustomerID}
}

// Limit a queue across every worker of every process: at most two reports at once in
// all, at most one per customer, handed out round-robin across customers.
func ExampleQueueLimits() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	_ = skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema})
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})

	w, _ := skiplock.NewWorker(client, skiplock.WorkerConfig{
		Queues: map[string]skiplock.QueueConfig{"reports": {
			MaxWorkers: 10, // this process could run 10; the limits below hold for all of them
			Limits:     skiplock.QueueLimits{Concurrency: 2, KeyConcurrency: 1, Fair: true},
		}},
	})
	var (
		mu            sync.Mutex
		running, most int
		perCustomer   = map[string]int{}
		done          sync.WaitGroup
	)
	_ = skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[BuildReport]) error {
		mu.Lock()
		running++
		most = max(most, running)
		perCustomer[job.Args.CustomerID]++
		mu.Unlock()
		time.Sleep(20 * time.Millisecond) // the work: long enough that reports would overlap without the limits
		mu.Lock()
		running--
		mu.Unlock()
		done.Done()
		return nil
	})
	for _, c := range []string{"acme", "acme", "acme", "globex", "initech", "initech"} {
		done.Add(1)
		_, _ = client.Enqueue(ctx, BuildReport{CustomerID: c, Month: "2026-11"}, nil)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- w.Run(runCtx) }()
	done.Wait()
	stop()
	<-stopped
	fmt.Println("reports:", perCustomer["acme"]+perCustomer["globex"]+perCustomer["initech"])
	fmt.Println("never more than 2 at once:", most <= 2)
	// Output:
	// reports: 6
	// never more than 2 at once: true
}

// Change a queue's limits at run time: every worker of every process applies them at
// once, until they are reset to the limits the workers declare.
func ExampleClient_SetQueueLimits() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	_ = skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema})
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})

	// The payment provider asks us to slow down: 100 calls a minute, 5 at once, and at
	// most 2 at once per merchant account (EnqueueOptions.ConcurrencyKeys["account"]).
	_ = client.SetQueueLimits(ctx, "payments", skiplock.QueueLimits{Concurrency: 5, Rate: 100, RatePeriod: time.Minute,
		ConcurrencyKeys: map[string]int{"account": 2}})
	set, _ := client.QueueLimitsSet(ctx)
	fmt.Printf("%+v\n", set["payments"])

	_ = client.ResetQueueLimits(ctx, "payments") // back to what the workers declare
	set, _ = client.QueueLimitsSet(ctx)
	fmt.Println(len(set))
	// Output:
	// {Concurrency:5 KeyConcurrency:0 Rate:100 RatePeriod:1m0s KeyRate:0 KeyRatePeriod:0s ConcurrencyKeys:map[account:2] Fair:false}
	// 0
}
