package skiplock_test

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/skiplock/skiplock/internal/pgbouncer"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// bouncerParams is what a pgx connection string needs behind a transaction-pooling
// PgBouncer without prepared-statement support (before 1.21, or max_prepared_statements=0).
// pgx's default mode, cache_statement, names a prepared statement on the server connection
// it happens to get; the next transaction may get another server connection, where the
// statement does not exist (or already exists under that name). cache_describe uses only the
// unnamed statement, re-parsed within every round trip, and caches just the parameter and
// result types on the client, so every round trip stands alone.
const bouncerParams = "default_query_exec_mode=cache_describe"

// bouncerPool opens a pool through pgbouncer with bouncerParams, closed at cleanup.
func bouncerPool(t *testing.T, pb *pgbouncer.Bouncer, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pb.URL(bouncerParams))
	require.NoError(t, err)
	require.Equal(t, pgx.QueryExecModeCacheDescribe, cfg.ConnConfig.DefaultQueryExecMode)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

type bouncerArgs struct {
	N int `json:"n"`
}

func (bouncerArgs) Kind() string { return "bouncer" }

// bouncerFlakyArgs fail their first attempt, so retries are recorded through the pooler.
type bouncerFlakyArgs struct {
	N int `json:"n"`
}

func (bouncerFlakyArgs) Kind() string { return "bouncer_flaky" }

type bouncerRolledBackArgs struct{}

func (bouncerRolledBackArgs) Kind() string { return "bouncer_rolled_back" }

