package skiplock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// batchTracer records, for every coalesced insert, how many jobs it carried and whether
// it failed.
type batchTracer struct {
	mu      sync.Mutex
	batches []tracedBatch
}

type tracedBatch struct {
	jobs   int
	failed bool
}

type batchSizeKey struct{}

func (t *batchTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "FROM unnest($1::text[]") && len(d.Args) > 0 {
		if q, ok := d.Args[0].([]string); ok {
			return context.WithValue(ctx, batchSizeKey{}, len(q))
		}
	}
	return ctx
}

func (t *batchTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if n, ok := ctx.Value(batchSizeKey{}).(int); ok {
		t.mu.Lock()
		t.batches = append(t.batches, tracedBatch{jobs: n, failed: d.Err != nil})
		t.mu.Unlock()
	}
}

// sawBatch reports whether a coalesced insert of more than one job ended with failed.
func (t *batchTracer) sawBatch(failed bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range t.batches {
		if b.jobs > 1 && b.failed == failed {
			return true
		}
	}
	return false
}

// tracedClient is a client on a pool of its own whose coalesced inserts are traced.
func tracedClient(t *testing.T, b *bundle) (*skiplock.Client, *batchTracer) {
	t.Helper()
	tr := &batchTracer{}
	pool := newPoolWith(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = tr })
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)
	return c, tr
}

// together runs fn(i) for i in [0, n) on n goroutines released at once, and waits.
func together(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn(i)
		}()
	}
	close(start)
	wg.Wait()
}

func TestEnqueue_CoalescedCallersGetTheirOwnCommittedRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	client, tr := tracedClient(t, b)
	other := newPool(t, 4) // another session: sees only committed rows

	const producers, rounds = 32, 10
	for round := range rounds {
		errs := make([]error, producers)
		together(producers, func(i int) {
			n := round*producers + i
			row, err := client.Enqueue(b.ctx, noopArgs{N: n}, nil)
			if err != nil {
				errs[i] = err
				return
			}
			// The caller's own row...
			if !strings.Contains(string(row.Payload), `"n":`) || row.Kind != "noop" {
				errs[i] = errors.New("wrong row: " + string(row.Payload))
				return
			}
			var got int
			// ... committed the moment Enqueue returns: another session sees it.
			if err := other.QueryRow(b.ctx, b.q(`SELECT (payload->>'n')::int FROM {s}.jobs WHERE id = $1`), row.ID).Scan(&got); err != nil {
				errs[i] = err
				return
			}
			if got != n {
				errs[i] = errors.New("another caller's row was returned")
			}
		})
		for i, err := range errs {
			require.NoError(t, err, "producer %d of round %d", i, round)
		}
	}
	total := producers * rounds
	assert.Equal(t, total, b.count(t, `SELECT count(DISTINCT (payload->>'n')::int) FROM {s}.jobs`))
	assert.Equal(t, total, b.count(t, `SELECT count(*) FROM {s}.jobs`))
	// Calls shared commits: fewer transactions than jobs.
	txs := b.count(t, `SELECT count(DISTINCT xmin::text) FROM {s}.jobs`)
	assert.Less(t, txs, total, "no two of %d concurrent enqueues shared a commit", total)
	assert.True(t, tr.sawBatch(false), "no coalesced insert carried more than one job")
	t.Logf("%d jobs in %d transactions", total, txs)
	eventually(t, 10*time.Second, func() bool { return skiplock.CoalescerIdle(client) }, "the coalescer did not go idle")
}

type poisonArgs struct{ N int }

func (poisonArgs) Kind() string { return "poison" }

