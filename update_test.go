package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

type editArgs struct {
	V int `json:"v"`
}

func (editArgs) Kind() string { return "edit" }

// Update changes each field it is given and nothing else; skiplock's own metadata marks
// survive a metadata edit.
func TestUpdate_ChangesAQueuedJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var id int64
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`INSERT INTO {s}.jobs (kind, payload, run_at, metadata)
		VALUES ('edit', '{"v": 1}', now() + interval '1 hour', '{"skiplock_batch": "7", "team": "a"}') RETURNING id`)).Scan(&id))
	row := func() string {
		var out string
		require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT concat_ws(' ', queue, priority, payload::text,
			(metadata - 'skiplock_edited_at')::text, run_at > now() + interval '1 day', run_at <= now()) FROM {s}.jobs WHERE id = $1`), id).Scan(&out))
		return out
	}
	require.Equal(t, `default 0 {"v": 1} {"team": "a", "skiplock_batch": "7"} f f`, row())

	p := 5
	got, err := b.client.Update(b.ctx, id, skiplock.JobUpdate{Priority: &p, Queue: "reports",
		RunAt: time.Now().Add(48 * time.Hour), Args: editArgs{V: 2}, Metadata: map[string]string{"team": "b"}})
	require.NoError(t, err)
	assert.Equal(t, "reports", got.Queue)
	assert.Equal(t, `reports 5 {"v": 2} {"team": "b", "skiplock_batch": "7"} t f`, row())
	edited, err := time.Parse(time.RFC3339Nano, got.Metadata["skiplock_edited_at"])
	require.NoError(t, err, "the edit is marked in the metadata")
	assert.WithinDuration(t, time.Now(), edited, time.Minute)

	// Only what is set changes; RunNow makes it due.
	_, err = b.client.Update(b.ctx, id, skiplock.JobUpdate{RunNow: true})
	require.NoError(t, err)
	assert.Equal(t, `reports 5 {"v": 2} {"team": "b", "skiplock_batch": "7"} f t`, row())
	_, err = b.client.Update(b.ctx, id, skiplock.JobUpdate{Metadata: map[string]string{}})
	require.NoError(t, err)
	assert.Equal(t, `reports 5 {"v": 2} {"skiplock_batch": "7"} f t`, row())
}

// Bad edits are refused with a clear error and change nothing; jobs that are running or
// final are not edited.
func TestUpdate_RefusesBadEditsAndJobsThatStarted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var queued, running, succeeded, dead int64
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`WITH j AS (INSERT INTO {s}.jobs (kind, payload, status, locked_at, locked_by, attempts, finished_at)
		VALUES ('edit', '{"v": 1}', 'queued', NULL, NULL, 0, NULL),
			('edit', '{"v": 1}', 'running', now(), 'w', 1, NULL),
			('edit', '{"v": 1}', 'succeeded', NULL, NULL, 1, now()),
			('edit', '{"v": 1}', 'dead', NULL, NULL, 3, now())
		RETURNING id, status)
		SELECT max(id) FILTER (WHERE status = 'queued'), max(id) FILTER (WHERE status = 'running'),
			max(id) FILTER (WHERE status = 'succeeded'), max(id) FILTER (WHERE status = 'dead') FROM j`)).
		Scan(&queued, &running, &succeeded, &dead))
	snapshot := func() string {
		var out string
		require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT string_agg(concat_ws(' ', id, status, queue, priority, payload::text, metadata::text, run_at), ', ' ORDER BY id)
			FROM {s}.jobs`)).Scan(&out))
		return out
	}
	before := snapshot()
	p := 1
	big := 40000
	for _, c := range []struct {
		name string
		id   int64
		u    skiplock.JobUpdate
		want error
		msg  string // the message's start, when set
	}{
		{"invalid queue", queued, skiplock.JobUpdate{Queue: "Bad Queue!"}, skiplock.ErrInvalidQueue, ""},
		{"priority out of range", queued, skiplock.JobUpdate{Priority: &big}, skiplock.ErrInvalidOptions,
			"skiplock: invalid update: Priority 40000"},
		{"RunAt out of range", queued, skiplock.JobUpdate{RunAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, skiplock.ErrInvalidOptions,
			"skiplock: invalid update: RunAt 10000-01-01"},
		{"RunNow and RunAt", queued, skiplock.JobUpdate{RunNow: true, RunAt: time.Now()}, skiplock.ErrInvalidOptions,
			"skiplock: invalid update: JobUpdate sets both RunNow and RunAt"},
		{"reserved metadata key", queued, skiplock.JobUpdate{Metadata: map[string]string{"skiplock_workflow": "1"}}, skiplock.ErrInvalidOptions,
			`skiplock: invalid update: Metadata key "skiplock_workflow"`},
		{"args of another kind", queued, skiplock.JobUpdate{Args: noopArgs{N: 1}}, skiplock.ErrInvalidOptions,
			fmt.Sprintf(`skiplock: invalid update: job %d is of kind "edit": Args of kind "noop" cannot replace its args`, queued)},
		{"running", running, skiplock.JobUpdate{Priority: &p}, skiplock.ErrJobRunning, ""},
		{"succeeded", succeeded, skiplock.JobUpdate{Priority: &p}, skiplock.ErrJobFinished, ""},
		{"no such job", 1 << 40, skiplock.JobUpdate{Priority: &p}, skiplock.ErrJobNotFound, ""},
	} {
		_, err := b.client.Update(b.ctx, c.id, c.u)
		assert.ErrorIs(t, err, c.want, c.name)
		if c.msg != "" && assert.Error(t, err, c.name) {
			assert.True(t, strings.HasPrefix(err.Error(), c.msg), "%s: %s", c.name, err)
		}
	}
	assert.Equal(t, before, snapshot(), "a refused edit changed a job")

	// A dead job's args can be fixed before it is requeued.
	_, err := b.client.Update(b.ctx, dead, skiplock.JobUpdate{Args: editArgs{V: 9}})
	require.NoError(t, err)
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND status = 'dead' AND payload = '{"v": 9}'`, dead))
}

// "Run now" on a job scheduled an hour ahead starts it at once on an idle worker whose
// poll is an hour away: the edit's notification wakes it.
func TestUpdate_RunNowWakesAnIdleWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	row, err := b.client.Enqueue(b.ctx, editArgs{V: 1}, &skiplock.EnqueueOptions{RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: time.Hour, Logger: testLogger()})
	ran := make(chan int64, 1)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[editArgs]) error {
		ran <- job.ID
		return nil
	}))
	defer runWorker(t, w)()
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.workers`) > 0
	}, "the worker registered")
	_, err = b.client.Update(b.ctx, row.ID, skiplock.JobUpdate{RunNow: true})
	require.NoError(t, err)
	select {
	case id := <-ran:
		assert.Equal(t, row.ID, id)
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not start within 10 s of Run now (the worker's poll is an hour away)")
	}
}

