package skiplock_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// mapArgs marshals a map, so tests control the order of its keys in the payload.
type mapArgs map[string]any

func (mapArgs) Kind() string { return "map_args" }

// orderedArgs marshals to its bytes as they are: object keys in the order written.
type orderedArgs struct{ raw string }

func (orderedArgs) Kind() string                   { return "map_args" }
func (r orderedArgs) MarshalJSON() ([]byte, error) { return []byte(r.raw), nil }

// Not parallel: its 32 connections at once would crowd the parallel tests out of a shared
// server's connection slots.
func TestUnique_ConcurrentEnqueuesLeaveOneRow(t *testing.T) {
	b := setup(t)
	pool := newPool(t, 33) // one connection per goroutine, so all 32 enqueue at once
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)
	opts := &skiplock.EnqueueOptions{Unique: &skiplock.UniqueOpts{ByArgs: true}}

	const n = 32
	var (
		start    = make(chan struct{})
		wg       sync.WaitGroup
		mu       sync.Mutex
		ids      = map[int64]int{}
		inserted int
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var job *skiplock.JobRow
			var err error
			if i%2 == 0 { // half in their own transaction, half in a caller's
				job, err = client.Enqueue(b.ctx, emailArgs{OrderID: 7, To: "a@example.com"}, opts)
			} else {
				err = pgx.BeginFunc(b.ctx, pool, func(tx pgx.Tx) error {
					job, err = client.EnqueueTx(b.ctx, tx, emailArgs{OrderID: 7, To: "a@example.com"}, opts)
					return err
				})
			}
			if !assert.NoError(t, err) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			ids[job.ID]++
			if !job.Duplicate {
				inserted++
			}
		}()
	}
	close(start)
	wg.Wait()
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs`), "exactly one row")
	assert.Len(t, ids, 1, "every call returns the same job")
	assert.Equal(t, 1, inserted, "one call inserted, the others were told Duplicate")
}

// A server (or role) whose default isolation is REPEATABLE READ runs Enqueue's unique
// insert at that level: a holder committed after the statement began is still a
// duplicate, not a serialization failure. Not parallel, as the test above.
func TestUnique_ConcurrentEnqueuesUnderARepeatableReadDefaultAreDuplicates(t *testing.T) {
	b := setup(t)
	pool := newPoolWith(t, func(cfg *pgxpool.Config) {
		cfg.MaxConns = 17
		cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "repeatable read"
	})
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)
	opts := &skiplock.EnqueueOptions{Unique: &skiplock.UniqueOpts{ByArgs: true}}

	const rounds, n = 20, 16
	for round := range rounds {
		var (
			start    = make(chan struct{})
			wg       sync.WaitGroup
			mu       sync.Mutex
			inserted int
		)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				job, err := client.Enqueue(b.ctx, emailArgs{OrderID: int64(round), To: "a@example.com"}, opts)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if !job.Duplicate {
					inserted++
				}
			}()
		}
		close(start)
		wg.Wait()
		assert.Equal(t, 1, inserted, "round %d: one call inserted, the others were told Duplicate", round)
	}
	assert.Equal(t, rounds, b.count(t, `SELECT count(*) FROM {s}.jobs`), "one row per key")
}

func TestUnique_ByArgsIsCanonicalAndByFields(t *testing.T) {
	t.Parallel()
	b := setup(t)
	byArgs := &skiplock.EnqueueOptions{Unique: &skiplock.UniqueOpts{ByArgs: true}}
	first, err := b.client.Enqueue(b.ctx, orderedArgs{`{"a":1,"b":{"x":1,"y":2}}`}, byArgs)
	require.NoError(t, err)
	require.False(t, first.Duplicate)
	dup, err := b.client.Enqueue(b.ctx, orderedArgs{`{"b":{"y":2,"x":1},"a":1}`}, byArgs)
	require.NoError(t, err, "a duplicate is not an error")
	assert.True(t, dup.Duplicate, "key order does not matter")
	assert.Equal(t, first.ID, dup.ID)
	other, err := b.client.Enqueue(b.ctx, orderedArgs{`{"a":2,"b":{"x":1,"y":2}}`}, byArgs)
	require.NoError(t, err)
	assert.False(t, other.Duplicate, "other args are another job")

	byField := &skiplock.EnqueueOptions{Queue: "fields", Unique: &skiplock.UniqueOpts{ArgsFields: []string{"user"}, ByQueue: true}}
	f1, err := b.client.Enqueue(b.ctx, mapArgs{"user": 1, "note": "x"}, byField)
	require.NoError(t, err)
	f2, err := b.client.Enqueue(b.ctx, mapArgs{"note": "y", "user": 1}, byField)
	require.NoError(t, err)
	assert.True(t, f2.Duplicate, "only the named field counts")
	assert.Equal(t, f1.ID, f2.ID)
	f3, err := b.client.Enqueue(b.ctx, mapArgs{"user": 2, "note": "x"}, byField)
	require.NoError(t, err)
	assert.False(t, f3.Duplicate)

	// By kind alone (the zero UniqueOpts), and ByQueue.
	kindOnly := &skiplock.UniqueOpts{}
	k1, err := b.client.Enqueue(b.ctx, noopArgs{N: 1}, &skiplock.EnqueueOptions{Queue: "q1", Unique: kindOnly})
	require.NoError(t, err)
	k2, err := b.client.Enqueue(b.ctx, noopArgs{N: 2}, &skiplock.EnqueueOptions{Queue: "q2", Unique: kindOnly})
	require.NoError(t, err)
	assert.True(t, k2.Duplicate, "unique by kind: args and queue do not matter")
	assert.Equal(t, k1.ID, k2.ID)
	byQueue := &skiplock.UniqueOpts{ByQueue: true}
	q1, err := b.client.Enqueue(b.ctx, noopArgs{N: 1}, &skiplock.EnqueueOptions{Queue: "q1", Unique: byQueue})
	require.NoError(t, err)
	q2, err := b.client.Enqueue(b.ctx, noopArgs{N: 1}, &skiplock.EnqueueOptions{Queue: "q2", Unique: byQueue})
	require.NoError(t, err)
	assert.NotEqual(t, q1.ID, q2.ID, "ByQueue: one per queue")
	assert.Equal(t, 7, b.count(t, `SELECT count(*) FROM {s}.jobs`))
}

// archive moves a job to the archive as the completer does for a success.
func (b *bundle) archive(t *testing.T, id int64) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, b.q(`WITH done AS (DELETE FROM {s}.jobs WHERE id = $1 RETURNING *)
INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
	locked_by, last_error, errors, unique_key, created_at, finished_at)
