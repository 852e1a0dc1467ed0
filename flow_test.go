package skiplock_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// flowArgs is a job of the flow-control tests: it records its run in the audit table.
type flowArgs struct {
	N     int    `json:"n"`
	Key   string `json:"key,omitempty"`
	Sleep int    `json:"sleep_ms,omitempty"` // the most the handler sleeps; it picks at random below
	// Keys are the job's concurrency keys (flow_keys_test.go).
	Keys map[string]string `json:"keys,omitempty"`
}

func (flowArgs) Kind() string { return "flow" }

// EnqueueOptions takes the partition key and the concurrency keys from the args, as a
// user's args type would.
func (a flowArgs) EnqueueOptions() skiplock.EnqueueOptions {
	return skiplock.EnqueueOptions{Queue: "limited", PartitionKey: a.Key, ConcurrencyKeys: a.Keys}
}

// claimFailures counts the worker's "claim failed" warnings, and remembers their errors:
// the flow claims must never fail at READ COMMITTED (no serialization failures, no
// deadlocks).
type claimFailures struct {
	n    atomic.Int64
	mu   sync.Mutex
	errs []string
}

func (c *claimFailures) Enabled(context.Context, slog.Level) bool { return true }
func (c *claimFailures) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "claim failed") {
		c.n.Add(1)
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "err" {
				c.mu.Lock()
				c.errs = append(c.errs, a.Value.String())
				c.mu.Unlock()
			}
			return true
		})
	}
	return nil
}
func (c *claimFailures) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *claimFailures) WithGroup(string) slog.Handler      { return c }

// The flow tests that run several workers do not call t.Parallel: each keeps a few
// workers claiming back to back for seconds, and beside the parallel tests that load (and
// its stream of short transactions) kept TestSweeper_VacuumsBloatedJobsTable's VACUUM
// from giving back the heap's empty pages. Run first and alone, they take about 20 s.

// flowSetup creates the audit table the handlers write: one row per execution, with the
// database's clock at the handler's start and end.
func flowSetup(t *testing.T) *bundle {
	t.Helper()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.audit (
		job_id bigint, attempt int, key text, keys jsonb, worker text,
		started timestamptz NOT NULL, finished timestamptz)`))
	require.NoError(t, err)
	return b
}

// startFlowWorkers starts n workers, each with its own pool and client, working the
// "limited" queue with slots slots and the given limits, with handlers that write the
// audit table. It returns a stop function that stops them all.
func startFlowWorkers(t *testing.T, b *bundle, n, slots int, limits skiplock.QueueLimits, failures *claimFailures) (stop func()) {
	t.Helper()
	var stops []func()
	for i := range n {
		pool := newPool(t, int32(slots/2+6))
		client, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema, Logger: testLogger()})
		require.NoError(t, err)
		w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{
			ID:           fmt.Sprintf("w%d", i),
			Queues:       map[string]skiplock.QueueConfig{"limited": {MaxWorkers: slots, Limits: limits}},
			PollInterval: 200 * time.Millisecond,
			Logger:       slog.New(failures),
		})
		require.NoError(t, err)
		require.NoError(t, skiplock.Handle(w, auditHandler(b, pool)))
		stops = append(stops, runWorker(t, w))
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}

// auditHandler records the execution's start, sleeps up to Sleep ms, records its end.
func auditHandler(b *bundle, pool *pgxpool.Pool) func(ctx context.Context, job *skiplock.Job[flowArgs]) error {
	startSQL := b.q(`INSERT INTO {s}.audit (job_id, attempt, key, keys, worker, started)
		VALUES ($1, $2, $3, $5, $4, clock_timestamp())`)
	endSQL := b.q(`UPDATE {s}.audit SET finished = clock_timestamp() WHERE job_id = $1 AND attempt = $2`)
	return func(ctx context.Context, job *skiplock.Job[flowArgs]) error {
		if _, err := pool.Exec(ctx, startSQL, job.ID, job.Attempts, job.Args.Key, job.LockedBy, job.Args.Keys); err != nil {
			return err
		}
		if job.Args.Sleep > 0 { // the job's work, of random length so claims interleave
			work(ctx, time.Duration(rand.IntN(job.Args.Sleep+1))*time.Millisecond)
		}
		// The end must be recorded even through a passing connection error: an execution
		// without an end would count as running for ever.
		var err error
		for try := 0; try < 50; try++ {
			if _, err = pool.Exec(context.WithoutCancel(ctx), endSQL, job.ID, job.Attempts); err == nil {
				return nil
			}
			time.Sleep(100 * time.Millisecond) // a pause between retries, only after an error
		}
		return err
	}
}

// maxOverlapSQL is the most executions in the audit running at one instant, per key
// (or over all when grouped by a constant): a +1 at each start, a -1 at each end, summed
// in time order (an end before a start at the same instant). An execution with no end
// (its worker was killed) ends at $1.
const maxOverlapSQL = `SELECT coalesce(max(running), 0) FROM (
	SELECT sum(d) OVER (PARTITION BY g ORDER BY t, d ROWS UNBOUNDED PRECEDING) AS running FROM (
		SELECT %[1]s AS g, started AS t, 1 AS d FROM {s}.audit
		UNION ALL
		SELECT %[1]s, coalesce(finished, $1::timestamptz), -1 FROM {s}.audit
	) e
) x`

func (b *bundle) maxOverlap(t *testing.T, groupBy string, killedAt time.Time) int {
	t.Helper()
	return b.count(t, fmt.Sprintf(maxOverlapSQL, groupBy), killedAt)
}

func enqueueFlow(t *testing.T, b *bundle, n int, key func(i int) string, sleepMs int) {
	t.Helper()
	params := make([]skiplock.EnqueueParams, n)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: flowArgs{N: i, Key: key(i), Sleep: sleepMs}}
	}
	_, err := b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
}

func waitDrained(t *testing.T, b *bundle, n int) {
	t.Helper()
	eventually(t, 4*time.Minute, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive`) == n
	}, "all %d jobs done", n)
}

