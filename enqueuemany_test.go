package skiplock_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// A large EnqueueMany prepares its jobs while COPY sends the ones before them
// (internal/enqueue, stream.go). These tests hold that path to what preparing every job
// first gives: the same rows in the same order, the same refusal, nothing written on one.

// bigBatch is more jobs than the engine streams from (its streamMin is 1000).
const bigBatch = 2500

func bigParams(opts func(i int) *skiplock.EnqueueOptions) []skiplock.EnqueueParams {
	params := make([]skiplock.EnqueueParams, bigBatch)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: noopArgs{N: i}, Options: opts(i)}
	}
	return params
}

// rowsInIDOrder returns the n of each job's payload, its run_at's distance from now and
// its metadata, in id order.
func rowsInIDOrder(t *testing.T, b *bundle) (ns []int, scheduled []bool, meta []string) {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, b.q(`SELECT (payload->>'n')::int, run_at > now() + interval '30 minutes', metadata::text FROM {s}.jobs ORDER BY id`))
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var n int
		var s bool
		var m string
		require.NoError(t, rows.Scan(&n, &s, &m))
		ns, scheduled, meta = append(ns, n), append(scheduled, s), append(meta, m)
	}
	require.NoError(t, rows.Err())
	return ns, scheduled, meta
}

func TestEnqueueMany_LargeWritesEveryJobInOrder(t *testing.T) {
	t.Parallel()
	later := time.Now().Add(time.Hour)
	cases := []struct {
		name string
		opts func(i int) *skiplock.EnqueueOptions
	}{
		{"plain", func(int) *skiplock.EnqueueOptions { return nil }},
		{"several queues and priorities", func(i int) *skiplock.EnqueueOptions {
			return &skiplock.EnqueueOptions{Queue: []string{"a", "b", "c"}[i%3], Priority: i % 5, MaxAttempts: 1 + i%7}
		}},
		{"scheduled among due", func(i int) *skiplock.EnqueueOptions {
			if i%4 == 1 {
				return &skiplock.EnqueueOptions{RunAt: later}
			}
			return nil
		}},
		{"all scheduled", func(int) *skiplock.EnqueueOptions { return &skiplock.EnqueueOptions{RunAt: later} }},
		{"due after scheduled", func(i int) *skiplock.EnqueueOptions {
			if i < 1500 {
				return &skiplock.EnqueueOptions{RunAt: later}
			}
			return nil
		}},
		{"metadata from the start", func(i int) *skiplock.EnqueueOptions {
			return &skiplock.EnqueueOptions{Metadata: map[string]string{"i": fmt.Sprint(i)}}
		}},
		{"metadata from the middle on", func(i int) *skiplock.EnqueueOptions {
			o := &skiplock.EnqueueOptions{}
			if i >= 1200 && i%2 == 0 {
				o.Metadata = map[string]string{"i": fmt.Sprint(i)}
			}
			if i%5 == 0 {
				o.RunAt = later
			}
			return o
		}},
		{"scheduled with metadata from the middle on", func(i int) *skiplock.EnqueueOptions {
			o := &skiplock.EnqueueOptions{RunAt: later}
			if i >= 1200 {
				o.Metadata = map[string]string{"i": fmt.Sprint(i)}
			}
			return o
		}},
		{"a unique key in the middle", func(i int) *skiplock.EnqueueOptions {
			if i == 1700 {
				return &skiplock.EnqueueOptions{UniqueKey: "u"}
			}
			return nil
		}},
		{"a timeout in the middle", func(i int) *skiplock.EnqueueOptions {
			if i == 1700 {
				return &skiplock.EnqueueOptions{Timeout: time.Minute}
			}
			return nil
		}},
		{"unique from the start", func(i int) *skiplock.EnqueueOptions {
			return &skiplock.EnqueueOptions{UniqueKey: fmt.Sprint("u", i)}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			params := bigParams(c.opts)
			n, err := b.client.EnqueueMany(b.ctx, params)
			require.NoError(t, err)
			require.Equal(t, bigBatch, n)

			// Every job once; the due ones first, then the scheduled ones, each in the
			// call's order (as the COPY of each kind in turn writes them), with its
			// options.
			ns, scheduled, meta := rowsInIDOrder(t, b)
			require.Len(t, ns, bigBatch)
			var want []int
			for _, due := range []bool{true, false} {
				for i, p := range params {
					if (p.Options == nil || p.Options.RunAt.IsZero()) == due {
						want = append(want, i)
					}
				}
			}
			if c.name == "a unique key in the middle" || c.name == "a timeout in the middle" || c.name == "unique from the start" {
				// The one unnest insert keeps the call's order.
				want = want[:0]
				for i := range params {
					want = append(want, i)
				}
			}
			require.Equal(t, want, ns)
			for k, i := range ns {
				o := params[i].Options
				assert.Equal(t, o != nil && !o.RunAt.IsZero(), scheduled[k], "job %d scheduled", i)
				wantMeta := "{}"
				if o != nil && o.Metadata != nil {
					wantMeta = fmt.Sprintf(`{"i": "%d"}`, i)
				}
				assert.Equal(t, wantMeta, meta[k], "job %d metadata", i)
			}
			if c.name == "several queues and priorities" {
				assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs
					WHERE queue <> (ARRAY['a','b','c'])[(payload->>'n')::int % 3 + 1]
					   OR priority <> (payload->>'n')::int % 5 OR max_attempts <> 1 + (payload->>'n')::int % 7`))
			}
		})
	}
}

// badJSON marshals to JSON that Postgres's jsonb refuses (\u0000), or, with panics set,
// panics.
type badJSON struct {
	N      int
	panics bool
}

func (badJSON) Kind() string { return "bad_json" }
func (a badJSON) MarshalJSON() ([]byte, error) {
	if a.panics {
		panic(fmt.Sprintf("marshal %d", a.N))
	}
	return []byte(`{"s":"\u0000"}`), nil
}

func TestEnqueueMany_LargeRefusalWritesNothingAndNamesTheFirstJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	client := clientWith(t, b, skiplock.Config{MaxPayloadBytes: 100})
	badMeta := map[string]string{"k": "a\x00b"} // refused when the metadata is encoded
	cases := []struct {
		name string
		bad  map[int]skiplock.EnqueueParams
		want error
		job  int
	}{
		{"bad queue", map[int]skiplock.EnqueueParams{1600: {Args: noopArgs{}, Options: &skiplock.EnqueueOptions{Queue: "No Queue"}}},
			skiplock.ErrInvalidQueue, 1600},
		{"payload jsonb refuses", map[int]skiplock.EnqueueParams{1001: {Args: badJSON{}}}, skiplock.ErrInvalidPayload, 1001},
		{"payload too large", map[int]skiplock.EnqueueParams{2499: {Args: docArgs{Doc: strings.Repeat("x", 200)}}},
			skiplock.ErrPayloadTooLarge, 2499},
		{"the first job", map[int]skiplock.EnqueueParams{0: {Args: noopArgs{}, Options: &skiplock.EnqueueOptions{MaxAttempts: -1}}},
			skiplock.ErrInvalidOptions, 0},
		{"bad metadata", map[int]skiplock.EnqueueParams{1200: {Args: noopArgs{}, Options: &skiplock.EnqueueOptions{Metadata: badMeta}}},
			skiplock.ErrInvalidOptions, 1200},
		// Every job's args and options are checked before any job's metadata is
		// encoded: a later bad queue wins over an earlier bad metadata.
		{"bad metadata before a bad queue", map[int]skiplock.EnqueueParams{
			1200: {Args: noopArgs{}, Options: &skiplock.EnqueueOptions{Metadata: badMeta}},
			2000: {Args: noopArgs{}, Options: &skiplock.EnqueueOptions{Queue: "No Queue"}},
		}, skiplock.ErrInvalidQueue, 2000},
		{"two bad queues", map[int]skiplock.EnqueueParams{
			1300: {Args: noopArgs{}, Options: &skiplock.EnqueueOptions{Queue: "No Queue"}},
			1400: {Args: badJSON{}},
		}, skiplock.ErrInvalidQueue, 1300},
		{"bad queue after a unique key", map[int]skiplock.EnqueueParams{
			1100: {Args: noopArgs{}, Options: &skiplock.EnqueueOptions{UniqueKey: "u"}},
			1400: {Args: noopArgs{}, Options: &skiplock.EnqueueOptions{Queue: "No Queue"}},
		}, skiplock.ErrInvalidQueue, 1400},
	}
	for _, c := range cases {
		params := bigParams(func(int) *skiplock.EnqueueOptions { return nil })
		for i, p := range c.bad {
			params[i] = p
		}
		n, err := client.EnqueueMany(b.ctx, params)
		require.ErrorIs(t, err, c.want, c.name)
		assert.Zero(t, n, c.name)
		assert.True(t, strings.HasPrefix(err.Error(), fmt.Sprintf("job %d of %d: ", c.job, bigBatch)), "%s: %v", c.name, err)
		assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs`), c.name)
	}

	// The client is still usable, and its pool's connections too.
	n, err := client.EnqueueMany(b.ctx, bigParams(func(int) *skiplock.EnqueueOptions { return nil }))
	require.NoError(t, err)
	assert.Equal(t, bigBatch, n)
}

func TestEnqueueMany_LargePanicReachesTheCallerAndWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := newPool(t, 1) // one connection: the one the panicking call used
	client := clientWith(t, &bundle{ctx: b.ctx, pool: pool, schema: b.schema}, skiplock.Config{})
	params := bigParams(func(int) *skiplock.EnqueueOptions { return nil })
	params[1800] = skiplock.EnqueueParams{Args: badJSON{N: 1800, panics: true}}
	var got any
	func() {
		defer func() { got = recover() }()
		_, _ = client.EnqueueMany(b.ctx, params)
	}()
	assert.Equal(t, "marshal 1800", got)
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs`))
	// The connection is back in the pool, its transaction rolled back.
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	var xid *int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT txid_current_if_assigned()`).Scan(&xid))
	assert.Nil(t, xid, "the COPY's transaction is still open")

	params[1800] = skiplock.EnqueueParams{Args: noopArgs{N: 1800}}
	n, err := client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	assert.Equal(t, bigBatch, n)
}

