package skiplock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// A replanned statement keeps its text within a period and changes it at the next one,
// and pgx prepares the new text on a connection that ran the old one: Postgres plans it
// anew, for the table as it is then (see replanned).
func TestReplanned_ANewPeriodIsPreparedAndPlannedAnew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()

	r := newReplanned(`SELECT count(*) FROM pg_class WHERE relname = $1`)
	run := func() string {
		t.Helper()
		q := r.text()
		var n int
		require.NoError(t, conn.QueryRow(ctx, q, "pg_class").Scan(&n))
		require.Equal(t, 1, n)
		return q
	}
	prepared := func() int {
		t.Helper()
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements
			WHERE statement LIKE 'SELECT count(*) FROM pg_class WHERE relname = $1%'`).Scan(&n))
		return n
	}
	// Wait for the start of a period, so that the runs below fall in one.
	for time.Now().UnixNano()%int64(replanEvery) > int64(replanEvery)/2 {
		time.Sleep(50 * time.Millisecond)
	}
	first := run()
	for range 7 { // past the five custom plans after which Postgres may keep a generic one
		assert.Equal(t, first, run(), "one text within a period")
	}
	assert.Equal(t, 1, prepared(), "one statement prepared on the connection")

	time.Sleep(replanEvery)
	second := run()
	assert.NotEqual(t, first, second, "a new text in the next period")
	assert.Contains(t, second, r.base, "the statement itself is unchanged")
	assert.Equal(t, 2, prepared(), "the new text is prepared, so planned, anew")
}
