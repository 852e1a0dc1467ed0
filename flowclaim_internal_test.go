package skiplock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/claim"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// A keyed queue looks for its jobs without a key only among its first 64 queued jobs (in
// claim order), as docs/flow-control.md says: a job without a key behind 100 keyed jobs is claimed
// by the claim that follows the 37th keyed one, and not before.
func TestFlow_KeyedQueueLooksForJobsWithoutAKeyAmongTheFirst64(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	require.NoError(t, Migrate(ctx, pool, MigrateConfig{Schema: schema}))
	c, err := NewClient(pool, Config{Schema: schema})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, pgutil.Render(schema, `
		INSERT INTO {s}.jobs (queue, kind, partition_key, run_at)
		SELECT 'keyed', 'k', 'key' || g, now() - interval '1 hour' + g * interval '1 ms' FROM generate_series(1, 100) g;
		INSERT INTO {s}.jobs (queue, kind, run_at) VALUES ('keyed', 'nokey', now() - interval '1 minute');`))
	require.NoError(t, err)
	f := claim.NewFlowClaimer(c.db, time.Minute)
	limits := QueueLimits{KeyConcurrency: 1}
	for claim := 1; claim <= 101; claim++ {
		jobs, _, err := f.Claim(ctx, "keyed", limits, 1, "w")
		require.NoError(t, err)
		require.Len(t, jobs, 1, "claim %d", claim)
		if jobs[0].Row.Kind == "nokey" {
			require.Equal(t, 38, claim, "the claim that took the job without a key")
			return
		}
	}
	t.Fatal("the job without a key was never claimed")
}
