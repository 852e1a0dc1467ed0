package skiplock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// rawArgs marshals to its JSON as it is: a custom marshaler or json.RawMessage is how a
// user's args produce JSON that encoding/json accepts and jsonb may not.
type rawArgs struct {
	Raw json.RawMessage `json:"raw"`
}

func (rawArgs) Kind() string { return "raw" }

// jsonbRefused are payloads encoding/json accepts and Postgres's jsonb refuses (each was
// tried against Postgres 15 with $1::jsonb).
var jsonbRefused = map[string]string{
	"lone high surrogate":              `"\ud800"`,
	"lone low surrogate":               `"\udc00"`,
	"high surrogate then a letter":     `"\ud800x"`,
	"high surrogate then an escape":    `"\ud800\n"`,
	"high surrogate then a BMP escape": `"\ud800\u0041"`,
	"two high surrogates":              `"\ud800\udbff"`,
	"reversed pair":                    `"\udc00\ud800"`,
	"lone surrogate in a key":          `{"\ud800":1}`,
	"lone surrogate nested":            `{"a":[{"b":["ok","\udfff"]}]}`,
	"surrogate after escaped slash":    `"\\\ud800"`,
	"nul escape":                       `"\u0000"`,
	"nul escape in a key":              `{"\u0000":1}`,
	"16384 decimals by exponent":       `1e-16384`,
	"16384 decimals of zero":           `0e-16384`,
	"16384 decimals, fraction and exp": `1.5e-16383`,
	"16384 decimals written out":       "0." + strings.Repeat("0", 16383) + "1",
	"131073 integer digits by exp":     `1e131072`,
	"131073 integer digits written":    "1" + strings.Repeat("0", 131072),
	"fraction shifted past the limit":  `0.5e131073`,
	"exponent past int32/2":            `0e2147483648`,
	"huge exponent nested":             `{"a":[1,{"b":-1e1000000}]}`,
	"big mantissa, exponent too low":   "1" + strings.Repeat("0", 200000) + "e-100000",
	"nested 513 deep":                  strings.Repeat("[", 512) + strings.Repeat("]", 512), // in rawArgs's object
}

// jsonbTaken are the closest payloads on the right side of each limit: refusing them
// would be a false alarm.
var jsonbTaken = map[string]string{
	"surrogate pair":               `"\ud800\udc00"`,
	"pair in a key":                `{"\udbff\udfff":1}`,
	"escaped backslash, then text": `"\\ud800"`,
	"16383 decimals by exponent":   `1e-16383`,
	"16383 decimals of zero":       `0e-16383`,
	"16383 decimals, fraction+exp": `1.5e-16382`,
	"131072 integer digits":        "9" + strings.Repeat("9", 131071),
	"131072 integer digits by exp": `1e131071`,
	"zero with a huge exponent":    `0e999999999`,
	"small number, large exponent": `0.0001e131074`,
	"big mantissa, negative exp":   "1" + strings.Repeat("0", 140000) + "e-16383",
	"nested 512 deep":              strings.Repeat("[", 511) + strings.Repeat("]", 511), // in rawArgs's object
}

// TestEnqueueTx_BadPayloadRefusedAndTxUsable enqueues each payload jsonb refuses with
// EnqueueTx and EnqueueManyTx inside a transaction that has already written a row, as a
// user would: the enqueue must fail with ErrInvalidPayload, and the transaction must still
// run its next statement and commit, with nothing of the refused job written.
func TestEnqueueTx_BadPayloadRefusedAndTxUsable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.orders (id serial PRIMARY KEY, note text)`))
	require.NoError(t, err)
	client, err := skiplock.NewClient(b.pool, skiplock.Config{Schema: b.schema, MaxPayloadBytes: -1, Logger: testLogger()})
	require.NoError(t, err)

	for name, payload := range jsonbRefused {
		require.True(t, json.Valid([]byte(payload)), "%s: the payload must be JSON that encoding/json accepts", name)
		for _, many := range []bool{false, true} {
			tx, err := b.pool.Begin(b.ctx)
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) }) // no-op after commit
			_, err = tx.Exec(b.ctx, b.q(`INSERT INTO {s}.orders (note) VALUES ('before')`))
			require.NoError(t, err)
			if many {
				// A good job first: the whole call is refused before anything is sent.
				_, err = client.EnqueueManyTx(b.ctx, tx, []skiplock.EnqueueParams{{Args: noopArgs{}}, {Args: rawArgs{Raw: json.RawMessage(payload)}}})
			} else {
				_, err = client.EnqueueTx(b.ctx, tx, rawArgs{Raw: json.RawMessage(payload)}, nil)
			}
			assert.ErrorIs(t, err, skiplock.ErrInvalidPayload, "%s (many=%v)", name, many)
			_, err = tx.Exec(b.ctx, b.q(`INSERT INTO {s}.orders (note) VALUES ('after')`))
			assert.NoError(t, err, "%s (many=%v): the caller's next statement in the transaction", name, many)
			assert.NoError(t, tx.Commit(b.ctx), "%s (many=%v): the caller's commit", name, many)
		}
	}
	assert.Equal(t, 4*len(jsonbRefused), b.count(t, `SELECT count(*) FROM {s}.orders`), "every caller's write committed")
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs`), "no refused job was written")
}

