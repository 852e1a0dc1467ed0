package skiplock

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/claim"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// claimSetup migrates a fresh schema and returns a client on it, for the tests of the
// unexported claim statement (the external tests use setup in helpers_test.go).
func claimSetup(t testing.TB) (*Client, *pgxpool.Pool, string) {
	t.Helper()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	require.NoError(t, Migrate(context.Background(), pool, MigrateConfig{Schema: schema}))
	c, err := NewClient(pool, Config{Schema: schema})
	require.NoError(t, err)
	return c, pool, schema
}

func TestClaim_PlanUsesPartialIndexWithoutSort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, pool, schema := claimSetup(t)

	// 100,000 finished jobs (kept in the hot table) and 1,000 queued ones.
	_, err := pool.Exec(ctx, strings.ReplaceAll(`
		INSERT INTO {s}.jobs (kind, status, finished_at, attempts)
		SELECT 'k', 'succeeded', now(), 1 FROM generate_series(1, 100000);
		INSERT INTO {s}.jobs (kind, priority) SELECT 'k', i % 3 FROM generate_series(1, 1000) AS i;
		ANALYZE {s}.jobs;`, "{s}", `"`+schema+`"`))
	require.NoError(t, err)

	plan := explain(t, pool, "EXPLAIN "+claim.NewClaimer(c.db, time.Minute).Sql, "default", 100, "w1", time.Minute)
	text := strings.Join(plan, "\n")
	assert.Contains(t, text, "jobs_claim_idx", text)
	assert.NotContains(t, text, "Sort", text)
	assert.NotContains(t, text, "Seq Scan on jobs", text)

	// And the claim itself returns the highest priority first.
	jobs, err := claim.NewClaimer(c.db, time.Minute).Claim(ctx, "default", 10, "w1", nil)
	require.NoError(t, err)
	require.Len(t, jobs, 10)
	for _, j := range jobs {
		assert.Equal(t, 2, j.Row.Priority)
		assert.Equal(t, StatusRunning, j.Row.Status)
		assert.Equal(t, 1, j.Row.Attempts)
		assert.Equal(t, int64(1), j.Fence)
		assert.Equal(t, "w1", j.Row.LockedBy)
	}
}

func TestClaim_FutureJobsAreNotWalkedOver(t *testing.T) {
	t.Parallel()
	c, pool, schema := claimSetup(t)
	exec := schemaExec(t, pool, schema)
	buffers := func() float64 {
		return claimBuffers(t, pool, 50, claim.NewClaimer(c.db, time.Minute).Sql, "default", 100, "w1", time.Minute)
	}

	// Jobs scheduled for tomorrow, at higher priorities than the 50 due ones: a claim that
	// filtered run_at while walking the index would read all their entries, so its cost
	// would grow tenfold from 20,000 to 200,000 of them. It must stay flat.
	future := func(n int) {
		exec(fmt.Sprintf(`INSERT INTO {s}.jobs (kind, priority, run_at)
			SELECT 'k', 5 + i %% 3, now() + interval '1 day' FROM generate_series(1, %d) AS i;
			ANALYZE {s}.jobs`, n))
	}
	exec(`INSERT INTO {s}.jobs (kind, priority) SELECT 'k', 0 FROM generate_series(1, 50)`)
	future(20_000)
	few := buffers()
	future(180_000)
	many := buffers()
	// A claim that walked the 180,000 added entries would read some 700 more index pages
	// alone; the margin absorbs what a busy machine adds (catalog and hint-bit reads, seen
	// up to ~105 extra buffers when the suite runs in parallel).
	assert.Less(t, many, few+250, "buffers read by the claim: %v beside 200,000 future jobs, %v beside 20,000", many, few)
}

