package skiplock

// Tests of the completer's statements that pass over locked rows (complete.go).

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/claim"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/internal/record"
)

// TestCompleter_PassesOverLockedRowsAndWritesThemLater: while the completer passes over
// locked rows, a success whose row another transaction locked (as a concurrent claim
// does) is not waited for: the other successes of its batch are written at once, and it
// is written by a later batch once the lock is gone. A stale success (its attempt no
// longer the row's) ends after skipLockedFor, written by the statement that waits, which
// finds it stale. Every completion mode.
func TestCompleter_PassesOverLockedRowsAndWritesThemLater(t *testing.T) {
	t.Parallel()
	for _, mode := range []Completion{CompletionArchive, CompletionDelete, CompletionKeep} {
		t.Run(map[Completion]string{CompletionArchive: "archive", CompletionDelete: "delete", CompletionKeep: "keep"}[mode], func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c, pool, schema := claimSetup(t)
			for range 4 {
				_, err := c.Enqueue(ctx, fenceArgs{}, nil)
				require.NoError(t, err)
			}
			jobs, err := claim.NewClaimer(c.db, time.Minute).Claim(ctx, DefaultQueue, 4, "w", nil)
			require.NoError(t, err)
			require.Len(t, jobs, 4)
			slices.SortFunc(jobs, func(a, b claim.ClaimedJob) int { return int(a.Row.ID - b.Row.ID) })
			keys := make([]jobtype.AttemptKey, 4)
			for i, j := range jobs {
				keys[i] = jobtype.AttemptKey{ID: j.Row.ID, Fence: j.Fence}
			}
			keys[3].Fence++ // a stale attempt: the row holds another fence

			var mu sync.Mutex
			var written []jobtype.AttemptKey
			comp := record.NewCompleter(pool, schema, func(string, string) Completion { return mode }, "w", DefaultCompleteBatchSize, DefaultCompleteFlushInterval,
				nil, record.BatchListeners{Written: func(k []jobtype.AttemptKey) {
					mu.Lock()
					written = append(written, k...)
					mu.Unlock()
				}}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
			comp.SkipFor()
			require.NoError(t, comp.Start(ctx))
			defer comp.Stop()

			recorded := func(id int64) bool {
				var running bool
				err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+pgx.Identifier{schema, "jobs"}.Sanitize()+
					` WHERE id = $1 AND status = 'running')`, id).Scan(&running)
				require.NoError(t, err)
				return !running
			}
			isWritten := func(k jobtype.AttemptKey) bool {
				mu.Lock()
				defer mu.Unlock()
				return slices.Contains(written, k)
			}

			// Another transaction locks the row of the second job.
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx) //nolint:errcheck // ends the lock early on failure
			_, err = tx.Exec(ctx, `SELECT 1 FROM `+pgx.Identifier{schema, "jobs"}.Sanitize()+` WHERE id = $1 FOR UPDATE`, keys[1].ID)
			require.NoError(t, err)

			for _, k := range keys {
				require.True(t, comp.Add(k, &JobRow{}, nil, false, false))
			}
			require.Eventually(t, func() bool { return recorded(keys[0].ID) && recorded(keys[2].ID) }, 10*time.Second, 10*time.Millisecond,
				"the successes of unlocked rows are written without waiting for the lock")
			assert.Never(t, func() bool { return recorded(keys[1].ID) }, 100*time.Millisecond, 10*time.Millisecond, "the locked row")
			assert.False(t, isWritten(keys[1]), "the locked row's success is still on its way (its lease renewed)")
			assert.True(t, isWritten(keys[0]) && isWritten(keys[2]))

			require.NoError(t, tx.Rollback(ctx))
			require.Eventually(t, func() bool { return recorded(keys[1].ID) && isWritten(keys[1]) }, 10*time.Second, 10*time.Millisecond,
				"the success is written once the lock is gone")
			require.Eventually(t, func() bool { return isWritten(keys[3]) }, record.SkipLockedFor+10*time.Second, 50*time.Millisecond,
				"the stale success ends")
			assert.False(t, recorded(keys[3].ID), "the stale success changed nothing")
		})
	}
}

// statementCounter counts the round trips of statements sent through a pool.
type statementCounter struct{ n atomic.Int64 }

func (s *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.n.Add(1)
	return ctx
}

