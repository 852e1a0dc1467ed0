package skiplock_test

// Tests of enqueueing inside a database/sql transaction (sqltx.go): the promises of
// EnqueueTx, on pgx's stdlib driver.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// sqlDB opens a database/sql handle on pgx's driver for the test database.
func sqlDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", pgtest.URL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func TestEnqueueSQLTx_RollbackLeavesNoJobCommitNotifiesAtCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := sqlDB(t)
	lconn, err := pgx.Connect(b.ctx, pgtest.URL(t))
	require.NoError(t, err)
	defer lconn.Close(b.ctx)
	_, err = lconn.Exec(b.ctx, `LISTEN "`+b.schema+`_jobs"`)
	require.NoError(t, err)
	noNotification := func(wait time.Duration) {
		ctx, cancel := context.WithTimeout(b.ctx, wait)
		defer cancel()
		n, err := lconn.WaitForNotification(ctx)
		require.Error(t, err, "unexpected notification %+v", n)
	}

	for _, many := range []bool{false, true} {
		enqueue := func(tx *sql.Tx, id int64) {
			if many {
				n, err := b.client.EnqueueManySQLTx(b.ctx, tx, []skiplock.EnqueueParams{{Args: emailArgs{OrderID: id}}, {Args: emailArgs{OrderID: id + 100}}})
				require.NoError(t, err)
				require.Equal(t, 2, n)
				return
			}
			job, err := b.client.EnqueueSQLTx(b.ctx, tx, emailArgs{OrderID: id}, &skiplock.EnqueueOptions{Metadata: map[string]string{"via": "sql"}})
			require.NoError(t, err)
			require.NotZero(t, job.ID)
			assert.Equal(t, skiplock.StatusQueued, job.Status)
			assert.Equal(t, "sql", job.Metadata["via"])
		}
		// Rolled back: no row, no notification.
		tx, err := db.BeginTx(b.ctx, nil)
		require.NoError(t, err)
		enqueue(tx, 1)
		noNotification(200 * time.Millisecond)
		require.NoError(t, tx.Rollback())
		noNotification(200 * time.Millisecond)
		assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs`), "many=%v", many)

		// Committed: the rows, and the notification only after the commit.
		tx, err = db.BeginTx(b.ctx, nil)
		require.NoError(t, err)
		enqueue(tx, 2)
		noNotification(200 * time.Millisecond)
		require.NoError(t, tx.Commit())
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		n, err := lconn.WaitForNotification(ctx)
		cancel()
		require.NoError(t, err)
		assert.Equal(t, "default", n.Payload)
		jobs, err := b.client.List(b.ctx, skiplock.ListParams{Kind: "send_email"})
		require.NoError(t, err)
		require.NotEmpty(t, jobs)
		assert.JSONEq(t, `{"order_id":2,"to":""}`, string(jobs[0].Payload))
		_, err = b.pool.Exec(b.ctx, b.q(`DELETE FROM {s}.jobs`))
		require.NoError(t, err)
	}
}

// Errors leave the caller's database/sql transaction usable: a payload jsonb refuses, a
// duplicate unique key, bad options; the caller's writes before and after commit.
func TestEnqueueSQLTx_ErrorsLeaveTheTransactionUsable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := sqlDB(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.orders (id serial PRIMARY KEY, note text)`))
	require.NoError(t, err)
	client, err := skiplock.NewClient(b.pool, skiplock.Config{Schema: b.schema, MaxPayloadBytes: -1, Logger: testLogger()})
	require.NoError(t, err)
	_, err = client.Enqueue(b.ctx, noopArgs{N: 1}, &skiplock.EnqueueOptions{UniqueKey: "held"})
	require.NoError(t, err)

	type attempt struct {
		name string
		run  func(tx *sql.Tx) error
		want error
	}
	var attempts []attempt
	for name, payload := range jsonbRefused {
		attempts = append(attempts,
			attempt{"payload " + name, func(tx *sql.Tx) error {
				_, err := client.EnqueueSQLTx(b.ctx, tx, rawArgs{Raw: json.RawMessage(payload)}, nil)
				return err
			}, skiplock.ErrInvalidPayload},
			attempt{"many payload " + name, func(tx *sql.Tx) error {
				_, err := client.EnqueueManySQLTx(b.ctx, tx, []skiplock.EnqueueParams{{Args: noopArgs{}}, {Args: rawArgs{Raw: json.RawMessage(payload)}}})
				return err
			}, skiplock.ErrInvalidPayload})
	}
	attempts = append(attempts,
		attempt{"duplicate unique key", func(tx *sql.Tx) error {
			job, err := client.EnqueueSQLTx(b.ctx, tx, noopArgs{N: 1}, &skiplock.EnqueueOptions{UniqueKey: "held"})
			if err == nil || !job.Duplicate {
				t.Errorf("want the existing job with Duplicate set, got %+v", job)
			}
			return err
		}, skiplock.ErrDuplicateJob},
		attempt{"bad queue", func(tx *sql.Tx) error {
			_, err := client.EnqueueSQLTx(b.ctx, tx, noopArgs{}, &skiplock.EnqueueOptions{Queue: "a b"})
			return err
		}, skiplock.ErrInvalidQueue},
	)
	for _, a := range attempts {
		tx, err := db.BeginTx(b.ctx, nil)
		require.NoError(t, err)
		_, err = tx.ExecContext(b.ctx, b.q(`INSERT INTO {s}.orders (note) VALUES ('before')`))
		require.NoError(t, err)
		assert.ErrorIs(t, a.run(tx), a.want, a.name)
		_, err = tx.ExecContext(b.ctx, b.q(`INSERT INTO {s}.orders (note) VALUES ('after')`))
		assert.NoError(t, err, "%s: the caller's next statement", a.name)
		assert.NoError(t, tx.Commit(), "%s: the caller's commit", a.name)
	}
	assert.Equal(t, 2*len(attempts), b.count(t, `SELECT count(*) FROM {s}.orders`))
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs`), "only the key holder")
}

// Under REPEATABLE READ and SERIALIZABLE, a key taken after the snapshot is a duplicate
// and the transaction stays usable, through database/sql as through pgx.
func TestEnqueueSQLTx_UniqueKeepsStrictTransactionsUsable(t *testing.T) {
	t.Parallel()
	for _, iso := range []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelSerializable} {
		t.Run(iso.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			db := sqlDB(t)
			opts := &skiplock.EnqueueOptions{Unique: &skiplock.UniqueOpts{ByArgs: true}}
			tx, err := db.BeginTx(b.ctx, &sql.TxOptions{Isolation: iso})
			require.NoError(t, err)
			var one int
			require.NoError(t, tx.QueryRowContext(b.ctx, `SELECT 1`).Scan(&one)) // take the snapshot
			other, err := b.client.Enqueue(b.ctx, noopArgs{N: 5}, opts)          // commits after it
			require.NoError(t, err)

			_, err = b.client.EnqueueSQLTx(b.ctx, tx, noopArgs{N: 5}, opts)
			require.ErrorIs(t, err, skiplock.ErrDuplicateJob)
			_, err = b.client.EnqueueManySQLTx(b.ctx, tx, []skiplock.EnqueueParams{{Args: noopArgs{N: 5}, Options: opts}})
			require.ErrorIs(t, err, skiplock.ErrDuplicateJob)

			fresh, err := b.client.EnqueueSQLTx(b.ctx, tx, noopArgs{N: 6}, opts)
			require.NoError(t, err)
			require.NoError(t, tx.Commit())
			got, err := b.client.Get(b.ctx, fresh.ID)
			require.NoError(t, err)
			assert.Equal(t, skiplock.StatusQueued, got.Status)
			assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE unique_key = $1`, other.UniqueKey))
		})
	}
}

