package skiplock_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// fullWalkEvery is internal/claim's FullWalkEvery: how often at least a draining claim
// loop walks the claim index from the front.
const fullWalkEvery = 500 * time.Millisecond

// claimOrderArgs is a job whose handler records its start in the test's order_audit table.
type claimOrderArgs struct {
	N int `json:"n"`
}

func (claimOrderArgs) Kind() string { return "claim_order" }

// orderAuditSQL records the start of job $1: when (the database's clock), and how many
// jobs of its queue were due when it was claimed (run_at <= locked_at), still queued now,
// and ahead of it in the documented claim order (priority DESC, run_at, id): jobs it
// overtook. 0 when the claim took the first due job.
const orderAuditSQL = `INSERT INTO {s}.order_audit (job_id, ahead)
	SELECT me.id, (SELECT count(*) FROM {s}.jobs o
		WHERE o.status = 'queued' AND o.queue = me.queue AND o.run_at <= me.locked_at
			AND (o.priority > me.priority OR o.priority = me.priority AND (o.run_at, o.id) < (me.run_at, me.id)))
	FROM {s}.jobs me WHERE me.id = $1`

// orderWorker starts a worker on the default queue with one slot (and on the queues
// also, with their own config) whose claimOrderArgs handler records each start
// (orderAuditSQL), after sleeping d.
func orderWorker(t *testing.T, b *bundle, d time.Duration, also ...string) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.order_audit (seq bigserial PRIMARY KEY, job_id bigint NOT NULL,
		started_at timestamptz NOT NULL DEFAULT clock_timestamp(), ahead bigint NOT NULL)`))
	require.NoError(t, err)
	queues := map[string]skiplock.QueueConfig{"default": {MaxWorkers: 1}}
	for _, q := range also {
		queues[q] = skiplock.QueueConfig{}
	}
	w := newWorker(t, b, skiplock.WorkerConfig{Queues: queues, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[claimOrderArgs]) error {
		if d > 0 {
			time.Sleep(d)
		}
		_, err := b.pool.Exec(ctx, b.q(orderAuditSQL), job.ID)
		return err
	}))
	runWorker(t, w)
}

// startOrder returns the ids of the started jobs in start order.
func startOrder(t *testing.T, b *bundle) []int64 {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, b.q(`SELECT job_id FROM {s}.order_audit ORDER BY seq`))
	require.NoError(t, err)
	var ids []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

// assertClaimOrder asserts that every job due when the test began started in the
// documented order (priority DESC, run_at, id), that no job overtook a due one, and that
// none started before its run_at.
func assertClaimOrder(t *testing.T, b *bundle, began time.Time) {
	t.Helper()
	var want []int64
	rows, err := b.pool.Query(b.ctx, b.q(`SELECT id FROM {s}.jobs WHERE run_at <= $1 AND kind = 'claim_order' AND queue = 'default'
		UNION ALL SELECT id FROM {s}.jobs_archive WHERE run_at <= $1 AND kind = 'claim_order' AND queue = 'default'`), began)
	require.NoError(t, err)
	due := map[int64]bool{}
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		due[id] = true
	}
	require.NoError(t, rows.Err())
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT array_agg(id ORDER BY priority DESC, run_at, id) FROM (
		SELECT id, priority, run_at FROM {s}.jobs WHERE id = ANY($1)
		UNION ALL SELECT id, priority, run_at FROM {s}.jobs_archive WHERE id = ANY($1)) j`),
		slices.Collect(func(yield func(int64) bool) {
			for id := range due {
				if !yield(id) {
					return
				}
			}
		})).Scan(&want))
	var got []int64
	for _, id := range startOrder(t, b) {
		if due[id] {
			got = append(got, id)
		}
	}
	assert.Equal(t, want, got, "the jobs due at the start ran in claim order")
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.order_audit WHERE ahead > 0`), "a job started while a due job was ahead of it")
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.order_audit a JOIN (
		SELECT id, run_at FROM {s}.jobs UNION ALL SELECT id, run_at FROM {s}.jobs_archive) j ON j.id = a.job_id
		WHERE a.started_at < j.run_at`), "a job started before its run_at")
}

