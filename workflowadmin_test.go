package skiplock_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// countedJob is a job of a batch whose callback's counts a test reads; it fails
// permanently while its Fail is set and the test has not healed it.
type countedJob struct {
	Fail bool `json:"fail,omitempty"`
}

func (countedJob) Kind() string { return "counted_job" }

type countedCallback struct{}

func (countedCallback) Kind() string { return "counted_callback" }

// After RetryWorkflow, a batch's callback counts every job of the batch: the jobs that
// had succeeded before the retry and the retried ones (before: only the retried ones,
// Succeeded=1 of 10).
func TestRetryWorkflow_ABatchsCallbackCountsEveryJob(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		onlyOnSuccess bool
		// parked jobs are enqueued an hour ahead: CancelWorkflow cancels them, queued.
		parked int
		// failing jobs fail until the retry.
		failing int
	}{
		{name: "a failed job of an OnlyOnSuccess batch", onlyOnSuccess: true, failing: 1},
		{name: "jobs cancelled with the workflow", parked: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var healed atomic.Bool
			var mu sync.Mutex
			var got []skiplock.BatchCounts
			w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
			require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[countedJob]) error {
				if job.Args.Fail && !healed.Load() {
					return skiplock.Permanent(errors.New("failing until healed"))
				}
				return nil
			}))
			require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[countedCallback]) error {
				counts, ok := skiplock.BatchCountsOf(job.JobRow)
				assert.True(t, ok, "the callback carries no counts")
				mu.Lock()
				got = append(got, counts)
				mu.Unlock()
				return nil
			}))
			callbacks := func() []skiplock.BatchCounts {
				mu.Lock()
				defer mu.Unlock()
				return append([]skiplock.BatchCounts(nil), got...)
			}

			const n = 10
			jobs := make([]skiplock.EnqueueParams, n)
			for i := range jobs {
				jobs[i] = skiplock.EnqueueParams{Args: countedJob{Fail: i < tc.failing}}
				if i >= n-tc.parked {
					jobs[i].Options = &skiplock.EnqueueOptions{RunAt: time.Now().Add(time.Hour)}
				}
			}
			batch, err := b.client.EnqueueBatch(b.ctx, skiplock.Batch{Name: "counted", OnlyOnSuccess: tc.onlyOnSuccess,
				Jobs: jobs, Callback: countedCallback{}})
			require.NoError(t, err)
			runWorker(t, w)
			finished := `SELECT count(*) FROM {s}.workflow_tasks WHERE workflow_id = $1 AND name <> 'callback'
				AND state IN ('succeeded', 'failed')`
			eventually(t, 30*time.Second, func() bool { return b.count(t, finished, batch.ID) == n-tc.parked },
				"the batch's jobs due now did not finish")
			if tc.parked > 0 {
				cancelled, err := b.client.CancelWorkflow(b.ctx, batch.ID)
				require.NoError(t, err)
				require.Equal(t, tc.parked+1, cancelled, "the parked jobs and the waiting callback")
			}
			info := waitSettled(t, b, batch.ID)
			require.Equal(t, "cancelled", info.Task("callback").State)
			require.Empty(t, callbacks())

			healed.Store(true)
			retried, err := b.client.RetryWorkflow(b.ctx, batch.ID)
			require.NoError(t, err)
			assert.Equal(t, tc.failing+tc.parked+1, retried, "the failed or cancelled jobs, and the callback")
			info = waitSettled(t, b, batch.ID)
			assert.Equal(t, "succeeded", info.Task("callback").State)
			eventually(t, 10*time.Second, func() bool { return len(callbacks()) > 0 }, "the callback did not run")
			assert.Equal(t, []skiplock.BatchCounts{{Succeeded: n}}, callbacks())
		})
	}
}

// deafStep is a workflow task whose first attempt ignores its context until the test
// releases it; every attempt writes its start and end (database clock) to the audit
// table deaf_audit.
type deafStep struct{}

func (deafStep) Kind() string { return "deaf_step" }

