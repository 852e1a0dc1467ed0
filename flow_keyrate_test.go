package skiplock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// keyRateOverSQL counts the starts in the audit that are ahead of their key's token
// bucket: a key's bucket starts full (KeyRate tokens, $1) and refills at $1 per $3
// seconds from $2 (an instant before any claim), so by any instant s at most
// $1 + $1·(s − $2)/$3 starts of the key can have taken a token. A handler starts after
// its claim took the token, so the i-th start of a key by the audit must respect the
// bound too. Jobs without a key share the bucket of key ”.
const keyRateOverSQL = `SELECT count(*) FROM (
	SELECT started, row_number() OVER (PARTITION BY key ORDER BY started) AS i FROM {s}.audit) s
	WHERE i > $1::float8 + floor($1::float8 * extract(epoch FROM started - $2::timestamptz) / $3::float8)`

// keyRatePerSecSQL is, per key, the starts per second after the key's first KeyRate
// starts (the full bucket's burst): the rate the bucket let through.
const keyRatePerSecSQL = `SELECT key, (count(*) - $1)::float8 / extract(epoch FROM max(started) - min(started)
	FILTER (WHERE i = $1 + 1))::float8
	FROM (SELECT key, started, row_number() OVER (PARTITION BY key ORDER BY started) AS i FROM {s}.audit) s
	GROUP BY key ORDER BY key`

// assertKeyRate checks the audit against KeyRate rate per period from t0, and that every
// key got at least minShare of its rate.
func assertKeyRate(t *testing.T, b *bundle, rate int, period time.Duration, t0 time.Time, minShare float64) {
	t.Helper()
	over := b.count(t, keyRateOverSQL, float64(rate), t0, period.Seconds())
	assert.Zero(t, over, "starts ahead of their key's token bucket")
	rows, err := b.pool.Query(b.ctx, b.q(keyRatePerSecSQL), rate)
	require.NoError(t, err)
	defer rows.Close()
	keys := 0
	for rows.Next() {
		var key string
		var perSec float64
		require.NoError(t, rows.Scan(&key, &perSec))
		keys++
		t.Logf("key %q: %.1f starts/s past its burst, limit %.1f/s", key, perSec, float64(rate)/period.Seconds())
		assert.GreaterOrEqual(t, perSec, minShare*float64(rate)/period.Seconds(), "starts per second of key %q", key)
	}
	require.NoError(t, rows.Err())
	assert.Positive(t, keys)
}

// Not parallel (see flowSetup). Four workers, each with its own pool, race on a queue
// whose only limit is KeyRate: three keys and the jobs without a key each start at most
// KeyRate per KeyRatePeriod (the bucket's bound, by the audit), and each gets its rate.
func TestFlow_KeyRateBoundsStartsPerKey(t *testing.T) {
	b := flowSetup(t)
	const rate = 10 // per 500ms: 20 starts/s per key
	const period = 500 * time.Millisecond
	keys := []string{"a", "b", "c", ""}
	enqueueFlow(t, b, 1200, func(i int) string { return keys[i%len(keys)] }, 0)
	var t0 time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT clock_timestamp()`).Scan(&t0))
	var failures claimFailures
	stop := startFlowWorkers(t, b, 4, 20, skiplock.QueueLimits{KeyRate: rate, KeyRatePeriod: period}, &failures)
	eventually(t, time.Minute, func() bool {
		return b.count(t, `SELECT count(*) FROM (SELECT key FROM {s}.audit GROUP BY key HAVING count(*) >= 70) k`) == len(keys)
	}, "70 starts of every key")
	stop()
	assertKeyRate(t, b, rate, period, t0, 0.5)
	assert.Zero(t, failures.n.Load(), "claims failed: %v", failures.errs)
}

// A queue with KeyRate and the other limits together: each holds, and Concurrency bounds
// the whole while the keys' buckets bound each key.
func TestFlow_KeyRateWithKeyAndGlobalLimits(t *testing.T) {
	b := flowSetup(t)
	const rate = 20 // per second per key
	limits := skiplock.QueueLimits{Concurrency: 5, KeyConcurrency: 2, KeyRate: rate, Fair: true}
	keys := []string{"a", "b", "c"}
	enqueueFlow(t, b, 600, func(i int) string { return keys[i%len(keys)] }, 40)
	var t0 time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT clock_timestamp()`).Scan(&t0))
	var failures claimFailures
	stop := startFlowWorkers(t, b, 4, 6, limits, &failures)
	eventually(t, time.Minute, func() bool {
		return b.count(t, `SELECT count(*) FROM (SELECT key FROM {s}.audit GROUP BY key HAVING count(*) >= 60) k`) == len(keys)
	}, "60 starts of every key")
	stop()
	assert.Zero(t, b.count(t, keyRateOverSQL, float64(rate), t0, 1.0), "starts ahead of their key's token bucket")
	perKey := b.maxOverlap(t, "key", time.Time{})
	all := b.maxOverlap(t, "0", time.Time{})
	t.Logf("most at once: %d per key (limit 2), %d in all (limit 5)", perKey, all)
	assert.LessOrEqual(t, perKey, 2)
	assert.LessOrEqual(t, all, 5)
	assert.Zero(t, failures.n.Load(), "claims failed: %v", failures.errs)
}