// Claimed jobs leave their entries at the front of the claim index until the next VACUUM
// (a claim moves a job out of the index's predicate, not out of the index). The claim's
// seek of the queue's priorities steps over them once to the first queued job; its scan
// of the due jobs then starts at that job, so a draining queue's claims do not step over
// them a second time.
func TestClaim_ScanOfDueJobsStartsAfterClaimedEntries(t *testing.T) {
	t.Parallel()
	c, pool, schema := claimSetup(t)
	behindClaimedEntries(t, pool, schema)

	top := analyzed(t, pool, claim.NewClaimer(c.db, time.Minute).Sql, "default", 100, "w1", time.Minute)
	require.Equal(t, 50.0, top["Actual Rows"], "claims the 50 queued jobs")
	scan, found := dueScanBuffers(top)
	require.True(t, found, "the claim's plan has a LockRows node over jobs_claim_idx")
	// Stepping over the 40,000 entries again read 295 buffers; locking the 50 jobs reads
	// about 55 (one per lock, and the index pages of their entries).
	assert.Less(t, scan, 150.0, "buffers read by the scan of due jobs (the whole claim read %v)", planBuffers(top))
}

// behindClaimedEntries fills the default queue of schema with 50 queued jobs behind
// 40,000 claimed (running) ones, whose entries stay at the front of jobs_claim_idx until
// the next VACUUM.
func behindClaimedEntries(t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	_, err := pool.Exec(context.Background(), strings.ReplaceAll(`
		INSERT INTO {s}.jobs (kind, run_at) SELECT 'k', now() - interval '1 hour' FROM generate_series(1, 40000);
		UPDATE {s}.jobs SET status = 'running', locked_at = now(), locked_by = 'w0', attempts = 1, fence = 1;
		INSERT INTO {s}.jobs (kind) SELECT 'k' FROM generate_series(1, 50);
		ANALYZE {s}.jobs`, "{s}", `"`+schema+`"`))
	require.NoError(t, err)
}

// analyzed runs query under EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON), which executes it
// (a claim claims), and returns the plan's top node.
func analyzed(t *testing.T, pool *pgxpool.Pool, query string, args ...any) map[string]any {
	t.Helper()
	out := explain(t, pool, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+query, args...)
	var plan []map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.Join(out, "\n")), &plan))
	return plan[0]["Plan"].(map[string]any)
}

// planBuffers is the number of shared buffers plan node n and the nodes under it read
// (hits and reads).
func planBuffers(n map[string]any) float64 {
	return n["Shared Hit Blocks"].(float64) + n["Shared Read Blocks"].(float64)
}

// schemaExec returns a function that runs SQL on pool with {s} standing for schema.
func schemaExec(t *testing.T, pool *pgxpool.Pool, schema string) func(sql string) {
	return func(sql string) {
		t.Helper()
		_, err := pool.Exec(context.Background(), strings.ReplaceAll(sql, "{s}", pgx.Identifier{schema}.Sanitize()))
		require.NoError(t, err)
	}
}

// claimBuffers runs the claim statement sql with args under EXPLAIN (ANALYZE, BUFFERS)
// in a rolled-back transaction, checks that it claimed rows jobs, and returns the
// buffers it read (hits and reads).
func claimBuffers(t *testing.T, pool *pgxpool.Pool, rows float64, sql string, args ...any) float64 {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	var plan []map[string]any
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...).Scan(&plan))
	top := plan[0]["Plan"].(map[string]any)
	require.Equal(t, rows, top["Actual Rows"], "jobs claimed")
	return planBuffers(top)
}

// planNode returns the first node of the plan under top (top included, depth first) for
// which match reports true; nil if there is none.
func planNode(top map[string]any, match func(n map[string]any) bool) map[string]any {
	if match(top) {
		return top
	}
	kids, _ := top["Plans"].([]any)
	for _, k := range kids {
		if n := planNode(k.(map[string]any), match); n != nil {
			return n
		}
	}
	return nil
}

// dueScanBuffers sums the buffers of the plan's scans of due jobs: the LockRows nodes (FOR
// UPDATE SKIP LOCKED) over a scan of jobs_claim_idx. found is false when it has none.
func dueScanBuffers(top map[string]any) (sum float64, found bool) {
	claimIdx := func(n map[string]any) bool { return n["Index Name"] == "jobs_claim_idx" }
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if n["Node Type"] == "LockRows" && planNode(n, claimIdx) != nil {
			sum, found = sum+planBuffers(n), true
			return
		}
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			walk(k.(map[string]any))
		}
	}
	walk(top)
	return sum, found
}

