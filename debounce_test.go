package skiplock_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

type docArgs struct {
	Doc string `json:"doc"`
	V   int    `json:"v"`
}

func (docArgs) Kind() string { return "doc_index" }

// byDoc makes one job per document; edit sets Replace, Debounce and MaxDelay.
func byDoc(edit func(u *skiplock.UniqueOpts)) *skiplock.EnqueueOptions {
	u := &skiplock.UniqueOpts{ArgsFields: []string{"doc"}}
	edit(u)
	return &skiplock.EnqueueOptions{Unique: u}
}

// Replace gives the queued holder the new args; a running holder is kept.
func TestUnique_ReplaceGivesTheQueuedHolderTheNewArgs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	replace := byDoc(func(u *skiplock.UniqueOpts) { u.Replace = true })
	first, err := b.client.Enqueue(b.ctx, docArgs{Doc: "a", V: 1}, replace)
	require.NoError(t, err)
	assert.False(t, first.Duplicate)

	got, err := b.client.Enqueue(b.ctx, docArgs{Doc: "a", V: 2}, replace)
	require.NoError(t, err)
	assert.True(t, got.Duplicate && got.Replaced, "replaced")
	assert.Equal(t, first.ID, got.ID)
	_, err = time.Parse(time.RFC3339Nano, got.Metadata["skiplock_replaced_at"])
	assert.NoError(t, err, "the holder's metadata says when it was replaced: %v", got.Metadata)
	assert.JSONEq(t, `{"doc": "a", "v": 2}`, string(got.Payload))
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE payload = '{"doc": "a", "v": 2}'`))
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs`))

	// Without Replace, a duplicate keeps the holder as it was.
	got, err = b.client.Enqueue(b.ctx, docArgs{Doc: "a", V: 3}, byDoc(func(*skiplock.UniqueOpts) {}))
	require.NoError(t, err)
	assert.True(t, got.Duplicate && !got.Replaced, "kept")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE payload = '{"doc": "a", "v": 2}'`))

	// A holder that started runs with the args it started with.
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET status = 'running', locked_at = now(), locked_by = 'w', attempts = 1 WHERE id = $1`), first.ID)
	require.NoError(t, err)
	got, err = b.client.Enqueue(b.ctx, docArgs{Doc: "a", V: 4}, replace)
	require.NoError(t, err)
	assert.True(t, got.Duplicate && !got.Replaced, "a running holder is kept")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE payload = '{"doc": "a", "v": 2}'`))
}

// Debounce delays a new job and pushes a queued holder's run_at; bad settings are
// refused with nothing written, and EnqueueMany refuses the options it cannot honour.
func TestUnique_DebouncePushesTheHoldersRunAt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	debounce := byDoc(func(u *skiplock.UniqueOpts) { u.Debounce = time.Hour })
	first, err := b.client.Enqueue(b.ctx, docArgs{Doc: "b", V: 1}, debounce)
	require.NoError(t, err)
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE run_at BETWEEN now() + interval '59 minutes' AND now() + interval '61 minutes'`))
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET run_at = now() + interval '10 minutes' WHERE id = $1`), first.ID)
	require.NoError(t, err)
	got, err := b.client.Enqueue(b.ctx, docArgs{Doc: "b", V: 2}, debounce)
	require.NoError(t, err)
	assert.True(t, got.Duplicate && got.Replaced)
	assert.JSONEq(t, `{"doc": "b", "v": 1}`, string(got.Payload), "Debounce alone keeps the args")
	_, err = time.Parse(time.RFC3339Nano, got.Metadata["skiplock_debounced_at"])
	assert.NoError(t, err, "the holder's metadata says when it was debounced: %v", got.Metadata)
	assert.NotContains(t, got.Metadata, "skiplock_replaced_at")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE run_at BETWEEN now() + interval '59 minutes' AND now() + interval '61 minutes'`),
		"the holder was pushed to an hour from now")

	// MaxDelay caps the push at created_at + MaxDelay, and a push never pulls a job earlier.
	capped := byDoc(func(u *skiplock.UniqueOpts) { u.Debounce, u.MaxDelay = time.Hour, 2*time.Hour })
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET created_at = now() - interval '90 minutes', run_at = now() WHERE id = $1`), first.ID)
	require.NoError(t, err)
	_, err = b.client.Enqueue(b.ctx, docArgs{Doc: "b", V: 3}, capped)
	require.NoError(t, err)
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE run_at BETWEEN created_at + interval '119 minutes' AND created_at + interval '121 minutes'`),
		"pushed to created_at + MaxDelay, not now + Debounce")
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET run_at = now() + interval '5 hours' WHERE id = $1`), first.ID)
	require.NoError(t, err)
	_, err = b.client.Enqueue(b.ctx, docArgs{Doc: "b", V: 4}, capped)
	require.NoError(t, err)
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE run_at > now() + interval '4 hours'`), "a push never pulls a job earlier")

	before := b.count(t, `SELECT count(*) FROM {s}.jobs`)
	for name, o := range map[string]*skiplock.EnqueueOptions{
		"negative Debounce":         byDoc(func(u *skiplock.UniqueOpts) { u.Debounce = -time.Second }),
		"MaxDelay without Debounce": byDoc(func(u *skiplock.UniqueOpts) { u.MaxDelay = time.Second }),
		"MaxDelay under Debounce":   byDoc(func(u *skiplock.UniqueOpts) { u.Debounce, u.MaxDelay = time.Minute, time.Second }),
	} {
		_, err := b.client.Enqueue(b.ctx, docArgs{Doc: "c"}, o)
		assert.ErrorIs(t, err, skiplock.ErrInvalidOptions, name)
	}
	_, err = b.client.EnqueueMany(b.ctx, []skiplock.EnqueueParams{{Args: docArgs{Doc: "d"}, Options: byDoc(func(u *skiplock.UniqueOpts) { u.Replace = true })}})
	assert.ErrorIs(t, err, skiplock.ErrInvalidOptions, "EnqueueMany with Replace")
	assert.Equal(t, before, b.count(t, `SELECT count(*) FROM {s}.jobs`), "a refused enqueue wrote a job")
}