// flowKillKeyLimits are the limits of TestFlow_KeyRateAndKeyLimitHoldWhileWorkersAreKilled.
var flowKillKeyLimits = skiplock.QueueLimits{KeyConcurrency: 2, KeyRate: 10, KeyRatePeriod: 500 * time.Millisecond}

// Not parallel (see flowSetup). Four worker processes (2 slots each) work a queue with a
// per-key rate and a per-key limit; two are killed with SIGKILL while they run jobs and
// replaced. Each key's starts stay under its bucket (a retry of a killed worker's job is a
// new start and takes a token), and at most 2 of a key run at once.
func TestFlow_KeyRateAndKeyLimitHoldWhileWorkersAreKilled(t *testing.T) {
	b := flowSetup(t)
	const jobs = 400
	keys := []string{"a", "b", "c"}
	enqueueFlow(t, b, jobs, func(i int) string { return keys[i%len(keys)] }, 40)
	var t0 time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT clock_timestamp()`).Scan(&t0))
	killTwoWorkerProcesses(t, b, jobs, "keyrate")
	// Only the bound: a killed worker's jobs hold their key's slots until the sweeper takes
	// them back, so keys stall meanwhile (the rate is checked without kills above).
	assertKeyRate(t, b, flowKillKeyLimits.KeyRate, flowKillKeyLimits.KeyRatePeriod, t0, 0)
	perKey := b.maxOverlap(t, "key", time.Time{})
	t.Logf("most executions of a key at once: %d, limit %d", perKey, flowKillKeyLimits.KeyConcurrency)
	assert.LessOrEqual(t, perKey, flowKillKeyLimits.KeyConcurrency)
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.audit WHERE finished IS NULL`), "every execution ended")
}

type keyPruneArgs struct{}

func (keyPruneArgs) Kind() string { return "key_prune" }

// A queue with KeyRate keeps a bucket row per key only while the bucket is refilling: a
// worker's refresh of the limits deletes the rows whose bucket has refilled (a key
// without a row has a full bucket), so the rows do not grow with every key ever started
// (each claim reads them all, under the queue's lock). A bucket still refilling stays.
func TestFlow_KeyRateForgetsTheBucketsThatHaveRefilled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	limits := skiplock.QueueLimits{KeyRate: 5, KeyRatePeriod: time.Hour}
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, Logger: testLogger(),
		Queues: map[string]skiplock.QueueConfig{"keyprune": {MaxWorkers: 5, Limits: limits}}})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[keyPruneArgs]) error { return nil }))
	for i := range 20 {
		_, err := b.client.Enqueue(b.ctx, keyPruneArgs{}, &skiplock.EnqueueOptions{Queue: "keyprune", PartitionKey: fmt.Sprintf("k%d", i)})
		require.NoError(t, err)
	}
	for range 3 {
		_, err := b.client.Enqueue(b.ctx, keyPruneArgs{}, &skiplock.EnqueueOptions{Queue: "keyprune", PartitionKey: "hot"})
		require.NoError(t, err)
	}
	runWorker(t, w)
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE queue = 'keyprune'`) == 23
	}, "the 23 jobs ran")
	require.Equal(t, 21, b.count(t, `SELECT count(*) FROM {s}.queue_key_flow WHERE queue = 'keyprune'`), "a bucket per key started")
	// The keys k*: an hour and more since their start, by their buckets' clock.
	_, err := b.pool.Exec(b.ctx, b.q(`UPDATE {s}.queue_key_flow SET refilled_at = refilled_at - interval '61 minutes'
		WHERE queue = 'keyprune' AND partition_key <> 'hot'`))
	require.NoError(t, err)
	require.NoError(t, b.client.SetQueueLimits(b.ctx, "keyprune", limits)) // the workers refresh
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.queue_key_flow WHERE queue = 'keyprune'`) == 1
	}, "only the bucket still refilling is kept")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.queue_key_flow WHERE queue = 'keyprune' AND partition_key = 'hot' AND tokens BETWEEN 2 AND 2.1`))
}
