package skiplock_test

// Tests of listing jobs (list.go) and deleting them (delete.go), over the jobs table and
// the archive.

import (
	"context"
	"encoding/base64"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

type resizeArgs struct {
	Image string `json:"image"`
}

func (resizeArgs) Kind() string { return "resize" }

// archiveAt moves jobs ids to the archive as succeeded, finished at finished (now when nil),
// as a worker's completion would.
func (b *bundle) archiveAt(t *testing.T, ids []int64, finished *time.Time) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, b.q(`WITH m AS (DELETE FROM {s}.jobs WHERE id = ANY ($1) RETURNING *)
INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
	created_at, finished_at, metadata)
SELECT id, queue, kind, payload, 'succeeded', priority, run_at, 1, max_attempts, created_at,
	coalesce($2::timestamptz, now()), metadata FROM m`), ids, finished)
	require.NoError(t, err)
}

// listAll pages through p with ListPage and returns every id, checking that each page
// but the last is full and hands a cursor.
func listAll(t *testing.T, b *bundle, p skiplock.ListParams) []int64 {
	t.Helper()
	var ids []int64
	for range 1000 {
		page, err := b.client.ListPage(b.ctx, p)
		require.NoError(t, err)
		for _, j := range page.Jobs {
			ids = append(ids, j.ID)
		}
		if page.Next == "" {
			require.Less(t, len(page.Jobs), p.Limit, "a page without a cursor is the last")
			return ids
		}
		require.Len(t, page.Jobs, p.Limit)
		p.Cursor = page.Next
	}
	t.Fatal("listing did not end")
	return nil
}

func TestList_FindsArchivedJobsOfAKind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var want []int64
	for i := range 3 {
		j, err := b.client.Enqueue(b.ctx, resizeArgs{Image: string(rune('a' + i))}, nil)
		require.NoError(t, err)
		want = append(want, j.ID)
	}
	_, err := b.client.Enqueue(b.ctx, noopArgs{}, nil)
	require.NoError(t, err)

	// A real worker archives them (the default completion).
	w := newWorker(t, b, skiplock.WorkerConfig{Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(context.Context, *skiplock.Job[resizeArgs]) error { return nil }))
	require.NoError(t, skiplock.Handle(w, func(context.Context, *skiplock.Job[noopArgs]) error { return nil }))
	stop := runWorker(t, w)
	eventually(t, 30*time.Second, func() bool { return b.count(t, `SELECT count(*) FROM {s}.jobs_archive`) == 4 }, "all four archived")
	stop()
	require.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs`))

	jobs, err := b.client.List(b.ctx, skiplock.ListParams{Kind: "resize", Status: skiplock.StatusSucceeded})
	require.NoError(t, err)
	var got []int64
	for _, j := range jobs {
		assert.Equal(t, "resize", j.Kind)
		assert.Equal(t, skiplock.StatusSucceeded, j.Status)
		assert.False(t, j.FinishedAt.IsZero())
		got = append(got, j.ID)
	}
	assert.Equal(t, want, got)
}

func TestListPage_CursorWalksBothTablesInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	params := make([]skiplock.EnqueueParams, 95)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: noopArgs{N: i}}
	}
	_, err := b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	var all []int64
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT array_agg(id ORDER BY id) FROM {s}.jobs`)).Scan(&all))
	// Every other job of the first half, and the whole second half, in the archive.
	var moved []int64
	for i, id := range all {
		if i%2 == 0 || i >= 50 {
			moved = append(moved, id)
		}
	}
	b.archiveAt(t, moved, nil)

	for _, limit := range []int{1, 7, 95, 200} {
		got := listAll(t, b, skiplock.ListParams{Limit: limit})
		assert.Equal(t, all, got, "ascending, limit %d", limit)
		got = listAll(t, b, skiplock.ListParams{Limit: limit, Descending: true})
		rev := slices.Clone(all)
		slices.Reverse(rev)
		assert.Equal(t, rev, got, "descending, limit %d", limit)
	}
	// Queued only: the jobs table; succeeded only: the archive.
	queued := listAll(t, b, skiplock.ListParams{Status: skiplock.StatusQueued, Limit: 10})
	assert.Len(t, queued, len(all)-len(moved))
	succeeded := listAll(t, b, skiplock.ListParams{Status: skiplock.StatusSucceeded, Limit: 10})
	assert.Equal(t, moved, succeeded)

	// A job moved to the archive between two pages is found there, in its place.
	page, err := b.client.ListPage(b.ctx, skiplock.ListParams{Limit: 3})
	require.NoError(t, err)
	next := []int64{all[3], all[4], all[5]}
	b.archiveAt(t, []int64{all[3]}, nil)
	page, err = b.client.ListPage(b.ctx, skiplock.ListParams{Limit: 3, Cursor: page.Next})
	require.NoError(t, err)
	assert.Equal(t, next, ids(page.Jobs))
}