SELECT id, queue, kind, payload, 'succeeded', priority, run_at, 1, max_attempts,
	locked_by, last_error, errors, unique_key, created_at, now() FROM done`), id)
	require.NoError(t, err)
}

func TestUnique_SucceededWithinPeriodCounts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hour := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	withDone := func(at time.Time) *skiplock.EnqueueOptions {
		return &skiplock.EnqueueOptions{RunAt: at, Unique: &skiplock.UniqueOpts{ByPeriod: time.Hour,
			States: []skiplock.JobStatus{skiplock.StatusQueued, skiplock.StatusRunning, skiplock.StatusSucceeded}}}
	}
	first, err := b.client.Enqueue(b.ctx, noopArgs{}, withDone(hour.Add(5*time.Minute)))
	require.NoError(t, err)
	b.archive(t, first.ID) // succeeded at "10:05"

	dup, err := b.client.Enqueue(b.ctx, noopArgs{}, withDone(hour.Add(40*time.Minute)))
	require.NoError(t, err)
	assert.True(t, dup.Duplicate, "succeeded within the hour blocks another")
	assert.Equal(t, first.ID, dup.ID)
	assert.Equal(t, skiplock.StatusSucceeded, dup.Status)

	n, err := b.client.EnqueueMany(b.ctx, []skiplock.EnqueueParams{
		{Args: noopArgs{}, Options: withDone(hour.Add(50 * time.Minute))}, // blocked by the archive
		{Args: noopArgs{}, Options: withDone(hour.Add(70 * time.Minute))}, // the next hour
		{Args: noopArgs{}, Options: withDone(hour.Add(80 * time.Minute))}, // same batch, same hour
	})
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the batch inserts only the 11:00 job")

	// Without succeeded among the states, a finished job blocks nothing.
	activeOnly := &skiplock.EnqueueOptions{RunAt: hour.Add(45 * time.Minute), Unique: &skiplock.UniqueOpts{ByPeriod: time.Hour}}
	again, err := b.client.Enqueue(b.ctx, noopArgs{}, activeOnly)
	require.NoError(t, err)
	assert.False(t, again.Duplicate)

	// Dead jobs stay in the hot table: they count when dead is named.
	withDead := &skiplock.EnqueueOptions{Queue: "d", Unique: &skiplock.UniqueOpts{ByQueue: true,
		States: []skiplock.JobStatus{skiplock.StatusQueued, skiplock.StatusRunning, skiplock.StatusDead}}}
	d1, err := b.client.Enqueue(b.ctx, noopArgs{}, withDead)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET status = 'dead', finished_at = now() WHERE id = $1`), d1.ID)
	require.NoError(t, err)
	d2, err := b.client.Enqueue(b.ctx, noopArgs{}, withDead)
	require.NoError(t, err)
	assert.True(t, d2.Duplicate)
	assert.Equal(t, skiplock.StatusDead, d2.Status)
}

