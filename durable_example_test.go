package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
)

// Checkout is a durable job: reserve the stock, charge the card, ship the parcel. Each
// step writes its business row in its StepTx, so the row and the step's record commit
// together: a crash or a retry never reserves, charges or ships twice.
type Checkout struct {
	Order int    `json:"order"`
	Card  string `json:"card"`
}

func (Checkout) Kind() string { return "checkout" }

// errDeclined is the payment provider's final answer.
var errDeclined = errors.New("card declined")

// checkoutHandler is the saga: three steps and, when the charge is declined, a
// compensation (the reservation is released) before the job fails for good.
func checkoutHandler(schema string) func(ctx context.Context, job *skiplock.Job[Checkout]) error {
	write := func(ctx context.Context, tx pgx.Tx, order int, what string) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+schema+`.ledger (order_id, entry) VALUES ($1, $2)`, order, what)
		return err
	}
	return func(ctx context.Context, job *skiplock.Job[Checkout]) error {
		order := job.Args.Order
		reservation, err := skiplock.StepTx(ctx, "reserve", func(ctx context.Context, tx pgx.Tx) (string, error) {
			return fmt.Sprintf("R-%d", order), write(ctx, tx, order, "reserved")
		})
		if err != nil {
			return err
		}
		_, err = skiplock.StepTx(ctx, "charge", func(ctx context.Context, tx pgx.Tx) (int, error) {
			if job.Args.Card == "expired" {
				return 0, skiplock.Permanent(errDeclined) // not recorded: no retry will help
			}
			return 4200, write(ctx, tx, order, "charged")
		})
		if errors.Is(err, errDeclined) {
			// Compensate: release what the earlier step reserved, exactly once too.
			if _, cerr := skiplock.StepTx(ctx, "release", func(ctx context.Context, tx pgx.Tx) (bool, error) {
				return true, write(ctx, tx, order, "released "+reservation)
			}); cerr != nil {
				return cerr
			}
			return err // Permanent: the job ends failed
		}
		if err != nil {
			return err // retried; reserve is not run again
		}
		_, err = skiplock.StepTx(ctx, "ship", func(ctx context.Context, tx pgx.Tx) (bool, error) {
			return true, write(ctx, tx, order, "shipped")
		})
		return err
	}
}

// runUntil runs w until every job of ids has one of the statuses, then stops it.
func runUntil(client *skiplock.Client, w *skiplock.Worker, ids []int64, statuses ...skiplock.JobStatus) {
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	waitUntil(func() bool {
		for _, id := range ids {
			j, err := client.Get(context.Background(), id)
			if err != nil || !strings.Contains(fmt.Sprint(statuses), string(j.Status)) {
				return false
			}
		}
		return true
	})
	stop()
	_ = <-ran
}

// printLedger prints the ledger's entries in order.
func printLedger(ctx context.Context, pool *pgxpool.Pool, schema string) {
	rows, _ := pool.Query(ctx, `SELECT order_id, entry FROM `+schema+`.ledger ORDER BY order_id, n`)
	var order int
	var entry string
	_, _ = pgx.ForEachRow(rows, []any{&order, &entry}, func() error {
		fmt.Println(order, entry)
		return nil
	})
}

// A checkout saga as a durable job: each step's business row commits with its record, so
// no step runs twice for an order, and a declined card releases the reservation before
// the job fails. Order 1 goes through; order 2's card is declined.
func ExampleStepTx() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	if err := skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}); err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+schema+`.ledger (n serial, order_id int, entry text)`); err != nil {
		panic(err)
	}
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	w, _ := skiplock.NewWorker(client, skiplock.WorkerConfig{Completion: skiplock.CompletionKeep, SweepInterval: -1,
		PollInterval: 50 * time.Millisecond})
	_ = skiplock.Handle(w, checkoutHandler(schema))
	paid, _ := client.Enqueue(ctx, Checkout{Order: 1, Card: "valid"}, nil)
	declined, _ := client.Enqueue(ctx, Checkout{Order: 2, Card: "expired"}, nil)
	runUntil(client, w, []int64{paid.ID, declined.ID}, skiplock.StatusSucceeded, skiplock.StatusFailed)

	printLedger(ctx, pool, schema)
	steps, _ := client.Steps(ctx, declined.ID)
	for _, s := range steps {
		fmt.Printf("job 2 step %d %s: %s %s\n", s.Seq, s.Name, s.Status, s.Result)
	}
	// Output:
	// 1 reserved
	// 1 charged
	// 1 shipped
	// 2 reserved
	// 2 released R-2
	// job 2 step 0 reserve: done "R-2"
	// job 2 step 1 release: done true
}

// Approval is a job that waits for a person's decision, sent with Client.Signal.
type Approval struct {
	Doc int `json:"doc"`
}

func (Approval) Kind() string { return "approval" }

// A job waits for a signal without holding a worker: AwaitSignal parks it (the handler
// returns ErrSuspended) until Client.Signal wakes it; the payload is recorded, so the
// handler's later runs get the same answer.
func ExampleAwaitSignal() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	if err := skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}); err != nil {
		panic(err)
	}
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	w, _ := skiplock.NewWorker(client, skiplock.WorkerConfig{Completion: skiplock.CompletionKeep, SweepInterval: -1,
		PollInterval: 50 * time.Millisecond})
	decided := make(chan string, 1)
	_ = skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[Approval]) error {
		payload, err := skiplock.AwaitSignal(ctx, "decision", 24*time.Hour)
		if err != nil {
			return err // ErrSuspended: parked until the signal or the timeout
		}
		decided <- string(payload)
		return nil
	})
	job, _ := client.Enqueue(ctx, Approval{Doc: 7}, nil)
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(runCtx) }()
	waitUntil(func() bool { // parked: queued, its attempt given back
		j, _ := client.Get(ctx, job.ID)
		return j.Status == skiplock.StatusQueued && j.Attempts == 0
	})
	_ = client.Signal(ctx, job.ID, "decision", map[string]string{"by": "ana", "verdict": "approved"})
	fmt.Println(<-decided)
	stop()
	_ = <-ran
	// Output:
	// {"by": "ana", "verdict": "approved"}
}

// Fork runs a job again from a named step: the steps before it are copied and replayed,
// that step and the later ones run again.
func ExampleClient_Fork() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	if err := skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}); err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+schema+`.ledger (n serial, order_id int, entry text)`); err != nil {
		panic(err)
	}
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	w, _ := skiplock.NewWorker(client, skiplock.WorkerConfig{Completion: skiplock.CompletionKeep, SweepInterval: -1,
		PollInterval: 50 * time.Millisecond})
	_ = skiplock.Handle(w, checkoutHandler(schema))
	job, _ := client.Enqueue(ctx, Checkout{Order: 3, Card: "valid"}, nil)
	runUntil(client, w, []int64{job.ID}, skiplock.StatusSucceeded)
	// The parcel was lost: ship again, without reserving or charging again.
	fork, _ := client.Fork(ctx, job.ID, "ship")
	w2, _ := skiplock.NewWorker(client, skiplock.WorkerConfig{Completion: skiplock.CompletionKeep, SweepInterval: -1,
		PollInterval: 50 * time.Millisecond})
	_ = skiplock.Handle(w2, checkoutHandler(schema))
	runUntil(client, w2, []int64{fork.ID}, skiplock.StatusSucceeded)
	printLedger(ctx, pool, schema)
	// Output:
	// 3 reserved
	// 3 charged
	// 3 shipped
	// 3 shipped
}