func ids(jobs []*skiplock.JobRow) []int64 {
	out := make([]int64, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

func TestListPage_Filters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	enq := func(args skiplock.JobArgs, o *skiplock.EnqueueOptions) int64 {
		j, err := b.client.Enqueue(b.ctx, args, o)
		require.NoError(t, err)
		return j.ID
	}
	red := enq(resizeArgs{Image: "r"}, &skiplock.EnqueueOptions{Queue: "img", Metadata: map[string]string{"tenant": "red", "plan": "pro"}})
	blue := enq(resizeArgs{Image: "b"}, &skiplock.EnqueueOptions{Queue: "img", Metadata: map[string]string{"tenant": "blue"}})
	other := enq(noopArgs{}, &skiplock.EnqueueOptions{Metadata: map[string]string{"tenant": "red"}})
	old := enq(noopArgs{N: 1}, nil)
	_, err := b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET created_at = now() - interval '2 days' WHERE id = $1`), old)
	require.NoError(t, err)
	yesterday := time.Now().Add(-24 * time.Hour)
	b.archiveAt(t, []int64{red}, &yesterday)
	b.archiveAt(t, []int64{other}, nil)

	hourAgo := time.Now().Add(-time.Hour)
	cases := []struct {
		name string
		p    skiplock.ListParams
		want []int64
	}{
		{"kind", skiplock.ListParams{Kind: "resize"}, []int64{red, blue}},
		{"queue", skiplock.ListParams{Queue: "img"}, []int64{red, blue}},
		{"status", skiplock.ListParams{Status: skiplock.StatusQueued}, []int64{blue, old}},
		{"one tag", skiplock.ListParams{Metadata: map[string]string{"tenant": "red"}}, []int64{red, other}},
		{"two tags", skiplock.ListParams{Metadata: map[string]string{"tenant": "red", "plan": "pro"}}, []int64{red}},
		{"a tag no job has", skiplock.ListParams{Metadata: map[string]string{"tenant": "green"}}, nil},
		{"created since", skiplock.ListParams{CreatedSince: hourAgo}, []int64{red, blue, other}},
		{"created until", skiplock.ListParams{CreatedUntil: hourAgo}, []int64{old}},
		{"finished since", skiplock.ListParams{FinishedSince: hourAgo}, []int64{other}},
		{"finished until", skiplock.ListParams{FinishedUntil: hourAgo}, []int64{red}},
		{"finished in a window", skiplock.ListParams{FinishedSince: yesterday.Add(-time.Minute), FinishedUntil: time.Now().Add(time.Minute)}, []int64{red, other}},
		{"all together", skiplock.ListParams{Kind: "resize", Queue: "img", Status: skiplock.StatusSucceeded,
			Metadata: map[string]string{"plan": "pro"}, FinishedUntil: hourAgo, CreatedSince: hourAgo}, []int64{red}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.p.Limit = 1 // every filter through the cursor too
			got := listAll(t, b, tc.p)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestListPage_RefusesCursorsItDidNotMake(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 3 {
		_, err := b.client.Enqueue(b.ctx, resizeArgs{Image: string(rune('a' + i))}, nil)
		require.NoError(t, err)
	}
	p := skiplock.ListParams{Kind: "resize", Limit: 1}
	page, err := b.client.ListPage(b.ctx, p)
	require.NoError(t, err)
	require.NotEmpty(t, page.Next)

	raw, err := base64.RawURLEncoding.DecodeString(page.Next)
	require.NoError(t, err)
	flip := func(i int) string {
		c := slices.Clone(raw)
		c[i] ^= 0xff
		return base64.RawURLEncoding.EncodeToString(c)
	}
	zeroID := slices.Clone(raw)
	clear(zeroID[2:10])
	bad := map[string]skiplock.ListParams{
		"garbage":                {Kind: "resize", Cursor: "not a cursor!"},
		"truncated":              {Kind: "resize", Cursor: page.Next[:10]},
		"other version":          {Kind: "resize", Cursor: flip(0)},
		"other filter digest":    {Kind: "resize", Cursor: flip(len(raw) - 1)},
		"zero id":                {Kind: "resize", Cursor: base64.RawURLEncoding.EncodeToString(zeroID)},
		"other filters":          {Kind: "noop", Cursor: page.Next},
		"other metadata":         {Kind: "resize", Metadata: map[string]string{"a": "b"}, Cursor: page.Next},
		"other order":            {Kind: "resize", Descending: true, Cursor: page.Next},
		"other finished bound":   {Kind: "resize", FinishedSince: time.Now(), Cursor: page.Next},
		"standard base64 string": {Kind: "resize", Cursor: base64.StdEncoding.EncodeToString(raw) + "="},
	}
	for name, p := range bad {
		_, err := b.client.ListPage(b.ctx, p)
		assert.ErrorIs(t, err, skiplock.ErrInvalidCursor, name)
	}
	// The same filters with another limit take the cursor.
	page2, err := b.client.ListPage(b.ctx, skiplock.ListParams{Kind: "resize", Limit: 5, Cursor: page.Next})
	require.NoError(t, err)
	assert.Len(t, page2.Jobs, 2)
	assert.Empty(t, page2.Next)

	// Other bad input.
	_, err = b.client.ListPage(b.ctx, skiplock.ListParams{Status: "finished"})
	assert.ErrorIs(t, err, skiplock.ErrInvalidOptions)
	_, err = b.client.ListPage(b.ctx, skiplock.ListParams{Queue: "a b"})
	assert.ErrorIs(t, err, skiplock.ErrInvalidQueue)
}

func TestDelete_DeletesQueuedAndArchivedButNotRunning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	queued, err := b.client.Enqueue(b.ctx, noopArgs{N: 1}, &skiplock.EnqueueOptions{UniqueKey: "k1"})
	require.NoError(t, err)
	archived, err := b.client.Enqueue(b.ctx, noopArgs{N: 2}, nil)
	require.NoError(t, err)
	b.archiveAt(t, []int64{archived.ID}, nil)
	running, err := b.client.Enqueue(b.ctx, noopArgs{N: 3}, nil)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET status = 'running', locked_by = 'w', locked_at = now(), lease_until = now() + interval '1 minute' WHERE id = $1`), running.ID)
	require.NoError(t, err)

	got, err := b.client.Delete(b.ctx, queued.ID)
	require.NoError(t, err)
	assert.Equal(t, queued.ID, got.ID)
	assert.Equal(t, skiplock.StatusQueued, got.Status)
	// Its unique key is free again.
	_, err = b.client.Enqueue(b.ctx, noopArgs{N: 1}, &skiplock.EnqueueOptions{UniqueKey: "k1"})
	require.NoError(t, err)

	got, err = b.client.Delete(b.ctx, archived.ID)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusSucceeded, got.Status)
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs_archive`))

	got, err = b.client.Delete(b.ctx, running.ID)
	require.ErrorIs(t, err, skiplock.ErrJobRunning)
	assert.Equal(t, skiplock.StatusRunning, got.Status)
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND status = 'running'`, running.ID))

	_, err = b.client.Delete(b.ctx, queued.ID)
	require.ErrorIs(t, err, skiplock.ErrJobNotFound)
}