// TestPgBouncer_TransactionPoolingRunsEveryJobExactlyOnce runs migrations, every enqueue path,
// three workers and the inspection calls through a transaction-pooling PgBouncer; only the
// workers' LISTEN sessions go straight to Postgres.
func TestPgBouncer_TransactionPoolingRunsEveryJobExactlyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	pb := pgbouncer.Start(t, pgtest.URL(t), pgbouncer.Options{PoolMode: "transaction", PoolSize: 10})
	t.Logf("%s on port %d", pb.Version, pb.Port)
	pool := bouncerPool(t, pb, 8)
	q := func(s string) string { return strings.ReplaceAll(s, "{s}", pgx.Identifier{schema}.Sanitize()) }

	// Migrate works through the pooler: it is one transaction, with SET LOCAL and a
	// transaction-scoped advisory lock. A second run finds nothing to do.
	require.NoError(t, skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}))
	require.NoError(t, skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}))
	st, err := skiplock.GetMigrationStatus(ctx, pool, skiplock.MigrateConfig{Schema: schema})
	require.NoError(t, err)
	require.Equal(t, st.Latest, st.Current)

	_, err = direct.Exec(ctx, q(`CREATE TABLE {s}.audit (job_id bigint, attempt int, worker text, kind text, n int);
		CREATE TABLE {s}.orders (id int PRIMARY KEY)`))
	require.NoError(t, err)
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Logger: testLogger()})
	require.NoError(t, err)

	// Three workers, each with its own small pool through the pooler; LISTEN goes direct.
	workers := []string{"bouncer-w0", "bouncer-w1", "bouncer-w2"}
	for _, id := range workers {
		wpool := bouncerPool(t, pb, 4)
		wclient, err := skiplock.NewClient(wpool, skiplock.Config{Schema: schema, Logger: testLogger()})
		require.NoError(t, err)
		w, err := skiplock.NewWorker(wclient, skiplock.WorkerConfig{
			ID:           id,
			Queues:       map[string]skiplock.QueueConfig{"default": {MaxWorkers: 6}, "bulk": {MaxWorkers: 6}},
			ListenURL:    pgtest.URL(t),
			PollInterval: 200 * time.Millisecond,
			// Heartbeats (every third of it) go through the pooler too. The lease is long
			// because each worker's pool is smaller than it needs and the pooler has 10
			// server connections for all: on a loaded CI machine statements waited seconds
			// for a connection, and with a 6 s lease 10 of 3,200 jobs were taken back (a
			// lease that ran out, or a claim whose reply came too late to run its jobs).
			// At-least-once allows that; this test's promise is exactly once without faults.
			VisibilityTimeout: 20 * time.Second,
			SweepInterval:     500 * time.Millisecond,
			RetryPolicy:       skiplock.BackoffPolicy{Base: time.Millisecond, Max: 10 * time.Millisecond},
			ShutdownTimeout:   5 * time.Second,
			Logger:            testLogger(),
		})
		require.NoError(t, err)
		audit := q(`INSERT INTO {s}.audit VALUES ($1, $2, $3, $4, $5)`)
		require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[bouncerArgs]) error {
			_, err := wpool.Exec(ctx, audit, job.ID, job.Attempts, job.LockedBy, job.Kind, job.Args.N)
			return err
		}))
		require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[bouncerFlakyArgs]) error {
			if job.Attempts == 1 {
				return errors.New("the first attempt of a flaky job fails")
			}
			_, err := wpool.Exec(ctx, audit, job.ID, job.Attempts, job.LockedBy, job.Kind, job.Args.N)
			return err
		}))
		runWorker(t, w)
	}

	const (
		singles   = 500 // Enqueue, 4 goroutines, every tenth with a unique key
		inTx      = 500 // EnqueueTx next to a business row, committed
		rolled    = 50  // EnqueueTx, rolled back
		many      = 2000
		manyBatch = 500
		flaky     = 200
	)
	var g group
	for p := range 4 {
		g.Go(func() error {
			for i := p; i < singles; i += 4 {
				var opts *skiplock.EnqueueOptions
				if i%10 == 0 {
					opts = &skiplock.EnqueueOptions{UniqueKey: "single-" + strconv.Itoa(i), Priority: 5}
				}
				if _, err := client.Enqueue(ctx, bouncerArgs{N: i}, opts); err != nil {
					return fmt.Errorf("enqueue %d: %w", i, err)
				}
			}
			return nil
		})
	}
	g.Go(func() error {
		for i := range inTx + rolled {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if i >= inTx {
					if _, err := client.EnqueueTx(ctx, tx, bouncerRolledBackArgs{}, nil); err != nil {
						return err
					}
					return errRollback
				}
				if _, err := tx.Exec(ctx, q(`INSERT INTO {s}.orders VALUES ($1)`), i); err != nil {
					return err
				}
				_, err := client.EnqueueTx(ctx, tx, bouncerArgs{N: 10_000 + i}, nil)
				return err
			})
			if err != nil && !errors.Is(err, errRollback) {
				return fmt.Errorf("enqueue in tx %d: %w", i, err)
			}
		}
		return nil
	})
	g.Go(func() error {
		for start := 0; start < many; start += manyBatch {
			params := make([]skiplock.EnqueueParams, manyBatch)
			for i := range params {
				n := 20_000 + start + i
				params[i] = skiplock.EnqueueParams{Args: bouncerArgs{N: n}, Options: &skiplock.EnqueueOptions{Queue: "bulk"}}
				switch {
				case start == 0: // the unique-key path: one multi-row insert
					params[i].Options.UniqueKey = "many-" + strconv.Itoa(n)
				case i%2 == 0: // the COPY path for scheduled jobs (already due)
					params[i].Options.RunAt = time.Now().Add(-time.Second)
				}
			}
			n, err := client.EnqueueMany(ctx, params)
			if err != nil {
				return fmt.Errorf("enqueue many from %d: %w", start, err)
			}
			if n != manyBatch {
				return fmt.Errorf("enqueue many from %d inserted %d of %d", start, n, manyBatch)
			}
		}
		params := make([]skiplock.EnqueueParams, flaky)
		for i := range params {
			params[i] = skiplock.EnqueueParams{Args: bouncerFlakyArgs{N: 30_000 + i}}
		}
		_, err := client.EnqueueMany(ctx, params)
		return err
	})
	require.NoError(t, g.Wait())

	// A duplicate unique key is still reported through the pooler, with the active job.
	if row, err := client.Enqueue(ctx, bouncerArgs{N: -1}, &skiplock.EnqueueOptions{UniqueKey: "single-0"}); err != nil {
		require.ErrorIs(t, err, skiplock.ErrDuplicateJob)
		require.NotNil(t, row)
	} // else single-0 already finished, and the key was free again: a legal outcome

	total := singles + inTx + many + flaky
	count := func(query string) int {
		var n int
		require.NoError(t, direct.QueryRow(ctx, q(query)).Scan(&n))
		return n
	}
	eventually(t, 3*time.Minute, func() bool {
		return count(`SELECT count(*) FROM {s}.jobs_archive WHERE kind <> 'bouncer' OR (payload->>'n')::int >= 0`) >= total
	}, "all %d jobs archived", total)

	assert.Equal(t, total, count(`SELECT count(*) FROM {s}.audit WHERE n >= 0`), "successful executions")
	assert.Equal(t, total, count(`SELECT count(DISTINCT job_id) FROM {s}.audit WHERE n >= 0`), "distinct jobs executed")
	assert.Equal(t, total, count(`SELECT count(DISTINCT n) FROM {s}.audit WHERE n >= 0`), "distinct args executed")
	assert.Equal(t, 0, count(`SELECT count(*) FROM {s}.jobs_archive WHERE status <> 'succeeded'`))
	assert.Equal(t, 0, count(`SELECT count(*) FROM {s}.jobs WHERE (payload->>'n')::int >= 0 OR kind <> 'bouncer'`), "no job left behind")
	assert.Equal(t, flaky, count(`SELECT count(*) FROM {s}.jobs_archive
		WHERE kind = 'bouncer_flaky' AND attempts = 2 AND jsonb_array_length(errors) = 1`), "flaky jobs retried once")
	assert.Equal(t, 0, count(`SELECT count(*) FROM {s}.jobs_archive WHERE kind = 'bouncer' AND attempts <> 1`))
	assert.Equal(t, inTx, count(`SELECT count(*) FROM {s}.orders o JOIN {s}.audit a ON a.n = 10000 + o.id`), "every order's job ran")
	assert.Equal(t, 0, count(`SELECT count(*) FROM {s}.jobs_archive WHERE kind = 'bouncer_rolled_back'`)+
		count(`SELECT count(*) FROM {s}.jobs WHERE kind = 'bouncer_rolled_back'`), "rolled-back enqueues left no job")
	assert.Equal(t, len(workers), count(`SELECT count(DISTINCT worker) FROM {s}.audit`), "every worker took part")
	// The maintenance leader was elected through the pooler, and one of the workers leads.
	var leader string
	require.NoError(t, direct.QueryRow(ctx, q(`SELECT leader_id FROM {s}.leader WHERE name = 'maintenance' AND expires_at > now()`)).Scan(&leader))
	assert.Contains(t, workers, leader, "the maintenance leader")

	// Inspection works through the pooler as well.
	var id int64
	require.NoError(t, direct.QueryRow(ctx, q(`SELECT min(id) FROM {s}.jobs_archive`)).Scan(&id))
	job, err := client.Get(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusSucceeded, job.Status)
	_, err = client.Stats(ctx)
	require.NoError(t, err)
	_, err = client.List(ctx, skiplock.ListParams{Queue: "bulk"})
	require.NoError(t, err)
	if t.Failed() {
		t.Logf("pgbouncer log:\n%s", pb.Log())
	}
}

