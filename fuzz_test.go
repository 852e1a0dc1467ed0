package skiplock_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// fuzzArgs is a job whose kind and payload come from the fuzzer: Raw is copied into the
// JSON as it is (when the fuzzer says so), Text is a string that encoding/json escapes.
type fuzzArgs struct {
	kind string
	Raw  json.RawMessage `json:"raw,omitempty"`
	Text string          `json:"text"`
}

func (a fuzzArgs) Kind() string { return a.kind }

// fuzzSentinels are the errors an enqueue may return for bad input, and ErrDuplicateJob.
var fuzzSentinels = []error{
	skiplock.ErrNilArgs, skiplock.ErrInvalidKind, skiplock.ErrInvalidQueue, skiplock.ErrInvalidOptions,
	skiplock.ErrInvalidPayload, skiplock.ErrPayloadTooLarge, skiplock.ErrDuplicateJob,
}

func isSentinel(err error) bool {
	for _, s := range fuzzSentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// fuzzMaxPayload keeps ErrPayloadTooLarge within the fuzzer's reach.
const fuzzMaxPayload = 1024

// fuzzDupKey is the unique key of the one job that always sits in the fuzz schema.
const fuzzDupKey = "dup"

// The enqueue paths FuzzEnqueueValidation drives, chosen by mode % 4.
const (
	fuzzModeEnqueue = iota
	fuzzModeEnqueueTx
	fuzzModeEnqueueMany
	fuzzModeEnqueueManyTx
)

// FuzzEnqueueValidation feeds arbitrary kinds, queues, unique keys, priorities, max
// attempts, run_at times and payloads to every enqueue path on a real migrated schema. Each
// call either fails with one of the documented sentinel errors and writes nothing (and
// leaves the caller's transaction usable), or succeeds and Get returns what went in. A raw
// database error or a panic is a bug.
//
// One schema and pool serve every input of a fuzzing process; the schema holds exactly one
// job (unique key "dup") between inputs.
func FuzzEnqueueValidation(f *testing.F) {
	ctx := context.Background()
	schema := pgtest.Schema(f)
	pool := pgtest.Pool(f)
	if err := skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}); err != nil {
		f.Fatal(err)
	}
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, MaxPayloadBytes: fuzzMaxPayload, Logger: testLogger()})
	if err != nil {
		f.Fatal(err)
	}
	dup, err := client.Enqueue(ctx, fuzzArgs{kind: "dup"}, &skiplock.EnqueueOptions{UniqueKey: fuzzDupKey})
	if err != nil {
		f.Fatal(err)
	}
	jobs := pgx.Identifier{schema, "jobs"}.Sanitize()

	// The seeds in testdata/fuzz/FuzzEnqueueValidation add NUL bytes, invalid UTF-8, huge
	// numbers and deep nesting to these.
	f.Add(uint8(fuzzModeEnqueue), "send_email", "", "", int64(0), int64(0), int64(0), false, []byte("hello"))
	f.Add(uint8(fuzzModeEnqueueTx), "k", "mail-1_x", "key-1", int64(-32768), int64(1), int64(1700000000), true, []byte(`{"a":[1,2.5,"x",null,true]}`))
	f.Add(uint8(fuzzModeEnqueueMany), "k", "default", fuzzDupKey, int64(32767), int64(1000000), int64(0), true, []byte(`[]`))
	f.Add(uint8(fuzzModeEnqueueManyTx), "k", "Bad Queue", "", int64(0), int64(-1), int64(0), false, []byte{})
	f.Add(uint8(fuzzModeEnqueueTx), "k", "q", fuzzDupKey, int64(0), int64(0), int64(0), false, []byte("x"))
	f.Add(uint8(fuzzModeEnqueueTx), "k", "", "", int64(0), int64(0), int64(0), true, []byte(`{"a":["\ud800"]}`))
	f.Add(uint8(fuzzModeEnqueueManyTx), "k", "", "", int64(0), int64(0), int64(0), true, []byte(`[1e-16384,1e131072]`))

	f.Fuzz(func(t *testing.T, mode uint8, kind, queue, uniqueKey string, priority, maxAttempts, runAtSec int64, raw bool, payload []byte) {
		args := fuzzArgs{kind: kind}
		if raw {
			args.Raw = payload
		} else {
			args.Text = string(payload)
		}
		opts := &skiplock.EnqueueOptions{Queue: queue, Priority: int(priority), MaxAttempts: int(maxAttempts), UniqueKey: uniqueKey}
		if runAtSec != 0 {
			opts.RunAt = time.Unix(runAtSec, 0)
		}
		input := fmt.Sprintf("mode=%d kind=%q queue=%q unique_key=%q priority=%d max_attempts=%d run_at=%d raw=%v payload=%q",
			mode%4, kind, queue, uniqueKey, priority, maxAttempts, runAtSec, raw, payload)

		var (
			row      *skiplock.JobRow
			inserted = -1 // EnqueueMany's count
		)
		switch mode % 4 {
		case fuzzModeEnqueue:
			row, err = client.Enqueue(ctx, args, opts)
		case fuzzModeEnqueueMany:
			inserted, err = client.EnqueueMany(ctx, []skiplock.EnqueueParams{{Args: args, Options: opts}})
		case fuzzModeEnqueueTx, fuzzModeEnqueueManyTx:
			tx, berr := pool.Begin(ctx)
			if berr != nil {
				t.Fatal(berr)
			}
			if mode%4 == fuzzModeEnqueueTx {
				row, err = client.EnqueueTx(ctx, tx, args, opts)
			} else {
				inserted, err = client.EnqueueManyTx(ctx, tx, []skiplock.EnqueueParams{{Args: args, Options: opts}})
			}
			// A rejected job must leave the caller's transaction usable: its next statement
			// runs, and it commits.
			var one int
			if serr := tx.QueryRow(ctx, `SELECT 1`).Scan(&one); serr != nil {
				_ = tx.Rollback(ctx)
				t.Fatalf("%s\nthe caller's next statement failed after the enqueue returned %v: %v", input, err, serr)
			}
			if cerr := tx.Commit(ctx); cerr != nil {
				t.Fatalf("%s\nthe caller's transaction could not commit after the enqueue returned %v: %v", input, err, cerr)
			}
		}

		var ids []int64
		rows, qerr := pool.Query(ctx, `SELECT id FROM `+jobs+` WHERE id <> $1`, dup.ID)
		if qerr == nil {
			ids, qerr = pgx.CollectRows(rows, pgx.RowTo[int64])
		}
		if qerr != nil {
			t.Fatal(qerr)
		}
		if len(ids) > 0 {
			defer func() {
				if _, err := pool.Exec(ctx, `DELETE FROM `+jobs+` WHERE id <> $1`, dup.ID); err != nil {
					t.Fatal(err)
				}
			}()
		}

		// A duplicate through EnqueueMany is skipped and not counted, without an error.
		if err == nil && inserted == 0 {
			if uniqueKey != fuzzDupKey {
				t.Fatalf("%s\nEnqueueMany inserted nothing and returned no error", input)
			}
			err = skiplock.ErrDuplicateJob
		}
		if err != nil {
			if !isSentinel(err) {
				t.Fatalf("%s\nreturned an error that is none of the documented sentinels: %v", input, err)
			}
			// A payload refused as jsonb would refuse it must really be one jsonb refuses
			// (asked in a statement of its own); only the nesting limit is stricter.
			if sent, merr := json.Marshal(args); errors.Is(err, skiplock.ErrInvalidPayload) && merr == nil && jsonDepth(sent) <= 512 {
				var ok bool
				if perr := pool.QueryRow(ctx, `SELECT $1::jsonb IS NOT NULL`, string(sent)).Scan(&ok); perr == nil {
					t.Fatalf("%s\nrefused with %v, but Postgres takes %s as jsonb", input, err, truncateBytes(sent, 200))
				}
			}
			if len(ids) > 0 {
				t.Fatalf("%s\nreturned %v but wrote jobs %v", input, err, ids)
			}
			if errors.Is(err, skiplock.ErrDuplicateJob) && row != nil && row.ID != dup.ID {
				t.Fatalf("%s\nErrDuplicateJob came with job %d, not the job holding the key (%d)", input, row.ID, dup.ID)
			}
			return
		}

		if len(ids) != 1 {
			t.Fatalf("%s\nsucceeded but wrote jobs %v", input, ids)
		}
		if row != nil && row.ID != ids[0] {
			t.Fatalf("%s\nreturned job %d but wrote job %d", input, row.ID, ids[0])
		}
		got, err := client.Get(ctx, ids[0])
		if err != nil {
			t.Fatalf("%s\nGet: %v", input, err)
		}
		want := skiplock.JobRow{
			ID: ids[0], Queue: queue, Kind: kind, Status: skiplock.StatusQueued, Priority: int(priority),
			MaxAttempts: int(maxAttempts), UniqueKey: uniqueKey,
		}
		if want.Queue == "" {
			want.Queue = skiplock.DefaultQueue
		}
		if want.MaxAttempts == 0 {
			want.MaxAttempts = skiplock.DefaultMaxAttempts
		}
		gotFields := skiplock.JobRow{
			ID: got.ID, Queue: got.Queue, Kind: got.Kind, Status: got.Status, Priority: got.Priority,
			MaxAttempts: got.MaxAttempts, UniqueKey: got.UniqueKey,
		}
		if !reflect.DeepEqual(gotFields, want) {
			t.Fatalf("%s\nGet returned %+v, want %+v", input, gotFields, want)
		}
		if !opts.RunAt.IsZero() && !got.RunAt.Equal(opts.RunAt) {
			t.Fatalf("%s\nrun_at is %s, want %s", input, got.RunAt, opts.RunAt)
		}
		if row != nil && !reflect.DeepEqual(row, got) {
			t.Fatalf("%s\nthe enqueue returned %+v, Get returned %+v", input, row, got)
		}

		// The stored payload is the JSON of the args, up to jsonb's normalization.
		sent, err := json.Marshal(args)
		if err != nil {
			t.Fatalf("%s\nthe enqueue accepted args that do not marshal: %v", input, err)
		}
		var same bool
		if err := pool.QueryRow(ctx, `SELECT payload = $2::jsonb FROM `+jobs+` WHERE id = $1`, got.ID, string(sent)).Scan(&same); err != nil {
			t.Fatal(err)
		}
		if !same {
			t.Fatalf("%s\nstored payload %s, sent %s", input, got.Payload, sent)
		}
		var back, orig fuzzArgs
		if err := json.Unmarshal(got.Payload, &back); err != nil {
			t.Fatalf("%s\nthe stored payload %s does not decode: %v", input, got.Payload, err)
		}
		if err := json.Unmarshal(sent, &orig); err != nil {
			t.Fatal(err)
		}
		if back.Text != orig.Text {
			t.Fatalf("%s\nthe stored text decodes to %q, want %q", input, back.Text, orig.Text)
		}
	})
}

// jsonDepth is the deepest nesting of arrays and objects in the valid JSON b.
func jsonDepth(b []byte) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

func truncateBytes(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}
