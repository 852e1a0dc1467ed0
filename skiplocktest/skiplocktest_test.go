package skiplocktest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/skiplocktest"
)

type sendEmail struct {
	To      string `json:"to"`
	Subject string `json:"subject,omitempty"`
}

func (sendEmail) Kind() string { return "send_email" }

type flaky struct {
	FailTimes int `json:"fail_times"`
}

func (flaky) Kind() string { return "flaky" }

func setup(t *testing.T) (*pgxpool.Pool, *skiplock.Client) {
	t.Helper()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	require.NoError(t, skiplock.Migrate(t.Context(), pool, skiplock.MigrateConfig{Schema: schema}))
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	require.NoError(t, err)
	return pool, client
}

// fakeTB records a failure instead of ending the test, to check what the helpers refuse.
type fakeTB struct {
	testing.TB
	mu     sync.Mutex
	failed string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.failed = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	panic(f)
}

// fails runs fn with a fakeTB and returns the failure message ("" when none).
func fails(t *testing.T, fn func(tb testing.TB)) (msg string) {
	f := &fakeTB{TB: t}
	defer func() {
		if r := recover(); r != nil && r != any(f) {
			panic(r)
		}
		msg = f.failed
	}()
	fn(f)
	return ""
}

func TestRequireEnqueued_InTransactionAndOnPool(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer tx.Rollback(context.WithoutCancel(t.Context())) //nolint:errcheck
	_, err = client.EnqueueTx(t.Context(), tx, sendEmail{To: "ada@example.com", Subject: "Order 1"}, &skiplock.EnqueueOptions{Queue: "mail"})
	require.NoError(t, err)

	// The transaction sees its own job; the pool does not, until the commit.
	job := skiplocktest.RequireEnqueued(t, tx, client, sendEmail{To: "ada@example.com"}, nil)
	assert.Equal(t, "Order 1", job.Args.Subject, "fields left out of want match anything")
	assert.Equal(t, "mail", job.Queue)
	skiplocktest.RequireEnqueued(t, tx, client, sendEmail{To: "ada@example.com"}, &skiplocktest.RequireOpts{Queue: "mail", Status: skiplock.StatusQueued, Count: 1})
	skiplocktest.RequireNotEnqueued(t, pool, client, sendEmail{To: "ada@example.com"}, nil)
	skiplocktest.RequireNotEnqueued(t, tx, client, sendEmail{To: "bob@example.com"}, nil)
	skiplocktest.RequireNotEnqueued(t, tx, client, sendEmail{To: "ada@example.com"}, &skiplocktest.RequireOpts{Queue: "default"})
	require.NoError(t, tx.Commit(t.Context()))
	skiplocktest.RequireEnqueued(t, pool, client, sendEmail{To: "ada@example.com", Subject: "Order 1"}, nil)

	// And the failures say what was there.
	msg := fails(t, func(tb testing.TB) {
		skiplocktest.RequireEnqueued(tb, pool, client, sendEmail{To: "bob@example.com"}, nil)
	})
	assert.Contains(t, msg, `no job of kind "send_email" matching {"to":"bob@example.com"}`)
	assert.Contains(t, msg, `ada@example.com`, "the jobs of the kind are listed")
	msg = fails(t, func(tb testing.TB) {
		skiplocktest.RequireEnqueued(tb, pool, client, sendEmail{To: "ada@example.com"}, &skiplocktest.RequireOpts{Count: 2})
	})
	assert.Contains(t, msg, "1 jobs of kind")
	msg = fails(t, func(tb testing.TB) {
		skiplocktest.RequireNotEnqueued(tb, pool, client, sendEmail{To: "ada@example.com"}, nil)
	})
	assert.Contains(t, msg, "want none")
}