func TestEnqueueMany_LargeEncryptsEveryPayload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := clientWith(t, b, skiplock.Config{Keyring: keyring(t, "k1")})
	params := make([]skiplock.EnqueueParams, bigBatch)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: secretArgs{Card: fmt.Sprint("card-", i)}, Options: &skiplock.EnqueueOptions{Encrypt: i%2 == 0}}
	}
	n, err := c.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	require.Equal(t, bigBatch, n)
	assert.Equal(t, bigBatch/2, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE payload::text LIKE '%card-%'`),
		"the odd jobs' payloads are plaintext, the even ones' ciphertext")
	var sealed json.RawMessage
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT payload FROM {s}.jobs ORDER BY id LIMIT 1`)).Scan(&sealed))
	assert.NotContains(t, string(sealed), "card-0")
}

func TestEnqueueMany_LargeWithHooksRunsThemAll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hook := &countingEnqueueHook{}
	c := clientWith(t, b, skiplock.Config{Hooks: []skiplock.Hook{hook}})
	params := bigParams(func(int) *skiplock.EnqueueOptions { return nil })
	params[1500] = skiplock.EnqueueParams{Args: noopArgs{}, Options: &skiplock.EnqueueOptions{Queue: "No Queue"}}
	_, err := c.EnqueueMany(b.ctx, params)
	require.ErrorIs(t, err, skiplock.ErrInvalidQueue)
	assert.Zero(t, hook.enqueuing, "a refused job: no hook ran")

	params[1500] = skiplock.EnqueueParams{Args: noopArgs{N: 1500}}
	n, err := c.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	require.Equal(t, bigBatch, n)
	assert.Equal(t, bigBatch, hook.enqueuing)
	assert.Equal(t, bigBatch, hook.done)
	assert.Equal(t, bigBatch, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE metadata->>'hooked' = 'yes'`))
}

// countingEnqueueHook counts its calls and marks each job's metadata. EnqueueMany runs
// hooks in the caller's goroutine, one job at a time.
type countingEnqueueHook struct{ enqueuing, done int }

func (h *countingEnqueueHook) JobEnqueuing(_ context.Context, ev *skiplock.EnqueueEvent) func(*skiplock.JobRow, error) {
	h.enqueuing++
	ev.Metadata["hooked"] = "yes"
	return func(*skiplock.JobRow, error) { h.done++ }
}

func (*countingEnqueueHook) JobStarted(ctx context.Context, _ *skiplock.JobRow) context.Context {
	return ctx
}
func (*countingEnqueueHook) JobFinished(context.Context, *skiplock.JobRow, skiplock.JobResult) {}
