package skiplock_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// dimOverlapSQL is maxOverlapSQL per key of dimension $2: the most executions in the
// audit holding one key of the dimension at one instant. An execution with no end ends
// at $1.
const dimOverlapSQL = `SELECT coalesce(max(running), 0) FROM (
	SELECT sum(d) OVER (PARTITION BY g ORDER BY t, d ROWS UNBOUNDED PRECEDING) AS running FROM (
		SELECT e.value AS g, a.started AS t, 1 AS d
		FROM {s}.audit a CROSS JOIN LATERAL jsonb_each_text(a.keys) e WHERE e.key = $2
		UNION ALL
		SELECT e.value, coalesce(a.finished, $1::timestamptz), -1
		FROM {s}.audit a CROSS JOIN LATERAL jsonb_each_text(a.keys) e WHERE e.key = $2
	) e
) x`

// assertDimLimits checks, by the audit, that no key of a dimension of limits ran more
// than its dimension's limit at once, and returns the most at once per dimension.
func assertDimLimits(t *testing.T, b *bundle, limits map[string]int) map[string]int {
	t.Helper()
	most := map[string]int{}
	for dim, limit := range limits {
		got := b.count(t, dimOverlapSQL, time.Time{}, dim)
		most[dim] = got
		assert.LessOrEqual(t, got, limit, "the most executions of one %s key at once (audit)", dim)
	}
	t.Logf("most executions of one key at once, by dimension: %v (limits %v)", most, limits)
	return most
}

// enqueueKeyed enqueues n flow jobs whose keys are keys(i), sleeping up to sleepMs.
func enqueueKeyed(t *testing.T, b *bundle, n int, part func(i int) string, keys func(i int) map[string]string, sleepMs int) {
	t.Helper()
	params := make([]skiplock.EnqueueParams, n)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: flowArgs{N: i, Key: part(i), Keys: keys(i), Sleep: sleepMs}}
	}
	_, err := b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
}

// Not parallel (see flowSetup). One claim may see many jobs whose first key (in any
// order) has room and whose other key has none: the jobs of eight tenants in one region,
// and the jobs of one tenant in eight regions. With a tenant limit of 1 and a region
// limit of 2, at most 2 of the first and 1 of the second run at once; a claim that
// checked one key of each job only would start 8 of one of them together.
func TestFlow_ConcurrencyKeysStartAJobOnlyWhenEveryKeyHasRoom(t *testing.T) {
	b := flowSetup(t)
	limits := map[string]int{"tenant": 1, "region": 2, "shard": 1}
	keys := func(i int) map[string]string {
		switch {
		case i < 40: // eight tenants, one region
			return map[string]string{"tenant": fmt.Sprintf("t%d", i%8), "region": "eu"}
		case i < 80: // one tenant, eight regions
			return map[string]string{"tenant": "big", "region": fmt.Sprintf("r%d", i%8)}
		default: // three keys: the shard is the scarce one
			return map[string]string{"tenant": fmt.Sprintf("u%d", i%8), "region": fmt.Sprintf("s%d", i%8), "shard": "one"}
		}
	}
	enqueueKeyed(t, b, 120, func(int) string { return "" }, keys, 30)
	var failures claimFailures
	stop := startFlowWorkers(t, b, 1, 24, skiplock.QueueLimits{ConcurrencyKeys: limits}, &failures)
	waitDrained(t, b, 120)
	stop()
	most := assertDimLimits(t, b, limits)
	assert.Equal(t, 2, most["region"], "the region's 2 slots were used")
	assert.Zero(t, failures.n.Load(), "claims failed: %v", failures.errs)
}

