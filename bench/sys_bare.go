package main

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// bare is the reference, not a queue: plain SQL on a table with an identity key,
// the same JSON payload and two timestamps. It gives the floors the queues are
// measured against on the same server in the same run:
//
//   - single: INSERT INTO bare_jobs (payload) VALUES ($1), one statement and one
//     commit per call, the rate one commit per job allows;
//   - bulk: one COPY of the payloads into bare_jobs in a transaction;
//   - latency: the least a durable queue with notifications does per job. The
//     insert and its pg_notify commit together (one statement); a listener
//     receives the job's id and marks it started with an UPDATE by primary key,
//     its own commit, and the handler starts when that UPDATE returns. No claim
//     query, no queue, no lease: two commits and a notification.
//   - drain and storm: the least a durable queue does per job when it works off a
//     backlog. bareLoops loops each claim up to bareBatch queued jobs in one
//     statement (UPDATE by primary key of the rows a FOR UPDATE SKIP LOCKED scan
//     of the queued-rows index picked, with its commit), run them, and record the
//     batch's outcomes in one statement and one commit: DELETE for a success, back
//     to queued for a failed first attempt (storm). No lease, no fence, no
//     priorities, no archive, no notifications: two commits per batch. A loop
//     whose claim found nothing waits 1 ms, doubling up to 20 ms, before the next.
//
// The table has the one index a queue cannot do without, bare_jobs_queued (id)
// WHERE started_at IS NULL, the queued rows in order; every floor maintains it.
func init() { register("bare", func() System { return &bareSystem{} }) }

type bareSystem struct {
	pool     *pgxpool.Pool
	listened atomic.Bool // Insert notifies: the latency floor's listener runs
	queue    atomic.Bool // the drain floor's loops run: a job is final when its row is gone

	cancel context.CancelFunc
	wg     sync.WaitGroup
	runErr error // the listener's error; read after wg.Wait
}

const bareChannel = "bare_jobs"

func (b *bareSystem) Name() string        { return "bare" }
func (b *bareSystem) HotTable() string    { return "bare_jobs" }
func (b *bareSystem) JobTables() []string { return []string{"bare_jobs"} }
func (b *bareSystem) Config() string {
	return "plain SQL on bare_jobs (id identity, payload jsonb, created_at default now(), started_at): single: INSERT per call, autocommit; bulk: COPY in one transaction; latency: INSERT + pg_notify in one statement, a listener marks the job started with UPDATE … WHERE id = $1 (autocommit); drain, storm: " + strconv.Itoa(bareLoops) + " loops, each claims up to " + strconv.Itoa(bareBatch) + " queued rows (UPDATE of the rows a FOR UPDATE SKIP LOCKED scan of a partial index picked) and records the batch's outcomes in one statement (DELETE on success, back to queued on a first failure)"
}

func (b *bareSystem) Setup(ctx context.Context, pool *pgxpool.Pool) error {
	b.pool = pool
	_, err := pool.Exec(ctx, `CREATE TABLE bare_jobs (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		payload jsonb NOT NULL,
		created_at timestamptz NOT NULL DEFAULT now(),
		started_at timestamptz,
		attempts int NOT NULL DEFAULT 0);
		CREATE INDEX bare_jobs_queued ON bare_jobs (id) WHERE started_at IS NULL`)
	return err
}

// The drain floor's shape: loops claiming at once, and the most jobs one claim takes.
const (
	bareLoops = 4
	bareBatch = 100
)

// bareClaimSQL claims up to $1 queued jobs, oldest first.
const bareClaimSQL = `UPDATE bare_jobs SET started_at = now(), attempts = attempts + 1
WHERE id = ANY (ARRAY(SELECT id FROM bare_jobs WHERE started_at IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED))
RETURNING id, attempts, payload`

// bareDoneSQL records a batch's outcomes: $1 succeeded (deleted), $2 failed and queued again.
const bareDoneSQL = `WITH ok AS (DELETE FROM bare_jobs WHERE id = ANY ($1)),
failed AS (UPDATE bare_jobs SET started_at = NULL WHERE id = ANY ($2))
SELECT 1`

func (b *bareSystem) Reset(ctx context.Context) error {
	_, err := b.pool.Exec(ctx, "TRUNCATE bare_jobs")
	return err
}

func (b *bareSystem) Bulk(n int, runAt time.Time, queues int) func(context.Context) error {
	if !runAt.IsZero() || queues > 1 {
		return func(context.Context) error { return errUnsupported }
	}
	rows := make([][]any, n)
	for i := range rows {
		rows[i] = []any{NoopArgs{}}
	}
	return func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"bare_jobs"}, []string{"payload"}, pgx.CopyFromRows(rows))
			return err
		})
	}
}

