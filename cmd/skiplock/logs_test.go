package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logs prints a job's records oldest first, as a table or JSON; a missing job is an
// error, a job without records prints nothing.
func TestLogs(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	id := f.insert(job{status: "running", attempts: 2})
	quiet := f.insert(job{status: "queued"})
	_, err := f.pool.Exec(context.Background(), `INSERT INTO `+pgx.Identifier{f.schema, "job_logs"}.Sanitize()+`
		(job_id, fence, seq, attempt, at, level, message, attrs) VALUES
		($1, 7, 1, 2, now(), 0, 'charged', '{"amount": 12}'),
		($1, 3, 1, 1, now() - interval '1 minute', 4, 'card declined', NULL)`, id)
	require.NoError(t, err)

	r := f.run("logs", strconv.FormatInt(id, 10))
	require.Equal(t, 0, r.code, r)
	assert.Equal(t, []string{"1"}, row(t, r.stdout, "1")[:1])
	assert.Contains(t, r.stdout, "WARN")
	assert.Contains(t, r.stdout, `{"amount": 12}`)
	assert.Less(t, indexOf(r.stdout, "card declined"), indexOf(r.stdout, "charged"), "oldest first")

	r = f.run("logs", "--id", strconv.FormatInt(id, 10), "--json")
	require.Equal(t, 0, r.code, r)
	var got []logJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
	require.Len(t, got, 2)
	assert.Equal(t, "WARN", got[0].Level)
	assert.Equal(t, "charged", got[1].Message)

	r = f.run("logs", strconv.FormatInt(quiet, 10))
	require.Equal(t, 0, r.code, r)
	assert.Empty(t, r.stdout)

	r = f.run("logs", "987654321")
	require.Equal(t, 1, r.code, r)
	assert.Equal(t, fmt.Sprintf("skiplock: logs: job 987654321 not found in schema %q\n", f.schema), r.stderr)
	r = f.run("logs", "x")
	require.Equal(t, 2, r.code, r)
	r = f.run("logs", "--id", strconv.FormatInt(id, 10), "987654321")
	require.Equal(t, 2, r.code, "an id given twice: %v", r)
	assert.Contains(t, r.stderr, "give the job's id once")
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}