// A task cancelled while it runs is not run again by RetryWorkflow before its handler
// has returned: RetryWorkflow refuses with ErrJobRunning while the handler runs, past the
// job's visibility timeout (its worker renews the cancelled job's lease), and puts it
// back once it has returned. Before, RetryWorkflow requeued it at once and a second
// attempt ran beside the first.
func TestRetryWorkflow_ATaskCancelledWhileItRunsIsNotRunBesideItself(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.deaf_audit (job_id bigint, started timestamptz, finished timestamptz)`))
	require.NoError(t, err)
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseHandler := func() { releaseOnce.Do(func() { close(release) }) }
	var attempts atomic.Int64
	const visibility = time.Second
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1,
		VisibilityTimeout: visibility, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[deafStep]) error {
		var started time.Time
		if err := b.pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&started); err != nil {
			return err
		}
		if attempts.Add(1) == 1 {
			<-release // deaf to ctx: it was cancelled, and goes on
		}
		_, err := b.pool.Exec(context.Background(), b.q(`INSERT INTO {s}.deaf_audit VALUES ($1, $2, clock_timestamp())`), job.ID, started)
		return err
	}))
	runWorker(t, w)
	t.Cleanup(releaseHandler) // before the worker stops (cleanups run last first)

	wf, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "deaf", Tasks: []skiplock.WorkflowTask{{Name: "t", Args: deafStep{}}}})
	require.NoError(t, err)
	id := wf.Task("t").JobID
	eventually(t, 10*time.Second, func() bool { return attempts.Load() == 1 }, "the first attempt did not start")
	_, err = b.client.Cancel(b.ctx, id)
	require.NoError(t, err)

	// Past the visibility timeout the handler still runs: every retry is refused.
	holdsFor(t, 2*visibility+visibility/2, 100*time.Millisecond, func() {
		_, err := b.client.RetryWorkflow(b.ctx, wf.ID)
		require.ErrorIs(t, err, skiplock.ErrJobRunning, "a retry while the cancelled attempt's handler runs")
		require.Equal(t, int64(1), attempts.Load(), "a second attempt started beside the first")
	})

	releaseHandler()
	eventually(t, 10*time.Second, func() bool {
		n, err := b.client.RetryWorkflow(b.ctx, wf.ID)
		if errors.Is(err, skiplock.ErrJobRunning) {
			return false
		}
		require.NoError(t, err)
		require.Equal(t, 1, n)
		return true
	}, "the retry was still refused after the handler returned")
	info := waitSettled(t, b, wf.ID)
	assert.Equal(t, "succeeded", info.Task("t").State)
	assert.Equal(t, 2, b.count(t, `SELECT count(*) FROM {s}.deaf_audit`), "two attempts ran")
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.deaf_audit a JOIN {s}.deaf_audit o
		ON o.job_id = a.job_id AND o.started > a.started AND o.started < a.finished`), "an attempt started while another ran")
}

// raceStep is a workflow task of the settle-race tests: it fails permanently while Fail
// is set and the test has not healed it, and waits for the test's gate when Gate is set.
type raceStep struct {
	Fail bool `json:"fail,omitempty"`
	Gate bool `json:"gate,omitempty"`
}

func (raceStep) Kind() string { return "race_step" }

// raceSetup returns a worker that runs raceStep (healed tells failing steps to succeed,
// closing gate lets gated ones go on; each run is counted in race_runs), and holds the
// settle of a task in the middle of its transaction: a trigger on workflow_tasks, fired
// by the update that matches when (a condition on OLD and NEW), waits for an advisory
// lock that the returned hold has taken; unhold lets it go.
func raceSetup(t *testing.T, b *bundle, when string, healed *atomic.Bool, gate chan struct{}) (w *skiplock.Worker, unhold func()) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.race_runs (task text);
		CREATE FUNCTION {s}.hold_settle() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_advisory_xact_lock(hashtext(TG_TABLE_SCHEMA)); RETURN NULL; END $$;
		CREATE TRIGGER hold_settle AFTER UPDATE ON {s}.workflow_tasks FOR EACH ROW
			WHEN (`+when+`) EXECUTE FUNCTION {s}.hold_settle()`))
	require.NoError(t, err)
	holder, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	_, err = holder.Exec(b.ctx, `SELECT pg_advisory_lock(hashtext($1))`, b.schema)
	require.NoError(t, err)
	var once sync.Once
	unhold = func() {
		once.Do(func() {
			_, err := holder.Exec(b.ctx, `SELECT pg_advisory_unlock(hashtext($1))`, b.schema)
			assert.NoError(t, err)
			holder.Release()
		})
	}
	w = newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[raceStep]) error {
		if job.Args.Gate {
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if job.Args.Fail && !healed.Load() {
			return skiplock.Permanent(errors.New("failing until healed"))
		}
		_, err := b.pool.Exec(ctx, b.q(`INSERT INTO {s}.race_runs VALUES ($1)`), job.Metadata["skiplock_task"])
		return err
	}))
	return w, unhold
}

// waiting counts the backends of the test's schema that wait for a lock: on the
// advisory lock of the held settle (advisory), or on another transaction (rows).
func waiting(t *testing.T, b *bundle, advisory bool) int {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'
		AND (wait_event = 'advisory') = $1 AND strpos(query, $2) > 0`, advisory, `"`+b.schema+`".`)
}