func TestUnique_InvalidOptions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for name, o := range map[string]*skiplock.EnqueueOptions{
		"states without running": {Unique: &skiplock.UniqueOpts{States: []skiplock.JobStatus{skiplock.StatusQueued}}},
		"unknown state":          {Unique: &skiplock.UniqueOpts{States: []skiplock.JobStatus{"queued", "running", "done"}}},
		"negative period":        {Unique: &skiplock.UniqueOpts{ByPeriod: -time.Second}},
		"key and unique":         {UniqueKey: "k", Unique: &skiplock.UniqueOpts{}},
	} {
		_, err := b.client.Enqueue(b.ctx, noopArgs{}, o)
		assert.ErrorIs(t, err, skiplock.ErrInvalidOptions, name)
	}
	_, err := b.client.Enqueue(b.ctx, orderedArgs{`[1,2]`}, &skiplock.EnqueueOptions{Unique: &skiplock.UniqueOpts{ArgsFields: []string{"a"}}})
	assert.ErrorIs(t, err, skiplock.ErrInvalidPayload, "fields of args that are not an object")
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs`))
}

// In a REPEATABLE READ or SERIALIZABLE transaction, a unique key taken by a transaction
// that committed after the snapshot must not abort the caller's transaction.
func TestUnique_EnqueueTxKeepsStrictTransactionsUsable(t *testing.T) {
	t.Parallel()
	for _, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		t.Run(string(iso), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			for _, legacy := range []bool{false, true} {
				opts := &skiplock.EnqueueOptions{Unique: &skiplock.UniqueOpts{ByArgs: true}}
				if legacy {
					opts = &skiplock.EnqueueOptions{UniqueKey: "legacy"}
				}
				tx, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: iso})
				require.NoError(t, err)
				var one int
				require.NoError(t, tx.QueryRow(b.ctx, `SELECT 1`).Scan(&one)) // take the snapshot

				other, err := b.client.Enqueue(b.ctx, noopArgs{N: 5}, opts) // commits after the snapshot
				require.NoError(t, err)

				_, err = b.client.EnqueueTx(b.ctx, tx, noopArgs{N: 5}, opts)
				require.ErrorIs(t, err, skiplock.ErrDuplicateJob)
				_, err = b.client.EnqueueManyTx(b.ctx, tx, []skiplock.EnqueueParams{{Args: noopArgs{N: 5}, Options: opts}})
				require.ErrorIs(t, err, skiplock.ErrDuplicateJob)

				// The transaction is still usable: it enqueues another job and commits.
				fresh, err := b.client.EnqueueTx(b.ctx, tx, noopArgs{N: 6}, &skiplock.EnqueueOptions{Unique: &skiplock.UniqueOpts{ByArgs: true}})
				require.NoError(t, err)
				require.NoError(t, tx.Commit(b.ctx))
				got, err := b.client.Get(b.ctx, fresh.ID)
				require.NoError(t, err)
				assert.Equal(t, skiplock.StatusQueued, got.Status)
				assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE unique_key = $1`, other.UniqueKey))
				_, err = b.pool.Exec(b.ctx, b.q(`DELETE FROM {s}.jobs`))
				require.NoError(t, err)
			}
		})
	}
}

