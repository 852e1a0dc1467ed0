package skiplocktest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/skiplocktest"
)

// A test of a handler that fails once: run it, see the retry, move the clock past the
// backoff, run it again. In a real test, pass the test's t instead of exampleT.
func ExampleAdvance() {
	t := &exampleT{}
	pool, client, cleanup := examplePool(t)
	defer cleanup()
	w, _ := skiplock.NewWorker(client, skiplock.WorkerConfig{})
	_ = skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[flaky]) error {
		if job.Attempts <= job.Args.FailTimes {
			return errors.New("downstream down")
		}
		return nil
	})
	_, _ = client.Enqueue(context.Background(), flaky{FailTimes: 1}, nil)
	skiplocktest.RequireEnqueued(t, pool, client, flaky{FailTimes: 1}, nil)

	r := skiplocktest.RunOne(t, w, "default")
	fmt.Println(r.Job.Attempts, r.Result.Outcome)
	fmt.Println(skiplocktest.RunOne(t, w, "default") == nil) // backing off: nothing due
	skiplocktest.Advance(t, pool, client, time.Hour)         // past any first backoff
	for _, r := range skiplocktest.Drain(t, w, "default") {
		fmt.Println(r.Job.Attempts, r.Result.Outcome)
	}
	// Output:
	// 1 retry
	// true
	// 2 succeeded
}

// exampleT is the testing.TB an Example has not got: it fails by panicking.
type exampleT struct{ testing.TB }

func (*exampleT) Helper()                   {}
func (*exampleT) Context() context.Context  { return context.Background() }
func (*exampleT) Logf(string, ...any)       {}
func (*exampleT) Cleanup(func())            {}
func (*exampleT) Fatal(args ...any)         { panic(fmt.Sprint(args...)) }
func (*exampleT) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }

func examplePool(t *exampleT) (*pgxpool.Pool, *skiplock.Client, func()) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.URL(t))
	if err != nil {
		panic(err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	schema := "example_" + hex.EncodeToString(b[:])
	if err := skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}); err != nil {
		panic(err)
	}
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	return pool, client, func() {
		_, _ = pool.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`)
		pool.Close()
	}
}