func (s *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A batch is one round trip: a success statement and the wake-up of its waiters
// (internal/waiting) are sent together, and count once.
func (s *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	s.n.Add(1)
	return ctx
}

func (s *statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (s *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// TestCompleter_MixedModesCostOneStatementPerMode: a batch of 300 successes whose jobs
// are recorded in three modes (per queue) is written with three statements, one per mode,
// not one per job; each job ends as its mode says.
func TestCompleter_MixedModesCostOneStatementPerMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, pool, schema := claimSetup(t)
	modes := map[string]Completion{"a": CompletionArchive, "d": CompletionDelete, "k": CompletionKeep}
	var keys []jobtype.AttemptKey
	for q := range modes {
		for range 100 {
			_, err := c.Enqueue(ctx, fenceArgs{}, &EnqueueOptions{Queue: q})
			require.NoError(t, err)
		}
		jobs, err := claim.NewClaimer(c.db, time.Minute).Claim(ctx, q, 100, "w", nil)
		require.NoError(t, err)
		require.Len(t, jobs, 100)
		for _, j := range jobs {
			keys = append(keys, jobtype.AttemptKey{ID: j.Row.ID, Fence: j.Fence})
		}
	}
	rand.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	queueOf := map[int64]string{}
	rows, err := pool.Query(ctx, `SELECT id, queue FROM `+pgx.Identifier{schema, "jobs"}.Sanitize())
	require.NoError(t, err)
	var id int64
	var q string
	_, err = pgx.ForEachRow(rows, []any{&id, &q}, func() error { queueOf[id] = q; return nil })
	require.NoError(t, err)

	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	counter := &statementCounter{}
	cfg.ConnConfig.Tracer = counter
	cpool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer cpool.Close()
	comp := record.NewCompleter(cpool, schema, func(queue, _ string) Completion { return modes[queue] }, "w",
		DefaultCompleteBatchSize, DefaultCompleteFlushInterval, nil, record.BatchListeners{}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, k := range keys {
		require.True(t, comp.Add(k, &JobRow{Queue: queueOf[k.ID]}, nil, false, false))
	}
	comp.FlushNow()
	assert.EqualValues(t, 3, counter.n.Load(), "round trips for one batch of 300 successes in 3 modes")

	count := func(table, where string) (n int) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, table}.Sanitize()+` WHERE `+where).Scan(&n))
		return n
	}
	assert.Equal(t, 100, count("jobs_archive", `queue = 'a' AND status = 'succeeded'`))
	assert.Equal(t, 100, count("jobs", `queue = 'k' AND status = 'succeeded'`))
	assert.Zero(t, count("jobs", `queue IN ('a', 'd')`))
	assert.Zero(t, count("jobs_archive", `queue IN ('d', 'k')`))
}

// A success batch sent on the pool runs its connection's cached generic plan
// (pgutil.PlanSettingsSQL): small batches were planned anew at every run. The plan is made
// by the first batch, here on an empty table whose statistics say so, and kept while the
// table grows and nothing analyzes it: it must still reach the rows by their key.
func TestCompleter_RunsOneCachedPlanThatReachesRowsByKeyAtEverySize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, pool, schema := oneConnSetup(t)
	comp := record.NewCompleter(pool, schema, func(string, string) Completion { return CompletionArchive }, "w",
		DefaultCompleteBatchSize, DefaultCompleteFlushInterval, nil, record.BatchListeners{}, nil,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, comp.Start(ctx))
	defer comp.Stop()
	succeed := func() {
		t.Helper()
		_, err := c.Enqueue(ctx, fenceArgs{}, nil)
		require.NoError(t, err)
		claimed, err := claim.NewClaimer(c.db, time.Minute).Claim(ctx, DefaultQueue, 1, "w", nil)
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		id := claimed[0].Row.ID
		require.True(t, comp.Add(jobtype.AttemptKey{ID: id, Fence: claimed[0].Fence}, &JobRow{}, nil, false, false))
		require.Eventually(t, func() bool {
			var archived bool
			require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+pgx.Identifier{schema, "jobs_archive"}.Sanitize()+
				` WHERE id = $1)`, id).Scan(&archived))
			return archived
		}, 10*time.Second, 5*time.Millisecond)
	}
	for range 3 {
		succeed()
	}
	_, err := pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "jobs"}.Sanitize()+` (kind, status, locked_by, locked_at, attempts, fence)
		SELECT 'k', 'running', 'w', now(), 1, 1 FROM generate_series(1, 20000)`)
	require.NoError(t, err)
	succeed()

	generic, custom, plan := cachedPlan(t, pool, pgutil.Render(schema, record.CompleteSQL(CompletionArchive, false, false)), `'{1}', '{1}', 'w'`)
	assert.Equal(t, int64(0), custom, "batches planned anew")
	assert.Equal(t, int64(4), generic, "batches that ran the cached plan")
	assert.NotContains(t, plan, "Seq Scan on jobs", plan)
	assert.Contains(t, plan, "jobs_pkey", plan) // an index scan, or a bitmap one when a cache reset replanned it
	assertOwnPlanSettings(t, pool)
}
