package skiplock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// holdUpdates makes every UPDATE of a jobs row from status from to status to wait, before
// its transaction commits, until the returned release is called: the test holds an
// advisory lock that a trigger on the row asks for. It returns release, which the
// test's cleanup also calls.
func holdUpdates(t *testing.T, b *bundle, from, to skiplock.JobStatus) (release func()) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, b.q(`
		CREATE FUNCTION {s}.hold_update() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_advisory_xact_lock(hashtext(TG_TABLE_SCHEMA)); RETURN NEW; END $$;
		CREATE TRIGGER hold_update AFTER UPDATE ON {s}.jobs FOR EACH ROW
		WHEN (OLD.status = '`+string(from)+`' AND NEW.status = '`+string(to)+`') EXECUTE FUNCTION {s}.hold_update()`))
	require.NoError(t, err)
	conn, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	_, err = conn.Exec(b.ctx, `SELECT pg_advisory_lock(hashtext($1))`, b.schema)
	require.NoError(t, err)
	released := false
	release = func() {
		if released {
			return
		}
		released = true
		_, err := conn.Exec(context.Background(), `SELECT pg_advisory_unlock(hashtext($1))`, b.schema)
		assert.NoError(t, err)
		conn.Release()
	}
	t.Cleanup(release)
	return release
}

// waitForLockWait waits until a statement of the test's database whose text contains
// part waits for a lock.
func waitForLockWait(t *testing.T, b *bundle, part string) {
	t.Helper()
	eventually(t, 10*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%' AND query LIKE '%' || $2 || '%'`, part, b.schema) > 0
	}, "a statement containing %q waits for a lock", part)
}

// A dead job requeued while a sweep's DeadRetention purge was deleting it is kept: the
// purge judged it by the row it read (dead, past retention), and the delete, waiting on
// the requeue's row lock, took the requeued row with it. Requeue said it requeued the
// job; the job was gone.
func TestSweeper_ADeadJobRequeuedDuringTheDeadRetentionPurgeIsKept(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var id int64
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`INSERT INTO {s}.jobs (kind, status, attempts, finished_at)
		VALUES ('k', 'dead', 3, now() - interval '2 hours') RETURNING id`)).Scan(&id))
	release := holdUpdates(t, b, skiplock.StatusDead, skiplock.StatusQueued)

	requeued := make(chan skiplock.RequeueResult, 1)
	go func() {
		res, err := b.client.Requeue(context.Background(), skiplock.RequeueFilter{IDs: []int64{id}})
		assert.NoError(t, err)
		requeued <- res
	}()
	waitForLockWait(t, b, "pick")

	s, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{DeadRetention: time.Hour, Logger: testLogger()})
	require.NoError(t, err)
	swept := make(chan skiplock.SweepResult, 1)
	go func() {
		res, err := s.Sweep(context.Background())
		assert.NoError(t, err)
		swept <- res
	}()
	waitForLockWait(t, b, "finished_at < now() - $1::interval")
	release()

	assert.Equal(t, skiplock.RequeueResult{Requeued: 1}, <-requeued)
	res := <-swept
	assert.Zero(t, res.Purged, "the sweep deleted the job it found dead, requeued meanwhile")
	row, err := b.client.Get(b.ctx, id)
	require.NoError(t, err, "a requeued job was deleted by the dead-job purge")
	assert.Equal(t, skiplock.StatusQueued, row.Status)
}