func TestFlow_GlobalLimitIsNeverExceededAcrossWorkers(t *testing.T) {
	b := flowSetup(t)
	const jobs, limit = 1500, 7
	enqueueFlow(t, b, jobs, func(int) string { return "" }, 3)
	var failures claimFailures
	// Six workers with 3 slots each: 18 slots for a limit of 7, which no worker can reach
	// alone, so the limit is kept across workers or not at all. Short jobs keep their
	// claims overlapping.
	stop := startFlowWorkers(t, b, 6, 3, skiplock.QueueLimits{Concurrency: limit}, &failures)
	waitDrained(t, b, jobs)
	stop()

	assert.Equal(t, jobs, b.count(t, `SELECT count(DISTINCT job_id) FROM {s}.audit WHERE finished IS NOT NULL`))
	got := b.maxOverlap(t, "0", time.Time{})
	t.Logf("most executions at once: %d, limit %d", got, limit)
	assert.LessOrEqual(t, got, limit, "the most executions at once (audit) must never pass the limit")
	assert.Greater(t, got, 1, "executions ran side by side")
	assert.Greater(t, b.count(t, `SELECT count(DISTINCT worker) FROM {s}.audit`), 1, "several workers took part")
	assert.Zero(t, failures.n.Load(), "claims failed: %v", failures.errs)
}

func TestFlow_KeyLimitIsNeverExceededPerKey(t *testing.T) {
	b := flowSetup(t)
	const keys, perKey, limit = 40, 12, 2
	enqueueFlow(t, b, keys*perKey, func(i int) string { return fmt.Sprintf("tenant-%02d", i%keys) }, 8)
	var failures claimFailures
	stop := startFlowWorkers(t, b, 3, 20, skiplock.QueueLimits{KeyConcurrency: limit}, &failures)
	waitDrained(t, b, keys*perKey)
	stop()

	oneKey, all := b.maxOverlap(t, "key", time.Time{}), b.maxOverlap(t, "0", time.Time{})
	t.Logf("most executions at once: %d of one key (limit %d), %d in all", oneKey, limit, all)
	assert.LessOrEqual(t, oneKey, limit, "the most executions of one key at once")
	assert.Greater(t, all, limit, "keys run side by side")
	assert.Zero(t, failures.n.Load(), "claims failed: %v", failures.errs)
}

