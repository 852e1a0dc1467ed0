package skiplock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock"
)

// ChargeOrder is a job kind whose handler writes a business row.
type ChargeOrder struct {
	Order int `json:"order"`
}

func (ChargeOrder) Kind() string { return "charge_order" }

// A handler makes its effect exactly once: its business row and its job's success
// commit in one transaction, fenced on the attempt's token. Had the attempt been taken
// away (its worker cut off for longer than its lease), CompleteTx would fail with
// ErrAttemptLost and the payment would roll back. The token (job.Fence) goes with the
// row, as a fencing token another system could check.
func ExampleCompleteTx() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	if err := skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}); err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+schema+`.payments (order_id int PRIMARY KEY, job_id bigint, token bigint)`); err != nil {
		panic(err)
	}
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	w, _ := skiplock.NewWorker(client, skiplock.WorkerConfig{Completion: skiplock.CompletionKeep, SweepInterval: -1,
		PollInterval: 50 * time.Millisecond})
	done := make(chan struct{})
	_ = skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[ChargeOrder]) error {
		defer close(done)
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.Background()) // a no-op after Commit
		if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.payments VALUES ($1, $2, $3)`,
			job.Args.Order, job.ID, job.Fence); err != nil {
			return err
		}
		if err := skiplock.CompleteTx(ctx, tx, job); err != nil {
			return err // ErrAttemptLost: nothing commits
		}
		return tx.Commit(ctx)
	})
	job, _ := client.Enqueue(ctx, ChargeOrder{Order: 42}, nil)
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(runCtx) }()
	<-done
	stop()
	_ = <-ran

	j, _ := client.Get(ctx, job.ID)
	var paid int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.payments WHERE token > 0`).Scan(&paid)
	fmt.Println(j.Status, paid)
	// Output:
	// succeeded 1
}