// Under a steady stream of enqueues of one key, each pushing the job Debounce ahead, the
// job still runs within MaxDelay of its first enqueue, and the stream goes on in a new
// job. The handler records when each job started, by the database clock.
func TestUnique_DebouncedKeyUnderASteadyStreamRunsWithinMaxDelay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.audit (job_id bigint, v int, created_at timestamptz, started timestamptz)`))
	require.NoError(t, err)
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 100 * time.Millisecond, Logger: testLogger()})
	auditSQL := b.q(`INSERT INTO {s}.audit VALUES ($1, $2, $3, clock_timestamp())`)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[docArgs]) error {
		_, err := b.pool.Exec(ctx, auditSQL, job.ID, job.Args.V, job.CreatedAt)
		return err
	}))
	defer runWorker(t, w)()

	opts := byDoc(func(u *skiplock.UniqueOpts) {
		u.Replace, u.Debounce, u.MaxDelay = true, 500*time.Millisecond, 1500*time.Millisecond
	})
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	v := 0
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); <-tick.C {
		v++
		_, err := b.client.Enqueue(b.ctx, docArgs{Doc: "e", V: v}, opts)
		require.NoError(t, err)
	}
	streamEnd := time.Now()
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status <> 'succeeded'`) == 0
	}, "every job of the stream ran")
	// A 4 s stream with MaxDelay 1.5 s: the first jobs ran while the stream went on.
	var ranDuringStream int
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT count(*) FROM {s}.audit WHERE started < $1`), streamEnd).Scan(&ranDuringStream))
	assert.GreaterOrEqual(t, ranDuringStream, 2, "jobs that ran while the stream pushed them")
	// Each ran within MaxDelay of its first enqueue (plus the 100 ms poll and a margin
	// for a loaded machine).
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.audit WHERE started > created_at + interval '2500 milliseconds'`),
		"a job ran later than MaxDelay after its first enqueue")
	// The last job ran with the stream's last args.
	assert.Equal(t, v, b.count(t, `SELECT max(v) FROM {s}.audit`))
	assert.Equal(t, b.count(t, `SELECT count(*) FROM {s}.audit`), b.count(t, `SELECT count(DISTINCT job_id) FROM {s}.audit`), "a job ran twice")
}