// A job enqueued through database/sql (on a pool shared with pgx, as stdlib.OpenDBFromPool
// gives) runs like any other.
func TestEnqueueSQLTx_JobRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := stdlib.OpenDBFromPool(b.pool)
	t.Cleanup(func() { _ = db.Close() })
	tx, err := db.BeginTx(b.ctx, nil)
	require.NoError(t, err)
	later := time.Now().Add(-time.Second)
	_, err = b.client.EnqueueManySQLTx(b.ctx, tx, []skiplock.EnqueueParams{
		{Args: emailArgs{OrderID: 1, To: "a@example.com"}},
		{Args: emailArgs{OrderID: 2, To: "b@example.com"}, Options: &skiplock.EnqueueOptions{RunAt: later, Priority: 3, Queue: "mail"}},
	})
	require.NoError(t, err)
	_, err = b.client.EnqueueSQLTx(b.ctx, tx, emailArgs{OrderID: 3, To: "c@example.com"}, &skiplock.EnqueueOptions{Queue: "mail"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit())

	got := make(chan emailArgs, 3)
	w := newWorker(t, b, skiplock.WorkerConfig{Queues: map[string]skiplock.QueueConfig{"default": {}, "mail": {}}, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(_ context.Context, job *skiplock.Job[emailArgs]) error {
		got <- job.Args
		return nil
	}))
	stop := runWorker(t, w)
	defer stop()
	seen := map[int64]string{}
	for range 3 {
		select {
		case a := <-got:
			seen[a.OrderID] = a.To
		case <-time.After(30 * time.Second):
			t.Fatal("jobs enqueued through database/sql did not run")
		}
	}
	assert.Equal(t, map[int64]string{1: "a@example.com", 2: "b@example.com", 3: "c@example.com"}, seen)
}