// Not parallel (see flowSetup). Four workers, each with its own pool, race on a queue
// whose jobs carry two or three keys each, on the plain limited path (with a global
// limit) and on the keyed one (partition keys, a per-key limit, fair sharing): every
// key of every dimension stays under its limit at every instant, and no job is lost.
func TestFlow_ConcurrencyKeysHoldAcrossWorkers(t *testing.T) {
	dims := map[string]int{"tenant": 2, "region": 4, "shard": 1}
	keys := func(i int) map[string]string {
		k := map[string]string{"tenant": fmt.Sprintf("t%d", i%7), "region": fmt.Sprintf("r%d", (i/7)%3)}
		if i%3 == 0 {
			k["shard"] = fmt.Sprintf("s%d", i%2)
		}
		return k
	}
	for _, tc := range []struct {
		name   string
		limits skiplock.QueueLimits
		part   func(i int) string
	}{
		{"plain path", skiplock.QueueLimits{Concurrency: 10, ConcurrencyKeys: dims}, func(int) string { return "" }},
		{"keyed path", skiplock.QueueLimits{KeyConcurrency: 3, Fair: true, ConcurrencyKeys: dims},
			func(i int) string { return fmt.Sprintf("c%d", i%5) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := flowSetup(t)
			const jobs = 420
			enqueueKeyed(t, b, jobs, tc.part, keys, 15)
			var failures claimFailures
			stop := startFlowWorkers(t, b, 4, 6, tc.limits, &failures)
			waitDrained(t, b, jobs)
			stop()
			most := assertDimLimits(t, b, dims)
			assert.GreaterOrEqual(t, most["region"], 2, "jobs of a region ran side by side")
			if tc.limits.KeyConcurrency > 0 {
				assert.LessOrEqual(t, b.maxOverlap(t, "key", time.Time{}), tc.limits.KeyConcurrency, "per partition key")
			}
			if tc.limits.Concurrency > 0 {
				assert.LessOrEqual(t, b.maxOverlap(t, "0", time.Time{}), tc.limits.Concurrency, "in all")
			}
			assert.Equal(t, jobs, b.count(t, `SELECT count(DISTINCT job_id) FROM {s}.audit`), "every job ran")
			assert.Zero(t, failures.n.Load(), "claims failed: %v", failures.errs)
		})
	}
}

// flowKillDimLimits are the limits of TestFlow_ConcurrencyKeysHoldWhileWorkersAreKilled.
var flowKillDimLimits = skiplock.QueueLimits{ConcurrencyKeys: map[string]int{"tenant": 2, "region": 3}}

// Not parallel (see flowSetup). Four worker processes (2 slots each) work a queue whose
// jobs carry a tenant and a region; two are killed with SIGKILL while they run jobs and
// replaced. A killed worker's jobs keep their keys until the sweeper takes them back, so
// no key runs more than its limit at once, counting the killed executions until the kill.
func TestFlow_ConcurrencyKeysHoldWhileWorkersAreKilled(t *testing.T) {
	b := flowSetup(t)
	const jobs = 300
	enqueueKeyed(t, b, jobs, func(int) string { return "" }, func(i int) map[string]string {
		return map[string]string{"tenant": fmt.Sprintf("t%d", i%4), "region": fmt.Sprintf("r%d", (i/4)%2)}
	}, 40)
	killTwoWorkerProcesses(t, b, jobs, "keys")
	assertDimLimits(t, b, flowKillDimLimits.ConcurrencyKeys)
	assert.Equal(t, jobs, b.count(t, `SELECT count(DISTINCT job_id) FROM {s}.audit`), "every job ran")
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.audit WHERE finished IS NULL`), "every execution ended")
}

// Bad keys and bad per-dimension limits are refused with a clear error, nothing written;
// limits set at run time keep their dimensions.
func TestFlow_ConcurrencyKeysAreChecked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	many := map[string]string{}
	for i := range 9 {
		many[fmt.Sprintf("d%d", i)] = "k"
	}
	for _, tc := range []struct {
		name string
		keys map[string]string
		msg  string
	}{
		{"too many dimensions", many, "at most 8"},
		{"bad dimension", map[string]string{"Region": "eu"}, `dimension "Region"`},
		{"empty key", map[string]string{"region": ""}, "1-255 bytes"},
		{"long key", map[string]string{"region": strings.Repeat("k", 256)}, "1-255 bytes"},
		{"NUL in key", map[string]string{"region": "e\x00u"}, "without NUL"},
	} {
		_, err := b.client.Enqueue(b.ctx, noopArgs{}, &skiplock.EnqueueOptions{ConcurrencyKeys: tc.keys})
		assert.ErrorIs(t, err, skiplock.ErrInvalidOptions, tc.name)
		assert.ErrorContains(t, err, tc.msg, tc.name)
	}
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs`), "nothing written")

	for _, l := range []map[string]int{{"region": 0}, {"region": -1}, {"bad name": 1}} {
		err := b.client.SetQueueLimits(b.ctx, "q", skiplock.QueueLimits{ConcurrencyKeys: l})
		assert.ErrorIs(t, err, skiplock.ErrInvalidLimits, "%v", l)
	}
	want := skiplock.QueueLimits{KeyConcurrency: 2, ConcurrencyKeys: map[string]int{"region": 50, "tenant": 3}}
	require.NoError(t, b.client.SetQueueLimits(b.ctx, "q", want))
	require.NoError(t, b.client.SetQueueLimits(b.ctx, "r", skiplock.QueueLimits{Concurrency: 1}))
	set, err := b.client.QueueLimitsSet(b.ctx)
	require.NoError(t, err)
	assert.Equal(t, want, set["q"])
	assert.Nil(t, set["r"].ConcurrencyKeys)

	// The keys are stored with the job, by every enqueue.
	row, err := b.client.Enqueue(b.ctx, noopArgs{}, &skiplock.EnqueueOptions{ConcurrencyKeys: map[string]string{"region": "eu"}})
	require.NoError(t, err)
	_, err = b.client.EnqueueMany(b.ctx, []skiplock.EnqueueParams{{Args: noopArgs{}, Options: &skiplock.EnqueueOptions{
		UniqueKey: "u", ConcurrencyKeys: map[string]string{"region": "us", "tenant": "a"}}}})
	require.NoError(t, err)
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND concurrency_keys = '{"region": "eu"}'`, row.ID))
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE concurrency_keys = '{"region": "us", "tenant": "a"}'`))
}