// TestEnqueueTx_PayloadBeyondJSONBRefusedAndTxUsable enqueues, with no payload limit
// (MaxPayloadBytes -1), a payload holding a string one byte longer than jsonb stores
// (2^28 - 1 bytes), inside a transaction that has already written a row: the server
// would refuse it and abort the transaction ("string too long to represent as jsonb
// string"), so the enqueue must fail first, with ErrPayloadTooLarge, and the transaction
// must still write and commit.
func TestEnqueueTx_PayloadBeyondJSONBRefusedAndTxUsable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.orders (id serial PRIMARY KEY, note text)`))
	require.NoError(t, err)
	client, err := skiplock.NewClient(b.pool, skiplock.Config{Schema: b.schema, MaxPayloadBytes: -1, Logger: testLogger()})
	require.NoError(t, err)
	big := make([]byte, 0, 1<<28+2)
	big = append(big, '"')
	big = append(big, bytes.Repeat([]byte("x"), 1<<28)...)
	big = append(big, '"')
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(b.ctx, b.q(`INSERT INTO {s}.orders (note) VALUES ('before')`))
	require.NoError(t, err)
	_, err = client.EnqueueTx(b.ctx, tx, rawArgs{Raw: json.RawMessage(big)}, nil)
	require.ErrorIs(t, err, skiplock.ErrPayloadTooLarge)
	_, err = tx.Exec(b.ctx, b.q(`INSERT INTO {s}.orders (note) VALUES ('after')`))
	require.NoError(t, err, "the caller's next statement in the transaction")
	require.NoError(t, tx.Commit(b.ctx))
	assert.Equal(t, 2, b.count(t, `SELECT count(*) FROM {s}.orders`))
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs`))
}