// lockedCall runs call on its own goroutine and returns its result's channel once call
// has either returned or started to wait for a lock.
func lockedCall(t *testing.T, b *bundle, call func() (int, error)) <-chan [2]any {
	t.Helper()
	done := make(chan [2]any, 1)
	go func() {
		n, err := call()
		done <- [2]any{n, err}
	}()
	eventually(t, 10*time.Second, func() bool { return len(done) > 0 || waiting(t, b, false) > 0 },
		"the call neither returned nor waited for a lock")
	return done
}

// CancelWorkflow while a settle that releases a task is committing: the task's job was
// inserted after the cancel took its snapshot, and before, the cancel found the task
// released (not waiting) and did not see its job, which stayed queued. Now the cancel
// waits for the settle and cancels the job.
func TestCancelWorkflow_ATaskReleasedWhileItRunsIsCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var healed atomic.Bool
	w, unhold := raceSetup(t, b, `NEW.name = 'b' AND OLD.state = 'waiting' AND NEW.state = 'released'`, &healed, nil)
	t.Cleanup(unhold)
	// b's queue has no worker: whatever happens to its job stays visible.
	wf, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "cancel race", Tasks: []skiplock.WorkflowTask{
		{Name: "a", Args: raceStep{}},
		{Name: "b", Args: raceStep{}, DependsOn: []string{"a"}, Options: &skiplock.EnqueueOptions{Queue: "parked"}},
	}})
	require.NoError(t, err)
	runWorker(t, w)
	eventually(t, 10*time.Second, func() bool { return waiting(t, b, true) > 0 }, "a's settle did not reach the hold")

	done := lockedCall(t, b, func() (int, error) { return b.client.CancelWorkflow(b.ctx, wf.ID) })
	unhold()
	res := <-done
	require.Nil(t, res[1])
	assert.Equal(t, 1, res[0], "b cancelled")

	info, err := b.client.GetWorkflow(b.ctx, wf.ID)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": "succeeded", "b": "cancelled"}, states(info))
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE metadata ->> 'skiplock_task' = 'b' AND status <> 'cancelled'`),
		"b's job was left to run after the workflow was cancelled")
}

// RetryWorkflow while a settle of a dependency of a task it reopens is committing: the
// settle left the task alone (it was cancelled), and before, the retry counted that
// dependency as unsettled from its snapshot, so the reopened task waited for it for
// ever. Now the retry waits for the settle and sees the dependency settled.
func TestRetryWorkflow_ADependencySettledMeanwhileIsCounted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var healed atomic.Bool
	gate := make(chan struct{})
	w, unhold := raceSetup(t, b, `NEW.name = 'p2' AND OLD.state = 'released' AND NEW.state = 'succeeded'`, &healed, gate)
	t.Cleanup(unhold)
	wf, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "retry race", Tasks: []skiplock.WorkflowTask{
		{Name: "p1", Args: raceStep{Fail: true}},
		{Name: "p2", Args: raceStep{Gate: true}},
		{Name: "c", Args: raceStep{}, DependsOn: []string{"p1", "p2"}},
	}})
	require.NoError(t, err)
	runWorker(t, w)
	eventually(t, 10*time.Second, func() bool {
		info, err := b.client.GetWorkflow(b.ctx, wf.ID)
		require.NoError(t, err)
		return info.Task("p1").State == "failed" && info.Task("c").State == "cancelled"
	}, "p1 did not fail")
	close(gate) // p2 succeeds; its settle finds c cancelled, leaves it, and is held
	eventually(t, 10*time.Second, func() bool { return waiting(t, b, true) > 0 }, "p2's settle did not reach the hold")

	healed.Store(true)
	done := lockedCall(t, b, func() (int, error) { return b.client.RetryWorkflow(b.ctx, wf.ID) })
	unhold()
	res := <-done
	require.Nil(t, res[1])
	assert.Equal(t, 2, res[0], "p1 requeued, c reopened")

	eventually(t, 15*time.Second, func() bool {
		info, err := b.client.GetWorkflow(b.ctx, wf.ID)
		require.NoError(t, err)
		return info.Task("c").State == "succeeded"
	}, "c never ran: it waits for p2, which had succeeded")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.race_runs WHERE task = 'c'`))
}