var errRollback = errors.New("roll back on purpose")

// TestPgBouncer_NotifyThroughPoolerWakesDirectListener: the NOTIFY of an enqueue through
// the pooler reaches a worker whose LISTEN connection goes straight to Postgres.
func TestPgBouncer_NotifyThroughPoolerWakesDirectListener(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	pb := pgbouncer.Start(t, pgtest.URL(t), pgbouncer.Options{})
	pool := bouncerPool(t, pb, 4)
	require.NoError(t, skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}))
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Logger: testLogger()})
	require.NoError(t, err)
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{
		ListenURL:     pgtest.URL(t),
		PollInterval:  time.Hour, // only a notification can wake it
		SweepInterval: -1,
		Logger:        testLogger(),
	})
	require.NoError(t, err)
	started := make(chan int, 2)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[bouncerArgs]) error {
		started <- job.Args.N
		return nil
	}))
	runWorker(t, w)

	// The first job may be taken by the claim every start makes; once it has run, the
	// worker waits for a notification (or an hour).
	_, err = client.Enqueue(ctx, bouncerArgs{N: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, 1, <-started)
	_, err = client.Enqueue(ctx, bouncerArgs{N: 2}, nil)
	require.NoError(t, err)
	select {
	case n := <-started:
		assert.Equal(t, 2, n)
	case <-time.After(10 * time.Second):
		t.Fatalf("the second job did not start within 10s with an hour's poll: the notification sent through pgbouncer did not wake the worker\npgbouncer log:\n%s", pb.Log())
	}
}

// TestPgBouncer_DefaultExecModeBreaksUnderTransactionPooling shows why bouncerParams is
// needed: with pgx's default mode, two clients that share one server connection trip over
// each other's named prepared statements.
func TestPgBouncer_DefaultExecModeBreaksUnderTransactionPooling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	opts := pgbouncer.Options{PoolSize: 1}
	if pgbouncer.VersionAtLeast(t, 1, 21) {
		// Newer pgbouncers can track prepared statements; this test is about one that does not.
		opts.Settings = map[string]string{"max_prepared_statements": "0"}
	}
	pb := pgbouncer.Start(t, pgtest.URL(t), opts)
	const query = `SELECT $1::int + 1`

	run := func(params string) (errs []error) {
		var conns []*pgx.Conn
		for range 2 {
			c, err := pgx.Connect(ctx, pb.URL(params))
			require.NoError(t, err)
			t.Cleanup(func() { c.Close(context.Background()) })
			conns = append(conns, c)
		}
		for range 2 {
			for _, c := range conns {
				var n int
				errs = append(errs, c.QueryRow(ctx, query, 1).Scan(&n))
			}
		}
		return errs
	}

	var broke bool
	for _, err := range run("") {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == "42P05" || pgErr.Code == "26000") {
			broke = true // prepared statement already exists / does not exist
		}
	}
	assert.True(t, broke, "pgx's default cache_statement mode was expected to fail behind %s in transaction mode", pb.Version)
	for _, err := range run(bouncerParams) {
		assert.NoError(t, err, bouncerParams)
	}
}

// group runs functions in goroutines and returns the first error, like errgroup.
type group struct {
	wg   sync.WaitGroup
	once sync.Once
	err  error
}

func (g *group) Go(fn func() error) {
	g.wg.Go(func() {
		if err := fn(); err != nil {
			g.once.Do(func() { g.err = err })
		}
	})
}

func (g *group) Wait() error {
	g.wg.Wait()
	return g.err
}