func TestPoll_FindsDueAndPausedQueuesWithoutWalkingFutureJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, pool, schema := claimSetup(t)
	exec := schemaExec(t, pool, schema)
	// q_due: one due job at a low priority, below 200,000 jobs due tomorrow at higher ones.
	// q_future: only future jobs. q_running: only a running job. q_empty: nothing.
	// q_paused: a due job, but paused. q_busy: a due job, but not asked about (no free slot).
	exec(`INSERT INTO {s}.jobs (queue, kind, priority) VALUES ('q_due', 'k', 0), ('q_paused', 'k', 0), ('q_busy', 'k', 0);
		INSERT INTO {s}.jobs (queue, kind, priority, run_at)
		SELECT q, 'k', 5 + i % 3, now() + interval '1 day'
		FROM generate_series(1, 100000) AS i, unnest(ARRAY['q_due', 'q_future']) AS q;
		INSERT INTO {s}.jobs (queue, kind, status, locked_at, locked_by, attempts) VALUES ('q_running', 'k', 'running', now(), 'w', 1);
		INSERT INTO {s}.queues (name, paused_at) VALUES ('q_paused', now()), ('q_resumed', NULL);
		ANALYZE {s}.jobs`)
	p := claim.NewPoller(c.db, time.Second, nil, nil, c.logger)
	names := []string{"q_due", "q_future", "q_running", "q_empty", "q_paused", "q_busy"}
	candidates := []bool{true, true, true, true, true, false} // q_busy has no free slot
	rows, err := pool.Query(ctx, p.Sql, names, candidates)
	require.NoError(t, err)
	type state struct{ paused, due bool }
	got := map[string]state{}
	var (
		name        string
		paused, due bool
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &paused, &due}, func() error {
		got[name] = state{paused, due}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, map[string]state{
		"q_due": {due: true}, "q_future": {}, "q_running": {}, "q_empty": {},
		"q_paused": {paused: true}, "q_busy": {},
	}, got)

	// One statement for every queue, and it reads index pages per priority, not per job:
	// walking the 200,000 future entries would take some 800 pages.
	buffers := planBuffers(analyzed(t, pool, p.Sql, names, candidates))
	t.Logf("the poll read %v buffers", buffers)
	assert.Less(t, buffers, 200.0, "buffers read by the poll beside 200,000 future jobs")
}