func (b *bareSystem) Insert(ctx context.Context, args NoopArgs) error {
	if b.listened.Load() {
		_, err := b.pool.Exec(ctx, `WITH ins AS (INSERT INTO bare_jobs (payload) VALUES ($1) RETURNING id)
			SELECT pg_notify('`+bareChannel+`', id::text) FROM ins`, args)
		return err
	}
	_, err := b.pool.Exec(ctx, `INSERT INTO bare_jobs (payload) VALUES ($1)`, args)
	return err
}

// Start runs the latency floor's listener, or the drain floor's loops.
func (b *bareSystem) Start(ctx context.Context, sink *Sink, spec Spec) error {
	switch {
	case spec.Queues > 1:
		return errUnsupported
	case spec.Backlog:
		return b.startLoops(ctx, sink, spec.FailOnce)
	case !spec.OneAtATime || spec.FailOnce:
		return errUnsupported
	}
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+bareChannel); err != nil {
		conn.Release()
		return err
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.cancel = cancel
	b.listened.Store(true)
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer func() {
			// The connection still listens: close it rather than return it to the pool.
			_ = conn.Conn().Close(context.Background())
			conn.Release()
		}()
		for {
			n, err := conn.Conn().WaitForNotification(lctx)
			if err != nil {
				if lctx.Err() == nil {
					b.runErr = err
				}
				return
			}
			id, err := strconv.ParseInt(n.Payload, 10, 64)
			if err != nil {
				b.runErr = err
				return
			}
			var payload []byte
			if err := b.pool.QueryRow(lctx, `UPDATE bare_jobs SET started_at = now() WHERE id = $1 RETURNING payload`, id).Scan(&payload); err != nil {
				if lctx.Err() == nil {
					b.runErr = err
				}
				return
			}
			var a NoopArgs
			if err := json.Unmarshal(payload, &a); err != nil {
				b.runErr = err
				return
			}
			sink.Handle(a)
		}
	}()
	return nil
}

// startLoops runs the drain floor: bareLoops loops of claim, run, record.
func (b *bareSystem) startLoops(ctx context.Context, sink *Sink, failOnce bool) error {
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.cancel = cancel
	b.queue.Store(true)
	var once sync.Once
	fail := func(err error) {
		if lctx.Err() == nil {
			once.Do(func() { b.runErr = err })
			cancel()
		}
	}
	for range bareLoops {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			var ok, failed []int64
			idle := time.Duration(0) // the wait after a claim found nothing: 1 ms, doubling to 20 ms
			for lctx.Err() == nil {
				rows, err := b.pool.Query(lctx, bareClaimSQL, bareBatch)
				if err != nil {
					fail(err)
					return
				}
				ok, failed = ok[:0], failed[:0]
				var (
					id       int64
					attempts int
					payload  []byte
				)
				_, err = pgx.ForEachRow(rows, []any{&id, &attempts, &payload}, func() error {
					var a NoopArgs
					if err := json.Unmarshal(payload, &a); err != nil {
						return err
					}
					sink.Handle(a)
					if failOnce && attempts == 1 {
						failed = append(failed, id)
					} else {
						ok = append(ok, id)
					}
					return nil
				})
				if err != nil {
					fail(err)
					return
				}
				if len(ok)+len(failed) == 0 {
					idle = min(max(2*idle, time.Millisecond), 20*time.Millisecond)
					_ = sleep(lctx, idle)
					continue
				}
				idle = 0
				if _, err := b.pool.Exec(lctx, bareDoneSQL, ok, failed); err != nil {
					fail(err)
					return
				}
			}
		}()
	}
	return nil
}

func (b *bareSystem) Stop(context.Context) error {
	if b.cancel == nil {
		return nil
	}
	b.listened.Store(false)
	b.queue.Store(false)
	b.cancel()
	b.wg.Wait()
	b.cancel = nil
	return b.runErr
}

func (b *bareSystem) Pending(ctx context.Context) (int64, error) {
	var n int64
	if b.queue.Load() {
		err := b.pool.QueryRow(ctx, `SELECT count(*) FROM bare_jobs`).Scan(&n)
		return n, err
	}
	err := b.pool.QueryRow(ctx, `SELECT count(*) FROM bare_jobs WHERE started_at IS NULL`).Scan(&n)
	return n, err
}
