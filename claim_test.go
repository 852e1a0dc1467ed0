package skiplock

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/pgtest"
)

func TestClaim_PlanUsesPartialIndexWithoutSort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	require.NoError(t, Migrate(ctx, pool, MigrateConfig{Schema: schema}))
	c, err := NewClient(pool, Config{Schema: schema})
	require.NoError(t, err)

	// 100,000 finished jobs (kept in the hot table) and 1,000 queued ones.
	_, err = pool.Exec(ctx, strings.ReplaceAll(`
		INSERT INTO {s}.jobs (kind, status, finished_at, attempts)
		SELECT 'k', 'succeeded', now(), 1 FROM generate_series(1, 100000);
		INSERT INTO {s}.jobs (kind, priority) SELECT 'k', i % 3 FROM generate_series(1, 1000) AS i;
		ANALYZE {s}.jobs;`, "{s}", `"`+schema+`"`))
	require.NoError(t, err)

	rows, err := pool.Query(ctx, "EXPLAIN "+c.sql.claim, "default", 100, "w1")
	require.NoError(t, err)
	var plan []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan = append(plan, line)
	}
	require.NoError(t, rows.Err())
	text := strings.Join(plan, "\n")
	assert.Contains(t, text, "jobs_claim_idx", text)
	assert.NotContains(t, text, "Sort", text)
	assert.NotContains(t, text, "Seq Scan on jobs", text)

	// And the claim itself returns the highest priority first.
	jobs, err := c.claim(ctx, "default", 10, "w1")
	require.NoError(t, err)
	require.Len(t, jobs, 10)
	for _, j := range jobs {
		assert.Equal(t, 2, j.Priority)
		assert.Equal(t, StatusRunning, j.Status)
		assert.Equal(t, 1, j.Attempts)
		assert.Equal(t, "w1", j.LockedBy)
	}
}