// The same for the retention of finished jobs in the hot table: a cancelled workflow task
// retried while a sweep was deleting its job past ArchiveRetention keeps its job.
func TestSweeper_ACancelledJobRetriedDuringTheRetentionPurgeIsKept(t *testing.T) {
	t.Parallel()
	b := setup(t)
	info, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "w", Tasks: []skiplock.WorkflowTask{{Name: "a", Args: noopArgs{}}}})
	require.NoError(t, err)
	n, err := b.client.CancelWorkflow(b.ctx, info.ID)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	id := info.Task("a").JobID
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET finished_at = now() - interval '2 hours' WHERE id = $1`), id)
	require.NoError(t, err)
	release := holdUpdates(t, b, skiplock.StatusCancelled, skiplock.StatusQueued)

	retried := make(chan int, 1)
	go func() {
		n, err := b.client.RetryWorkflow(context.Background(), info.ID)
		assert.NoError(t, err)
		retried <- n
	}()
	waitForLockWait(t, b, "workflow")

	s, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{ArchiveRetention: time.Hour, Logger: testLogger()})
	require.NoError(t, err)
	swept := make(chan skiplock.SweepResult, 1)
	go func() {
		res, err := s.Sweep(context.Background())
		assert.NoError(t, err)
		swept <- res
	}()
	waitForLockWait(t, b, "status IN ('succeeded', 'cancelled')")
	release()

	assert.Equal(t, 1, <-retried)
	res := <-swept
	assert.Zero(t, res.Purged, "the sweep deleted the job it found cancelled, retried meanwhile")
	row, err := b.client.Get(b.ctx, id)
	require.NoError(t, err, "a retried workflow task's job was deleted by the retention purge")
	assert.Equal(t, skiplock.StatusQueued, row.Status)
}

// holdWorkflowScans makes a sweeper, on a client of its own, read the workflows table
// only while the test lets it: its connections run as a role without superuser rights,
// and a row-level policy on workflows waits for an advisory lock the test holds until
// release is called (the test's own client, a superuser, bypasses the policy). A
// statement reading workflows thus waits after taking its snapshot and before locking
// any workflow row. It returns the sweeper and release, which the cleanup also calls.
func holdWorkflowScans(t *testing.T, b *bundle, cfg skiplock.SweeperConfig) (*skiplock.Sweeper, func()) {
	t.Helper()
	role := pgx.Identifier{b.schema + "_sweeper"}.Sanitize()
	_, err := b.pool.Exec(b.ctx, b.q(`
		CREATE ROLE `+role+` NOLOGIN;
		GRANT USAGE ON SCHEMA {s} TO `+role+`;
		GRANT ALL ON ALL TABLES IN SCHEMA {s} TO `+role+`;
		GRANT ALL ON ALL SEQUENCES IN SCHEMA {s} TO `+role+`;
		CREATE FUNCTION {s}.hold_scan() RETURNS boolean LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_advisory_xact_lock_shared(hashtext(current_schema() || 'scan')); RETURN true; END $$;
		ALTER TABLE {s}.workflows ENABLE ROW LEVEL SECURITY;
		CREATE POLICY hold_scan ON {s}.workflows USING ({s}.hold_scan())`))
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, q := range []string{`DROP OWNED BY ` + role, `DROP ROLE ` + role} {
			_, err := b.pool.Exec(context.Background(), q)
			assert.NoError(t, err)
		}
	})
	pool := newPoolWith(t, func(c *pgxpool.Config) {
		c.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, `SET ROLE `+role+`; SET search_path = `+pgx.Identifier{b.schema}.Sanitize())
			return err
		}
	})
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema, Logger: testLogger()})
	require.NoError(t, err)
	cfg.Logger = testLogger()
	s, err := skiplock.NewSweeper(client, cfg)
	require.NoError(t, err)

	conn, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	_, err = conn.Exec(b.ctx, `SELECT pg_advisory_lock(hashtext($1 || 'scan'))`, b.schema)
	require.NoError(t, err)
	released := false
	release := func() {
		if released {
			return
		}
		released = true
		_, err := conn.Exec(context.Background(), `SELECT pg_advisory_unlock(hashtext($1 || 'scan'))`, b.schema)
		assert.NoError(t, err)
		conn.Release()
	}
	t.Cleanup(release)
	return s, release
}

// A workflow retried while a sweep was picking it for the purge of finished workflows
// is kept: the purge read its tasks as finished past retention in its snapshot, then
// locked the workflow's row after RetryWorkflow had taken it, reopened the tasks and
// committed, and deleted the workflow with the tasks RetryWorkflow had just put back.
func TestSweeper_AWorkflowRetriedDuringTheWorkflowPurgeIsKept(t *testing.T) {
	t.Parallel()
	b := setup(t)
	info, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "w", Tasks: []skiplock.WorkflowTask{{Name: "a", Args: noopArgs{}}}})
	require.NoError(t, err)
	id := info.Task("a").JobID
	// The task's job died two hours ago (a dead job stays in the jobs table: no
	// DeadRetention), in a workflow created three hours ago.
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET status = 'dead', attempts = 1, finished_at = now() - interval '2 hours' WHERE id = $1`), id)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.workflow_tasks SET state = 'dead' WHERE job_id = $1`), id)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.workflows SET created_at = now() - interval '3 hours' WHERE id = $1`), info.ID)
	require.NoError(t, err)

	s, release := holdWorkflowScans(t, b, skiplock.SweeperConfig{ArchiveRetention: time.Hour, Logger: testLogger()})
	swept := make(chan skiplock.SweepResult, 1)
	go func() {
		res, err := s.Sweep(context.Background())
		assert.NoError(t, err)
		swept <- res
	}()
	waitForLockWait(t, b, "FOR UPDATE OF w SKIP LOCKED")

	n, err := b.client.RetryWorkflow(b.ctx, info.ID)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	release()

	res := <-swept
	assert.Zero(t, res.PurgedWorkflows, "the sweep deleted the workflow it found finished, retried meanwhile")
	wf, err := b.client.GetWorkflow(b.ctx, info.ID)
	require.NoError(t, err, "a retried workflow was deleted by the workflow purge")
	assert.Equal(t, "released", wf.Task("a").State)
	row, err := b.client.Get(b.ctx, id)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusQueued, row.Status)
}