// TestEnqueueTx_PayloadsAtTheLimitsAreStored enqueues the payloads just inside jsonb's
// limits, one transaction each: none is refused, and each is stored as sent.
func TestEnqueueTx_PayloadsAtTheLimitsAreStored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	client, err := skiplock.NewClient(b.pool, skiplock.Config{Schema: b.schema, MaxPayloadBytes: -1, Logger: testLogger()})
	require.NoError(t, err)
	for name, payload := range jsonbTaken {
		tx, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		row, err := client.EnqueueTx(b.ctx, tx, rawArgs{Raw: json.RawMessage(payload)}, nil)
		if !assert.NoError(t, err, name) {
			_ = tx.Rollback(b.ctx)
			continue
		}
		require.NoError(t, tx.Commit(b.ctx), name)
		var same bool
		require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT payload -> 'raw' = $2::jsonb FROM {s}.jobs WHERE id = $1`), row.ID, payload).Scan(&same), name)
		assert.True(t, same, "%s: stored as sent", name)
	}
}

type nilHook struct{ skiplock.Hook }

// TestNewWorker_InvalidConfig: each field value that would fail later (a panic, an endless
// warning loop, a busy loop, a huge allocation) is refused by NewWorker with
// ErrInvalidConfig and a message naming the field.
func TestNewWorker_InvalidConfig(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := []struct {
		name  string
		cfg   skiplock.WorkerConfig
		field string
		also  error
	}{
		{"ID with NUL", skiplock.WorkerConfig{ID: "w\x00"}, "WorkerConfig.ID", nil},
		{"ID invalid UTF-8", skiplock.WorkerConfig{ID: "w\xff"}, "WorkerConfig.ID", nil},
		{"ID too long", skiplock.WorkerConfig{ID: strings.Repeat("w", 256)}, "WorkerConfig.ID", nil},
		{"VisibilityTimeout 2ns", skiplock.WorkerConfig{VisibilityTimeout: 2}, "WorkerConfig.VisibilityTimeout is 2ns: use at least 1ms, or 0 for the default", nil},
		{"VisibilityTimeout under 1ms", skiplock.WorkerConfig{VisibilityTimeout: time.Millisecond - 1}, "WorkerConfig.VisibilityTimeout", nil},
		{"PollInterval 1ns", skiplock.WorkerConfig{PollInterval: 1}, "WorkerConfig.PollInterval", nil},
		{"SweepInterval 1µs", skiplock.WorkerConfig{SweepInterval: time.Microsecond}, "WorkerConfig.SweepInterval", nil},
		{"DeadRetention negative", skiplock.WorkerConfig{DeadRetention: -time.Hour}, "WorkerConfig.DeadRetention is -1h0m0s", nil},
		{"queue name", skiplock.WorkerConfig{Queues: map[string]skiplock.QueueConfig{"A b": {}}}, "WorkerConfig.Queues", skiplock.ErrInvalidQueue},
		{"MaxWorkers negative", skiplock.WorkerConfig{Queues: map[string]skiplock.QueueConfig{"q": {MaxWorkers: -1}}}, `WorkerConfig.Queues["q"].MaxWorkers`, nil},
		{"MaxWorkers huge", skiplock.WorkerConfig{Queues: map[string]skiplock.QueueConfig{"q": {MaxWorkers: 1 << 40}}}, `WorkerConfig.Queues["q"].MaxWorkers`, nil},
		{"Completion unknown", skiplock.WorkerConfig{Completion: 99}, "WorkerConfig.Completion", nil},
		{"CompleteBatchSize huge", skiplock.WorkerConfig{CompleteBatchSize: 1 << 40}, "WorkerConfig.CompleteBatchSize", nil},
		{"FleetStatements huge", skiplock.WorkerConfig{FleetStatements: 100_001}, "WorkerConfig.FleetStatements", nil},
		{"ListenURL unparsable", skiplock.WorkerConfig{ListenURL: "postgres://u:secret@[::1"}, "WorkerConfig.ListenURL", nil},
		{"nil hook", skiplock.WorkerConfig{Hooks: []skiplock.Hook{nil}}, "WorkerConfig.Hooks[0]", nil},
		{"typed nil hook", skiplock.WorkerConfig{Hooks: []skiplock.Hook{(*nilHook)(nil)}}, "WorkerConfig.Hooks[0]", nil},
	}
	for _, c := range cases {
		w, err := skiplock.NewWorker(b.client, c.cfg)
		assert.Nil(t, w, c.name)
		if assert.ErrorIs(t, err, skiplock.ErrInvalidConfig, c.name) {
			assert.Contains(t, err.Error(), c.field, c.name)
			assert.NotContains(t, err.Error(), "secret", "%s: the message must not show a password", c.name)
		}
		if c.also != nil {
			assert.ErrorIs(t, err, c.also, c.name)
		}
	}

	// The values next to the refused ones, and the documented zero and negative meanings,
	// are accepted.
	for _, cfg := range []skiplock.WorkerConfig{
		{ID: strings.Repeat("é", 127), VisibilityTimeout: time.Millisecond, PollInterval: time.Millisecond, SweepInterval: time.Millisecond},
		{VisibilityTimeout: -1, PollInterval: -1, SweepInterval: -1, FetchCooldown: -1, ShutdownTimeout: -1, ArchiveRetention: -1, CompleteBatchSize: -1, CompleteFlushInterval: -1, FleetStatements: -1},
		{Queues: map[string]skiplock.QueueConfig{"q": {MaxWorkers: 100_000}}, CompleteBatchSize: 100_000, FleetStatements: 100_000, Completion: skiplock.CompletionKeep, ListenURL: "postgres://127.0.0.1/x"},
	} {
		_, err := skiplock.NewWorker(b.client, cfg)
		assert.NoError(t, err, "%+v", cfg)
	}
}

// TestNewSweeper_InvalidConfig: a positive interval or visibility timeout under 1ms is
// refused with ErrInvalidConfig naming the field (today's 1ns visibility timeout would
// reclaim every running job at each sweep).
func TestNewSweeper_InvalidConfig(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := []struct {
		name  string
		cfg   skiplock.SweeperConfig
		field string
	}{
		{"Interval 1ns", skiplock.SweeperConfig{Interval: 1}, "SweeperConfig.Interval is 1ns"},
		{"VisibilityTimeout 2ns", skiplock.SweeperConfig{VisibilityTimeout: 2}, "SweeperConfig.VisibilityTimeout is 2ns"},
		{"DeadRetention negative", skiplock.SweeperConfig{DeadRetention: -time.Hour}, "SweeperConfig.DeadRetention is -1h0m0s"},
	}
	for _, c := range cases {
		s, err := skiplock.NewSweeper(b.client, c.cfg)
		assert.Nil(t, s, c.name)
		if assert.ErrorIs(t, err, skiplock.ErrInvalidConfig, c.name) {
			assert.Contains(t, err.Error(), c.field, c.name)
		}
	}
	_, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{Interval: time.Millisecond, VisibilityTimeout: time.Millisecond})
	assert.NoError(t, err)
	_, err = skiplock.NewSweeper(b.client, skiplock.SweeperConfig{Interval: -1, VisibilityTimeout: -1, ArchiveRetention: -1, BatchSize: -1})
	assert.NoError(t, err)
}

// TestNewClient_InvalidConfig: a bad schema name is ErrInvalidConfig naming Config.Schema,
// and still ErrInvalidSchema.
func TestNewClient_InvalidConfig(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, schema := range []string{"A b", "x\x00", strings.Repeat("s", 49), `x"; drop`} {
		c, err := skiplock.NewClient(b.pool, skiplock.Config{Schema: schema})
		assert.Nil(t, c, schema)
		assert.ErrorIs(t, err, skiplock.ErrInvalidConfig, schema)
		assert.ErrorIs(t, err, skiplock.ErrInvalidSchema, schema)
		if err != nil {
			assert.Contains(t, err.Error(), "Config.Schema", schema)
		}
	}
	for _, h := range []skiplock.Hook{nil, (*nilHook)(nil)} {
		c, err := skiplock.NewClient(b.pool, skiplock.Config{Hooks: []skiplock.Hook{&nilHook{}, h}})
		assert.Nil(t, c)
		assert.ErrorIs(t, err, skiplock.ErrInvalidConfig)
		if err != nil {
			assert.Contains(t, err.Error(), "Config.Hooks[1]")
		}
	}
}

