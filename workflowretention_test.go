package skiplock_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// TestSweeper_PurgesWorkflowsPastRetention: a workflow whose tasks all ended and whose
// jobs finished past ArchiveRetention is deleted with its tasks and edges, in batches;
// one with a task still waiting, or a job finished within the retention, is kept.
func TestSweeper_PurgesWorkflowsPastRetention(t *testing.T) {
	t.Parallel()
	b := setup(t)
	enqueue := func(name string) int64 {
		t.Helper()
		info, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: name, Tasks: []skiplock.WorkflowTask{
			{Name: "a", Args: stepArgs{}},
			{Name: "b", Args: stepArgs{}, DependsOn: []string{"a"}},
		}})
		require.NoError(t, err)
		return info.ID
	}
	// finish makes workflow id's tasks end as state, its jobs finished daysAgo, and the
	// workflow created before that: as the settle would have left it.
	finish := func(id int64, state string, daysAgo int) {
		t.Helper()
		_, err := b.pool.Exec(b.ctx, b.q(`
			WITH t AS (UPDATE {s}.workflow_tasks SET state = $2 WHERE workflow_id = $1 RETURNING job_id)
			UPDATE {s}.jobs SET status = $2, finished_at = now() - make_interval(days => $3), locked_at = NULL
			WHERE id IN (SELECT job_id FROM t)`), id, state, daysAgo)
		require.NoError(t, err)
		_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.workflows SET created_at = now() - make_interval(days => $2 + 1) WHERE id = $1`), id, daysAgo)
		require.NoError(t, err)
	}

	// 25 old finished workflows: more than two batches of 10.
	var old []int64
	for i := range 25 {
		id := enqueue(fmt.Sprint("old-", i))
		finish(id, "succeeded", 8)
		old = append(old, id)
	}
	// Cancelled before anything ran (no job for b), long ago: goes too.
	cancelled := enqueue("cancelled")
	_, err := b.client.CancelWorkflow(b.ctx, cancelled)
	require.NoError(t, err)
	finish(cancelled, "cancelled", 8)
	// Finished within the retention: kept.
	recent := enqueue("recent")
	finish(recent, "failed", 1)
	// Created long ago but b still waits (a's job is queued): kept.
	waiting := enqueue("waiting")
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.workflows SET created_at = now() - interval '30 days' WHERE id = $1`), waiting)
	require.NoError(t, err)
	// Every task ended long ago, but one job is still in the hot table unfinished (a
	// retry put it back): kept.
	rerun := enqueue("rerun")
	finish(rerun, "succeeded", 8)
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET status = 'queued', finished_at = NULL
		WHERE id = (SELECT job_id FROM {s}.workflow_tasks WHERE workflow_id = $1 AND name = 'a')`), rerun)
	require.NoError(t, err)

	// A sequence's workflow stays while the sequence names it, however old.
	_, err = b.client.EnqueueSequence(b.ctx, "tenant-1", stepArgs{}, nil)
	require.NoError(t, err)
	var seq int64
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT workflow_id FROM {s}.sequences WHERE key = 'tenant-1'`)).Scan(&seq))
	finish(seq, "succeeded", 8)

	s, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{BatchSize: 10, Logger: testLogger()})
	require.NoError(t, err)
	res, err := s.Sweep(b.ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(26), res.PurgedWorkflows)

	for _, id := range append(old, cancelled) {
		_, err := b.client.GetWorkflow(b.ctx, id)
		require.ErrorIs(t, err, skiplock.ErrWorkflowNotFound, "workflow %d", id)
	}
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.workflow_tasks WHERE workflow_id = ANY ($1)`, append(old, cancelled)))
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.workflow_edges WHERE workflow_id = ANY ($1)`, append(old, cancelled)))
	for _, id := range []int64{recent, waiting, rerun} {
		info, err := b.client.GetWorkflow(b.ctx, id)
		require.NoError(t, err, "workflow %d", id)
		assert.Len(t, info.Tasks, 2)
		assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.workflow_edges WHERE workflow_id = $1`, id))
	}
	_, err = b.client.GetWorkflow(b.ctx, seq)
	require.NoError(t, err, "the sequence's workflow")
	assert.Equal(t, 4, b.count(t, `SELECT count(*) FROM {s}.workflows`))

	// A second sweep finds nothing more.
	res, err = s.Sweep(b.ctx)
	require.NoError(t, err)
	assert.Zero(t, res.PurgedWorkflows)
}