func TestRequeue_SkipsHeldUniqueKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	opts := &skiplock.EnqueueOptions{Unique: &skiplock.UniqueOpts{ByArgs: true}}
	dead := func(n int) *skiplock.JobRow {
		j, err := b.client.Enqueue(b.ctx, noopArgs{N: n}, opts)
		require.NoError(t, err)
		_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET status = 'dead', finished_at = now() WHERE id = $1`), j.ID)
		require.NoError(t, err)
		return j
	}
	a1, a2 := dead(1), dead(1) // two dead jobs with one key
	held := dead(2)
	active, err := b.client.Enqueue(b.ctx, noopArgs{N: 2}, opts) // holds held's key
	require.NoError(t, err)
	require.False(t, active.Duplicate)
	free := dead(3)

	res, err := b.client.Requeue(b.ctx, skiplock.RequeueFilter{Kind: "noop"})
	require.NoError(t, err)
	assert.Equal(t, skiplock.RequeueResult{Requeued: 2, Skipped: 2}, res)
	for id, want := range map[int64]skiplock.JobStatus{a1.ID: "dead", a2.ID: "queued", held.ID: "dead", free.ID: "queued", active.ID: "queued"} {
		j, err := b.client.Get(b.ctx, id)
		require.NoError(t, err)
		assert.Equal(t, want, j.Status, "job %d", id)
	}
}

// A holder that is running when a unique enqueue whose States count succeeded begins, and
// succeeds while that enqueue waits on it, still blocks it: the enqueue answers with the
// archived holder and writes no second job.
func TestUnique_AHolderThatSucceedsDuringTheEnqueueStillCounts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, inTx := range []bool{false, true} {
		opts := &skiplock.EnqueueOptions{Unique: &skiplock.UniqueOpts{ByArgs: true,
			States: []skiplock.JobStatus{skiplock.StatusQueued, skiplock.StatusRunning, skiplock.StatusSucceeded}}}
		args := emailArgs{OrderID: 99, To: fmt.Sprintf("in-tx-%t", inTx)}
		holder, err := b.client.Enqueue(b.ctx, args, opts)
		require.NoError(t, err)
		_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET status = 'running', locked_at = now(), locked_by = 'w', attempts = 1 WHERE id = $1`), holder.ID)
		require.NoError(t, err)

		// The completer's move to the archive, held open while the enqueue starts.
		done, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		_, err = done.Exec(b.ctx, b.q(`WITH done AS (DELETE FROM {s}.jobs WHERE id = $1 RETURNING *)
INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
	locked_by, last_error, errors, unique_key, created_at, finished_at)
SELECT id, queue, kind, payload, 'succeeded', priority, run_at, 1, max_attempts,
	locked_by, last_error, errors, unique_key, created_at, now() FROM done`), holder.ID)
		require.NoError(t, err)

		type result struct {
			job *skiplock.JobRow
			err error
		}
		res := make(chan result, 1)
		go func() {
			var r result
			if inTx {
				r.err = pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
					r.job, r.err = b.client.EnqueueTx(b.ctx, tx, args, opts)
					return r.err
				})
			} else {
				r.job, r.err = b.client.Enqueue(b.ctx, args, opts)
			}
			res <- r
		}()
		eventually(t, 10*time.Second, func() bool {
			var waiting int
			require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO "' || $1 || '".jobs%'`, b.schema).Scan(&waiting))
			return waiting == 1
		}, "the enqueue waits on the holder's row")
		require.NoError(t, done.Commit(b.ctx))

		r := <-res
		require.NoError(t, r.err, "in tx: %t", inTx)
		assert.True(t, r.job.Duplicate, "in tx %t: the succeeded holder blocks the key", inTx)
		assert.Equal(t, holder.ID, r.job.ID, "in tx %t", inTx)
		assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE payload->>'to' = $1`, args.To), "in tx %t: no second job", inTx)
	}
}

// EnqueueMany meets the race of TestUnique_AHolderThatSucceedsDuringTheEnqueueStillCounts
// too: a holder running when the bulk insert begins, and succeeding while the insert waits
// on its row, still blocks its job, which is skipped and not counted (own transaction,
// the caller's pgx transaction, a database/sql one); the call's other jobs are written.
func TestUnique_EnqueueManyAHolderThatSucceedsDuringTheInsertStillCounts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := sqlDB(t)
	opts := &skiplock.EnqueueOptions{Unique: &skiplock.UniqueOpts{ByArgs: true,
		States: []skiplock.JobStatus{skiplock.StatusQueued, skiplock.StatusRunning, skiplock.StatusSucceeded}}}
	for _, mode := range []string{"own", "pgx-tx", "sql-tx"} {
		args := emailArgs{OrderID: 98, To: "many-" + mode}
		fresh := emailArgs{OrderID: 97, To: "many-fresh-" + mode}
		plain := emailArgs{OrderID: 96, To: "many-plain-" + mode}
		holder, err := b.client.Enqueue(b.ctx, args, opts)
		require.NoError(t, err)
		_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET status = 'running', locked_at = now(), locked_by = 'w', attempts = 1 WHERE id = $1`), holder.ID)
		require.NoError(t, err)

		// The completer's move to the archive, held open while the enqueue starts.
		done, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		_, err = done.Exec(b.ctx, b.q(`WITH done AS (DELETE FROM {s}.jobs WHERE id = $1 RETURNING *)
INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
	locked_by, last_error, errors, unique_key, created_at, finished_at)
SELECT id, queue, kind, payload, 'succeeded', priority, run_at, 1, max_attempts,
	locked_by, last_error, errors, unique_key, created_at, now() FROM done`), holder.ID)
		require.NoError(t, err)

		params := []skiplock.EnqueueParams{{Args: args, Options: opts}, {Args: fresh, Options: opts}, {Args: plain}}
		type result struct {
			n   int
			err error
		}
		res := make(chan result, 1)
		go func() {
			var r result
			switch mode {
			case "own":
				r.n, r.err = b.client.EnqueueMany(b.ctx, params)
			case "pgx-tx":
				r.err = pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
					r.n, r.err = b.client.EnqueueManyTx(b.ctx, tx, params)
					return r.err
				})
			case "sql-tx":
				tx, err := db.BeginTx(b.ctx, nil)
				if err != nil {
					r.err = err
					break
				}
				if r.n, r.err = b.client.EnqueueManySQLTx(b.ctx, tx, params); r.err != nil {
					_ = tx.Rollback()
					break
				}
				r.err = tx.Commit()
			}
			res <- r
		}()
		eventually(t, 10*time.Second, func() bool {
			var waiting int
			require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO "' || $1 || '".jobs%'`, b.schema).Scan(&waiting))
			return waiting == 1
		}, "%s: the enqueue waits on the holder's row", mode)
		require.NoError(t, done.Commit(b.ctx))

		r := <-res
		require.NoError(t, r.err, mode)
		assert.Equal(t, 2, r.n, "%s: the succeeded holder's duplicate is not counted", mode)
		assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE payload->>'to' = $1`, args.To), "%s: no second job", mode)
		assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE payload->>'to' = $1`, fresh.To), "%s: the other unique job", mode)
		assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE payload->>'to' = $1`, plain.To), "%s: the plain job", mode)
	}
}
