package skiplock

// Tests of the plans of the statements that take job ids from a subquery: each must
// reach its rows through the primary key even when the table's statistics are stale.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/maintenance"
	"github.com/skiplock/skiplock/internal/ownership"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/internal/record"
	"github.com/skiplock/skiplock/internal/settle"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A queue analyzed while empty (a VACUUM or ANALYZE between bursts, or on a new install)
// and then given a backlog keeps statistics that say it holds no rows until the next
// ANALYZE. With id IN (SELECT ...), the planner then chose nested-loop semi joins that
// walked every row of jobs for each heartbeat, sweep, purge and skipping success batch:
// in a 100k-job drain those statements ran for seconds on the CPU, success batches hit
// their 30 s timeout, and the jobs ran again after their leases ended. Each statement
// must find its rows by key, whatever the statistics say.
func TestPlans_ReachRowsByKeyWhenStatisticsSayTheTableIsEmpty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool, schema := claimSetup(t)
	s := `"` + schema + `"`
	exec := func(sql string) {
		t.Helper()
		_, err := pool.Exec(ctx, strings.ReplaceAll(sql, "{s}", s))
		require.NoError(t, err)
	}
	// A drained queue: its rows gone but for one straggler at the end of the heap, so the
	// vacuum cannot truncate the table. Its statistics now say the table's pages hold
	// (almost) no rows.
	exec(`INSERT INTO {s}.jobs (kind) SELECT 'k' FROM generate_series(1, 20001)`)
	exec(`DELETE FROM {s}.jobs WHERE id < (SELECT max(id) FROM {s}.jobs)`)
	exec(`VACUUM (ANALYZE) {s}.jobs`)
	// The next backlog fills those pages: 20,000 running jobs, and 20,000 archived ones.
	exec(`INSERT INTO {s}.jobs (kind, status, locked_by, locked_at, lease_until, attempts, fence)
		SELECT 'k', 'running', 'w', now(), now() + interval '1 minute', 1, 1 FROM generate_series(1, 20000);
		INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts,
			max_attempts, created_at, finished_at)
		SELECT 1000000 + i, 'default', 'k', '{}', 'succeeded', 0, now(), 1, 20, now(), now()
		FROM generate_series(1, 20000) AS i;`)
	var pages int
	var tuples float64
	require.NoError(t, pool.QueryRow(ctx, `SELECT relpages, reltuples FROM pg_class WHERE oid = $1::regclass`,
		s+".jobs").Scan(&pages, &tuples))
	require.Greater(t, pages, 50, "the vacuum kept the pages")
	require.Less(t, tuples, 10.0, "the statistics say the pages are empty")

	ids, fences := []int64{5, 17, 19000}, []int64{1, 1, 1}
	progress := []*string{nil, nil, nil}
	type statement struct {
		name string
		sql  string
		args []any
		// seqScan: the statement looks for its candidates with a scan of jobs (once per
		// run, not per row): the purge of kept jobs past retention has no index to use.
		seqScan bool
	}
	cases := []statement{
		{name: "heartbeat", sql: ownership.HeartbeatSQL, args: []any{ids, fences, "w", time.Minute, progress}},
		{name: "sweeper reclaim", sql: maintenance.ReclaimSQL, args: []any{time.Minute, 100}},
		{name: "sweep of cancelled sequence tasks", sql: maintenance.EndCancelledSequencesSQL, args: []any{100}},
		{name: "archive purge", sql: maintenance.PurgeArchiveSQL, args: []any{7 * 24 * time.Hour, 1000, time.Time{}, nil, nil,
			[]string{"q"}, []string{"k2"}, maintenance.EnqueueKeyRetention}, seqScan: true},
		{name: "archive purge of a queue", sql: maintenance.PurgeArchiveSQL, args: []any{time.Hour, 1000, time.Now().Add(-2 * time.Hour), "q", nil,
			[]string{}, []string{"k2"}, maintenance.EnqueueKeyRetention}, seqScan: true},
		{name: "archive purge of a kind", sql: maintenance.PurgeArchiveSQL, args: []any{time.Hour, 1000, time.Time{}, nil, "k2",
			[]string{}, []string{}, maintenance.EnqueueKeyRetention}, seqScan: true},
		{name: "requeue", sql: settle.RequeueSQL, args: []any{ids, nil, nil}},
		{name: "failure", sql: record.FailureSQL, args: []any{ids, fences, "w", `{}`}},
		{name: "release", sql: ownership.ReleaseSQL, args: []any{ids, fences, "w"}},
	}
	for _, mode := range []Completion{CompletionArchive, CompletionDelete, CompletionKeep} {
		for _, skip := range []bool{false, true} {
			cases = append(cases, statement{name: "success", sql: record.CompleteSQL(mode, false, skip), args: []any{ids, fences, "w"}})
			if mode != CompletionDelete {
				cases = append(cases, statement{name: "success with output", sql: record.CompleteSQL(mode, true, skip),
					args: []any{ids, fences, "w", progress, progress}})
			}
		}
	}
	for _, c := range cases {
		plan := explain(t, pool, "EXPLAIN "+pgutil.Render(schema, c.sql), c.args...)
		text := c.name + ":\n" + strings.Join(plan, "\n")
		assert.NotContains(t, text, "Nested Loop Semi Join", text)
		if !c.seqScan {
			assert.NotContains(t, text, "Seq Scan on jobs ", text)
		}
		for i, line := range plan {
			// An index scan of the primary key with no condition reads the whole table.
			if strings.Contains(line, "Index Scan using jobs_pkey on jobs") && !strings.Contains(line, "Index Scan Backward") {
				require.Less(t, i+1, len(plan), text)
				assert.Contains(t, plan[i+1], "Index Cond", text)
			}
		}
	}
}

