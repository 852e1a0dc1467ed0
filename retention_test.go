package skiplock_test

// Tests of completion and retention per queue and per kind (QueueConfig.Completion and
// Retention, WorkerConfig.Kinds, SweeperConfig.QueueRetention and KindRetention).

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// TestWorker_CompletionPerKindAndQueue: one worker, one run, its success batches mixing
// jobs of three modes: a kind set to delete leaves no row anywhere (even in a queue that
// keeps), a queue set to keep keeps its other jobs in the jobs table, and the rest are
// archived as the worker's default says.
func TestWorker_CompletionPerKindAndQueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 40
	for i := range n {
		for _, q := range []string{"default", "kept"} {
			_, err := b.client.Enqueue(b.ctx, noopArgs{N: i}, &skiplock.EnqueueOptions{Queue: q})
			require.NoError(t, err)
			_, err = b.client.Enqueue(b.ctx, emailArgs{OrderID: int64(i)}, &skiplock.EnqueueOptions{Queue: q})
			require.NoError(t, err)
		}
	}
	w := newWorker(t, b, skiplock.WorkerConfig{
		Queues: map[string]skiplock.QueueConfig{"default": {}, "kept": {Completion: skiplock.CompletionKeep}},
		Kinds:  map[string]skiplock.KindConfig{"send_email": {Completion: skiplock.CompletionDelete}},
		// A long flush interval: the jobs of all modes share batches.
		CompleteFlushInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger(),
	})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error { return nil }))
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[emailArgs]) error { return nil }))
	runWorker(t, w)
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status IN ('queued', 'running')`) == 0
	}, "all jobs done")

	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE kind = 'send_email'`), "deleted kind left rows in jobs")
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE kind = 'send_email'`), "deleted kind left rows in the archive")
	assert.Equal(t, n, b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE kind = 'noop' AND queue = 'default' AND status = 'succeeded'`))
	assert.Equal(t, n, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE kind = 'noop' AND queue = 'kept' AND status = 'succeeded'`))
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE queue = 'kept'`), "the kept queue archived")
}

// archiveJobs enqueues and runs jobs of each (queue, kind) given, archiving them, then
// sets their finished_at back by age.
func archiveJobs(t *testing.T, b *bundle, jobs map[string]int, age time.Duration) {
	t.Helper()
	for q, count := range jobs {
		for i := range count {
			_, err := b.client.Enqueue(b.ctx, noopArgs{N: i}, &skiplock.EnqueueOptions{Queue: q})
			require.NoError(t, err)
		}
	}
	// The archive gets its rows the way a worker writes them, then they age.
	_, err := b.pool.Exec(b.ctx, b.q(`WITH done AS (DELETE FROM {s}.jobs RETURNING *)
		INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts, created_at, finished_at)
		SELECT id, queue, kind, payload, 'succeeded', priority, run_at, 1, max_attempts, created_at, now() - $1::interval FROM done`), age)
	require.NoError(t, err)
}

// TestSweeper_RetentionPerQueueAndKind: a queue kept 1 h is purged while another is kept
// the default 7 days; a kind's retention overrides its queue's.
func TestSweeper_RetentionPerQueueAndKind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	archiveJobs(t, b, map[string]int{"short": 30, "long": 20}, 2*time.Hour)
	_, err := b.client.Enqueue(b.ctx, emailArgs{}, &skiplock.EnqueueOptions{Queue: "short"})
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, b.q(`WITH done AS (DELETE FROM {s}.jobs RETURNING *)
		INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts, created_at, finished_at)
		SELECT id, queue, kind, payload, 'succeeded', priority, run_at, 1, max_attempts, created_at, now() - interval '2 hours' FROM done`))
	require.NoError(t, err)

	sw, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{
		QueueRetention: map[string]time.Duration{"short": time.Hour},
		KindRetention:  map[string]time.Duration{"send_email": 3 * time.Hour},
		BatchSize:      7, // several batches per rule
		Logger:         testLogger(),
	})
	require.NoError(t, err)
	res, err := sw.Sweep(b.ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 30, res.Purged)
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE queue = 'short' AND kind = 'noop'`), "the 1 h queue was not purged")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE kind = 'send_email'`), "the kind kept 3 h was purged by its queue's 1 h")
	assert.Equal(t, 20, b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE queue = 'long'`), "the queue kept 7 days was purged")

	// Eight days old, the default's jobs go too; the kind kept 3 h goes at 4 h.
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs_archive SET finished_at = now() - interval '8 days' WHERE queue = 'long'`))
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs_archive SET finished_at = now() - interval '4 hours' WHERE kind = 'send_email'`))
	require.NoError(t, err)
	// A new sweeper (a new leader) walks the archive from its beginning; the first one
	// starts from where it ended, and walks it whole again within purgeRescanEvery.
	sw2, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{
		QueueRetention: map[string]time.Duration{"short": time.Hour},
		KindRetention:  map[string]time.Duration{"send_email": 3 * time.Hour},
		Logger:         testLogger(),
	})
	require.NoError(t, err)
	res, err = sw2.Sweep(b.ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 21, res.Purged)
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs_archive`))
}

