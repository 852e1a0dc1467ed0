package skiplock_test

// Tests of what each retention rule deletes: exactly its jobs, with their log records,
// steps and signals; never a live or dead job; any positive duration; a sweep's bound.

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// insertJobRow inserts a job row in table (jobs or jobs_archive) of queue and kind, with
// status and finished_at now() - age (NULL when age is negative), and returns its id.
func insertJobRow(t *testing.T, b *bundle, table, queue, kind, status string, age time.Duration) int64 {
	t.Helper()
	var id int64
	var fin any
	if age >= 0 {
		fin = age
	}
	if table == "jobs" {
		require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`INSERT INTO {s}.jobs (queue, kind, status, attempts, finished_at, durable,
			locked_by, locked_at, lease_until)
			VALUES ($1, $2, $3, 1, now() - $4::interval, true,
				CASE WHEN $3 = 'running' THEN 'w' END, CASE WHEN $3 = 'running' THEN now() END,
				CASE WHEN $3 = 'running' THEN now() + interval '1 hour' END) RETURNING id`),
			queue, kind, status, fin).Scan(&id))
	} else {
		require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at,
			attempts, max_attempts, created_at, finished_at)
			VALUES (nextval(pg_get_serial_sequence('{s}.jobs', 'id')), $1, $2, '{}', 'succeeded', 0, now(), 1, 25, now(), now() - $3::interval) RETURNING id`),
			queue, kind, age).Scan(&id))
	}
	// A log record, a step and a signal of its own.
	for _, q := range []string{
		`INSERT INTO {s}.job_logs (job_id, fence, seq, attempt, at, level, message) VALUES ($1, 1, 0, 1, now(), 0, 'hi')`,
		`INSERT INTO {s}.job_steps (job_id, seq, name, kind, attempt, started_at) VALUES ($1, 0, 's', 'step', 1, now())`,
		`INSERT INTO {s}.job_signals (job_id, name, payload) VALUES ($1, 'n', '{}')`,
	} {
		_, err := b.pool.Exec(b.ctx, b.q(q), id)
		require.NoError(t, err)
	}
	return id
}

// records counts the job's rows in the jobs table, the archive, job_logs, job_steps and
// job_signals.
func records(t *testing.T, b *bundle, id int64) [5]int {
	return [5]int{
		b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1`, id),
		b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE id = $1`, id),
		b.count(t, `SELECT count(*) FROM {s}.job_logs WHERE job_id = $1`, id),
		b.count(t, `SELECT count(*) FROM {s}.job_steps WHERE job_id = $1`, id),
		b.count(t, `SELECT count(*) FROM {s}.job_signals WHERE job_id = $1`, id),
	}
}

// Each rule (the default, a queue's, a kind's over its queue's, either way) deletes
// exactly its jobs past retention, archived or kept or cancelled, with their log records,
// steps and signals; queued, running, dead and failed jobs stay whatever their finished_at.
func TestSweeper_EachRuleDeletesExactlyItsJobsWithTheirRecords(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := time.Hour
	gone := map[string]int64{
		"archived old default":     insertJobRow(t, b, "archive", "default", "k", "", 8*24*h),
		"kept old default":         insertJobRow(t, b, "jobs", "default", "k", "succeeded", 8*24*h),
		"cancelled old default":    insertJobRow(t, b, "jobs", "default", "k", "cancelled", 8*24*h),
		"archived short 2h":        insertJobRow(t, b, "archive", "short", "k", "", 2*h),
		"kind short in long queue": insertJobRow(t, b, "archive", "long", "shortkind", "", 2*h),
	}
	kept := map[string]int64{
		"archived young default":     insertJobRow(t, b, "archive", "default", "k", "", 6*24*h),
		"archived long 8d":           insertJobRow(t, b, "archive", "long", "k", "", 8*24*h),
		"kind long in short queue":   insertJobRow(t, b, "archive", "short", "longkind", "", 2*h),
		"queued with old finished":   insertJobRow(t, b, "jobs", "short", "k", "queued", 30*24*h),
		"running with old finished":  insertJobRow(t, b, "jobs", "short", "k", "running", 30*24*h),
		"dead old, no DeadRetention": insertJobRow(t, b, "jobs", "short", "k", "dead", 30*24*h),
		"failed old":                 insertJobRow(t, b, "jobs", "default", "k", "failed", 30*24*h),
	}
	sw, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{
		QueueRetention: map[string]time.Duration{"short": h, "long": 30 * 24 * h},
		KindRetention:  map[string]time.Duration{"shortkind": h, "longkind": 3 * h},
		BatchSize:      1, Logger: testLogger(),
	})
	require.NoError(t, err)
	res, err := sw.Sweep(b.ctx)
	require.NoError(t, err)
	assert.EqualValues(t, len(gone), res.Purged)
	for name, id := range gone {
		assert.Equal(t, [5]int{}, records(t, b, id), name)
	}
	for name, id := range kept {
		r := records(t, b, id)
		assert.Equal(t, 1, r[0]+r[1], name)
		assert.Equal(t, [3]int{1, 1, 1}, [3]int{r[2], r[3], r[4]}, name)
	}
}

// The largest durations are valid retentions and purge nothing (the interval reaches back
// 292 years).
func TestSweeper_HugeRetentionsPurgeNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	insertJobRow(t, b, "archive", "default", "k", "", 100*365*24*time.Hour)
	insertJobRow(t, b, "jobs", "q", "k", "dead", 100*365*24*time.Hour)
	huge := time.Duration(math.MaxInt64)
	sw, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{
		ArchiveRetention: huge, DeadRetention: huge,
		QueueRetention: map[string]time.Duration{"q": huge}, KindRetention: map[string]time.Duration{"k2": huge},
		Logger: testLogger(),
	})
	require.NoError(t, err)
	res, err := sw.Sweep(b.ctx)
	require.NoError(t, err)
	assert.Zero(t, res.Purged)
	_, err = skiplock.NewWorker(b.client, skiplock.WorkerConfig{ArchiveRetention: huge, DeadRetention: huge,
		Queues: map[string]skiplock.QueueConfig{"q": {Retention: huge}}, Kinds: map[string]skiplock.KindConfig{"k": {Retention: huge}}})
	require.NoError(t, err)
}

// A sweep's purge stops after 1,000 batches; the next sweep deletes the rest (its rule
// had not recorded the walk as complete).
func TestSweeper_APurgeAtItsBatchBoundLeavesTheRestToTheNextSweep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts, created_at, finished_at)
		SELECT i, 'default', 'k', '{}', 'succeeded', 0, now(), 1, 20, now(), now() - interval '8 days' FROM generate_series(1, 1003) AS i`))
	require.NoError(t, err)
	sw, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{BatchSize: 1, Logger: testLogger()})
	require.NoError(t, err)
	res, err := sw.Sweep(b.ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 1000, res.Purged)
	res, err = sw.Sweep(b.ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 3, res.Purged)
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs_archive`))
}