func TestRunOneAndDrain_RunRealHandlersSynchronously(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{})
	require.NoError(t, err)
	var sent []string
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[sendEmail]) error {
		sent = append(sent, job.Args.To) // no lock: the handler runs in the test's goroutine
		if job.Args.To == "" {
			return skiplock.Permanent(errors.New("no address"))
		}
		if err := skiplock.RecordProgress(ctx, 1, "sent"); err != nil {
			return err
		}
		return skiplock.SetOutput(ctx, map[string]string{"message_id": "m-" + job.Args.To})
	}))
	assert.Nil(t, skiplocktest.RunOne(t, w, "default"), "nothing due")
	for _, to := range []string{"a@example.com", "b@example.com", ""} {
		_, err := client.Enqueue(t.Context(), sendEmail{To: to}, nil)
		require.NoError(t, err)
	}
	ran := skiplocktest.Drain(t, w, "default")
	require.Len(t, ran, 3)
	assert.Equal(t, []string{"a@example.com", "b@example.com", ""}, sent)
	assert.Equal(t, skiplock.OutcomeSucceeded, ran[0].Result.Outcome)
	assert.Equal(t, skiplock.OutcomeFailed, ran[2].Result.Outcome)

	// The outcomes are recorded before Drain returns.
	j, err := client.Get(t.Context(), ran[0].Job.ID)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusSucceeded, j.Status)
	assert.JSONEq(t, `{"message_id": "m-a@example.com"}`, string(j.Output), "the output is stored with the success")
	assert.Equal(t, &skiplock.Progress{Value: 1, Message: "sent"}, j.Progress)
	j, err = client.Get(t.Context(), ran[2].Job.ID)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusFailed, j.Status)
	skiplocktest.RequireNotEnqueued(t, pool, client, sendEmail{To: "a@example.com"}, nil)
}

// A queue the worker does not serve (a typo above all) fails the test, naming the
// worker's queues, instead of passing for an empty queue; its jobs are left alone.
func TestDrainAndRunOne_FailOnAQueueTheWorkerDoesNotServe(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{Queues: map[string]skiplock.QueueConfig{"email": {}, "default": {}}})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[sendEmail]) error { return nil }))
	_, err = client.Enqueue(t.Context(), sendEmail{To: "ada@example.com"}, &skiplock.EnqueueOptions{Queue: "reports"})
	require.NoError(t, err)

	for _, c := range []struct{ queue, op string }{{"emial", "Drain"}, {"reports", "Drain"}, {"emial", "RunOne"}} {
		msg := fails(t, func(tb testing.TB) {
			if c.op == "Drain" {
				skiplocktest.Drain(tb, w, c.queue)
			} else {
				skiplocktest.RunOne(tb, w, c.queue)
			}
		})
		assert.Equal(t, fmt.Sprintf(`skiplocktest: %s(%q): skiplock: queue %q is not one this worker serves (its queues: "default", "email"): name one of them, or add it to WorkerConfig.Queues`,
			c.op, c.queue, c.queue), msg)
	}
	skiplocktest.RequireEnqueued(t, pool, client, sendEmail{To: "ada@example.com"}, &skiplocktest.RequireOpts{Queue: "reports", Status: skiplock.StatusQueued})
	assert.Empty(t, skiplocktest.Drain(t, w, "email"), "a queue it serves, empty")
}