// The fenced statements match their (id, fence) pairs with a hashed subplan, read once per
// statement, in custom and in generic plans alike. As a join with unnest($1, $2), a
// generic plan (pgx prepares its statements, and Postgres switches to a generic plan
// after five runs) chose a nested loop that read every pair for every row: 35–55 ms for a
// batch of 500 against 2–8 ms.
func TestPlans_FencedStatementsProbeTheirPairsInAHashInGenericPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool, schema := claimSetup(t)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	ids, fences := []int64{5, 5, 19000}, []int64{1, 2, 1}
	progress := []*string{nil, nil, nil}
	cases := map[string]struct {
		sql  string
		args []any
	}{
		"heartbeat": {ownership.HeartbeatSQL, []any{ids, fences, "w", time.Minute, progress}},
		"failure":   {record.FailureSQL, []any{ids, fences, "w", `{}`}},
		"release":   {ownership.ReleaseSQL, []any{ids, fences, "w"}},
		"success":   {record.CompleteSQL(CompletionArchive, true, false), []any{ids, fences, "w", progress, progress}},
		"skipping":  {record.CompleteSQL(CompletionKeep, true, true), []any{ids, fences, "w", progress, progress}},
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		_, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode)
		require.NoError(t, err)
		for name, c := range cases {
			rows, err := conn.Query(ctx, "EXPLAIN "+pgutil.Render(schema, c.sql), c.args...)
			require.NoError(t, err, name)
			var plan []string
			for rows.Next() {
				var line string
				require.NoError(t, rows.Scan(&line))
				plan = append(plan, line)
			}
			require.NoError(t, rows.Err(), name)
			text := name + " (" + mode + "):\n" + strings.Join(plan, "\n")
			assert.Contains(t, text, "hashed SubPlan", text)
			assert.NotContains(t, text, "Nested Loop", text)
		}
	}
}

// The failure statement reads each attempt's entry of its JSON argument (verdict, delay,
// message) once per row. Written into each SET expression, the lookup ran seventeen times
// a row: in a failure storm that was most of the statement's cost (3.4 µs of 19 per row
// in a batch of 100).
func TestPlans_FailureLooksUpEachAttemptsEntryOnce(t *testing.T) {
	t.Parallel()
	_, pool, schema := claimSetup(t)
	plan := explain(t, pool, "EXPLAIN VERBOSE "+pgutil.Render(schema, record.FailureSQL),
		[]int64{1}, []int64{1}, "w", `{"1:1": ["retry", 1000, "boom"]}`)
	text := strings.Join(plan, "\n")
	// The entry's key is the row's "id:fence".
	assert.Equal(t, 1, strings.Count(text, "(jobs.fence)::text"), text)
}

// explain runs an EXPLAIN statement and returns its plan's lines.
func explain(t *testing.T, pool *pgxpool.Pool, query string, args ...any) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), query, args...)
	require.NoError(t, err, query)
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err, query)
	return plan
}