// In a REPEATABLE READ transaction, a holder changed after the snapshot cannot be
// replaced: the enqueue keeps it (Duplicate, not Replaced) and the caller's transaction
// stays usable.
func TestUnique_ReplaceInARepeatableReadTransactionLeavesItUsable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	replace := byDoc(func(u *skiplock.UniqueOpts) { u.Replace = true })
	_, err := b.client.Enqueue(b.ctx, docArgs{Doc: "f", V: 1}, replace)
	require.NoError(t, err)
	tx, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	var one int
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT 1`).Scan(&one)) // the snapshot
	_, err = b.client.Enqueue(b.ctx, docArgs{Doc: "f", V: 2}, replace)
	require.NoError(t, err)
	got, err := b.client.EnqueueTx(b.ctx, tx, docArgs{Doc: "f", V: 3}, replace)
	require.NoError(t, err)
	assert.True(t, got.Duplicate && !got.Replaced, "kept")
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT 1`).Scan(&one), "the caller's transaction is usable")
	require.NoError(t, tx.Commit(b.ctx))
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE payload = '{"doc": "f", "v": 2}'`))
}

// A new debounced job is due Debounce after now() by the database's clock, as a
// debounced holder's push is, not by the enqueuing host's: a host whose clock is behind
// the server's by more than Debounce would otherwise enqueue it due at once, and one
// ahead would hold it back by the difference. run_at and created_at come from the same
// now() of the insert's transaction, so they differ by exactly Debounce; an insert
// middleware sees no RunAt and may set one, which then wins.
func TestUnique_DebouncedNewJobIsDueByTheDatabaseClock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	debounce := byDoc(func(u *skiplock.UniqueOpts) { u.Debounce = 1500 * time.Millisecond })
	exact := func(id int64) bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND run_at = created_at + interval '1.5 seconds'`, id) == 1
	}
	job, err := b.client.Enqueue(b.ctx, docArgs{Doc: "clock-a"}, debounce)
	require.NoError(t, err)
	assert.True(t, exact(job.ID), "Enqueue: run_at is created_at + Debounce, one clock: %s vs %s", job.RunAt, job.CreatedAt)
	assert.Equal(t, job.CreatedAt.Add(1500*time.Millisecond), job.RunAt, "the returned row says so too")

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	job, err = b.client.EnqueueTx(b.ctx, tx, docArgs{Doc: "clock-b"}, debounce)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))
	assert.True(t, exact(job.ID), "EnqueueTx: run_at is created_at + Debounce")

	var seen []time.Time
	at := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	mw, err := skiplock.NewClient(b.pool, skiplock.Config{Schema: b.schema, Logger: testLogger(),
		InsertMiddleware: []skiplock.InsertMiddleware{func(_ context.Context, j *skiplock.InsertJob) error {
			seen = append(seen, j.RunAt)
			if j.Payload != nil && string(j.Payload) == `{"doc":"clock-d","v":0}` {
				j.RunAt = at
			}
			return nil
		}}})
	require.NoError(t, err)
	job, err = mw.Enqueue(b.ctx, docArgs{Doc: "clock-c"}, debounce)
	require.NoError(t, err)
	assert.True(t, exact(job.ID), "through a middleware that leaves RunAt alone")
	job, err = mw.Enqueue(b.ctx, docArgs{Doc: "clock-d"}, debounce)
	require.NoError(t, err)
	assert.True(t, job.RunAt.Equal(at), "a middleware's RunAt wins: %s", job.RunAt)
	assert.Equal(t, []time.Time{{}, {}}, seen, "a middleware sees no RunAt on a debounced new job")
}