func TestFlow_GlobalAndKeyLimitsTogether(t *testing.T) {
	b := flowSetup(t)
	const keys, perKey = 30, 10
	enqueueFlow(t, b, keys*perKey, func(i int) string {
		if i%10 == 9 {
			return "" // some jobs have no key: they share one key of their own
		}
		return fmt.Sprintf("k%d", i%keys)
	}, 6)
	var failures claimFailures
	// 12 slots in three workers for a global limit of 9: no worker reaches it alone.
	stop := startFlowWorkers(t, b, 3, 4, skiplock.QueueLimits{Concurrency: 9, KeyConcurrency: 2, Fair: true}, &failures)
	waitDrained(t, b, keys*perKey)
	stop()

	oneKey, all := b.maxOverlap(t, "key", time.Time{}), b.maxOverlap(t, "0", time.Time{})
	t.Logf("most executions at once: %d of one key (limit 2), %d in all (limit 9)", oneKey, all)
	assert.LessOrEqual(t, oneKey, 2, "per key")
	assert.LessOrEqual(t, all, 9, "global")
	assert.Greater(t, all, 2, "keys ran side by side")
	assert.Zero(t, failures.n.Load(), "claims failed: %v", failures.errs)
}

func TestFlow_FairSharingServesASmallTenantPastABigBacklog(t *testing.T) {
	b := flowSetup(t)
	const big, small = 3000, 30
	enqueueFlow(t, b, big, func(int) string { return "a" }, 0)
	var failures claimFailures
	stop := startFlowWorkers(t, b, 2, 10, skiplock.QueueLimits{Fair: true}, &failures)
	eventually(t, time.Minute, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.audit`) >= 200
	}, "tenant a under way")
	var bAt time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT clock_timestamp()`).Scan(&bAt))
	enqueueFlow(t, b, small, func(int) string { return "b" }, 0)
	eventually(t, time.Minute, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.audit WHERE key = 'b'`) == small
	}, "all of tenant b started")
	stop()

	// Tenant a's starts between b's enqueue and b's last start: round-robin gives about
	// one a per b, plus what was claimed or in flight when b arrived.
	aMeanwhile := b.count(t, `SELECT count(*) FROM {s}.audit
		WHERE key = 'a' AND started > $1 AND started < (SELECT max(started) FROM {s}.audit WHERE key = 'b')`, bAt)
	assert.LessOrEqual(t, aMeanwhile, 2*small+2*10, "a's backlog must not starve b")
	assert.Less(t, b.count(t, `SELECT count(*) FROM {s}.audit WHERE key = 'a'`), big, "b done before a")
	assert.Zero(t, failures.n.Load(), "claims failed: %v", failures.errs)
}

func TestFlow_RateLimitBoundsStarts(t *testing.T) {
	b := flowSetup(t)
	const rate = 40 // per 500ms: 80 starts/s
	const period = 500 * time.Millisecond
	enqueueFlow(t, b, 2000, func(int) string { return "" }, 0)
	var t0 time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT clock_timestamp()`).Scan(&t0))
	var failures claimFailures
	stop := startFlowWorkers(t, b, 3, 20, skiplock.QueueLimits{Rate: rate, RatePeriod: period}, &failures)
	eventually(t, time.Minute, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.audit`) >= 240
	}, "240 starts")
	stop()

	// The bucket starts empty and refills at rate per period: by any instant s, at most
	// rate * (s - t0) / period jobs can have taken a token. A handler starts after its
	// token was taken, so the audit's i-th start must respect the bound too.
	over := b.count(t, `SELECT count(*) FROM (
		SELECT started, row_number() OVER (ORDER BY started) AS i FROM {s}.audit) s
		WHERE i > floor($1::float8 * extract(epoch FROM started - $2::timestamptz) / $3::float8) + 1`,
		float64(rate), t0, period.Seconds())
	assert.Zero(t, over, "starts ahead of the token bucket")
	// And the rate is used: over the run, at least half of rate per period, on a machine
	// as busy as CI's (the race detector, other test packages on two cores: 54/s was seen
	// there). The bucket check above bounds the rate from above, exactly.
	var n int
	var secs float64
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT count(*), extract(epoch FROM max(started) - min(started))
		FROM {s}.audit`)).Scan(&n, &secs))
	perSec := float64(n-1) / secs
	t.Logf("%d starts in %.2fs: %.1f/s for a limit of %.1f/s", n, secs, perSec, rate/period.Seconds())
	assert.GreaterOrEqual(t, perSec, 0.5*rate/period.Seconds(), "starts per second")
	assert.Zero(t, failures.n.Load(), "claims failed: %v", failures.errs)
}