// BenchmarkEnqueueTx_Savepoint measures what running EnqueueTx under a savepoint (so that
// a refused insert could be rolled back to it instead of aborting the caller's
// transaction) would cost. Each iteration times, inside one open transaction, a bare
// EnqueueTx, an EnqueueTx between SAVEPOINT and RELEASE (pgx's nested transaction), and a
// bare SELECT 1 (one round trip, for scale), in turn, so all three see the same load; it
// reports the median of each in µs. A transaction is committed every 50 iterations (so
// under 64 subtransactions each, the cache size past which Postgres's snapshots slow).
func BenchmarkEnqueueTx_Savepoint(b *testing.B) {
	ctx := context.Background()
	b2 := setupTB(b)
	var plain, savepoint, roundtrip []time.Duration
	var tx pgx.Tx
	n := 0
	for b.Loop() {
		var err error
		if n%50 == 0 {
			if tx != nil {
				if err := tx.Commit(ctx); err != nil {
					b.Fatal(err)
				}
			}
			if tx, err = b2.pool.Begin(ctx); err != nil {
				b.Fatal(err)
			}
		}
		n++
		t0 := time.Now()
		if _, err := b2.client.EnqueueTx(ctx, tx, noopArgs{}, nil); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		sp, err := tx.Begin(ctx)
		if err == nil {
			if _, err = b2.client.EnqueueTx(ctx, sp, noopArgs{}, nil); err == nil {
				err = sp.Commit(ctx)
			}
		}
		if err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		plain, savepoint, roundtrip = append(plain, t1.Sub(t0)), append(savepoint, t2.Sub(t1)), append(roundtrip, t3.Sub(t2))
	}
	if err := tx.Commit(ctx); err != nil {
		b.Fatal(err)
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2]) / float64(time.Microsecond)
	}
	b.ReportMetric(median(plain), "plain-µs")
	b.ReportMetric(median(savepoint), "savepoint-µs")
	b.ReportMetric(median(roundtrip), "roundtrip-µs")
}

// setupTB is setup for a benchmark.
func setupTB(tb testing.TB) *bundle {
	ctx := context.Background()
	schema := pgtest.Schema(tb)
	pool := pgtest.Pool(tb)
	if err := skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}); err != nil {
		tb.Fatal(err)
	}
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Logger: testLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	return &bundle{ctx: ctx, pool: pool, client: client, schema: schema}
}