// The poll's due check steps over the entries claimed jobs leave at the front of the
// claim index (until the next VACUUM) once, as the claim does: its walk of the queue's
// priorities finds each one's first queued job, and the check starts there, not at the
// front of the priority's range again.
func TestPoll_StepsOverClaimedEntriesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, pool, schema := claimSetup(t)
	behindClaimedEntries(t, pool, schema)
	p := claim.NewPoller(c.db, time.Second, nil, nil, c.logger)
	names, candidates := []string{DefaultQueue}, []bool{true}
	var due bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT due FROM (`+p.Sql+`) p`, names, candidates).Scan(&due))
	require.True(t, due, "the queue has due jobs")

	top := analyzed(t, pool, p.Sql, names, candidates)
	walk := planNode(top, func(n map[string]any) bool { return n["Subplan Name"] == "CTE prios" })
	require.NotNil(t, walk, "the poll's plan walks the queue's priorities")
	t.Logf("the poll read %v buffers, %v of them in its walk", planBuffers(top), planBuffers(walk))
	// The walk steps over the 40,000 entries once (some 245 buffers, several times that
	// while they are not yet marked dead). A due check that stepped over them again read
	// as much once more; the rest of the poll reads a few buffers.
	assert.Less(t, planBuffers(top)-planBuffers(walk), 100.0,
		"buffers the poll read besides its walk of the queue's priorities (%v of %v)", planBuffers(walk), planBuffers(top))
}

// The claim reads its rows (RowReader: destinations shared by the rows, strings made once
// per claim) into the same JobRows as scanJob reads the same rows: every column, NULL or
// not, two kinds and a deadline in the metadata.
func TestClaim_RowsMatchScanJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, pool, schema := claimSetup(t)
	jobs := pgx.Identifier{schema, "jobs"}.Sanitize()
	_, err := pool.Exec(ctx, `INSERT INTO `+jobs+` (kind, payload, priority, max_attempts, last_error, errors, unique_key, metadata, progress, output, run_at)
		VALUES ('k1', '{"a": 1}', 0, 5, 'boom', '[{"attempt": 1, "at": "2026-01-02T03:04:05Z", "error": "boom"}]', 'u1',
			'{"m": "x", "skiplock_deadline": "2099-01-01T00:00:00.5Z"}', '{"value": 50, "message": "half"}', '{"o": true}', now() - interval '1 hour'),
		('k2', '{}', 0, 25, NULL, NULL, NULL, '{}', NULL, NULL, now() - interval '2 hours'),
		('k1', '{"b": [1, 2]}', 0, 25, NULL, NULL, NULL, '{}', NULL, NULL, now() - interval '3 hours')`)
	require.NoError(t, err)
	claimed, err := claim.NewClaimer(c.db, time.Minute).Claim(ctx, DefaultQueue, 10, "w1", nil)
	require.NoError(t, err)
	require.Len(t, claimed, 3)
	rows, err := pool.Query(ctx, `SELECT `+jobColumns+` FROM `+jobs+` ORDER BY id`)
	require.NoError(t, err)
	want, err := collectJobs(rows)
	require.NoError(t, err)
	got := map[int64]*JobRow{}
	for _, cj := range claimed {
		cj.Row.Fence = 0 // set by the starter, not read
		got[cj.Row.ID] = cj.Row
	}
	for _, w := range want {
		assert.Equal(t, w, got[w.ID])
	}
	assert.NotNil(t, want[0].Progress)
	assert.Equal(t, "2099-01-01T00:00:00.5Z", want[0].Deadline.UTC().Format(time.RFC3339Nano))
}

// A claim runs its connection's cached generic plan (pgutil.PlanSettingsSQL): Postgres
// would otherwise plan it again at every run, because its LIMIT is a parameter. The plan
// is made by the first claim, here on an empty table whose statistics say so, and kept
// while a backlog grows and nothing analyzes the table: it must walk the claim index all
// the same. The settings last only for the claim's transaction.
func TestClaim_RunsOneCachedPlanThatWalksTheIndexAtEverySize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, pool, schema := oneConnSetup(t)
	claimer := claim.NewClaimer(c.db, time.Minute)
	for range 3 {
		claimed, err := claimer.Claim(ctx, DefaultQueue, 10, "w1", nil)
		require.NoError(t, err)
		require.Empty(t, claimed)
	}
	_, err := pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "jobs"}.Sanitize()+` (kind) SELECT 'k' FROM generate_series(1, 20000)`)
	require.NoError(t, err)
	claimed, err := claimer.Claim(ctx, DefaultQueue, 10, "w1", nil)
	require.NoError(t, err)
	require.Len(t, claimed, 10)

	assertOneClaimPlanWalksTheIndex(t, pool, claimer.Sql, `'`+DefaultQueue+`', 10, 'w1', '1 minute'`)
}

// assertOneClaimPlanWalksTheIndex checks that the claim statement sql, prepared on pool's
// one connection, ran four times with one cached plan (none planned anew), and that the
// plan, shown for args, walks the claim index, finds the rows to update by TID, and
// reads no table sequentially; and that the connection's settings are its own again.
func assertOneClaimPlanWalksTheIndex(t *testing.T, pool *pgxpool.Pool, sql, args string) {
	t.Helper()
	generic, custom, plan := cachedPlan(t, pool, sql, args)
	assert.Equal(t, int64(0), custom, "claims planned anew")
	assert.Equal(t, int64(4), generic, "claims that ran the cached plan")
	assert.NotContains(t, plan, "Seq Scan", plan)
	assert.Contains(t, plan, "jobs_claim_idx", plan)
	assert.Contains(t, plan, "Tid Scan on jobs", plan)
	assertOwnPlanSettings(t, pool)
}

// The resumed claim, too, runs one cached plan, made on an empty table, that walks the
// claim index at every size.
func TestClaim_ResumedClaimRunsOneCachedPlanThatWalksTheIndexAtEverySize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, pool, schema := oneConnSetup(t)
	claimer := claim.NewClaimer(c.db, time.Minute)
	from := &claim.Resume{RunAt: time.Now()}
	for range 3 {
		claimed, err := claimer.Claim(ctx, DefaultQueue, 10, "w1", from)
		require.NoError(t, err)
		require.Empty(t, claimed)
	}
	_, err := pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "jobs"}.Sanitize()+` (kind, run_at) SELECT 'k', now() - interval '1 hour' FROM generate_series(1, 20000)`)
	require.NoError(t, err)
	*from = firstQueued(t, pool, schema)
	claimed, err := claimer.Claim(ctx, DefaultQueue, 10, "w1", from)
	require.NoError(t, err)
	require.Len(t, claimed, 10)

	assertOneClaimPlanWalksTheIndex(t, pool, claimer.ResumedSql,
		fmt.Sprintf(`'%s', 10, 'w1', '1 minute', 0, '%s', %d`, DefaultQueue, from.RunAt.Format(time.RFC3339Nano), from.ID))
}

// oneConnSetup is claimSetup on a pool of one connection, whose prepared statements (and
// their cached plans) cachedPlan reads, with a jobs table vacuumed and analyzed while
// empty: its statistics say so until the next ANALYZE.
func oneConnSetup(t *testing.T) (*Client, *pgxpool.Pool, string) {
	t.Helper()
	return oneConnSetupWith(t, nil)
}

// oneConnSetupWith is oneConnSetup with the connection's runtime parameters params.
func oneConnSetupWith(t *testing.T, params map[string]string) (*Client, *pgxpool.Pool, string) {
	t.Helper()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	cfg.MaxConns = 1
	maps.Copy(cfg.ConnConfig.RuntimeParams, params)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, Migrate(ctx, pool, MigrateConfig{Schema: schema}))
	c, err := NewClient(pool, Config{Schema: schema})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `VACUUM ANALYZE `+pgx.Identifier{schema, "jobs"}.Sanitize())
	require.NoError(t, err)
	return c, pool, schema
}

// cachedPlan returns, for the statement sql prepared on pool's one connection, how many of
// its runs used its generic plan and how many a custom one, and the plan it keeps, shown
// for the parameters args (SQL literals) under pgutil.PlanSettingsSQL, as it runs.
func cachedPlan(t *testing.T, pool *pgxpool.Pool, sql, args string) (generic, custom int64, plan string) {
	t.Helper()
	ctx := context.Background()
	var name string
	require.NoError(t, pool.QueryRow(ctx, `SELECT name, generic_plans, custom_plans FROM pg_prepared_statements
		WHERE statement = $1`, sql).Scan(&name, &generic, &custom))
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }() // a failed check must not leave the pool's one connection taken
	_, err = tx.Exec(ctx, pgutil.PlanSettingsSQL)
	require.NoError(t, err)
	rows, err := tx.Query(ctx, `EXPLAIN EXECUTE `+pgx.Identifier{name}.Sanitize()+`(`+args+`)`, pgx.QueryExecModeSimpleProtocol)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return generic, custom, strings.Join(lines, "\n")
}

// assertOwnPlanSettings checks that pool's connection is back to its own plan settings:
// pgutil.PlanSettingsSQL's last only for the transaction they were set in.
func assertOwnPlanSettings(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var mode, seqscan string
	var jitOwn bool
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT current_setting('plan_cache_mode'), current_setting('enable_seqscan'),
		current_setting('jit') = (SELECT reset_val FROM pg_settings WHERE name = 'jit')`).Scan(&mode, &seqscan, &jitOwn))
	assert.Equal(t, "auto", mode)
	assert.Equal(t, "on", seqscan)
	assert.True(t, jitOwn, "jit is the connection's own again")
}