// The SQL function's overload (migration 17) takes concurrency keys as a JSON object,
// checks them as Go does (nothing written, the argument named), and leaves a held unique
// key's job as it was.
func TestSQLEnqueue_ConcurrencyKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, dup := mustSQLEnqueue(t, b.ctx, b.pool, b.schema, "noop", `{}`, map[string]any{
		"concurrency_keys": `{"region": "eu", "tenant": "a"}`, "queue": "q", "unique_key": "u"})
	assert.False(t, dup)
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND queue = 'q'
		AND concurrency_keys = '{"region": "eu", "tenant": "a"}'`, id))
	again, dup := mustSQLEnqueue(t, b.ctx, b.pool, b.schema, "noop", `{}`, map[string]any{
		"concurrency_keys": `{"region": "us"}`, "queue": "q", "unique_key": "u"})
	assert.True(t, dup)
	assert.Equal(t, id, again)
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE concurrency_keys ->> 'region' = 'eu'`), "the holder kept its keys")
	none, _ := mustSQLEnqueue(t, b.ctx, b.pool, b.schema, "noop", `{}`, map[string]any{"concurrency_keys": nil})
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND concurrency_keys IS NULL`, none))

	many := map[string]string{}
	for i := range 9 {
		many[fmt.Sprintf("d%d", i)] = "k"
	}
	manyJSON, err := json.Marshal(many)
	require.NoError(t, err)
	for name, keys := range map[string]string{
		"not an object":       `["eu"]`,
		"too many dimensions": string(manyJSON),
		"bad dimension":       `{"Region": "eu"}`,
		"empty key":           `{"region": ""}`,
		"not a string":        `{"region": 1}`,
		"long key":            `{"region": "` + strings.Repeat("k", 256) + `"}`,
	} {
		_, _, err := sqlEnqueue(b.ctx, b.pool, b.schema, "noop", `{}`, map[string]any{"concurrency_keys": keys})
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, name)
		assert.Equal(t, "22023", pgErr.Code, name)
		assert.Equal(t, "concurrency_keys", pgErr.ColumnName, name)
	}
	assert.Equal(t, 2, b.count(t, `SELECT count(*) FROM {s}.jobs`), "nothing more written")
}