// Client.Cancel of a workflow's jobs beside CancelWorkflow of the workflow: the two take
// the workflow's row and the jobs' rows in one order, so neither fails on a deadlock.
// Before, Cancel's settle, holding the job, waited for a dependent's row CancelWorkflow
// held while CancelWorkflow waited for the job (40P01); Cancel taking the job's row
// before the workflow's, against CancelWorkflow taking the workflow's first, deadlocked
// too.
func TestCancelWorkflow_BesideCancelOfItsJobsNeverDeadlocks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const workflows, roots = 20, 4
	type target struct {
		wf   int64
		jobs []int64
	}
	var targets []target
	for range workflows {
		tasks := []skiplock.WorkflowTask{{Name: "last", Args: raceStep{}, DependsOn: []string{"r0"}}}
		for i := range roots {
			tasks = append(tasks, skiplock.WorkflowTask{Name: "r" + strconv.Itoa(i), Args: raceStep{},
				Options: &skiplock.EnqueueOptions{Queue: "parked"}})
		}
		info, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "both cancels", Tasks: tasks})
		require.NoError(t, err)
		tg := target{wf: info.ID}
		for _, task := range info.Tasks {
			if task.JobID != 0 {
				tg.jobs = append(tg.jobs, task.JobID)
			}
		}
		targets = append(targets, tg)
	}
	start := make(chan struct{})
	errs := make(chan error, workflows*(roots+1))
	var wg sync.WaitGroup
	for _, tg := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := b.client.CancelWorkflow(b.ctx, tg.wf)
			errs <- err
		}()
		for _, id := range tg.jobs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := b.client.Cancel(b.ctx, id)
				errs <- err
			}()
		}
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, tg := range targets {
		info, err := b.client.GetWorkflow(b.ctx, tg.wf)
		require.NoError(t, err)
		for _, task := range info.Tasks {
			assert.Equal(t, "cancelled", task.State, "workflow %d task %s", tg.wf, task.Name)
		}
	}
}

// goneStep is a workflow task that fails permanently while Fail is set and the test has
// not healed it; every run is counted in gone_runs.
type goneStep struct {
	Fail bool `json:"fail,omitempty"`
}

func (goneStep) Kind() string { return "gone_step" }