func TestFlow_LimitsChangeAtRunTimeOnEveryWorker(t *testing.T) {
	b := flowSetup(t)
	enqueueFlow(t, b, 3000, func(int) string { return "" }, 30)
	var failures claimFailures
	stop := startFlowWorkers(t, b, 2, 10, skiplock.QueueLimits{Concurrency: 2}, &failures)
	running := func() int {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'running'`)
	}
	eventually(t, time.Minute, func() bool { return running() == 2 }, "2 running")

	require.NoError(t, b.client.SetQueueLimits(b.ctx, "limited", skiplock.QueueLimits{Concurrency: 6}))
	set, err := b.client.QueueLimitsSet(b.ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]skiplock.QueueLimits{"limited": {Concurrency: 6}}, set)
	eventually(t, 30*time.Second, func() bool { return running() >= 5 }, "the raised limit applies")
	var mark time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT clock_timestamp()`).Scan(&mark))

	require.NoError(t, b.client.ResetQueueLimits(b.ctx, "limited"))
	eventually(t, 30*time.Second, func() bool { return running() <= 2 }, "back to the declared limit")
	stop()

	assert.LessOrEqual(t, b.maxOverlap(t, "0", time.Time{}), 6)
	assert.Zero(t, failures.n.Load(), "claims failed: %v", failures.errs)
}