// The claims are never compiled with JIT. A generic plan's cost grows with the table
// (a claim's LIMIT $2 is taken for a tenth of the due jobs): with 10^7 jobs queued it was
// 707,326, far past jit_above_cost, and Postgres compiled the claim at every run, 300 ms
// of a 302 ms claim. Here the connection's jit_above_cost is 0, so every plan it runs
// would be compiled: the claims' own settings (pgutil.PlanSettingsSQL) must turn JIT off.
func TestClaim_IsNeverCompiledWithJIT(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, pool, schema := oneConnSetupWith(t, map[string]string{"jit_above_cost": "0"})
	_, err := pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "jobs"}.Sanitize()+` (kind, run_at) SELECT 'k', now() - interval '1 hour' FROM generate_series(1, 10)`)
	require.NoError(t, err)
	from := firstQueued(t, pool, schema)
	claimer := claim.NewClaimer(c.db, time.Minute)
	_, err = claimer.Claim(ctx, DefaultQueue, 1, "w1", nil)
	require.NoError(t, err)
	_, err = claimer.Claim(ctx, DefaultQueue, 1, "w1", &from)
	require.NoError(t, err)
	var jitAvailable bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_jit_available()`).Scan(&jitAvailable))

	// analyzed runs the statement sql, prepared as name, under EXPLAIN ANALYZE in a
	// rolled-back transaction opened with settings, and returns what it printed.
	analyzed := func(name, args, settings string) string {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, settings)
		require.NoError(t, err)
		rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE) EXECUTE `+pgx.Identifier{name}.Sanitize()+`(`+args+`)`, pgx.QueryExecModeSimpleProtocol)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return strings.Join(lines, "\n")
	}
	args := `'` + DefaultQueue + `', 10, 'w1', '1 minute'`
	for sql, args := range map[string]string{
		claimer.Sql:        args,
		claimer.ResumedSql: fmt.Sprintf(`%s, 0, '%s', %d`, args, from.RunAt.Format(time.RFC3339Nano), from.ID),
	} {
		// The claims' own statement, planned and run as a worker's claims are.
		var name string
		require.NoError(t, pool.QueryRow(ctx, `SELECT name FROM pg_prepared_statements WHERE statement = $1`, sql).Scan(&name))
		plan := analyzed(name, args, pgutil.PlanSettingsSQL)
		assert.NotContains(t, plan, "JIT:", plan)
		if jitAvailable {
			// The same statement planned without the claims' settings is compiled: the
			// check sees JIT where the server has it.
			_, err := pool.Exec(ctx, `PREPARE jit_check AS `+sql)
			require.NoError(t, err)
			plan = analyzed("jit_check", args, `SET LOCAL plan_cache_mode = force_generic_plan`)
			assert.Contains(t, plan, "JIT:", plan)
			_, err = pool.Exec(ctx, `DEALLOCATE jit_check`)
			require.NoError(t, err)
		}
	}
	assertOwnPlanSettings(t, pool)
}