// A task whose job is gone from the jobs table cannot run again, and RetryWorkflow says
// so: it leaves that task, and the task that depends on it (CancelDependents), as they
// are, puts the rest back, and returns their count with ErrTaskJobGone; the workflow
// then ends (WaitWorkflow returns). Before, it reopened the dependent to wait for the
// gone task, which nothing would ever settle, and returned 2, nil: WaitWorkflow never
// returned, and the retention sweep never deleted the workflow.
func TestRetryWorkflow_ATaskWhoseJobIsGoneIsNotWaitedFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// a and c are enqueued with these options and args.
		opts *skiplock.EnqueueOptions
		fail bool
		// end waits for the workflow's first outcome and removes a's job.
		end   func(t *testing.T, b *bundle, wf int64)
		wantA string
	}{
		{name: "a failed job purged by DeadRetention", fail: true, wantA: "failed",
			end: func(t *testing.T, b *bundle, wf int64) {
				info := waitSettled(t, b, wf)
				require.Equal(t, map[string]string{"a": "failed", "b": "cancelled", "c": "failed"}, states(info))
				_, err := b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET finished_at = now() - interval '2 hours' WHERE id = $1`),
					info.Task("a").JobID)
				require.NoError(t, err)
				s, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{DeadRetention: time.Hour,
					ArchiveRetention: 365 * 24 * time.Hour, Logger: testLogger()})
				require.NoError(t, err)
				res, err := s.Sweep(b.ctx)
				require.NoError(t, err)
				require.Equal(t, int64(1), res.Purged, "a's job purged")
			}},
		{name: "a cancelled job deleted after CancelWorkflow", wantA: "cancelled",
			opts: &skiplock.EnqueueOptions{RunAt: time.Now().Add(time.Hour)},
			end: func(t *testing.T, b *bundle, wf int64) {
				n, err := b.client.CancelWorkflow(b.ctx, wf)
				require.NoError(t, err)
				require.Equal(t, 3, n)
				info := waitSettled(t, b, wf)
				_, err = b.client.Delete(b.ctx, info.Task("a").JobID)
				require.NoError(t, err)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.gone_runs (task text)`))
			require.NoError(t, err)
			var healed atomic.Bool
			w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
			require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[goneStep]) error {
				if _, err := b.pool.Exec(ctx, b.q(`INSERT INTO {s}.gone_runs VALUES ($1)`), job.Metadata["skiplock_task"]); err != nil {
					return err
				}
				if job.Args.Fail && !healed.Load() {
					return skiplock.Permanent(errors.New("failing until healed"))
				}
				return nil
			}))
			runWorker(t, w)
			wf, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "gone", Tasks: []skiplock.WorkflowTask{
				{Name: "a", Args: goneStep{Fail: tc.fail}, Options: tc.opts},
				{Name: "b", Args: goneStep{}, DependsOn: []string{"a"}},
				{Name: "c", Args: goneStep{Fail: tc.fail}, Options: tc.opts},
			}})
			require.NoError(t, err)
			tc.end(t, b, wf.ID)

			healed.Store(true)
			n, err := b.client.RetryWorkflow(b.ctx, wf.ID)
			require.ErrorIs(t, err, skiplock.ErrTaskJobGone)
			assert.Contains(t, err.Error(), `tasks ["a"] stay as they are`)
			assert.Contains(t, err.Error(), `tasks ["b"], which depend on them, stay cancelled`)
			assert.Equal(t, 1, n, "c put back")

			ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
			defer cancel()
			info, err := b.client.WaitWorkflow(ctx, wf.ID)
			require.NoError(t, err, "the workflow never ended")
			assert.Equal(t, map[string]string{"a": tc.wantA, "b": "cancelled", "c": "succeeded"}, states(info))
			assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.gone_runs WHERE task = 'b'`), "b ran")
		})
	}
}

// gatedStep is a workflow task that fails permanently when Fail is set, and, when Gate
// is set, waits for the test's gate before it returns.
type gatedStep struct {
	Fail bool `json:"fail,omitempty"`
	Gate bool `json:"gate,omitempty"`
}

func (gatedStep) Kind() string { return "gated_step" }

// Requeue of a workflow task's job puts its task back to released: WaitWorkflow waits
// for the job's new outcome, which settles the task, and RetryWorkflow then runs the
// dependent the first failure cancelled. Before, the task kept its failed state while
// its job ran (WaitWorkflow returned at once with a failed, and GetWorkflow still said
// failed after its success), and RetryWorkflow reopened b to wait for a settle of a
// that never came: b never ran.
func TestRequeue_OfAWorkflowTaskReopensItsTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.gated_runs (task text)`))
	require.NoError(t, err)
	gate := make(chan struct{})
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(gate) }) }
	started := make(chan string, 10)
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[gatedStep]) error {
		started <- job.Metadata["skiplock_task"]
		if job.Args.Fail {
			return skiplock.Permanent(errors.New("bad args"))
		}
		if job.Args.Gate {
			<-gate
		}
		_, err := b.pool.Exec(ctx, b.q(`INSERT INTO {s}.gated_runs VALUES ($1)`), job.Metadata["skiplock_task"])
		return err
	}))
	runWorker(t, w)
	t.Cleanup(openGate) // before the worker stops (cleanups run last first)
	wf, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "requeued", Tasks: []skiplock.WorkflowTask{
		{Name: "a", Args: gatedStep{Fail: true}},
		{Name: "b", Args: gatedStep{}, DependsOn: []string{"a"}},
	}})
	require.NoError(t, err)
	info := waitSettled(t, b, wf.ID)
	require.Equal(t, map[string]string{"a": "failed", "b": "cancelled"}, states(info))
	require.Equal(t, "a", <-started)

	// Fix a's args (its second run waits for the gate) and requeue it.
	a := wf.Task("a").JobID
	_, err = b.client.Update(b.ctx, a, skiplock.JobUpdate{Args: gatedStep{Gate: true}})
	require.NoError(t, err)
	res, err := b.client.Requeue(b.ctx, skiplock.RequeueFilter{IDs: []int64{a}})
	require.NoError(t, err)
	require.Equal(t, int64(1), res.Requeued)
	got, err := b.client.GetWorkflow(b.ctx, wf.ID)
	require.NoError(t, err)
	assert.Equal(t, "released", got.Task("a").State, "a runs again for its workflow")
	select {
	case name := <-started:
		require.Equal(t, "a", name)
	case <-time.After(10 * time.Second):
		t.Fatal("a's requeued job did not start")
	}

	// a runs, held by the gate: WaitWorkflow waits for its outcome.
	short, cancelShort := context.WithTimeout(b.ctx, 300*time.Millisecond)
	defer cancelShort()
	_, err = b.client.WaitWorkflow(short, wf.ID)
	require.ErrorIs(t, err, context.DeadlineExceeded, "WaitWorkflow returned while a's requeued job ran")
	waited := make(chan *skiplock.WorkflowInfo, 1)
	go func() {
		ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
		defer cancel()
		info, err := b.client.WaitWorkflow(ctx, wf.ID)
		assert.NoError(t, err)
		waited <- info
	}()
	openGate()
	info = <-waited
	require.NotNil(t, info)
	assert.Equal(t, map[string]string{"a": "succeeded", "b": "cancelled"}, states(info),
		"WaitWorkflow returned before a's requeued job ended, or b was not left cancelled")

	// b, cancelled by a's failure, runs once RetryWorkflow reopens it.
	n, err := b.client.RetryWorkflow(b.ctx, wf.ID)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "b reopened")
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	info, err = b.client.WaitWorkflow(ctx, wf.ID)
	require.NoError(t, err, "the workflow never ended")
	assert.Equal(t, map[string]string{"a": "succeeded", "b": "succeeded"}, states(info))
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.gated_runs WHERE task = 'b'`), "b ran once")
}

// A batch job that failed, put back (Requeue or RetryWorkflow) while other jobs of the
// batch have not finished, is counted once by the callback: its failure's count is taken
// back when it runs again, and the callback still waits for every job. Before, its first
// outcome had already counted it, its second counted it again, and the callback ran
// before the last job of the batch had finished (with Failed=1 and Succeeded=2 of 3).
// The same holds for a task of any RunDependents workflow.
func TestRequeue_OfAFailedBatchJobCountsItOnce(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"Requeue", "RetryWorkflow"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var healed atomic.Bool
			var mu sync.Mutex
			var got []skiplock.BatchCounts
			w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
			require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[countedJob]) error {
				if job.Args.Fail && !healed.Load() {
					return skiplock.Permanent(errors.New("failing until healed"))
				}
				return nil
			}))
			require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[countedCallback]) error {
				counts, _ := skiplock.BatchCountsOf(job.JobRow)
				mu.Lock()
				got = append(got, counts)
				mu.Unlock()
				return nil
			}))
			callbacks := func() []skiplock.BatchCounts {
				mu.Lock()
				defer mu.Unlock()
				return append([]skiplock.BatchCounts(nil), got...)
			}
			batch, err := b.client.EnqueueBatch(b.ctx, skiplock.Batch{Name: "requeued", Callback: countedCallback{},
				Jobs: []skiplock.EnqueueParams{
					{Args: countedJob{Fail: true}},
					{Args: countedJob{}},
					{Args: countedJob{}, Options: &skiplock.EnqueueOptions{RunAt: time.Now().Add(time.Hour)}},
				}})
			require.NoError(t, err)
			runWorker(t, w)
			taskState := func(name string) string {
				var s string
				require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT state FROM {s}.workflow_tasks WHERE workflow_id = $1 AND name = $2`),
					batch.ID, name).Scan(&s))
				return s
			}
			eventually(t, 30*time.Second, func() bool { return taskState("job-0") == "failed" && taskState("job-1") == "succeeded" },
				"job-0 did not fail or job-1 did not succeed")

			healed.Store(true)
			switch how {
			case "Requeue":
				res, err := b.client.Requeue(b.ctx, skiplock.RequeueFilter{IDs: []int64{batch.Task("job-0").JobID}})
				require.NoError(t, err)
				require.Equal(t, int64(1), res.Requeued)
			default:
				n, err := b.client.RetryWorkflow(b.ctx, batch.ID)
				require.NoError(t, err)
				require.Equal(t, 1, n)
			}
			eventually(t, 30*time.Second, func() bool { return taskState("job-0") == "succeeded" }, "job-0 did not run again")
			assert.Equal(t, "waiting", taskState("callback"), "the callback was released while job-2 had not run")
			assert.Equal(t, 1, b.count(t, `SELECT waiting FROM {s}.workflow_tasks WHERE workflow_id = $1 AND name = 'callback'`, batch.ID),
				"the callback waits for job-2 alone")

			_, err = b.client.Update(b.ctx, batch.Task("job-2").JobID, skiplock.JobUpdate{RunNow: true})
			require.NoError(t, err)
			info := waitSettled(t, b, batch.ID)
			assert.Equal(t, "succeeded", info.Task("callback").State)
			eventually(t, 10*time.Second, func() bool { return len(callbacks()) > 0 }, "the callback did not run")
			assert.Equal(t, []skiplock.BatchCounts{{Succeeded: 3}}, callbacks())
		})
	}
}