// A slotted queue (only Concurrency) whose claims were cut by its slots or found no due
// job must still find the jobs that become due later, with no enqueue to notify it: a
// snoozed job, a job retried after a backoff, a job scheduled for later. The claim loops
// used to leave such a queue out of the fallback poll for good, waiting for a finished
// job of their own that never came.
func TestFlow_SlottedQueueRunsJobsThatBecomeDueLater(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w, err := skiplock.NewWorker(b.client, skiplock.WorkerConfig{
		Queues:       map[string]skiplock.QueueConfig{"limited": {MaxWorkers: 4, Limits: skiplock.QueueLimits{Concurrency: 2}}},
		PollInterval: 100 * time.Millisecond,
		RetryPolicy:  skiplock.BackoffPolicy{Base: 100 * time.Millisecond, Max: 200 * time.Millisecond},
		Logger:       testLogger(),
	})
	require.NoError(t, err)
	var runs sync.Map // job id -> *atomic.Int64
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[flowArgs]) error {
		n, _ := runs.LoadOrStore(job.ID, new(atomic.Int64))
		if n.(*atomic.Int64).Add(1) > 1 {
			return nil
		}
		switch job.Args.N {
		case 0:
			return skiplock.Snooze(300 * time.Millisecond)
		case 1:
			return fmt.Errorf("fails once")
		}
		return nil
	}))
	stop := runWorker(t, w)
	defer stop()
	for n := range 2 {
		_, err = b.client.Enqueue(b.ctx, flowArgs{N: n}, nil)
		require.NoError(t, err)
	}
	// Enqueued for later while the queue is idle: no notification comes when it is due.
	_, err = b.client.Enqueue(b.ctx, flowArgs{N: 2}, &skiplock.EnqueueOptions{Queue: "limited", RunAt: time.Now().Add(500 * time.Millisecond)})
	require.NoError(t, err)
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive`) == 3
	}, "the snoozed, the retried and the scheduled job succeeded")
}

func TestFlow_InvalidLimitsAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, l := range []skiplock.QueueLimits{
		{Concurrency: -1}, {KeyConcurrency: -2}, {Rate: -3}, {Rate: 1, RatePeriod: -time.Second},
		{Rate: 1, RatePeriod: time.Microsecond}, {KeyRate: -4}, {KeyRate: 1, KeyRatePeriod: -time.Second},
		{KeyRate: 1, KeyRatePeriod: time.Microsecond},
	} {
		_, err := skiplock.NewWorker(b.client, skiplock.WorkerConfig{Queues: map[string]skiplock.QueueConfig{"q": {Limits: l}}})
		assert.ErrorIs(t, err, skiplock.ErrInvalidLimits, "%+v", l)
		assert.ErrorIs(t, b.client.SetQueueLimits(b.ctx, "q", l), skiplock.ErrInvalidLimits, "%+v", l)
	}
	assert.ErrorIs(t, b.client.SetQueueLimits(b.ctx, "no such queue!", skiplock.QueueLimits{}), skiplock.ErrInvalidQueue)
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.queue_limits`), "no limits stored")
	_, err := b.client.Enqueue(b.ctx, noopArgs{}, &skiplock.EnqueueOptions{PartitionKey: strings.Repeat("k", 256)})
	assert.ErrorIs(t, err, skiplock.ErrInvalidOptions)
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs`), "nothing written")
}

// A Concurrency above 100000 (the queue would keep a slot row per unit) and a rate
// period with a fraction of a millisecond (the table keeps whole milliseconds) are
// refused the same way whether declared or set at run time, naming the field; the
// bounds themselves pass, and a period set at run time reads back exactly.
func TestFlow_LimitsOutOfRangeAreRefusedNamingTheField(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct {
		l     skiplock.QueueLimits
		field string
	}{
		{skiplock.QueueLimits{Concurrency: 100_001}, "Concurrency 100001 is above 100000"},
		{skiplock.QueueLimits{Concurrency: math.MaxInt32}, "Concurrency 2147483647 is above 100000"},
		{skiplock.QueueLimits{Rate: 10, RatePeriod: 1999 * time.Microsecond}, "RatePeriod 1.999ms is not a whole number of milliseconds"},
		{skiplock.QueueLimits{Rate: 10, RatePeriod: time.Second + time.Nanosecond}, "RatePeriod 1.000000001s"},
		{skiplock.QueueLimits{KeyRate: 10, KeyRatePeriod: 2500 * time.Microsecond}, "KeyRatePeriod 2.5ms is not a whole number of milliseconds"},
	} {
		_, err := skiplock.NewWorker(b.client, skiplock.WorkerConfig{Queues: map[string]skiplock.QueueConfig{"q": {Limits: c.l}}})
		assert.ErrorIs(t, err, skiplock.ErrInvalidLimits, "%+v", c.l)
		assert.ErrorContains(t, err, c.field)
		err = b.client.SetQueueLimits(b.ctx, "q", c.l)
		assert.ErrorIs(t, err, skiplock.ErrInvalidLimits, "%+v", c.l)
		assert.ErrorContains(t, err, c.field)
	}
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.queue_limits`), "no limits stored")

	ok := skiplock.QueueLimits{Concurrency: 100_000}
	_, err := skiplock.NewWorker(b.client, skiplock.WorkerConfig{Queues: map[string]skiplock.QueueConfig{"q": {Limits: ok}}})
	require.NoError(t, err)
	require.NoError(t, b.client.SetQueueLimits(b.ctx, "q", ok))
	rate := skiplock.QueueLimits{Rate: 10, RatePeriod: 1999 * time.Millisecond, KeyRate: 3, KeyRatePeriod: 2 * time.Millisecond}
	require.NoError(t, b.client.SetQueueLimits(b.ctx, "r", rate))
	set, err := b.client.QueueLimitsSet(b.ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]skiplock.QueueLimits{"q": ok, "r": rate}, set, "stored exactly")
}

type gateArgs struct{}

func (gateArgs) Kind() string { return "gate" }