// One worker with one slot starts the due jobs higher priority first, then earliest
// run_at, then lowest id, over the whole smallint range of priorities and negative ones,
// whatever the order they were enqueued in; a job scheduled for later starts only once
// due (here among them, its place in the order then), and one scheduled an hour ahead
// not at all.
func TestClaimOrder_OneSlotStartsDueJobsInTheDocumentedOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now()
	var params []skiplock.EnqueueParams
	for _, p := range []int{32767, 32766, 100, 5, 1, 0, -1, -5, -100, -32767, -32768} {
		for _, ago := range []time.Duration{3 * time.Hour, time.Hour, time.Minute, 0, time.Hour} { // two share a run_at: id decides
			params = append(params, skiplock.EnqueueParams{Args: claimOrderArgs{N: p}, Options: &skiplock.EnqueueOptions{Priority: p, RunAt: now.Add(-ago)}})
		}
	}
	rand.Shuffle(len(params), func(i, j int) { params[i], params[j] = params[j], params[i] })
	for _, p := range []int{32767, 0, -32768} {
		params = append(params,
			skiplock.EnqueueParams{Args: claimOrderArgs{N: p}, Options: &skiplock.EnqueueOptions{Priority: p, RunAt: now.Add(1500 * time.Millisecond)}},
			skiplock.EnqueueParams{Args: claimOrderArgs{N: p}, Options: &skiplock.EnqueueOptions{Priority: p, RunAt: now.Add(time.Hour)}})
	}
	_, err := b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	orderWorker(t, b, 20*time.Millisecond) // 55 due jobs: about 1.5 s, the scheduled ones fall due midway
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.order_audit`) == len(params)-3
	}, "every due job and the three scheduled 1.5 s ahead started")
	assertClaimOrder(t, b, now)
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.order_audit a JOIN {s}.jobs j ON j.id = a.job_id WHERE j.run_at > now()`),
		"a job scheduled an hour ahead started")
}