// A sequence job cancelled while its handler ran, past its retention before the handler
// returns, is kept until then: the retention purge deleted it, its task stayed released
// (neither its worker nor the sweep found the row to end the attempt), and the key's
// next job waited for ever. Once the handler has returned, the purge deletes it.
func TestSweeper_ASequenceJobCancelledWhileRunningIsKeptUntilItsHandlerReturns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seqDeafAudit(t, b)
	started := make(chan struct{})
	goOn := make(chan struct{})
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1,
		Logger: testLogger(), Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 4}}})
	require.NoError(t, skiplock.Handle(w, seqDeafHandler(b, started, func(context.Context) { <-goOn })))
	runWorker(t, w)
	release := sync.OnceFunc(func() { close(goOn) })
	t.Cleanup(release) // before the worker's stop, should the test fail first
	one, err := b.client.EnqueueSequence(b.ctx, "k", seqDeafArgs{N: 1}, nil)
	require.NoError(t, err)
	<-started
	_, err = b.client.EnqueueSequence(b.ctx, "k", seqDeafArgs{N: 2}, nil)
	require.NoError(t, err)
	_, err = b.client.Cancel(b.ctx, one.JobID)
	require.NoError(t, err)
	// Cancelled two hours ago, its handler still running.
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET finished_at = now() - interval '2 hours' WHERE id = $1`), one.JobID)
	require.NoError(t, err)
	sw, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{ArchiveRetention: time.Hour, Logger: testLogger()})
	require.NoError(t, err)
	res, err := sw.Sweep(b.ctx)
	require.NoError(t, err)
	assert.Zero(t, res.Purged, "the purge deleted a cancelled job whose handler still runs")

	release()
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.seq_audit WHERE n = 2`) == 1
	}, "the key's next job did not run after the cancelled handler returned")
	eventually(t, 10*time.Second, func() bool {
		_, err := sw.Sweep(b.ctx)
		require.NoError(t, err)
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1`, one.JobID) == 0
	}, "the cancelled job past retention was not purged once its handler returned")
}

// Delete and DeleteMany leave a sequence job cancelled while its handler ran until the
// handler has returned (Delete says ErrJobRunning, as ErrJobRunning's advice asks):
// deleted before, its task stayed released and the key's next job waited for ever.
func TestDelete_ASequenceJobCancelledWhileRunningIsKeptUntilItsHandlerReturns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seqDeafAudit(t, b)
	started := make(chan struct{})
	goOn := make(chan struct{})
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1,
		Logger: testLogger(), Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 4}}})
	require.NoError(t, skiplock.Handle(w, seqDeafHandler(b, started, func(context.Context) { <-goOn })))
	runWorker(t, w)
	release := sync.OnceFunc(func() { close(goOn) })
	t.Cleanup(release) // before the worker's stop, should the test fail first
	one, err := b.client.EnqueueSequence(b.ctx, "k", seqDeafArgs{N: 1}, nil)
	require.NoError(t, err)
	<-started
	_, err = b.client.EnqueueSequence(b.ctx, "k", seqDeafArgs{N: 2}, nil)
	require.NoError(t, err)
	_, err = b.client.Cancel(b.ctx, one.JobID)
	require.NoError(t, err)

	row, err := b.client.Delete(b.ctx, one.JobID)
	require.ErrorIs(t, err, skiplock.ErrJobRunning, "Delete deleted a cancelled job whose handler still runs")
	assert.Equal(t, skiplock.StatusCancelled, row.Status)
	n, err := b.client.DeleteMany(b.ctx, skiplock.ListParams{Status: skiplock.StatusCancelled})
	require.NoError(t, err)
	assert.Zero(t, n, "DeleteMany deleted a cancelled job whose handler still runs")

	release()
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.seq_audit WHERE n = 2`) == 1
	}, "the key's next job did not run after the cancelled handler returned")
	_, err = b.client.Delete(b.ctx, one.JobID)
	require.NoError(t, err, "the cancelled job could not be deleted once its handler returned")
}
