package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostileStep is a step name with a tab, a newline and a terminal escape in it.
const hostileStep = "ship\t\n\x1b[31mred"

// recordSteps writes the steps a durable job's handler would have recorded for job id.
func (f *fixture) recordSteps(id int64, names ...string) {
	f.t.Helper()
	for seq, name := range names {
		_, err := f.pool.Exec(context.Background(), `INSERT INTO `+pgx.Identifier{f.schema, "job_steps"}.Sanitize()+`
			(job_id, seq, name, kind, result, attempt, started_at, finished_at)
			VALUES ($1, $2, $3, 'step', to_jsonb($3::text), 1, now() - interval '2 ms', now())`, id, seq, name)
		require.NoError(f.t, err)
	}
}

func TestStepsAndSignal(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	jobID := f.insert(job{kind: "saga", status: "running", attempts: 1, lockedBy: "w"})
	f.recordSteps(jobID, "reserve", hostileStep)

	r := f.run("signal", id(jobID), "approve", `{"by": "ops"}`)
	require.Equal(t, 0, r.code, r)
	assert.Equal(t, fmt.Sprintf("signal \"approve\" sent to job %d\n", jobID), r.stdout)

	r = f.run("steps", id(jobID))
	require.Equal(t, 0, r.code, r)
	assert.Contains(t, r.stdout, fmt.Sprintf("job %d: 2 steps", jobID))
	assert.Equal(t, []string{"0", `"reserve"`, "step", "done", "9", "B"}, row(t, r.stdout, "0")[:6])
	assert.Contains(t, r.stdout, `"ship\t\n\x1b[31mred"`, "the hostile name prints quoted")
	assert.NotContains(t, r.stdout, "\x1b")
	assert.Contains(t, r.stdout, "1 signal")
	assert.Contains(t, r.stdout, `"approve"`)
	assert.Contains(t, r.stdout, `{"by": "ops"}`)

	r = f.run("steps", "--json", id(jobID))
	require.Equal(t, 0, r.code, r)
	var got stepsJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	require.Len(t, got.Steps, 2)
	assert.Equal(t, hostileStep, got.Steps[1].Name)
	require.Len(t, got.Signals, 1)
	assert.JSONEq(t, `{"by": "ops"}`, string(got.Signals[0].Payload))
	assert.Nil(t, got.Signals[0].ConsumedSeq)

	r = f.run("steps", "987654321")
	require.Equal(t, 1, r.code, r)
	assert.Equal(t, fmt.Sprintf("skiplock: steps: job 987654321 not found in schema %q\n", f.schema), r.stderr)

	done := f.insert(job{status: "succeeded"})
	r = f.run("signal", id(done), "approve")
	require.Equal(t, 1, r.code, r)
	assert.Contains(t, r.stderr, "has finished")

	for _, args := range [][]string{{"signal", id(jobID)}, {"signal", "x", "approve"}, {"signal", id(jobID), "approve", "{not json"},
		{"signal", id(jobID), strings.Repeat("n", 300)}, {"steps"}, {"fork", id(jobID)}} {
		r = f.run(args...)
		assert.Equal(t, 2, r.code, "%v: %s", args, r)
	}
}

func TestFork(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	jobID := f.insert(job{kind: "saga", status: "failed", attempts: 3})
	f.recordSteps(jobID, "reserve", "charge", "ship")

	r := f.run("fork", id(jobID), "charge")
	require.Equal(t, 0, r.code, r)
	var newID int64
	_, err := fmt.Sscanf(r.stdout, fmt.Sprintf("job %d forked from step \"charge\": new job %%d", jobID), &newID)
	require.NoError(t, err, r.stdout)
	status, attempts := f.state(newID)
	assert.Equal(t, "queued", status)
	assert.Zero(t, attempts)
	r = f.run("steps", "--json", id(newID))
	require.Equal(t, 0, r.code, r)
	var got stepsJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	require.Len(t, got.Steps, 1, "the steps before charge are copied")
	assert.Equal(t, "reserve", got.Steps[0].Name)

	r = f.run("fork", id(jobID), "refund")
	require.Equal(t, 1, r.code, r)
	assert.Contains(t, r.stderr, `recorded no step "refund"`)
}
