package skiplock

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/claim"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// A keyed queue looks for its jobs without a key only among its first 64 queued jobs (in
// claim order), as docs/flow-control.md says: a job without a key behind 100 keyed jobs is claimed
// by the claim that follows the 37th keyed one, and not before.
func TestFlow_KeyedQueueLooksForJobsWithoutAKeyAmongTheFirst64(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	require.NoError(t, Migrate(ctx, pool, MigrateConfig{Schema: schema}))
	c, err := NewClient(pool, Config{Schema: schema})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, pgutil.Render(schema, `
		INSERT INTO {s}.jobs (queue, kind, partition_key, run_at)
		SELECT 'keyed', 'k', 'key' || g, now() - interval '1 hour' + g * interval '1 ms' FROM generate_series(1, 100) g;
		INSERT INTO {s}.jobs (queue, kind, run_at) VALUES ('keyed', 'nokey', now() - interval '1 minute');`))
	require.NoError(t, err)
	f := claim.NewFlowClaimer(c.db, time.Minute)
	limits := QueueLimits{KeyConcurrency: 1}
	for claim := 1; claim <= 101; claim++ {
		jobs, _, err := f.Claim(ctx, "keyed", limits, 1, "w")
		require.NoError(t, err)
		require.Len(t, jobs, 1, "claim %d", claim)
		if jobs[0].Row.Kind == "nokey" {
			require.Equal(t, 38, claim, "the claim that took the job without a key")
			return
		}
	}
	t.Fatal("the job without a key was never claimed")
}

// A key's bucket (KeyRate) starts full, is spent by one token per start, refills by the
// database's clock, and is the key's own: another key, and the jobs without a key, have
// theirs. A queue without KeyRate writes no bucket. The refill is driven by moving the
// bucket's time back, not by waiting.
func TestFlow_KeyRateBucketStartsFullAndRefillsPerKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	require.NoError(t, Migrate(ctx, pool, MigrateConfig{Schema: schema}))
	c, err := NewClient(pool, Config{Schema: schema})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, pgutil.Render(schema, `
		INSERT INTO {s}.jobs (queue, kind, partition_key, run_at)
		SELECT 'keyed', 'k', CASE g % 3 WHEN 0 THEN 'a' WHEN 1 THEN 'b' END, now() - interval '1 hour'
		FROM generate_series(1, 60) g;
		INSERT INTO {s}.jobs (queue, kind, partition_key, run_at)
		SELECT 'other', 'k', 'a', now() - interval '1 hour' FROM generate_series(1, 5) g`))
	require.NoError(t, err)
	f := claim.NewFlowClaimer(c.db, time.Minute)
	limits := QueueLimits{KeyRate: 5, KeyRatePeriod: time.Hour} // a token every 12 minutes
	perKey := func(jobs []claim.ClaimedJob) map[string]int {
		ids := make([]int64, len(jobs))
		for i, j := range jobs {
			ids[i] = j.Row.ID
		}
		out := map[string]int{}
		rows, err := pool.Query(ctx, pgutil.Render(schema, `SELECT coalesce(partition_key, '') FROM {s}.jobs WHERE id = ANY($1)`), ids)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var k string
			require.NoError(t, rows.Scan(&k))
			out[k]++
		}
		require.NoError(t, rows.Err())
		return out
	}

	jobs, _, err := f.Claim(ctx, "keyed", limits, 50, "w")
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"a": 5, "b": 5, "": 5}, perKey(jobs), "a full bucket per key, the jobs without a key sharing one")
	jobs, _, err = f.Claim(ctx, "keyed", limits, 50, "w")
	require.NoError(t, err)
	assert.Empty(t, jobs, "every bucket is spent")

	// 12 minutes later by the buckets' clock: one token for key a only.
	_, err = pool.Exec(ctx, pgutil.Render(schema, `UPDATE {s}.queue_key_flow SET refilled_at = refilled_at - interval '12 minutes 1 second'
		WHERE queue = 'keyed' AND partition_key = 'a'`))
	require.NoError(t, err)
	jobs, _, err = f.Claim(ctx, "keyed", limits, 50, "w")
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"a": 1}, perKey(jobs), "one token refilled, for key a")

	// A keyed queue without KeyRate reads and writes no bucket.
	jobs, _, err = f.Claim(ctx, "other", QueueLimits{KeyConcurrency: 1}, 5, "w")
	require.NoError(t, err)
	assert.Len(t, jobs, 1)
	var n int
	require.NoError(t, pool.QueryRow(ctx, pgutil.Render(schema, `SELECT count(*) FROM {s}.queue_key_flow WHERE queue = 'other'`)).Scan(&n))
	assert.Zero(t, n, "buckets of a queue without KeyRate")
}