func TestEnqueue_ARefusedJobFailsOnlyItsCaller(t *testing.T) {
	t.Parallel()
	b := setup(t)
	client, tr := tracedClient(t, b)
	// A job that passes every check in Go but that the database refuses.
	_, err := b.pool.Exec(b.ctx, b.q(`ALTER TABLE {s}.jobs ADD CONSTRAINT test_no_poison CHECK (kind <> 'poison')`))
	require.NoError(t, err)

	const producers = 16
	good := 0
	for round := 0; round < 200 && !tr.sawBatch(true); round++ {
		errs := make([]error, producers)
		together(producers, func(i int) {
			switch i {
			case round % producers:
				_, errs[i] = client.Enqueue(b.ctx, poisonArgs{N: round}, nil)
			case (round + 1) % producers:
				// Refused in Go, before it could join a batch.
				_, errs[i] = client.Enqueue(b.ctx, noopArgs{N: -1}, &skiplock.EnqueueOptions{Queue: "Not Valid"})
			case (round + 2) % producers:
				// An EnqueueMany of good jobs shares batches too, all or nothing.
				var n int
				n, errs[i] = client.EnqueueMany(b.ctx, []skiplock.EnqueueParams{{Args: noopArgs{N: 1}}, {Args: noopArgs{N: 2}}})
				if errs[i] == nil && n != 2 {
					errs[i] = errors.New("EnqueueMany inserted a part")
				}
			default:
				_, errs[i] = client.Enqueue(b.ctx, noopArgs{N: i}, nil)
			}
		})
		for i, err := range errs {
			switch i {
			case round % producers:
				var pgErr *pgconn.PgError
				require.ErrorAs(t, err, &pgErr, "the refused job's caller")
				assert.Equal(t, "23514", pgErr.Code)
			case (round + 1) % producers:
				require.ErrorIs(t, err, skiplock.ErrInvalidQueue)
			default:
				require.NoError(t, err, "a good job's caller (%d) must not fail for another's job", i)
			}
		}
		good += producers - 2 + 1 // the EnqueueMany wrote two
	}
	require.True(t, tr.sawBatch(true), "the refused job never shared a batch with others")
	assert.Equal(t, good, b.count(t, `SELECT count(*) FROM {s}.jobs`))
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE kind = 'poison' OR queue <> 'default'`))
}

func TestEnqueue_ADuplicateAnswersOnlyItsCaller(t *testing.T) {
	t.Parallel()
	b := setup(t)
	held, err := b.client.Enqueue(b.ctx, noopArgs{N: -1}, &skiplock.EnqueueOptions{UniqueKey: "held"})
	require.NoError(t, err)

	const producers = 32
	rows := make([]*skiplock.JobRow, producers)
	errs := make([]error, producers)
	together(producers, func(i int) {
		var opts *skiplock.EnqueueOptions
		switch {
		case i == 0:
			opts = &skiplock.EnqueueOptions{UniqueKey: "held"}
		case i%4 == 0:
			opts = &skiplock.EnqueueOptions{UniqueKey: "new-" + string(rune('a'+i))}
		}
		rows[i], errs[i] = b.client.Enqueue(b.ctx, noopArgs{N: i}, opts)
	})
	require.ErrorIs(t, errs[0], skiplock.ErrDuplicateJob)
	require.NotNil(t, rows[0])
	assert.Equal(t, held.ID, rows[0].ID, "the duplicate gets the job holding the key")
	for i := 1; i < producers; i++ {
		require.NoError(t, errs[i], "caller %d", i)
		assert.JSONEq(t, `{"n":`+strconv.Itoa(i)+`}`, string(rows[i].Payload))
	}
	assert.Equal(t, producers, b.count(t, `SELECT count(*) FROM {s}.jobs`))
}

func TestEnqueue_CancelledCallerReturnsAtOnceAndItsJobIsSaidFor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	client, err := skiplock.NewClient(newPool(t, 20), skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)

	// A share lock on the jobs table holds every insert until it is released.
	lock, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer lock.Rollback(b.ctx) //nolint:errcheck // released below
	_, err = lock.Exec(b.ctx, b.q(`LOCK TABLE {s}.jobs IN SHARE MODE`))
	require.NoError(t, err)
	blocked := func(n int) {
		eventually(t, 30*time.Second, func() bool {
			return b.count(t, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'
				AND query LIKE '%INSERT INTO%' AND query LIKE '%' || $1 || '%'`, b.schema) == n
		}, "%d coalesced inserts waiting for the lock", n)
	}
	type result struct {
		err error
		at  time.Time
	}
	enqueue := func(ctx context.Context, n int) chan result {
		ch := make(chan result, 1)
		go func() {
			_, err := client.Enqueue(ctx, noopArgs{N: n}, nil)
			ch <- result{err, time.Now()}
		}()
		return ch
	}

	// A: its batch is sent at once (nothing else in flight) and waits for the lock.
	ctxA, cancelA := context.WithCancel(b.ctx)
	defer cancelA()
	resA := enqueue(ctxA, 1)
	blocked(1)
	// Fill the other slots for batches in flight.
	var others []chan result
	for k := 2; k <= skiplock.CoalesceMaxInFlight; k++ {
		others = append(others, enqueue(b.ctx, k))
		blocked(k)
	}
	// B: every slot is taken, so its batch waits unsent.
	ctxB, cancelB := context.WithCancel(b.ctx)
	resB := enqueue(ctxB, 100)
	// Let B join a batch; it can only wait. A wait, not a condition: that B's call has
	// reached the coalescer is not visible from outside the package.
	time.Sleep(20 * time.Millisecond)
	cancelB()
	r := <-resB
	require.ErrorIs(t, r.err, context.Canceled)
	assert.Contains(t, r.err.Error(), "not inserted")

	cancelA()
	select {
	case r := <-resA:
		require.ErrorIs(t, r.err, context.Canceled)
		assert.Contains(t, r.err.Error(), "inserted if that commit succeeds")
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled caller did not return while its batch was held")
	}
	// C comes after and goes through once the lock is gone.
	others = append(others, enqueue(b.ctx, 200))
	require.NoError(t, lock.Rollback(b.ctx))
	for _, ch := range others {
		require.NoError(t, (<-ch).err)
	}

	// A's batch was sent: it commits. B's was not: its job never exists.
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE payload->>'n' = '1'`) == 1
	}, "the cancelled caller's job that was already sent was not committed")
	eventually(t, 30*time.Second, func() bool { return skiplock.CoalescerIdle(client) }, "the coalescer did not go idle")
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE payload->>'n' = '100'`))
	assert.Equal(t, skiplock.CoalesceMaxInFlight+1, b.count(t, `SELECT count(*) FROM {s}.jobs`))
}