// staggeredJob is a batch job that fails once (the first attempt of every third job) and
// then succeeds; the later ones take a little longer, so batches finish over a while.
type staggeredJob struct {
	I int `json:"i"`
}

func (staggeredJob) Kind() string { return "staggered_job" }

type staggeredCallback struct{}

func (staggeredCallback) Kind() string { return "staggered_callback" }

// Requeue of failed batch jobs, in a loop, racing the settles of four workers: every
// callback runs once, counts each job once (Succeeded+Failed = the batch's size), and
// never runs while a job of its batch has not had its first attempt. Before, a job
// requeued before its batch's callback was released was counted twice, and the
// callback ran early (counts adding up to 41 of 40).
func TestRequeue_RacingTheSettlesOfBatchesCountsEachJobOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	failedOnce := map[int64]bool{}
	callbacks := map[string][]skiplock.BatchCounts{}
	early := 0
	// notRun counts the jobs of workflow $1 that have not ended their first attempt.
	const notRun = `SELECT count(*) FROM {s}.jobs j JOIN {s}.workflow_tasks t ON t.job_id = j.id
		WHERE t.workflow_id = $1::bigint AND t.name <> 'callback' AND j.status IN ('queued', 'running') AND j.errors = '[]'::jsonb`
	var workers []*skiplock.Worker
	for range 4 {
		w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 20 * time.Millisecond, SweepInterval: -1, Logger: testLogger(),
			Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 8}}})
		require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[staggeredJob]) error {
			if job.Args.I > 30 {
				time.Sleep(time.Duration(job.Args.I) * 3 * time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			if job.Args.I%3 == 0 && !failedOnce[job.ID] {
				failedOnce[job.ID] = true
				return skiplock.Permanent(errors.New("first attempt"))
			}
			return nil
		}))
		require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[staggeredCallback]) error {
			counts, _ := skiplock.BatchCountsOf(job.JobRow)
			wf := job.Metadata["skiplock_workflow"]
			var n int
			if err := b.pool.QueryRow(ctx, b.q(notRun), wf).Scan(&n); err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			callbacks[wf] = append(callbacks[wf], counts)
			early += n
			return nil
		}))
		workers = append(workers, w)
	}
	const batches, size = 10, 40
	for i := range batches {
		jobs := make([]skiplock.EnqueueParams, size)
		for k := range jobs {
			jobs[k] = skiplock.EnqueueParams{Args: staggeredJob{I: k}}
		}
		_, err := b.client.EnqueueBatch(b.ctx, skiplock.Batch{Name: "staggered " + strconv.Itoa(i), Jobs: jobs, Callback: staggeredCallback{}})
		require.NoError(t, err)
	}
	for _, w := range workers {
		runWorker(t, w)
	}
	stop := make(chan struct{})
	requeuer := make(chan struct{})
	go func() {
		defer close(requeuer)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			_, err := b.client.Requeue(b.ctx, skiplock.RequeueFilter{Kind: "staggered_job"})
			assert.NoError(t, err)
		}
	}()
	eventually(t, 60*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.workflow_tasks WHERE state <> 'succeeded'`) == 0
	}, "every job and callback did not succeed")
	close(stop)
	<-requeuer
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, callbacks, batches)
	for wf, got := range callbacks {
		require.Len(t, got, 1, "workflow %s: callbacks", wf)
		assert.Equal(t, size, got[0].Succeeded+got[0].Failed, "workflow %s: %+v", wf, got[0])
	}
	assert.Zero(t, early, "callbacks ran while jobs of their batch had not run")
}
