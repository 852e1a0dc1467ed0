package skiplock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/claim"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// fuzzDecodeArgs has a field of most shapes a payload decodes into, and nests.
type fuzzDecodeArgs struct {
	S string            `json:"s"`
	N int64             `json:"n"`
	U uint8             `json:"u"`
	F float64           `json:"f"`
	B bool              `json:"b"`
	L []int32           `json:"l"`
	M map[string]string `json:"m"`
	A any               `json:"a"`
	T time.Time         `json:"t"`
	P *fuzzDecodeArgs   `json:"p"`
}

func (fuzzDecodeArgs) Kind() string { return "fuzz_decode" }

// fuzzDecodePtrArgs is registered as a pointer type, which Handle allocates itself.
type fuzzDecodePtrArgs fuzzDecodeArgs

func (*fuzzDecodePtrArgs) Kind() string { return "fuzz_decode_ptr" }

// errFuzzDecoded is what the fuzz handlers return: it cancels the job, so a decoded job
// (cancelled) is told apart from one whose payload did not decode (failed).
var errFuzzDecoded = errors.New("decoded")

// FuzzDecodeJobRow stores arbitrary bytes as a job's payload (as jsonb, when Postgres takes
// them; otherwise the claimed row is handed to the worker with the raw bytes as payload) and
// as its error history (as jsonb when Postgres takes them, else NULL), claims the job with
// the real claim statement, and runs it through the worker's typed decode path. The job must
// either reach its handler with exactly what encoding/json decodes (the handler then
// cancels it) or fail permanently (status failed) with the decode error recorded. A panic,
// a failed claim, or a job left running is a bug.
//
// One schema, pool and worker serve every input of a fuzzing process; each input's job is
// deleted after it.
func FuzzDecodeJobRow(f *testing.F) {
	ctx := context.Background()
	schema := pgtest.Schema(f)
	pool := pgtest.Pool(f)
	if err := Migrate(ctx, pool, MigrateConfig{Schema: schema}); err != nil {
		f.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	client, err := NewClient(pool, Config{Schema: schema, Logger: logger})
	if err != nil {
		f.Fatal(err)
	}
	w, err := NewWorker(client, WorkerConfig{ID: "fuzz-decode", Queues: map[string]QueueConfig{"fuzz": {}}})
	if err != nil {
		f.Fatal(err)
	}
	var handed any // the args the handler of the current input received
	if err := Handle(w, func(ctx context.Context, job *Job[fuzzDecodeArgs]) error {
		handed = job.Args
		return CancelJob(errFuzzDecoded)
	}); err != nil {
		f.Fatal(err)
	}
	if err := Handle(w, func(ctx context.Context, job *Job[*fuzzDecodePtrArgs]) error {
		handed = job.Args
		return CancelJob(errFuzzDecoded)
	}); err != nil {
		f.Fatal(err)
	}
	s := pgx.Identifier{schema}.Sanitize()
	// try_jsonb turns text into jsonb, or NULL when Postgres does not take it.
	if _, err := pool.Exec(ctx, `CREATE FUNCTION `+s+`.try_jsonb(t text) RETURNS jsonb LANGUAGE plpgsql AS $$
		BEGIN RETURN t::jsonb; EXCEPTION WHEN others THEN RETURN NULL; END $$`); err != nil {
		f.Fatal(err)
	}
	insertSQL := `INSERT INTO ` + s + `.jobs (queue, kind, payload, errors)
		VALUES ('fuzz', $1, COALESCE(` + s + `.try_jsonb($2), '"not stored"'),
			-- the schema only takes an array (jobs_errors_check); anything else is stored as no history
			(SELECT h FROM ` + s + `.try_jsonb($3) AS h WHERE jsonb_typeof(h) = 'array'))
		RETURNING id, ` + s + `.try_jsonb($2) IS NOT NULL`
	statusSQL := `SELECT status, coalesce(last_error, '') FROM ` + s + `.jobs WHERE id = $1`
	deleteSQL := `DELETE FROM ` + s + `.jobs WHERE id = $1`

	// The seeds in testdata/fuzz/FuzzDecodeJobRow add NUL bytes, invalid UTF-8, huge numbers
	// and deep nesting to these.
	f.Add([]byte(`{"s":"x","n":1,"u":2,"f":1.5,"b":true,"l":[1],"m":{"k":"v"},"a":[null],"t":"2026-01-01T00:00:00Z","p":{"s":"y"}}`), []byte(`[]`), false)
	f.Add([]byte(`{"n":"not a number"}`), []byte(`[{"attempt":1,"at":"2026-01-01T00:00:00Z","error":"boom"}]`), true)
	f.Add([]byte(`not json`), []byte(`not json`), false)

	f.Fuzz(func(t *testing.T, payload, history []byte, ptr bool) {
		kind := fuzzDecodeArgs{}.Kind()
		if ptr {
			kind = (*fuzzDecodePtrArgs)(nil).Kind()
		}
		input := fmt.Sprintf("payload=%q history=%q ptr=%v", payload, history, ptr)
		var id int64
		var stored bool
		err := pool.QueryRow(ctx, insertSQL, kind, postgresText(payload), postgresText(history)).Scan(&id, &stored)
		if err != nil {
			t.Fatalf("%s\ninsert: %v", input, err)
		}
		defer func() {
			if _, err := pool.Exec(ctx, deleteSQL, id); err != nil {
				t.Fatal(err)
			}
		}()

		jobs, err := claim.NewClaimer(client.db, time.Minute).Claim(ctx, "fuzz", 1, w.id, nil)
		if err != nil {
			t.Fatalf("%s\nclaiming the job failed, so it stays running with no worker: %v", input, err)
		}
		if len(jobs) != 1 || jobs[0].Row.ID != id {
			t.Fatalf("%s\nclaimed %d jobs, want job %d", input, len(jobs), id)
		}
		row, fence := jobs[0].Row, jobs[0].Fence
		if !stored {
			row.Payload = payload // what a decoder must survive even if Postgres never returns it
		}

		// What encoding/json makes of the payload is what the handler must get.
		var want any
		var decodeErr error
		if ptr {
			// Into the value a points to: a JSON null leaves it zero (Handle keeps the
			// handler's *T non-nil), as it leaves the value of a T that is not a pointer.
			a := new(fuzzDecodePtrArgs)
			decodeErr = json.Unmarshal(row.Payload, a)
			want = a
		} else {
			var a fuzzDecodeArgs
			decodeErr = json.Unmarshal(row.Payload, &a)
			want = a
		}

		handed = nil
		jc := jobtype.NewJobCtx(ctx, 0, true)
		w.executor.Execute(claim.Dispatched{Job: jc, Key: jobtype.AttemptKey{ID: row.ID, Fence: fence}, Row: row}, nil)
		jc.Cancel(nil)     // ends its watch of ctx
		w.failures.Flush() // failures are written in the background

		var status, lastErr string
		if err := pool.QueryRow(ctx, statusSQL, id).Scan(&status, &lastErr); err != nil {
			t.Fatalf("%s\nreading the job back: %v", input, err)
		}
		if decodeErr == nil {
			if status != string(StatusCancelled) || !reflect.DeepEqual(handed, want) {
				t.Fatalf("%s\nthe payload decodes, but the job is %s (last error %q) and the handler got %#v, want %#v",
					input, status, lastErr, handed, want)
			}
			return
		}
		if status != string(StatusFailed) || !strings.Contains(lastErr, "decoding payload") || handed != nil {
			t.Fatalf("%s\nthe payload does not decode (%v), but the job is %s with last error %q (handler got %#v); want failed",
				input, decodeErr, status, lastErr, handed)
		}
	})
}

// postgresText returns b as a string if Postgres can hold it as text (valid UTF-8 without
// NUL), else nil (SQL NULL).
func postgresText(b []byte) *string {
	if !utf8.Valid(b) || bytes.IndexByte(b, 0) >= 0 {
		return nil
	}
	s := string(b)
	return &s
}