func TestEnqueue_CoalescingOff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	client, err := skiplock.NewClient(b.pool, skiplock.Config{Schema: b.schema, CoalesceWindow: -1})
	require.NoError(t, err)
	const producers = 16
	errs := make([]error, producers)
	together(producers, func(i int) { _, errs[i] = client.Enqueue(b.ctx, noopArgs{N: i}, nil) })
	for _, err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, producers, b.count(t, `SELECT count(DISTINCT xmin::text) FROM {s}.jobs`), "one transaction per call")
}

func TestNewClient_RefusesALongCoalesceWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := skiplock.NewClient(b.pool, skiplock.Config{Schema: b.schema, CoalesceWindow: time.Second})
	require.ErrorIs(t, err, skiplock.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "Config.CoalesceWindow")
}

// BenchmarkEnqueue_OneProducer is the cost of coalescing to a lone caller: one producer,
// the default window against coalescing off, on the same schema. Run it with
// go test -run '^$' -bench Enqueue_OneProducer -count 5.
func BenchmarkEnqueue_OneProducer(b *testing.B) {
	ctx := context.Background()
	schema := pgtest.Schema(b)
	pool := pgtest.Pool(b)
	require.NoError(b, skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}))
	for _, bc := range []struct {
		name   string
		window time.Duration
	}{{"coalesced", 0}, {"alone", -1}} {
		client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, CoalesceWindow: bc.window, Logger: testLogger()})
		require.NoError(b, err)
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := client.Enqueue(ctx, noopArgs{N: 1}, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// An idle client's Enqueue writes its one job with the keyed one-row statement
// (coalescedOneSQL), not the arrays of a batch: every option must reach the row as the
// batch writes it, in every query mode pgx offers (PgBouncer setups use the simple and
// exec protocols, where the arguments go as text).
func TestEnqueue_AJobAloneKeepsEveryOptionInEveryQueryMode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	modes := []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol}
	runAt := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			pool := newPoolWith(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.DefaultQueryExecMode = mode })
			client, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema, Logger: testLogger()})
			require.NoError(t, err)

			due, err := client.Enqueue(b.ctx, noopArgs{N: 1}, nil)
			require.NoError(t, err)
			later, err := client.Enqueue(b.ctx, noopArgs{N: 2}, &skiplock.EnqueueOptions{
				Queue: "alone", Priority: 3, RunAt: runAt, MaxAttempts: 7, Timeout: 1500 * time.Millisecond,
				Metadata: map[string]string{"who": `a "quoted" \ value`}, PartitionKey: "tenant-1",
				ConcurrencyKeys: map[string]string{"region": "eu"},
			})
			require.NoError(t, err)

			for _, got := range []*skiplock.JobRow{due, later} {
				var (
					queue, kind, payload, status, meta string
					prio, maxA                         int
					at, created                        time.Time
					tmo                                *int64
					part, ckeys                        *string
				)
				require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT queue, kind, payload::text, status, priority, max_attempts,
					run_at, created_at, timeout_ms, metadata::text, partition_key, concurrency_keys::text
					FROM {s}.jobs WHERE id = $1`), got.ID).Scan(&queue, &kind, &payload, &status, &prio, &maxA,
					&at, &created, &tmo, &meta, &part, &ckeys))
				assert.Equal(t, got.Queue, queue)
				assert.Equal(t, "noop", kind)
				assert.JSONEq(t, string(got.Payload), payload)
				assert.Equal(t, "queued", status)
				assert.Equal(t, got.Priority, prio)
				assert.Equal(t, got.MaxAttempts, maxA)
				assert.True(t, got.RunAt.Equal(at), "run_at %v, returned %v", at, got.RunAt)
				assert.True(t, got.CreatedAt.Equal(created), "created_at %v, returned %v", created, got.CreatedAt)
				if got == due {
					assert.Equal(t, skiplock.DefaultQueue, queue)
					assert.JSONEq(t, `{"n":1}`, payload)
					assert.True(t, at.Equal(created), "a job with no RunAt is due at its insert: run_at %v, created_at %v", at, created)
					assert.Nil(t, tmo)
					assert.Nil(t, part)
					assert.Nil(t, ckeys)
					continue
				}
				assert.Equal(t, "alone", queue)
				assert.JSONEq(t, `{"n":2}`, payload)
				assert.Equal(t, 3, prio)
				assert.Equal(t, 7, maxA)
				assert.True(t, runAt.Equal(at), "run_at %v, want %v", at, runAt)
				require.NotNil(t, tmo)
				assert.Equal(t, int64(1500), *tmo)
				assert.Equal(t, map[string]string{"who": `a "quoted" \ value`}, got.Metadata)
				assert.Contains(t, meta, `"who": "a \"quoted\" \\ value"`)
				require.NotNil(t, part)
				assert.Equal(t, "tenant-1", *part)
				require.NotNil(t, ckeys)
				assert.JSONEq(t, `{"region": "eu"}`, *ckeys)
			}
		})
	}
}