// DependsOn works through database/sql as through pgx: the dependent waits for its
// parent and runs once it has succeeded, and an unknown parent is ErrDependencyNotFound
// with nothing written and the transaction usable. Before, every EnqueueSQLTx with
// DependsOn failed with "not supported on a database/sql transaction": the parents'
// look-up is a Query, which the adapter refused.
func TestEnqueueSQLTx_DependsOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := sqlDB(t)
	parent, err := b.client.Enqueue(b.ctx, emailArgs{OrderID: 1}, &skiplock.EnqueueOptions{Queue: "parents"})
	require.NoError(t, err)

	tx, err := db.BeginTx(b.ctx, nil)
	require.NoError(t, err)
	_, err = b.client.EnqueueSQLTx(b.ctx, tx, emailArgs{OrderID: 2}, &skiplock.EnqueueOptions{DependsOn: []int64{parent.ID + 1000}})
	require.ErrorIs(t, err, skiplock.ErrDependencyNotFound)
	child, err := b.client.EnqueueSQLTx(b.ctx, tx, emailArgs{OrderID: 3}, &skiplock.EnqueueOptions{DependsOn: []int64{parent.ID}})
	require.NoError(t, err, "after a refusal, the transaction takes the next enqueue")
	require.NoError(t, tx.Commit())
	assert.Equal(t, 2, b.count(t, `SELECT count(*) FROM {s}.jobs`), "the parent and one dependent")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.job_dependencies WHERE parent_id = $1 AND job_id = $2`, parent.ID, child.ID))

	got := make(chan int64, 2)
	w := newWorker(t, b, skiplock.WorkerConfig{Queues: map[string]skiplock.QueueConfig{"default": {}}, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(_ context.Context, job *skiplock.Job[emailArgs]) error {
		got <- job.Args.OrderID
		return nil
	}))
	defer runWorker(t, w)()
	holdsFor(t, 300*time.Millisecond, 50*time.Millisecond, func() {
		require.Empty(t, got, "the dependent ran before its parent succeeded")
	})
	_, err = b.client.Update(b.ctx, parent.ID, skiplock.JobUpdate{Queue: "default"}) // the worker's queue
	require.NoError(t, err)
	for _, want := range []int64{1, 3} {
		select {
		case id := <-got:
			assert.Equal(t, want, id)
		case <-time.After(30 * time.Second):
			t.Fatalf("order %d did not run", want)
		}
	}
}

// What docs/enqueueing.md says of a context that ends during EnqueueTx: ended before the
// call, it is refused with nothing sent and the transaction goes on; ended while a
// statement runs (here the insert waits for a unique key another transaction holds),
// pgx closes the connection to stop it, and the transaction is gone, through pgx as
// through database/sql.
func TestEnqueueTx_ACtxEndingMidStatementEndsTheTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	holder, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(b.ctx) }()
	_, err = b.client.EnqueueTx(b.ctx, holder, noopArgs{N: 1}, &skiplock.EnqueueOptions{UniqueKey: "k"})
	require.NoError(t, err)
	opts := &skiplock.EnqueueOptions{UniqueKey: "k"}

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	ended, cancel := context.WithCancel(b.ctx)
	cancel()
	_, err = b.client.EnqueueTx(ended, tx, noopArgs{N: 2}, opts)
	require.ErrorIs(t, err, context.Canceled)
	_, err = tx.Exec(b.ctx, `SELECT 1`)
	require.NoError(t, err, "a context ended before the call leaves the transaction usable")

	ctx, cancel := context.WithTimeout(b.ctx, 200*time.Millisecond)
	defer cancel()
	_, err = b.client.EnqueueTx(ctx, tx, noopArgs{N: 2}, opts)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = tx.Exec(b.ctx, `SELECT 1`)
	require.Error(t, err, "pgx closed the connection")
	assert.True(t, tx.Conn().IsClosed())

	stx, err := sqlDB(t).BeginTx(b.ctx, nil)
	require.NoError(t, err)
	defer func() { _ = stx.Rollback() }()
	ctx, cancel = context.WithTimeout(b.ctx, 200*time.Millisecond)
	defer cancel()
	_, err = b.client.EnqueueSQLTx(ctx, stx, noopArgs{N: 2}, opts)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = stx.ExecContext(b.ctx, `SELECT 1`)
	require.ErrorIs(t, err, driver.ErrBadConn)
}