// A queue whose limits fail to apply (here its slot rows cannot be written: a trigger
// refuses them) keeps its current path, and is logged; the worker's other queues get
// their limits all the same. The refresh used to stop at the first failing queue, in
// name order, so "aaa" kept "bbb" unlimited.
func TestFlow_AQueueWhoseLimitsFailDoesNotHoldBackTheOthers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE FUNCTION {s}.refuse_aaa() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF NEW.queue = 'aaa' THEN RAISE EXCEPTION 'no slots for aaa'; END IF;
		RETURN NEW;
	END $$;
	CREATE TRIGGER refuse_aaa BEFORE INSERT ON {s}.queue_slots FOR EACH ROW EXECUTE FUNCTION {s}.refuse_aaa()`))
	require.NoError(t, err)
	var logs logCapture
	w := newWorker(t, b, skiplock.WorkerConfig{
		Queues:        map[string]skiplock.QueueConfig{"aaa": {MaxWorkers: 5}, "bbb": {MaxWorkers: 5}},
		SweepInterval: -1, Logger: slog.New(&logs), ShutdownTimeout: time.Second,
	})
	release := make(chan struct{})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[gateArgs]) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}))
	stop := runWorker(t, w)
	defer stop()
	defer close(release)
	// A job of aaa running says the worker has started: its limits are read from now on.
	_, err = b.client.Enqueue(b.ctx, gateArgs{}, &skiplock.EnqueueOptions{Queue: "aaa"})
	require.NoError(t, err)
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue = 'aaa' AND status = 'running'`) == 1
	}, "the worker started")

	require.NoError(t, b.client.SetQueueLimits(b.ctx, "aaa", skiplock.QueueLimits{Concurrency: 1}))
	require.NoError(t, b.client.SetQueueLimits(b.ctx, "bbb", skiplock.QueueLimits{Concurrency: 1}))
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.queue_slots WHERE queue = 'bbb'`) == 1
	}, "bbb's slot written")
	eventually(t, 30*time.Second, func() bool {
		return logs.find("applying queue limits failed", "queue=aaa", "no slots for aaa") != ""
	}, "aaa's failure logged with its queue")

	for range 3 {
		_, err := b.client.Enqueue(b.ctx, gateArgs{}, &skiplock.EnqueueOptions{Queue: "bbb"})
		require.NoError(t, err)
	}
	running := func() int {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue = 'bbb' AND status = 'running'`)
	}
	eventually(t, 30*time.Second, func() bool { return running() == 1 }, "one bbb job running")
	holdsFor(t, time.Second, 50*time.Millisecond, func() {
		assert.LessOrEqual(t, running(), 1, "bbb is held to its limit of 1")
	})
}

// flowHelperEnv, when set, makes TestFlow_HelperProcess a worker process for
// TestFlow_LimitHoldsWhileWorkersAreKilled: "url|schema|id", or "url|schema|id|keyrate",
// or "url|schema|id|keys".
const flowHelperEnv = "SKIPLOCK_FLOW_HELPER"

// TestFlow_HelperProcess is not a test: run by TestFlow_LimitHoldsWhileWorkersAreKilled
// (and, with a fourth field "keyrate", by TestFlow_KeyRateAndKeyLimitHoldWhileWorkersAreKilled,
// with "keys", by TestFlow_ConcurrencyKeysHoldWhileWorkersAreKilled)
// as a child process, it works the limited queue until it is killed.
func TestFlow_HelperProcess(t *testing.T) {
	spec := os.Getenv(flowHelperEnv)
	if spec == "" {
		t.Skip("a child process of TestFlow_LimitHoldsWhileWorkersAreKilled, not a test")
	}
	parts := strings.SplitN(spec, "|", 4)
	limits := skiplock.QueueLimits{Concurrency: flowKillLimit}
	if len(parts) == 4 && parts[3] == "keyrate" {
		limits = flowKillKeyLimits
	}
	if len(parts) == 4 && parts[3] == "keys" {
		limits = flowKillDimLimits
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, parts[0])
	require.NoError(t, err)
	b := &bundle{ctx: ctx, pool: pool, schema: parts[1]}
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: parts[1], Logger: testLogger()})
	require.NoError(t, err)
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{
		ID:                parts[2],
		Queues:            map[string]skiplock.QueueConfig{"limited": {MaxWorkers: 2, Limits: limits}},
		PollInterval:      100 * time.Millisecond,
		VisibilityTimeout: 3 * time.Second,
		SweepInterval:     200 * time.Millisecond,
		Logger:            testLogger(),
	})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(w, auditHandler(b, pool)))
	require.NoError(t, w.Run(ctx)) // until killed
}