// TestWorker_QueueRetentionInEmbeddedSweeper: QueueConfig.Retention reaches the worker's
// own sweeper, for a queue kept (CompletionKeep) in the jobs table as for an archived one.
func TestWorker_QueueRetentionInEmbeddedSweeper(t *testing.T) {
	t.Parallel()
	b := setup(t)
	archiveJobs(t, b, map[string]int{"short": 5, "long": 5}, 2*time.Hour)
	for range 3 {
		_, err := b.client.Enqueue(b.ctx, noopArgs{}, &skiplock.EnqueueOptions{Queue: "short"})
		require.NoError(t, err)
	}
	w := newWorker(t, b, skiplock.WorkerConfig{
		Queues: map[string]skiplock.QueueConfig{
			"short": {Retention: time.Hour, Completion: skiplock.CompletionKeep},
			"long":  {},
		},
		SweepInterval: 50 * time.Millisecond, PollInterval: 50 * time.Millisecond, Logger: testLogger(),
	})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[noopArgs]) error { return nil }))
	runWorker(t, w)
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE queue = 'short'`) == 0
	}, "the 1 h queue's archive purged")
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue = 'short' AND status = 'succeeded'`) == 3
	}, "the kept jobs succeeded")
	_, err := b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET finished_at = now() - interval '2 hours' WHERE queue = 'short'`))
	require.NoError(t, err)
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue = 'short'`) == 0
	}, "the kept jobs past 1 h purged")
	assert.Equal(t, 5, b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE queue = 'long'`), "the 7-day queue was purged")
}

func TestConfig_RetentionOutOfRangeIsAnError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for name, cfg := range map[string]skiplock.WorkerConfig{
		"queue completion": {Queues: map[string]skiplock.QueueConfig{"q": {Completion: 9}}},
		"queue retention":  {Queues: map[string]skiplock.QueueConfig{"q": {Retention: -time.Hour}}},
		"kind completion":  {Kinds: map[string]skiplock.KindConfig{"k": {Completion: -1}}},
		"kind retention":   {Kinds: map[string]skiplock.KindConfig{"k": {Retention: -1}}},
		"empty kind":       {Kinds: map[string]skiplock.KindConfig{"": {}}},
	} {
		_, err := skiplock.NewWorker(b.client, cfg)
		require.ErrorIs(t, err, skiplock.ErrInvalidConfig, name)
	}
	_, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{QueueRetention: map[string]time.Duration{"q": 0}})
	require.ErrorIs(t, err, skiplock.ErrInvalidConfig)
	_, err = skiplock.NewSweeper(b.client, skiplock.SweeperConfig{KindRetention: map[string]time.Duration{"": time.Hour}})
	require.ErrorIs(t, err, skiplock.ErrInvalidKind)
}

// TestSweeper_SummarizesTheArchiveIndex: a sweep summarizes the page ranges of the
// archive's BRIN index on finished_at filled since its last summary, so the purge (and
// the dashboard's timing rollup) read the new pages only, not the whole archive: with
// autovacuum off nothing else does. After the sweep there is nothing left to summarize.
func TestSweeper_SummarizesTheArchiveIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// About 600 pages of archive (four or five ranges of 128 pages), finished today.
	_, err := b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at,
			attempts, max_attempts, created_at, finished_at)
		SELECT i, 'default', 'noop', jsonb_build_object('pad', repeat('x', 200)), 'succeeded', 0, now(), 1, 25, now(),
			now() - interval '1 hour' + i * interval '1 ms'
		FROM generate_series(1, 20000) AS i`))
	require.NoError(t, err)
	pages := b.count(t, `SELECT (pg_relation_size('{s}.jobs_archive') / 8192)::int`)
	require.Greater(t, pages, 3*128, "the archive must span several BRIN ranges")

	sw, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{Logger: testLogger()})
	require.NoError(t, err)
	_, err = sw.Sweep(b.ctx)
	require.NoError(t, err)
	assert.Zero(t, b.count(t, `SELECT brin_summarize_new_values('{s}.jobs_archive_finished_idx'::regclass)::int`),
		"ranges of the archive's BRIN index were left unsummarized by the sweep")
}

// TestWorker_RemoveQueueKeepsItsRetention: a queue removed at run time keeps the
// retention it declared in the worker's sweeper: its archived jobs, which the queue's
// other workers may still add to, are not purged at the shorter default from then on.
func TestWorker_RemoveQueueKeepsItsRetention(t *testing.T) {
	t.Parallel()
	b := setup(t)
	archiveJobs(t, b, map[string]int{"long": 5, "probe": 5}, 2*time.Hour)
	w := newWorker(t, b, skiplock.WorkerConfig{
		Queues:           map[string]skiplock.QueueConfig{"long": {Retention: 24 * time.Hour}},
		ArchiveRetention: time.Hour, SweepInterval: 50 * time.Millisecond, Logger: testLogger(),
	})
	runWorker(t, w)
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE queue = 'probe'`) == 0
	}, "the 1 h default purged the queue the worker does not serve")
	require.NoError(t, w.RemoveQueue(b.ctx, "long"))
	// Sweeps after the removal: the default's rule purges another queue's old jobs (aged
	// to within purgeMargin of its last cutoff, where its next purge starts).
	archiveJobs(t, b, map[string]int{"probe2": 5}, time.Hour+time.Minute)
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE queue = 'probe2'`) == 0
	}, "a sweep after the removal")
	assert.Equal(t, 5, b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE queue = 'long'`),
		"the removed queue's 2 h old archive was purged at the worker's 1 h default, not its 24 h retention")
}