// A claim of a queue with per-dimension limits passes over due jobs whose keys are full
// and takes the jobs behind them, looking through at most its budget plus
// claim.DimLookahead jobs, as docs/flow-control.md says: a job whose key has room behind
// 60 jobs of a full key starts, one behind 100 waits.
func TestFlow_DimensionClaimLooksPastFullKeysUpToItsLookahead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	require.NoError(t, Migrate(ctx, pool, MigrateConfig{Schema: schema}))
	c, err := NewClient(pool, Config{Schema: schema})
	require.NoError(t, err)
	for queue, behind := range map[string]int{"near": 60, "far": 100} {
		_, err = pool.Exec(ctx, pgutil.Render(schema, `
			INSERT INTO {s}.jobs (queue, kind, concurrency_keys, run_at)
			SELECT $1, CASE WHEN g > $2::int THEN 'us' ELSE 'eu' END,
				CASE WHEN g > $2::int THEN '{"region": "us"}' ELSE '{"region": "eu"}' END::jsonb,
				now() - interval '1 hour' + g * interval '1 ms'
			FROM generate_series(0, $2::int + 1) g`), queue, behind)
		require.NoError(t, err)
	}
	f := claim.NewFlowClaimer(c.db, time.Minute)
	limits := QueueLimits{ConcurrencyKeys: map[string]int{"region": 1}}
	for queue, want := range map[string]int{"near": 1, "far": 0} {
		jobs, _, err := f.Claim(ctx, queue, limits, 1, "w")
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		assert.Equal(t, "eu", jobs[0].Row.Kind, "%s: the first job", queue)
		began := time.Now()
		jobs, _, err = f.Claim(ctx, queue, limits, 1, "w")
		t.Logf("%s: a claim past the full key took %s", queue, time.Since(began))
		require.NoError(t, err)
		require.Len(t, jobs, want, "%s: the job whose key has room", queue)
		if want == 1 {
			assert.Equal(t, "us", jobs[0].Row.Kind)
		}
	}
	assert.Equal(t, 64, claim.DimLookahead, "the lookahead docs/flow-control.md gives")
}

// The slot claim (a queue whose only limit is Concurrency) walks the queue's priorities as
// the plain claim does: its scan of due jobs starts at each priority's first queued job,
// so it steps over the entries claimed jobs leave at the front of the claim index (until
// the next VACUUM) once, not twice. The test explains the slot claim the flow claimer
// sent, with its arguments.
func TestFlow_SlotClaimStepsOverClaimedEntriesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	rec := &slotClaimRecorder{}
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = rec
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, Migrate(ctx, pool, MigrateConfig{Schema: schema}))
	_, err = pool.Exec(ctx, pgutil.Render(schema, `
		INSERT INTO {s}.jobs (queue, kind, run_at) SELECT 'slotted', 'k', now() - interval '1 hour' FROM generate_series(1, 40000);
		UPDATE {s}.jobs SET status = 'running', locked_at = now(), locked_by = 'w0', attempts = 1, fence = 1;
		INSERT INTO {s}.jobs (queue, kind) SELECT 'slotted', 'k' FROM generate_series(1, 50);
		INSERT INTO {s}.queue_slots (queue, slot) SELECT 'slotted', g FROM generate_series(0, 99) g;
		ANALYZE {s}.jobs`))
	require.NoError(t, err)
	f := claim.NewFlowClaimer(pgutil.DB{Pool: pool, Schema: schema}, time.Minute)
	jobs, _, err := f.Claim(ctx, "slotted", QueueLimits{Concurrency: 100}, 10, "w1")
	require.NoError(t, err)
	require.Len(t, jobs, 10)
	sql, args := rec.last()
	require.NotEmpty(t, sql, "the slot claim was sent")

	top := analyzed(t, pool, sql, args...)
	require.Equal(t, 10.0, top["Actual Rows"], "claims 10 more jobs")
	scan, found := dueScanBuffers(top)
	require.True(t, found, "the slot claim's plan has a LockRows node over jobs_claim_idx")
	t.Logf("the scan of due jobs read %v buffers, the slot claim %v", scan, planBuffers(top))
	// Stepping over the 40,000 entries again read 245 buffers or more (several times that
	// while the entries are not yet marked dead); locking the 10 jobs reads about 15. The
	// margin absorbs what a busy machine adds.
	assert.Less(t, scan, 120.0, "buffers read by the scan of due jobs (the whole claim read %v)", planBuffers(top))
}

// slotClaimRecorder is a pool's tracer that keeps the last slot claim (the statement of a
// batch that writes queue_slots) its batches sent, with its arguments.
type slotClaimRecorder struct {
	mu   sync.Mutex
	sql  string
	args []any
}

func (r *slotClaimRecorder) last() (string, []any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sql, r.args
}

func (r *slotClaimRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (r *slotClaimRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *slotClaimRecorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (r *slotClaimRecorder) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if strings.Contains(d.SQL, "queue_slots") {
		r.mu.Lock()
		r.sql, r.args = d.SQL, d.Args
		r.mu.Unlock()
	}
}

func (r *slotClaimRecorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