// 300 distinct priorities with due jobs (the walk steps through each), and 300 more with
// only jobs scheduled for later (every claim's walk seeks each of them): the order holds,
// and the claims stay quick.
func TestClaimOrder_ManyDistinctPrioritiesKeepTheOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now()
	var params []skiplock.EnqueueParams
	for i := range 600 {
		p := -32768 + i*109 // 600 distinct priorities over the smallint range, both ends near
		if i == 599 {
			p = 32767
		}
		runAt := now.Add(-time.Duration(rand.IntN(3600)) * time.Second)
		if i%2 == 1 {
			runAt = now.Add(time.Hour)
		}
		params = append(params, skiplock.EnqueueParams{Args: claimOrderArgs{N: p}, Options: &skiplock.EnqueueOptions{Priority: p, RunAt: runAt}})
	}
	rand.Shuffle(len(params), func(i, j int) { params[i], params[j] = params[j], params[i] })
	_, err := b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	began := time.Now()
	orderWorker(t, b, 0)
	eventually(t, 60*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.order_audit`) == 300
	}, "the 300 due jobs started")
	t.Logf("300 jobs over 600 priorities, one at a time: %v", time.Since(began))
	assertClaimOrder(t, b, now)
}

// A job made due behind the place where a draining claim loop resumes its claims (a
// scheduled job moved to a past RunAt, a job enqueued with a past RunAt: the claim
// index puts it before the backlog) starts within FullWalkEvery (500 ms) of claims, the
// bound docs/workers.md gives; a job of a higher priority starts at the next claim.
func TestClaimOrder_JobsMadeDueBehindTheResumePlaceStartWithinAFullWalk(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now()
	params := make([]skiplock.EnqueueParams, 3000)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: claimOrderArgs{N: i}, Options: &skiplock.EnqueueOptions{RunAt: now.Add(-time.Hour + time.Duration(i)*time.Millisecond)}}
	}
	_, err := b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	scheduled, err := b.client.Enqueue(b.ctx, claimOrderArgs{N: -1}, &skiplock.EnqueueOptions{RunAt: now.Add(time.Hour)})
	require.NoError(t, err)
	orderWorker(t, b, 2*time.Millisecond)
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.order_audit`) >= 100
	}, "the drain is under way")

	// startedAfter waits for job id to start and returns how long after made its start
	// came, and how many backlog jobs started in between (the jobs that overtook it).
	startedAfter := func(id int64, made time.Time, seq int64) (time.Duration, int) {
		t.Helper()
		var at time.Time
		eventually(t, 10*time.Second, func() bool {
			return b.pool.QueryRow(b.ctx, b.q(`SELECT started_at FROM {s}.order_audit WHERE job_id = $1`), id).Scan(&at) == nil
		}, "job %d did not start", id)
		return at.Sub(made), b.count(t, `SELECT count(*) FROM {s}.order_audit WHERE seq > $1 AND started_at < $2 AND job_id <> $3`, seq, at, id)
	}
	lastSeq := func() int64 {
		var s int64
		require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT max(seq) FROM {s}.order_audit`)).Scan(&s))
		return s
	}

	cases := []struct {
		name   string
		make   func() int64
		within time.Duration
	}{
		{"a scheduled job updated to a past RunAt", func() int64 {
			_, err := b.client.Update(b.ctx, scheduled.ID, skiplock.JobUpdate{RunAt: now.Add(-2 * time.Hour)})
			require.NoError(t, err)
			return scheduled.ID
		}, fullWalkEvery + time.Second},
		{"a job enqueued with a past RunAt", func() int64 {
			r, err := b.client.Enqueue(b.ctx, claimOrderArgs{N: -2}, &skiplock.EnqueueOptions{RunAt: now.Add(-2 * time.Hour)})
			require.NoError(t, err)
			return r.ID
		}, fullWalkEvery + time.Second},
		{"a job of a higher priority", func() int64 {
			r, err := b.client.Enqueue(b.ctx, claimOrderArgs{N: -3}, &skiplock.EnqueueOptions{Priority: 5})
			require.NoError(t, err)
			return r.ID
		}, time.Second},
	}
	for _, c := range cases {
		seq := lastSeq()
		made := time.Now()
		id := c.make()
		d, overtook := startedAfter(id, made, seq)
		t.Logf("%s: started %v after, %d backlog jobs started before it", c.name, d.Round(time.Millisecond), overtook)
		assert.Less(t, d, c.within, "%s started late", c.name)
	}
	assert.Greater(t, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE kind = 'claim_order' AND status = 'queued'`), 1000, "the backlog is far from drained")
}

// Jobs of another queue, of a paused queue the worker serves and of a limited queue never
// start through a worker's plain queue, however high their priority and old their run_at.
func TestClaimOrder_OtherQueuesDoNotLeakIntoAPlainClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.client.PauseQueue(b.ctx, "paused"))
	require.NoError(t, b.client.SetQueueLimits(b.ctx, "limited", skiplock.QueueLimits{Concurrency: 1}))
	var params []skiplock.EnqueueParams
	for _, q := range []string{"other", "paused", "limited"} {
		for i := range 20 {
			params = append(params, skiplock.EnqueueParams{Args: claimOrderArgs{N: i},
				Options: &skiplock.EnqueueOptions{Queue: q, Priority: 32767, RunAt: time.Now().Add(-3 * time.Hour)}})
		}
	}
	for i := range 50 {
		params = append(params, skiplock.EnqueueParams{Args: claimOrderArgs{N: i}, Options: &skiplock.EnqueueOptions{Priority: -i}})
	}
	_, err := b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	orderWorker(t, b, 0, "paused")
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.order_audit`) >= 50
	}, "the default queue's jobs started")
	holdsFor(t, 300*time.Millisecond, 50*time.Millisecond, func() {
		require.Equal(t, 60, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue <> 'default' AND status = 'queued'`),
			"a job of another queue was claimed")
	})
	assert.Equal(t, 50, b.count(t, `SELECT count(*) FROM {s}.order_audit`))
	assertClaimOrder(t, b, time.Now())
}