// Edits racing claims: 4 workers drain 400 jobs while the test edits every job's args
// from v=1 to v=2. Each handler records the args it ran with. An edit that returned nil
// landed before the claim, so that job ran with v=2; one that returned ErrJobRunning (or
// ErrJobFinished) came after the claim, and the job ran with v=1. Every job ran once.
func TestUpdate_EditsRacingClaimsAreAtomic(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.audit (job_id bigint, v int)`))
	require.NoError(t, err)
	const jobs = 400
	params := make([]skiplock.EnqueueParams, jobs)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: editArgs{V: 1}}
	}
	_, err = b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	var ids []int64
	rows, err := b.pool.Query(b.ctx, b.q(`SELECT id FROM {s}.jobs ORDER BY id`))
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())

	auditSQL := b.q(`INSERT INTO {s}.audit VALUES ($1, $2)`)
	for range 4 {
		w := newWorker(t, b, skiplock.WorkerConfig{Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 2}}, Logger: testLogger()})
		require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[editArgs]) error {
			_, err := b.pool.Exec(ctx, auditSQL, job.ID, job.Args.V)
			return err
		}))
		defer runWorker(t, w)()
	}
	var mu sync.Mutex
	edited := map[int64]bool{}
	var wg sync.WaitGroup
	for part := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := part; i < len(ids); i += 2 {
				_, err := b.client.Update(b.ctx, ids[i], skiplock.JobUpdate{Args: editArgs{V: 2}})
				if err != nil && !errors.Is(err, skiplock.ErrJobRunning) && !errors.Is(err, skiplock.ErrJobFinished) {
					t.Errorf("update %d: %v", ids[i], err)
				}
				mu.Lock()
				edited[ids[i]] = err == nil
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	eventually(t, 2*time.Minute, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.audit`) >= jobs && b.count(t, `SELECT count(*) FROM {s}.jobs`) == 0
	}, "every job ran")
	assert.Equal(t, jobs, b.count(t, `SELECT count(DISTINCT job_id) FROM {s}.audit`))
	assert.Equal(t, jobs, b.count(t, `SELECT count(*) FROM {s}.audit`), "a job ran twice")
	wrong, both := 0, [2]int{}
	for id, ok := range edited {
		want := 1
		if ok {
			want, both[0] = 2, both[0]+1
		} else {
			both[1]++
		}
		if b.count(t, `SELECT v FROM {s}.audit WHERE job_id = $1`, id) != want {
			wrong++
		}
	}
	assert.Zero(t, wrong, "jobs that ran with other args than their edit's outcome says")
	t.Logf("edited before the claim: %d, after: %d", both[0], both[1])
}

// A job that waits for the jobs it depends on cannot be made due by an edit: it runs once
// they succeeded. Its other fields can still be edited.
func TestUpdate_AWaitingDependentIsNotMadeDue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	parent, err := b.client.Enqueue(b.ctx, editArgs{V: 1}, &skiplock.EnqueueOptions{RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	child, err := b.client.Enqueue(b.ctx, editArgs{V: 2}, &skiplock.EnqueueOptions{DependsOn: []int64{parent.ID}})
	require.NoError(t, err)
	before := b.count(t, `SELECT extract(year FROM run_at)::int FROM {s}.jobs WHERE id = $1`, child.ID)
	_, err = b.client.Update(b.ctx, child.ID, skiplock.JobUpdate{RunNow: true})
	assert.ErrorIs(t, err, skiplock.ErrInvalidOptions)
	assert.ErrorContains(t, err, fmt.Sprintf("skiplock: invalid update: job %d waits for the jobs it depends on", child.ID))
	_, err = b.client.Update(b.ctx, child.ID, skiplock.JobUpdate{RunAt: time.Now()})
	assert.ErrorIs(t, err, skiplock.ErrInvalidOptions)
	assert.Equal(t, before, b.count(t, `SELECT extract(year FROM run_at)::int FROM {s}.jobs WHERE id = $1`, child.ID), "the wait's run_at changed")
	p := 4
	_, err = b.client.Update(b.ctx, child.ID, skiplock.JobUpdate{Priority: &p})
	require.NoError(t, err)
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND priority = 4`, child.ID))
	// The parent itself (no wait) is made due as any job.
	_, err = b.client.Update(b.ctx, parent.ID, skiplock.JobUpdate{RunNow: true})
	require.NoError(t, err)
}