// liveIDs returns the ids of the processes in procs not yet killed.
func liveIDs(procs map[string]*exec.Cmd, killed map[string]time.Time) []string {
	var ids []string
	for id := range procs {
		if _, dead := killed[id]; !dead {
			ids = append(ids, id)
		}
	}
	return ids
}

// killTwoWorkerProcesses runs the kill scenario of the flow tests: four worker processes
// (TestFlow_HelperProcess in the given mode, "" for the plain limit), two of them killed
// with SIGKILL, each while it runs jobs, and replaced; it waits until the jobs are
// drained, ends a killed worker's audited executions at its death (a statement it had sent
// may still have run after it: a start recorded after the kill ends where it starts), and
// returns how many jobs the survivors took back and ran again (asserted positive).
func killTwoWorkerProcesses(t *testing.T, b *bundle, jobs int, mode string) int {
	t.Helper()
	suffix := ""
	if mode != "" {
		suffix = "|" + mode
	}
	killedAt := map[string]time.Time{}
	start := func(id string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFlow_HelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), flowHelperEnv+"="+pgtest.URL(t)+"|"+b.schema+"|"+id+suffix)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	procs := map[string]*exec.Cmd{}
	for i := range 4 {
		id := fmt.Sprintf("p%d", i)
		procs[id] = start(id)
	}
	for round := range 2 {
		// The victim is whichever live process holds running jobs now: a fixed one may
		// be idle whenever it is looked at.
		var victim string
		eventually(t, time.Minute, func() bool {
			var holder *string
			err := b.pool.QueryRow(b.ctx, b.q(`SELECT min(locked_by) FROM {s}.jobs
				WHERE status = 'running' AND locked_by = ANY($1)`), liveIDs(procs, killedAt)).Scan(&holder)
			require.NoError(t, err)
			if holder != nil {
				victim = *holder
			}
			return holder != nil
		}, "a worker process runs jobs (round %d)", round)
		require.NoError(t, procs[victim].Process.Kill())
		_ = procs[victim].Wait()
		// The victim's handlers ended at the latest now (by the database clock).
		var at time.Time
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT clock_timestamp()`).Scan(&at))
		killedAt[victim] = at
		id := fmt.Sprintf("r%d", round)
		procs[id] = start(id)
	}
	waitDrained(t, b, jobs)
	for victim, at := range killedAt {
		_, err := b.pool.Exec(b.ctx, b.q(`UPDATE {s}.audit SET finished = greatest(started, $2)
			WHERE worker = $1 AND finished IS NULL`), victim, at)
		require.NoError(t, err)
	}
	reclaimed := b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE attempts > 1`)
	t.Logf("%d jobs reclaimed from killed workers and run again", reclaimed)
	assert.Positive(t, reclaimed, "the killed workers held jobs that the sweeper took back")
	return reclaimed
}

// flowKillLimit is the global limit of TestFlow_LimitHoldsWhileWorkersAreKilled.
const flowKillLimit = 5

// Not parallel (see flowSetup): it also runs worker processes of its own and kills two.
func TestFlow_LimitHoldsWhileWorkersAreKilled(t *testing.T) {
	b := flowSetup(t)
	const jobs = 500
	enqueueFlow(t, b, jobs, func(int) string { return "" }, 40)

	// Four worker processes with 2 slots each (8 for a limit of 5: no process reaches it
	// alone); two are killed while they run jobs and replaced. The survivors' sweepers
	// take the dead workers' jobs back once their leases end.
	killTwoWorkerProcesses(t, b, jobs, "")
	got := b.maxOverlap(t, "0", time.Time{})
	t.Logf("most executions at once: %d, limit %d", got, flowKillLimit)
	assert.LessOrEqual(t, got, flowKillLimit, "the most executions at once (audit)")
	assert.Greater(t, got, 1, "executions ran side by side")
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.audit WHERE finished IS NULL`), "every execution ended")
}