func TestAdvance_MakesScheduledRetriedAndSnoozedJobsComeDue(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{RetryPolicy: skiplock.BackoffPolicy{Base: time.Minute, Max: time.Hour, Rand: func() float64 { return 0.999 }}})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[flaky]) error {
		if job.Attempts <= job.Args.FailTimes {
			return errors.New("downstream down")
		}
		return nil
	}))
	snoozed := false
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[sendEmail]) error {
		if !snoozed {
			snoozed = true
			return skiplock.Snooze(10 * time.Minute)
		}
		return nil
	}))

	// A job scheduled in 30 minutes by the database's clock.
	var dbNow time.Time
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT now()`).Scan(&dbNow))
	scheduled, err := client.Enqueue(t.Context(), flaky{}, &skiplock.EnqueueOptions{RunAt: dbNow.Add(30 * time.Minute)})
	require.NoError(t, err)
	assert.Nil(t, skiplocktest.RunOne(t, w, "default"))
	skiplocktest.Advance(t, pool, client, 29*time.Minute)
	assert.Nil(t, skiplocktest.RunOne(t, w, "default"), "one minute early")
	skiplocktest.Advance(t, pool, client, time.Minute)
	r := skiplocktest.RunOne(t, w, "default")
	require.NotNil(t, r, "due after 30 minutes")
	assert.Equal(t, scheduled.ID, r.Job.ID)

	// A retry: the first attempt fails, the backoff is 2^1 minutes × 0.9995 ≈ 119.9 s.
	retried, err := client.Enqueue(t.Context(), flaky{FailTimes: 1}, nil)
	require.NoError(t, err)
	r = skiplocktest.RunOne(t, w, "default")
	require.NotNil(t, r)
	assert.Equal(t, skiplock.OutcomeRetry, r.Result.Outcome)
	assert.Nil(t, skiplocktest.RunOne(t, w, "default"), "backing off")
	skiplocktest.Advance(t, pool, client, 119*time.Second)
	assert.Nil(t, skiplocktest.RunOne(t, w, "default"), "still backing off")
	skiplocktest.Advance(t, pool, client, time.Second)
	r = skiplocktest.RunOne(t, w, "default")
	require.NotNil(t, r, "the retry is due after its backoff")
	assert.Equal(t, retried.ID, r.Job.ID)
	assert.Equal(t, 2, r.Job.Attempts)
	assert.Equal(t, skiplock.OutcomeSucceeded, r.Result.Outcome)

	// A snooze of 10 minutes.
	_, err = client.Enqueue(t.Context(), sendEmail{To: "a@example.com"}, nil)
	require.NoError(t, err)
	r = skiplocktest.RunOne(t, w, "default")
	require.NotNil(t, r)
	assert.Equal(t, skiplock.OutcomeSnoozed, r.Result.Outcome)
	skiplocktest.Advance(t, pool, client, 9*time.Minute+59*time.Second)
	assert.Nil(t, skiplocktest.RunOne(t, w, "default"), "one second early")
	skiplocktest.Advance(t, pool, client, time.Second)
	r = skiplocktest.RunOne(t, w, "default")
	require.NotNil(t, r, "due after the snooze")
	assert.Equal(t, skiplock.OutcomeSucceeded, r.Result.Outcome)
	assert.Equal(t, 1, r.Job.Attempts, "the snooze gave its attempt back")

	// Finished jobs aged too: created 40 minutes ago by the schema's clock.
	var age time.Duration
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT now() - created_at FROM `+client.Schema()+`.jobs_archive WHERE id = $1`, scheduled.ID).Scan(&age))
	assert.GreaterOrEqual(t, age, 40*time.Minute)
	assert.False(t, strings.Contains(fails(t, func(tb testing.TB) { skiplocktest.Advance(tb, pool, client, time.Second) }), "skiplocktest"))
	assert.Contains(t, fails(t, func(tb testing.TB) { skiplocktest.Advance(tb, pool, client, -time.Second) }), "only moves forward")
}

type order struct {
	OrderID int64    `json:"order_id"`
	To      string   `json:"to"`
	Urgent  bool     `json:"urgent"`
	Lines   []string `json:"lines"`
	Address struct {
		City string `json:"city"`
		Zip  string `json:"zip"`
	} `json:"address"`
}

func (order) Kind() string { return "order" }