func TestDeleteMany_DeletesMatchesInBothTablesNeverRunning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	params := make([]skiplock.EnqueueParams, 2500)
	for i := range params {
		var args skiplock.JobArgs = resizeArgs{}
		if i%5 == 0 {
			args = noopArgs{N: i}
		}
		params[i] = skiplock.EnqueueParams{Args: args}
	}
	_, err := b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	// 1500 resize jobs archived; 10 resize jobs running; the rest queued.
	_, err = b.pool.Exec(b.ctx, b.q(`WITH m AS (DELETE FROM {s}.jobs WHERE id IN (SELECT id FROM {s}.jobs WHERE kind = 'resize' ORDER BY id LIMIT 1500) RETURNING *)
INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts, created_at, finished_at, metadata)
SELECT id, queue, kind, payload, 'succeeded', priority, run_at, 1, max_attempts, created_at, now(), metadata FROM m`))
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET status = 'running', locked_by = 'w', locked_at = now(), lease_until = now() + interval '1 minute'
WHERE id IN (SELECT id FROM {s}.jobs WHERE kind = 'resize' ORDER BY id LIMIT 10)`))
	require.NoError(t, err)

	_, err = b.client.DeleteMany(b.ctx, skiplock.ListParams{})
	require.ErrorIs(t, err, skiplock.ErrInvalidOptions, "no filter")
	_, err = b.client.DeleteMany(b.ctx, skiplock.ListParams{Kind: "resize", Cursor: "x"})
	require.ErrorIs(t, err, skiplock.ErrInvalidOptions)

	// A cap.
	n, err := b.client.DeleteMany(b.ctx, skiplock.ListParams{Kind: "resize", Status: skiplock.StatusSucceeded, Limit: 1200})
	require.NoError(t, err)
	assert.EqualValues(t, 1200, n)
	// Everything of the kind (several batches, both tables), but not the running ones.
	n, err = b.client.DeleteMany(b.ctx, skiplock.ListParams{Kind: "resize"})
	require.NoError(t, err)
	assert.EqualValues(t, 2000-1200-10, n)
	assert.Equal(t, 10, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE kind = 'resize' AND status = 'running'`))
	assert.Equal(t, 10, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE kind = 'resize'`))
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs_archive`))
	assert.Equal(t, 500, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE kind = 'noop'`))
}

// DeleteMany racing a worker that claims the same jobs: every job either ran (it is in
// the audit table and the archive) or was deleted while queued, never both; none is
// deleted while running.
func TestDeleteMany_RacingWorkersNeverDeletesARunningJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.audit (job_id bigint PRIMARY KEY)`))
	require.NoError(t, err)
	const n = 2000
	params := make([]skiplock.EnqueueParams, n)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: auditArgs{N: i}}
	}
	_, err = b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	w := newWorker(t, b, skiplock.WorkerConfig{Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 20}}, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[auditArgs]) error {
		_, err := b.pool.Exec(ctx, b.q(`INSERT INTO {s}.audit VALUES ($1)`), job.ID)
		return err
	}))
	stop := runWorker(t, w)
	var deleted int64
	for range 5 {
		d, err := b.client.DeleteMany(b.ctx, skiplock.ListParams{Kind: "audit", Status: skiplock.StatusQueued, Limit: 150})
		require.NoError(t, err)
		deleted += d
	}
	eventually(t, 60*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status IN ('queued', 'running')`) == 0
	}, "the queue drains")
	stop()
	ran := b.count(t, `SELECT count(*) FROM {s}.audit`)
	archived := b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE status = 'succeeded'`)
	assert.Equal(t, ran, archived, "every job that ran finished")
	assert.EqualValues(t, n, int64(ran)+deleted, "each job ran or was deleted")
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.audit a WHERE NOT EXISTS (SELECT 1 FROM {s}.jobs_archive j WHERE j.id = a.job_id)`),
		"no job that started was deleted")
}

// A ListParams (or RequeueFilter) the database could not take is refused before it is
// sent, with ErrInvalidOptions and a message that speaks of the call's own parameters,
// not of "enqueue options"; a metadata filter of invalid UTF-8 is refused rather than
// matched as the replacement characters JSON would write.
func TestListPage_RefusalsNameTheirParams(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.client.Enqueue(b.ctx, resizeArgs{Image: "a"}, &skiplock.EnqueueOptions{Metadata: map[string]string{"tag": "\ufffd"}})
	require.NoError(t, err)
	bad := map[string]func() error{
		"status": func() error { _, err := b.client.ListPage(b.ctx, skiplock.ListParams{Status: "finished"}); return err },
		"kind NUL": func() error {
			_, err := b.client.ListPage(b.ctx, skiplock.ListParams{Kind: "re\x00size"})
			return err
		},
		"kind UTF-8": func() error { _, err := b.client.List(b.ctx, skiplock.ListParams{Kind: "re\xffsize"}); return err },
		"metadata NUL": func() error {
			_, err := b.client.List(b.ctx, skiplock.ListParams{Metadata: map[string]string{"tag\x00": "x"}})
			return err
		},
		"metadata UTF-8": func() error {
			_, err := b.client.List(b.ctx, skiplock.ListParams{Metadata: map[string]string{"tag": "\xff"}})
			return err
		},
		"delete without filter": func() error { _, err := b.client.DeleteMany(b.ctx, skiplock.ListParams{Limit: 5}); return err },
		"delete with cursor": func() error {
			_, err := b.client.DeleteMany(b.ctx, skiplock.ListParams{Kind: "resize", Cursor: "x"})
			return err
		},
		"delete kind NUL": func() error {
			_, err := b.client.DeleteMany(b.ctx, skiplock.ListParams{Kind: "re\x00size"})
			return err
		},
		"requeue without filter": func() error { _, err := b.client.Requeue(b.ctx, skiplock.RequeueFilter{}); return err },
		"requeue kind NUL": func() error {
			_, err := b.client.Requeue(b.ctx, skiplock.RequeueFilter{Kind: "re\x00size"})
			return err
		},
	}
	for name, call := range bad {
		if err := call(); assert.ErrorIs(t, err, skiplock.ErrInvalidOptions, name) {
			assert.NotContains(t, err.Error(), "enqueue", name)
		}
	}
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs`), "nothing deleted")
	_, err = b.client.ListPage(b.ctx, skiplock.ListParams{Queue: strings.Repeat("q", 10_000)})
	if assert.ErrorIs(t, err, skiplock.ErrInvalidQueue) {
		assert.Less(t, len(err.Error()), 300, "the name is cut in the message")
	}
}