// firstQueued returns the place of the default queue's first queued job in the claim
// index, as a Resume.
func firstQueued(t *testing.T, pool *pgxpool.Pool, schema string) claim.Resume {
	t.Helper()
	var r claim.Resume
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT priority, run_at, id FROM `+pgx.Identifier{schema, "jobs"}.Sanitize()+`
		WHERE status = 'queued' AND queue = 'default' ORDER BY priority DESC, run_at, id LIMIT 1`).Scan(&r.Priority, &r.RunAt, &r.ID))
	return r
}

// A claim loop with a backlog resumes its next claim where its last one took jobs: its
// walk of the claim index starts there, not at the front, where the entries of the jobs
// claimed since the last VACUUM lie.
func TestClaim_ResumedClaimDoesNotStepOverClaimedEntries(t *testing.T) {
	t.Parallel()
	c, pool, schema := claimSetup(t)
	behindClaimedEntries(t, pool, schema)
	behindClaimedEntries(t, pool, schema) // 80,050 claimed entries, then 50 queued jobs
	claimer := claim.NewClaimer(c.db, time.Minute)
	from := firstQueued(t, pool, schema)

	full := func() float64 { return claimBuffers(t, pool, 50, claimer.Sql, "default", 100, "w1", time.Minute) }
	resumed := func() float64 {
		return claimBuffers(t, pool, 50, claimer.ResumedSql, "default", 100, "w1", time.Minute, from.Priority, from.RunAt, from.ID)
	}
	full() // the first walk marks the claimed entries dead, as a worker's claims do
	fromFront, fromPlace := full(), resumed()
	// The walk over 40,000 claimed entries reads about 295 buffers, over these about 590.
	// The margin absorbs what a busy machine adds to either claim (catalog and hint-bit
	// reads, seen up to ~105 extra buffers when the suite runs in parallel).
	assert.Greater(t, fromFront, fromPlace+350, "buffers read from the front: %v; resumed: %v", fromFront, fromPlace)

	// A job of a higher priority, claimed first: the walk goes on to the place's
	// priority from the place, not from the front of that priority.
	schemaExec(t, pool, schema)(`INSERT INTO {s}.jobs (kind, priority) VALUES ('k', 5)`)
	fromFront = claimBuffers(t, pool, 51, claimer.Sql, "default", 100, "w1", time.Minute)
	fromPlace = claimBuffers(t, pool, 51, claimer.ResumedSql, "default", 100, "w1", time.Minute, from.Priority, from.RunAt, from.ID)
	assert.Greater(t, fromFront, fromPlace+350, "with a higher priority, buffers read from the front: %v; resumed: %v", fromFront, fromPlace)
}

// A resumed claim takes what a claim from the front takes, in the same order, except the
// jobs of its place's priority queued before its place: a higher priority first, its own
// from the place on, then the lower ones. A claim from the front takes the jobs left
// before the place.
func TestClaim_ResumedClaimTakesEveryPriorityFromItsPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, pool, schema := claimSetup(t)
	exec := schemaExec(t, pool, schema)
	exec(`INSERT INTO {s}.jobs (kind, priority, run_at) SELECT 'before', 0, now() - interval '2 hours' FROM generate_series(1, 3);
		INSERT INTO {s}.jobs (kind, priority, run_at) SELECT 'from', 0, now() - interval '1 hour' FROM generate_series(1, 4);
		INSERT INTO {s}.jobs (kind, priority) SELECT 'higher', 5 FROM generate_series(1, 2);
		INSERT INTO {s}.jobs (kind, priority) SELECT 'lower', -2 FROM generate_series(1, 2);
		INSERT INTO {s}.jobs (kind, priority, run_at) VALUES ('later', 0, now() + interval '1 hour')`)
	var from claim.Resume
	require.NoError(t, pool.QueryRow(ctx, `SELECT priority, run_at, id FROM `+pgx.Identifier{schema, "jobs"}.Sanitize()+`
		WHERE kind = 'from' ORDER BY id LIMIT 1`).Scan(&from.Priority, &from.RunAt, &from.ID))
	claimer := claim.NewClaimer(c.db, time.Minute)
	claimed := func(limit int, from *claim.Resume) []string {
		t.Helper()
		jobs, err := claimer.Claim(ctx, DefaultQueue, limit, "w1", from)
		require.NoError(t, err)
		slices.SortFunc(jobs, func(a, b claim.ClaimedJob) int {
			return cmp.Or(-cmp.Compare(a.Row.Priority, b.Row.Priority), a.Row.RunAt.Compare(b.Row.RunAt), cmp.Compare(a.Row.ID, b.Row.ID))
		})
		var kinds []string
		for _, j := range jobs {
			kinds = append(kinds, j.Row.Kind)
		}
		return kinds
	}

	assert.Equal(t, []string{"higher", "higher", "from", "from"}, claimed(4, &from), "a higher priority first, then its own from the place")
	assert.Equal(t, []string{"from", "from", "lower", "lower"}, claimed(100, &from), "then the lower priority; nothing due later")
	assert.Equal(t, []string{"before", "before", "before"}, claimed(100, nil), "a claim from the front takes the jobs before the place")
}