func TestRequireEnqueued_SetFieldsOnlyComparesTheFieldsSetInWant(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	stored := order{OrderID: 7, To: "ada@example.com", Urgent: true, Lines: []string{"a"}}
	stored.Address.City, stored.Address.Zip = "Paris", "75001"
	_, err := client.Enqueue(t.Context(), stored, nil)
	require.NoError(t, err)
	_, err = client.Enqueue(t.Context(), order{OrderID: 8}, nil)
	require.NoError(t, err)
	set := &skiplocktest.RequireOpts{SetFieldsOnly: true}

	// By default the zero fields of want count, and the failure says how to leave them out.
	msg := fails(t, func(tb testing.TB) { skiplocktest.RequireEnqueued(tb, pool, client, order{OrderID: 7}, nil) })
	assert.Contains(t, msg, "SetFieldsOnly: true")
	msg = fails(t, func(tb testing.TB) { skiplocktest.RequireEnqueued(tb, pool, client, order{OrderID: 9}, nil) })
	assert.NotEmpty(t, msg)
	assert.NotContains(t, msg, "SetFieldsOnly", "no hint when no job matches the set fields either")

	job := skiplocktest.RequireEnqueued(t, pool, client, order{OrderID: 7}, set)
	assert.Equal(t, "ada@example.com", job.Args.To)
	var nested order
	nested.Address.City = "Paris"
	skiplocktest.RequireEnqueued(t, pool, client, nested, &skiplocktest.RequireOpts{SetFieldsOnly: true, Count: 1})
	skiplocktest.RequireEnqueued(t, pool, client, order{Urgent: true, Lines: []string{"a"}}, set)
	// A set field that differs still fails; all-zero want matches every job of the kind.
	skiplocktest.RequireNotEnqueued(t, pool, client, order{OrderID: 7, To: "bob@example.com"}, set)
	nested.Address.City = "Lyon"
	skiplocktest.RequireNotEnqueued(t, pool, client, nested, set)
	skiplocktest.RequireEnqueued(t, pool, client, order{}, &skiplocktest.RequireOpts{SetFieldsOnly: true, Count: 2})
	// Without it, order 8 (all its other fields zero) matches only a want equal to it.
	skiplocktest.RequireEnqueued(t, pool, client, order{OrderID: 8}, &skiplocktest.RequireOpts{Count: 1})
}

type charge struct {
	Card   string `json:"card"`
	Amount int    `json:"amount,omitempty"`
}

func (charge) Kind() string { return "charge" }

// Encrypted args (EnqueueOptions.Encrypt) are matched on their plaintext, opened with the
// client's Keyring: RequireNotEnqueued does not pass for a job it cannot read, and a
// client without the key fails the test saying so.
func TestRequireEnqueued_MatchesEncryptedArgs(t *testing.T) {
	t.Parallel()
	pool, plain := setup(t)
	ring, err := skiplock.NewKeyring("k1", map[string][]byte{"k1": make([]byte, 32)})
	require.NoError(t, err)
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: plain.Schema(), Keyring: ring})
	require.NoError(t, err)
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer tx.Rollback(context.WithoutCancel(t.Context())) //nolint:errcheck
	_, err = client.EnqueueTx(t.Context(), tx, charge{Card: "4111", Amount: 42}, &skiplock.EnqueueOptions{Encrypt: true})
	require.NoError(t, err)

	job := skiplocktest.RequireEnqueued(t, tx, client, charge{Card: "4111"}, &skiplocktest.RequireOpts{Count: 1})
	assert.Equal(t, 42, job.Args.Amount, "the args are decoded from the plaintext")
	key, sealed := skiplock.SealedKey(job.Payload)
	assert.True(t, sealed && key == "k1", "the row's payload is as stored")
	skiplocktest.RequireEnqueued(t, tx, client, charge{Amount: 42}, &skiplocktest.RequireOpts{SetFieldsOnly: true})
	skiplocktest.RequireNotEnqueued(t, tx, client, charge{Card: "5500"}, nil)
	msg := fails(t, func(tb testing.TB) { skiplocktest.RequireNotEnqueued(tb, tx, client, charge{Card: "4111"}, nil) })
	assert.Contains(t, msg, "want none", "an encrypted job that matches is found")
	msg = fails(t, func(tb testing.TB) { skiplocktest.RequireEnqueued(tb, tx, client, charge{Card: "5500"}, nil) })
	assert.Contains(t, msg, `"card":"4111"`, "the failure lists the jobs' args, opened")

	// A client without the key cannot tell: it fails the test rather than pass.
	for name, fn := range map[string]func(tb testing.TB){
		"RequireEnqueued":    func(tb testing.TB) { skiplocktest.RequireEnqueued(tb, tx, plain, charge{Card: "4111"}, nil) },
		"RequireNotEnqueued": func(tb testing.TB) { skiplocktest.RequireNotEnqueued(tb, tx, plain, charge{Card: "5500"}, nil) },
	} {
		msg := fails(t, fn)
		assert.Contains(t, msg, `encrypted with key "k1"`, name)
		assert.Contains(t, msg, "Keyring", name)
	}
}
