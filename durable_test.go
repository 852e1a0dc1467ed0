package skiplock_test

// Tests of durable execution (issue 42, docs/durable.md): steps recorded per job and not
// run again by a later attempt, durable sleeps and signal waits that end the attempt, the
// order check, Fork, and the records' life with their job. SQL is the judge: handlers
// write an audit row per run of a step's function, in the step's own transaction where
// the claim is exactly-once.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

type sagaArgs struct {
	Order int `json:"order"`
}

func (sagaArgs) Kind() string { return "saga" }

// durableSetup makes the audit table the steps write: one row per run of a step's
// function (run_at the database's clock), with the attempt and token that ran it.
func durableSetup(t *testing.T, b *bundle) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.step_audit (
		job_id bigint, step text, attempt int, token bigint, at timestamptz DEFAULT clock_timestamp(), n serial)`))
	require.NoError(t, err)
}

// audit writes one audit row for job's step on db.
func audit(ctx context.Context, b *bundle, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, job *skiplock.JobRow, step string) error {
	_, err := db.Exec(ctx, b.q(`INSERT INTO {s}.step_audit (job_id, step, attempt, token) VALUES ($1, $2, $3, $4)`),
		job.ID, step, job.Attempts, job.Fence)
	return err
}

// durableWorker is a worker polling fast, the sweeper off.
func durableWorker(t *testing.T, b *bundle, cfg skiplock.WorkerConfig) *skiplock.Worker {
	t.Helper()
	cfg.SweepInterval = -1
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	cfg.Logger = testLogger()
	if cfg.Completion == 0 {
		cfg.Completion = skiplock.CompletionKeep
	}
	return newWorker(t, b, cfg)
}

// A failed attempt's retry replays the steps recorded before the failure and runs the
// failed step again: reserve runs once, charge twice (its first run failed, unrecorded),
// ship once.
func TestStep_RetryReplaysRecordedSteps(t *testing.T) {
	t.Parallel()
	b := setup(t)
	durableSetup(t, b)
	w := durableWorker(t, b, skiplock.WorkerConfig{RetryPolicy: fixedDelay(10 * time.Millisecond)})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[sagaArgs]) error {
		res, err := skiplock.StepTx(ctx, "reserve", func(ctx context.Context, tx pgx.Tx) (string, error) {
			return "r-1", audit(ctx, b, tx, job.JobRow, "reserve")
		})
		if err != nil {
			return err
		}
		if res != "r-1" {
			return skiplock.Permanent(fmt.Errorf("replayed reserve gave %q", res))
		}
		_, err = skiplock.Step(ctx, "charge", func(ctx context.Context) (int, error) {
			if err := audit(ctx, b, b.pool, job.JobRow, "charge"); err != nil {
				return 0, err
			}
			if job.Attempts == 1 {
				return 0, errors.New("card declined, try again")
			}
			return 42, nil
		})
		if err != nil {
			return err
		}
		_, err = skiplock.StepTx(ctx, "ship", func(ctx context.Context, tx pgx.Tx) (bool, error) {
			return true, audit(ctx, b, tx, job.JobRow, "ship")
		})
		return err
	}))
	j, err := b.client.Enqueue(b.ctx, sagaArgs{Order: 1}, nil)
	require.NoError(t, err)
	runWorker(t, w)
	waitStatus(t, b, j.ID, skiplock.StatusSucceeded, 30*time.Second, "the saga succeeded")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE step = 'reserve'`))
	assert.Equal(t, 2, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE step = 'charge'`))
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE step = 'ship' AND attempt = 2`))
	steps, err := b.client.Steps(b.ctx, j.ID)
	require.NoError(t, err)
	require.Len(t, steps, 3)
	for i, name := range []string{"reserve", "charge", "ship"} {
		assert.Equal(t, name, steps[i].Name)
		assert.Equal(t, i, steps[i].Seq)
		assert.Equal(t, "done", steps[i].Status)
		assert.Equal(t, skiplock.StepKindStep, steps[i].Kind)
	}
	assert.Equal(t, json.RawMessage(`42`), steps[1].Result)
	assert.Equal(t, 2, steps[1].Attempt)
	assert.Equal(t, 1, steps[0].Attempt)
}

type killedArgs struct{}

func (killedArgs) Kind() string { return "killed_mid_job" }

// A finished step is not run again after its worker died mid-job: worker a records steps
// one and two, then hangs; its job is taken back (a's row gone, its lease over: what a
// kill leaves) and worker b runs it again: one and two return their records, three runs.
// When a's handler wakes up and runs step three, its StepTx commits nothing: the audit
// has one row per step.
func TestStep_FinishedStepDoesNotRunAgainAfterTheWorkerDied(t *testing.T) {
	t.Parallel()
	b := setup(t)
	durableSetup(t, b)
	stuck, inside := make(chan struct{}), make(chan struct{})
	lateErr := make(chan error, 1)
	handler := func(worker string) func(ctx context.Context, job *skiplock.Job[killedArgs]) error {
		return func(ctx context.Context, job *skiplock.Job[killedArgs]) error {
			for _, name := range []string{"one", "two"} {
				if _, err := skiplock.StepTx(ctx, name, func(ctx context.Context, tx pgx.Tx) (string, error) {
					return worker, audit(ctx, b, tx, job.JobRow, name)
				}); err != nil {
					return err
				}
			}
			if worker == "a" {
				close(inside)
				<-stuck // deaf to ctx: hung until the test lets it go
			}
			_, err := skiplock.StepTx(context.WithoutCancel(ctx), "three", func(ctx context.Context, tx pgx.Tx) (string, error) {
				return worker, audit(ctx, b, tx, job.JobRow, "three")
			})
			if worker == "a" {
				lateErr <- err
			}
			return err
		}
	}
	// One slot: a, hung, claims nothing more.
	a := durableWorker(t, b, skiplock.WorkerConfig{ID: "a", JobTimeout: -1,
		Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 1}}})
	require.NoError(t, skiplock.Handle(a, handler("a")))
	job, err := b.client.Enqueue(b.ctx, killedArgs{}, nil)
	require.NoError(t, err)
	runStuck(t, a, stuck)
	<-inside
	takeBack(t, b, job.ID)
	w := durableWorker(t, b, skiplock.WorkerConfig{ID: "b", JobTimeout: -1})
	require.NoError(t, skiplock.Handle(w, handler("b")))
	runWorker(t, w)
	waitStatus(t, b, job.ID, skiplock.StatusSucceeded, 30*time.Second, "worker b finished the job")
	close(stuck)
	select {
	case err := <-lateErr:
		assert.ErrorIs(t, err, skiplock.ErrAttemptLost, "a's late step")
	case <-time.After(30 * time.Second):
		t.Fatal("a's handler did not run its late step")
	}
	for _, name := range []string{"one", "two", "three"} {
		assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE step = $1`, name), "runs of step %s", name)
	}
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE step = 'three' AND attempt = 2`))
	assert.Equal(t, 2, b.count(t, `SELECT count(*) FROM {s}.job_steps WHERE job_id = $1 AND attempt = 1`, job.ID))
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.job_steps WHERE job_id = $1 AND attempt = 2 AND name = 'three'`, job.ID))
}

type sleeperArgs struct {
	Ignore bool `json:"ignore"` // the handler drops Sleep's error and returns nil
}

func (sleeperArgs) Kind() string { return "sleeper" }

// A sleeping job holds no worker slot: with one slot, other jobs run while it sleeps. It
// is queued with its attempt given back until its wake-up; run early, the same Sleep
// ends the attempt again; after its wake-up the handler goes on, the step before the
// sleep not run again. A handler that drops Sleep's error suspends all the same.
func TestSleep_HoldsNoWorkerSlotAndResumesAfterItsWakeUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	durableSetup(t, b)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.outcomes (job_id bigint, status text, outcome text)`))
	require.NoError(t, err)
	w := durableWorker(t, b, skiplock.WorkerConfig{Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 1}},
		Hooks: []skiplock.Hook{outcomeLog{b}}})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[sleeperArgs]) error {
		if err := skiplock.Sleep(ctx, -time.Minute); err != nil { // no sleep at all, recorded
			return skiplock.Permanent(fmt.Errorf("a negative sleep suspended: %w", err))
		}
		if _, err := skiplock.StepTx(ctx, "before", func(ctx context.Context, tx pgx.Tx) (int, error) {
			return 1, audit(ctx, b, tx, job.JobRow, "before")
		}); err != nil {
			return err
		}
		err := skiplock.Sleep(ctx, time.Hour)
		if job.Args.Ignore {
			return nil // the worker must not record a success
		}
		if err != nil {
			return err
		}
		return audit(ctx, b, b.pool, job.JobRow, "after")
	}))
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[auditArgs]) error {
		return audit(ctx, b, b.pool, job.JobRow, "other")
	}))
	sleeper, err := b.client.Enqueue(b.ctx, sleeperArgs{}, nil)
	require.NoError(t, err)
	ignorer, err := b.client.Enqueue(b.ctx, sleeperArgs{Ignore: true}, nil)
	require.NoError(t, err)
	runWorker(t, w)
	parked := `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND status = 'queued' AND attempts = 0
		AND run_at > now() + interval '50 minutes' AND locked_by IS NULL AND lease_until IS NULL`
	for _, id := range []int64{sleeper.ID, ignorer.ID} {
		eventually(t, 30*time.Second, func() bool { return b.count(t, parked, id) == 1 }, "job %d sleeps", id)
	}
	enqueueAudit(t, b, 5)
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE step = 'other'`) == 5
	}, "the other jobs ran while the sleepers slept")
	// Run early (an operator's RunNow): the same Sleep ends the attempt again.
	_, err = b.client.Update(b.ctx, sleeper.ID, skiplock.JobUpdate{RunNow: true})
	require.NoError(t, err)
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE step = 'before'`) == 2 &&
			b.count(t, parked, sleeper.ID) == 1
	}, "woken early, the sleeper sleeps again")
	holdsFor(t, 300*time.Millisecond, 20*time.Millisecond, func() {
		require.Equal(t, 1, b.count(t, parked, sleeper.ID), "the sleeper stays parked")
	})
	// Its wake-up passed: it goes on after the Sleep, once.
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.job_steps SET wake_at = now() - interval '1 second' WHERE job_id = $1 AND seq = 2`), sleeper.ID)
	require.NoError(t, err)
	_, err = b.client.Update(b.ctx, sleeper.ID, skiplock.JobUpdate{RunNow: true})
	require.NoError(t, err)
	waitStatus(t, b, sleeper.ID, skiplock.StatusSucceeded, 30*time.Second, "the sleeper finished")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE step = 'before' AND job_id = $1`, sleeper.ID))
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE step = 'after'`))
	j, err := b.client.Get(b.ctx, sleeper.ID)
	require.NoError(t, err)
	assert.Equal(t, 1, j.Attempts, "the sleeps gave their attempts back")
	steps, err := b.client.Steps(b.ctx, sleeper.ID)
	require.NoError(t, err)
	require.Len(t, steps, 3)
	assert.Equal(t, skiplock.StepKindSleep, steps[0].Kind)
	assert.Equal(t, "done", steps[0].Status, "the negative sleep")
	assert.Equal(t, skiplock.StepKindSleep, steps[2].Kind)
	assert.Equal(t, "done", steps[2].Status)
	require.NotNil(t, steps[2].WakeAt)
	assert.Zero(t, steps[0].Duration, "a sleep of no length")
	assert.Equal(t, 1, b.count(t, parked, ignorer.ID), "the job whose handler dropped Sleep's error still sleeps")
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.outcomes WHERE job_id = $1 AND outcome <> 'snoozed'`, ignorer.ID),
		"the hooks were told the attempt was suspended, not that it succeeded")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.outcomes WHERE job_id = $1 AND status = 'queued'`, ignorer.ID))
}

type waiterArgs struct {
	Timeout time.Duration `json:"timeout"`
}

func (waiterArgs) Kind() string { return "waiter" }

// waiterHandler awaits the signal "approve" and writes its payload (or "timeout") to the
// audit, as a step of its own after the wait.
func waiterHandler(b *bundle) func(ctx context.Context, job *skiplock.Job[waiterArgs]) error {
	return func(ctx context.Context, job *skiplock.Job[waiterArgs]) error {
		payload, err := skiplock.AwaitSignal(ctx, "approve", job.Args.Timeout)
		got := string(payload)
		switch {
		case errors.Is(err, skiplock.ErrSignalTimeout):
			got = "timeout"
		case err != nil:
			return err
		}
		_, err = skiplock.StepTx(ctx, "audit", func(ctx context.Context, tx pgx.Tx) (bool, error) {
			return true, audit(ctx, b, tx, job.JobRow, got)
		})
		return err
	}
}

// A signal sent before the job waits is kept, and the wait takes it without parking;
// a job that parks is woken by the signal; a wait whose timeout passes gets
// ErrSignalTimeout, recorded.
func TestAwaitSignal_SignalsBeforeAndAfterTheWaitAndTheTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	durableSetup(t, b)
	early, err := b.client.Enqueue(b.ctx, waiterArgs{}, nil)
	require.NoError(t, err)
	require.NoError(t, b.client.Signal(b.ctx, early.ID, "approve", map[string]string{"by": "early"}))
	late, err := b.client.Enqueue(b.ctx, waiterArgs{}, nil)
	require.NoError(t, err)
	timesOut, err := b.client.Enqueue(b.ctx, waiterArgs{Timeout: 200 * time.Millisecond}, nil)
	require.NoError(t, err)
	w := durableWorker(t, b, skiplock.WorkerConfig{})
	require.NoError(t, skiplock.Handle(w, waiterHandler(b)))
	runWorker(t, w)
	waitStatus(t, b, early.ID, skiplock.StatusSucceeded, 30*time.Second, "the early signal was taken")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE job_id = $1 AND step = '{"by": "early"}'`, early.ID))
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND status = 'queued' AND awaiting = 'approve'
			AND run_at = '9999-12-31 00:00:00+00' AND attempts = 0`, late.ID) == 1
	}, "the late job parks")
	require.NoError(t, b.client.Signal(b.ctx, late.ID, "other", 1)) // not the awaited name: no wake-up
	require.NoError(t, b.client.Signal(b.ctx, late.ID, "approve", "yes"))
	waitStatus(t, b, late.ID, skiplock.StatusSucceeded, 30*time.Second, "the signal woke the parked job")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE job_id = $1 AND step = '"yes"'`, late.ID))
	waitStatus(t, b, timesOut.ID, skiplock.StatusSucceeded, 30*time.Second, "the wait timed out")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE job_id = $1 AND step = 'timeout'`, timesOut.ID))
	steps, err := b.client.Steps(b.ctx, timesOut.ID)
	require.NoError(t, err)
	require.Len(t, steps, 2)
	assert.Equal(t, "timed_out", steps[0].Status)
	assert.Equal(t, skiplock.StepKindSignal, steps[0].Kind)
	sigs, err := b.client.Signals(b.ctx, late.ID)
	require.NoError(t, err)
	require.Len(t, sigs, 2)
	assert.Equal(t, "other", sigs[0].Name)
	assert.Nil(t, sigs[0].ConsumedSeq)
	require.NotNil(t, sigs[1].ConsumedSeq)
	assert.Equal(t, 0, *sigs[1].ConsumedSeq)
	// Finished: a signal now would never be read.
	assert.ErrorIs(t, b.client.Signal(b.ctx, late.ID, "approve", 1), skiplock.ErrJobFinished)
	assert.ErrorIs(t, b.client.Signal(b.ctx, 1<<40, "approve", 1), skiplock.ErrJobNotFound)
}

// Signals racing the park: each of many jobs runs a step, then tells the test it is about
// to wait for its signal (no timeout), and the test sends the signal 0-5 ms later. A test
// trigger holds each wait 4 ms between its check for a signal and its park's commit, so
// many signals are sent inside that window. A signal lost in the race would leave its job
// parked for ever. Every job must take its own signal, once.
func TestAwaitSignal_SignalRacingTheParkIsNeverLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	durableSetup(t, b)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE FUNCTION {s}.slow_wait() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN PERFORM pg_sleep(0.004); RETURN NEW; END $$;
		CREATE TRIGGER slow_wait BEFORE INSERT ON {s}.job_steps FOR EACH ROW
		WHEN (NEW.kind = 'signal' AND NEW.result IS NULL) EXECUTE FUNCTION {s}.slow_wait()`))
	require.NoError(t, err)
	const jobs = 150
	ready := make(chan int64, jobs)
	w := durableWorker(t, b, skiplock.WorkerConfig{PollInterval: 20 * time.Millisecond,
		Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 8}}})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[raceArgs]) error {
		if _, err := skiplock.Step(ctx, "before", func(ctx context.Context) (int, error) {
			ready <- job.ID // once per job: the step is recorded before the wait
			return 0, nil
		}); err != nil {
			return err
		}
		payload, err := skiplock.AwaitSignal(ctx, "go", 0)
		if err != nil {
			return err
		}
		return audit(ctx, b, b.pool, job.JobRow, string(payload))
	}))
	params := make([]skiplock.EnqueueParams, jobs)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: raceArgs{N: i}}
	}
	_, err = b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	runWorker(t, w)
	errs := make(chan error, jobs)
	for i := range jobs {
		id := <-ready
		go func() {
			work(b.ctx, time.Duration(i%6)*time.Millisecond) // before, during or after the park
			errs <- b.client.Signal(b.ctx, id, "go", id)
		}()
	}
	for range jobs {
		require.NoError(t, <-errs)
	}
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'succeeded'`) == jobs
	}, "every job took its signal (parked: %d)", b.count(t, `SELECT count(*) FROM {s}.jobs WHERE awaiting IS NOT NULL`))
	assert.Equal(t, jobs, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE step = job_id::text`), "each job got its own signal")
	assert.Equal(t, jobs, b.count(t, `SELECT count(DISTINCT job_id) FROM {s}.step_audit`))
	assert.Equal(t, jobs, b.count(t, `SELECT count(*) FROM {s}.job_signals WHERE consumed_seq = 1`))
	t.Logf("signals sent while a wait was being parked: %d", b.count(t, `SELECT count(*) FROM {s}.job_signals g JOIN {s}.job_steps st
		ON st.job_id = g.job_id AND st.kind = 'signal' WHERE g.sent_at BETWEEN st.started_at AND st.started_at + interval '4 ms'`))
	t.Logf("waits that parked before their signal: %d of %d",
		b.count(t, `SELECT count(*) FROM {s}.job_steps WHERE kind = 'signal' AND wake_at IS NOT NULL`), jobs)
}

type raceArgs struct {
	N int `json:"n"`
}

func (raceArgs) Kind() string { return "signal_race" }

type versionedArgs struct {
	Second string `json:"second"` // the name the handler's second step has in its attempt 2
}

func (versionedArgs) Kind() string { return "versioned" }

// Versioning: a retry whose handler renamed a recorded step gets ErrStepOrderChanged,
// naming the place, the recorded step and the called one; a retry whose handler only
// appends steps after the recorded ones runs them.
func TestStep_ChangedStepOrderIsAnErrorAndAppendingIsNot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	durableSetup(t, b)
	errs := make(chan error, 4)
	w := durableWorker(t, b, skiplock.WorkerConfig{RetryPolicy: fixedDelay(10 * time.Millisecond)})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[versionedArgs]) error {
		names := []string{"first", "second"} // attempt 1: then fails
		if job.Attempts > 1 {
			names = []string{"first", job.Args.Second, "third"} // the code changed
		}
		for _, name := range names {
			if _, err := skiplock.StepTx(ctx, name, func(ctx context.Context, tx pgx.Tx) (int, error) {
				return 0, audit(ctx, b, tx, job.JobRow, name)
			}); err != nil {
				if errors.Is(err, skiplock.ErrStepOrderChanged) {
					errs <- err
					return skiplock.Permanent(err)
				}
				return err
			}
		}
		if job.Attempts == 1 {
			return errors.New("first attempt fails after its steps")
		}
		return nil
	}))
	renamed, err := b.client.Enqueue(b.ctx, versionedArgs{Second: "second_v2"}, nil)
	require.NoError(t, err)
	appended, err := b.client.Enqueue(b.ctx, versionedArgs{Second: "second"}, nil)
	require.NoError(t, err)
	runWorker(t, w)
	waitStatus(t, b, renamed.ID, skiplock.StatusFailed, 30*time.Second, "the renamed step failed the job")
	waitStatus(t, b, appended.ID, skiplock.StatusSucceeded, 30*time.Second, "the appended step ran")
	select {
	case err := <-errs:
		assert.Contains(t, err.Error(), `step 1 was recorded as step "second", the handler now calls step "second_v2" there`)
	default:
		t.Fatal("no ErrStepOrderChanged")
	}
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE step = 'second_v2'`), "the renamed step did not run")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE job_id = $1 AND step = 'first'`, appended.ID))
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE job_id = $1 AND step = 'third' AND attempt = 2`, appended.ID))
	assert.Equal(t, 3, b.count(t, `SELECT count(*) FROM {s}.job_steps WHERE job_id = $1`, appended.ID))
}

// Fork: a new job whose steps before the named one are copied runs that step and the
// later ones again, and replays the earlier ones; the old job is left alone.
func TestFork_RunsAgainFromTheNamedStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	durableSetup(t, b)
	w := durableWorker(t, b, skiplock.WorkerConfig{Completion: skiplock.CompletionArchive})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[sagaArgs]) error {
		for _, name := range []string{"reserve", "charge", "ship"} {
			got, err := skiplock.StepTx(ctx, name, func(ctx context.Context, tx pgx.Tx) (int64, error) {
				return job.ID, audit(ctx, b, tx, job.JobRow, name)
			})
			if err != nil {
				return err
			}
			_ = got // reserve's result: the id of the job that ran it (the old job's, in a fork)
		}
		return nil
	}))
	j, err := b.client.Enqueue(b.ctx, sagaArgs{Order: 5}, &skiplock.EnqueueOptions{Metadata: map[string]string{"tenant": "acme"}})
	require.NoError(t, err)
	runWorker(t, w)
	waitStatus(t, b, j.ID, skiplock.StatusSucceeded, 30*time.Second, "the job finished")
	_, err = b.client.Fork(b.ctx, j.ID, "refund")
	assert.ErrorIs(t, err, skiplock.ErrStepNotFound)
	_, err = b.client.Fork(b.ctx, 1<<40, "charge")
	assert.ErrorIs(t, err, skiplock.ErrJobNotFound)
	fork, err := b.client.Fork(b.ctx, j.ID, "charge") // the job is in the archive
	require.NoError(t, err)
	assert.NotEqual(t, j.ID, fork.ID)
	assert.Equal(t, j.Kind, fork.Kind)
	assert.Equal(t, map[string]string{"tenant": "acme", "skiplock_forked_from": fmt.Sprint(j.ID)}, fork.Metadata)
	waitStatus(t, b, fork.ID, skiplock.StatusSucceeded, 30*time.Second, "the fork finished")
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE job_id = $1 AND step = 'reserve'`, fork.ID), "reserve replayed")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE job_id = $1 AND step = 'charge'`, fork.ID))
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE job_id = $1 AND step = 'ship'`, fork.ID))
	assert.Equal(t, 3, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE job_id = $1`, j.ID), "the old job's steps ran once")
	steps, err := b.client.Steps(b.ctx, fork.ID)
	require.NoError(t, err)
	require.Len(t, steps, 3)
	assert.Equal(t, 0, steps[0].Attempt, "copied by Fork")
	assert.Equal(t, json.RawMessage(fmt.Sprint(j.ID)), steps[0].Result, "the old job's result")
	assert.Equal(t, 1, steps[1].Attempt)
}

type lifeArgs struct{}

func (lifeArgs) Kind() string { return "life" }

// A job's steps and signals go away with it: deleted from the jobs table (Delete, the
// delete completion mode), or purged from the archive by retention; an archived job's
// stay readable until then.
func TestDurable_RecordsGoAwayWithTheirJob(t *testing.T) {
	t.Parallel()
	for name, mode := range map[string]skiplock.Completion{"archive": skiplock.CompletionArchive,
		"keep": skiplock.CompletionKeep, "delete": skiplock.CompletionDelete} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			w := durableWorker(t, b, skiplock.WorkerConfig{Completion: mode})
			require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[lifeArgs]) error {
				_, err := skiplock.Step(ctx, "one", func(context.Context) (int, error) { return 1, nil })
				return err
			}))
			j, err := b.client.Enqueue(b.ctx, lifeArgs{}, nil)
			require.NoError(t, err)
			other, err := b.client.Enqueue(b.ctx, lifeArgs{}, &skiplock.EnqueueOptions{RunAt: time.Now().Add(time.Hour)})
			require.NoError(t, err)
			require.NoError(t, b.client.Signal(b.ctx, j.ID, "hello", 1))
			require.NoError(t, b.client.Signal(b.ctx, other.ID, "hello", 2))
			records := func(id int64) int {
				return b.count(t, `SELECT (SELECT count(*) FROM {s}.job_steps WHERE job_id = $1) + (SELECT count(*) FROM {s}.job_signals WHERE job_id = $1)`, id)
			}
			runWorker(t, w)
			if mode == skiplock.CompletionDelete {
				eventually(t, 30*time.Second, func() bool {
					return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1`, j.ID) == 0
				}, "the job's success deleted it")
				assert.Equal(t, 0, records(j.ID), "its records went with it")
				assert.Equal(t, 1, records(other.ID), "another job's records stay")
				return
			}
			waitStatus(t, b, j.ID, skiplock.StatusSucceeded, 30*time.Second, "the job finished")
			require.Equal(t, 2, records(j.ID), "a finished job's records are kept")
			steps, err := b.client.Steps(b.ctx, j.ID)
			require.NoError(t, err)
			require.Len(t, steps, 1)
			if mode == skiplock.CompletionArchive { // the retention purge of the archive
				_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs_archive SET finished_at = now() - interval '8 days' WHERE id = $1`), j.ID)
				require.NoError(t, err)
				sw, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{Logger: testLogger()})
				require.NoError(t, err)
				res, err := sw.Sweep(b.ctx)
				require.NoError(t, err)
				require.EqualValues(t, 1, res.Purged)
			} else {
				_, err = b.client.Delete(b.ctx, j.ID)
				require.NoError(t, err)
			}
			assert.Equal(t, 0, records(j.ID), "its records went with it")
			assert.Equal(t, 1, records(other.ID), "another job's records stay")
			_, err = b.client.Steps(b.ctx, j.ID)
			assert.ErrorIs(t, err, skiplock.ErrJobNotFound)
		})
	}
}

// Bad input gets a clear error and writes nothing; outside a handler the steps say so.
func TestDurable_BadInputAndCallsOutsideAJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j, err := b.client.Enqueue(b.ctx, lifeArgs{}, &skiplock.EnqueueOptions{RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	for _, name := range []string{"", strings.Repeat("x", skiplock.MaxStepName+1), "bad\x00name", "\xff"} {
		assert.ErrorIs(t, b.client.Signal(b.ctx, j.ID, name, 1), skiplock.ErrInvalidStepName, "name %q", name)
	}
	assert.ErrorIs(t, b.client.Signal(b.ctx, j.ID, "s", func() {}), skiplock.ErrInvalidPayload)
	assert.ErrorIs(t, b.client.Signal(b.ctx, j.ID, "s", strings.Repeat("x", skiplock.DefaultMaxPayloadBytes)), skiplock.ErrPayloadTooLarge)
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.job_signals`))
	_, err = b.client.Fork(b.ctx, j.ID, "")
	assert.ErrorIs(t, err, skiplock.ErrInvalidStepName)
	_, err = skiplock.Step(b.ctx, "x", func(context.Context) (int, error) { return 1, nil })
	assert.ErrorIs(t, err, skiplock.ErrNotInJob)
	_, err = skiplock.StepTx(b.ctx, "x", func(context.Context, pgx.Tx) (int, error) { return 1, nil })
	assert.ErrorIs(t, err, skiplock.ErrNotInJob)
	assert.ErrorIs(t, skiplock.Sleep(b.ctx, time.Second), skiplock.ErrNotInJob)
	_, err = skiplock.AwaitSignal(b.ctx, "x", time.Second)
	assert.ErrorIs(t, err, skiplock.ErrNotInJob)
	steps, err := b.client.Steps(b.ctx, j.ID)
	require.NoError(t, err)
	assert.Empty(t, steps)
}

type batchStepArgs struct {
	N int `json:"n"`
}

func (batchStepArgs) Kind() string { return "batch_step" }

// In a batch handler, durable steps take each job's own context: given the call's (which
// carries its first job's values) they refuse, rather than record for the wrong job.
func TestStep_InABatchHandlerTakesEachJobsOwnContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	refused := make(chan error, 1)
	w := durableWorker(t, b, skiplock.WorkerConfig{})
	require.NoError(t, skiplock.HandleBatch(w, skiplock.BatchHandlerConfig{MaxJobs: 3, MaxWait: time.Second},
		func(ctx context.Context, jobs []*skiplock.Job[batchStepArgs]) []error {
			_, err := skiplock.Step(ctx, "wrong", func(context.Context) (int, error) { return 0, nil })
			select {
			case refused <- err:
			default:
			}
			errs := make([]error, len(jobs))
			for i, job := range jobs {
				_, errs[i] = skiplock.Step(job.Context(), "own", func(context.Context) (int, error) { return job.Args.N, nil })
			}
			return errs
		}))
	params := make([]skiplock.EnqueueParams, 3)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: batchStepArgs{N: i}}
	}
	_, err := b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	runWorker(t, w)
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'succeeded'`) == 3
	}, "the batch succeeded")
	assert.ErrorIs(t, <-refused, skiplock.ErrNotInJob)
	assert.Equal(t, 3, b.count(t, `SELECT count(*) FROM {s}.job_steps s JOIN {s}.jobs j ON j.id = s.job_id
		WHERE s.name = 'own' AND s.result = j.payload -> 'n'`), "each job's step recorded for it")
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.job_steps WHERE name = 'wrong'`))
}

// A sleeping job holds no slot of its queue's concurrency limit either: with
// Concurrency 1 (the slot rows) or with a per-key limit too (the claims under the
// queue's lock), other jobs of the queue run while it sleeps.
func TestSleep_HoldsNoConcurrencySlot(t *testing.T) {
	t.Parallel()
	for name, limits := range map[string]skiplock.QueueLimits{
		"slots": {Concurrency: 1}, "locked": {Concurrency: 1, KeyConcurrency: 1},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			durableSetup(t, b)
			w := durableWorker(t, b, skiplock.WorkerConfig{Queues: map[string]skiplock.QueueConfig{
				skiplock.DefaultQueue: {MaxWorkers: 4, Limits: limits}}})
			require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[sleeperArgs]) error {
				return skiplock.Sleep(ctx, time.Hour)
			}))
			require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[auditArgs]) error {
				return audit(ctx, b, b.pool, job.JobRow, "other")
			}))
			sleeper, err := b.client.Enqueue(b.ctx, sleeperArgs{}, nil)
			require.NoError(t, err)
			runWorker(t, w)
			eventually(t, 30*time.Second, func() bool {
				return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND status = 'queued' AND run_at > now() + interval '50 minutes'`, sleeper.ID) == 1
			}, "the job sleeps")
			enqueueAudit(t, b, 3)
			eventually(t, 30*time.Second, func() bool {
				return b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE step = 'other'`) == 3
			}, "the other jobs ran under the limit while the sleeper slept")
		})
	}
}

type cancelledStepArgs struct{}

func (cancelledStepArgs) Kind() string { return "cancelled_step" }

// A StepTx whose job is cancelled while its function runs commits nothing: its record,
// fenced on the attempt, finds the job no longer running, and the step's writes roll
// back with it. The handler ignores its cancelled context, so only the fence stops it.
func TestStepTx_StaleAttemptCommitsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	durableSetup(t, b)
	inside, goOn := make(chan struct{}), make(chan struct{})
	stepErr := make(chan error, 1)
	w := durableWorker(t, b, skiplock.WorkerConfig{JobTimeout: -1})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[cancelledStepArgs]) error {
		_, err := skiplock.StepTx(context.WithoutCancel(ctx), "pay", func(ctx context.Context, tx pgx.Tx) (int, error) {
			if err := audit(ctx, b, tx, job.JobRow, "pay"); err != nil {
				return 0, err
			}
			close(inside)
			<-goOn // meanwhile the job is cancelled
			return 1, nil
		})
		stepErr <- err
		return err
	}))
	job, err := b.client.Enqueue(b.ctx, cancelledStepArgs{}, nil)
	require.NoError(t, err)
	runWorker(t, w)
	<-inside
	_, err = b.client.Cancel(b.ctx, job.ID)
	require.NoError(t, err)
	close(goOn)
	select {
	case err := <-stepErr:
		assert.ErrorIs(t, err, skiplock.ErrAttemptLost)
	case <-time.After(30 * time.Second):
		t.Fatal("the step did not return")
	}
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.step_audit`), "the stale step's write committed")
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.job_steps`), "the stale step was recorded")
	waitStatus(t, b, job.ID, skiplock.StatusCancelled, 30*time.Second, "the job stays cancelled")
}

type failedCommitArgs struct{}

func (failedCommitArgs) Kind() string { return "failed_commit" }

// A StepTx whose commit fails (here a deferred constraint, checked at commit) records
// nothing and gives its place back: the same run's next try of the step runs its function
// again and is recorded at that place, not handed the result that never committed.
func TestStepTx_FailedCommitIsNotReplayed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	durableSetup(t, b)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.once (v int UNIQUE DEFERRABLE INITIALLY DEFERRED);
		INSERT INTO {s}.once VALUES (1)`))
	require.NoError(t, err)
	w := durableWorker(t, b, skiplock.WorkerConfig{})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[failedCommitArgs]) error {
		var err error
		for try := 0; try < 2; try++ {
			_, err = skiplock.StepTx(ctx, "charge", func(ctx context.Context, tx pgx.Tx) (int, error) {
				if try == 0 { // a duplicate, refused only at commit
					if _, err := tx.Exec(ctx, b.q(`INSERT INTO {s}.once VALUES (1)`)); err != nil {
						return 0, err
					}
				}
				return 40 + try, audit(ctx, b, tx, job.JobRow, "charge")
			})
			if err == nil {
				break
			}
		}
		if err != nil {
			return skiplock.Permanent(err)
		}
		_, err = skiplock.StepTx(ctx, "ship", func(ctx context.Context, tx pgx.Tx) (bool, error) {
			return true, audit(ctx, b, tx, job.JobRow, "ship")
		})
		return err
	}))
	job, err := b.client.Enqueue(b.ctx, failedCommitArgs{}, nil)
	require.NoError(t, err)
	runWorker(t, w)
	waitStatus(t, b, job.ID, skiplock.StatusSucceeded, 30*time.Second, "the job succeeded")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE step = 'charge'`), "the second try of charge did not run")
	steps, err := b.client.Steps(b.ctx, job.ID)
	require.NoError(t, err)
	require.Len(t, steps, 2, "charge was not recorded")
	assert.Equal(t, "charge", steps[0].Name)
	assert.Equal(t, 0, steps[0].Seq)
	assert.Equal(t, json.RawMessage(`41`), steps[0].Result)
	assert.Equal(t, "ship", steps[1].Name)
	assert.Equal(t, 1, steps[1].Seq)
}

type sleepPastDeadlineArgs struct {
	Wait bool `json:"wait"` // AwaitSignal without a timeout instead of Sleep
}

func (sleepPastDeadlineArgs) Kind() string { return "sleep_past_deadline" }

// A sleep or a signal wait that would end after the job's deadline parks the job only
// until the deadline: it then ends failed, no attempt started after it, rather than staying
// queued until a wake-up when it can no longer run.
func TestSleep_PastTheDeadlineEndsTheJobAtIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	durableSetup(t, b)
	w := durableWorker(t, b, skiplock.WorkerConfig{})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[sleepPastDeadlineArgs]) error {
		if err := audit(ctx, b, b.pool, job.JobRow, "run"); err != nil {
			return err
		}
		if job.Args.Wait {
			_, err := skiplock.AwaitSignal(ctx, "approve", 0)
			return err
		}
		return skiplock.Sleep(ctx, time.Hour)
	}))
	runWorker(t, w)
	for _, wait := range []bool{false, true} {
		row, err := b.client.Enqueue(b.ctx, sleepPastDeadlineArgs{Wait: wait}, &skiplock.EnqueueOptions{
			Deadline: dbNow(t, b).Add(2 * time.Second)})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
		row, err = b.client.Wait(ctx, row.ID)
		cancel()
		require.NoError(t, err, "the job (wait %v) was still queued long after its deadline", wait)
		assert.Equal(t, skiplock.StatusFailed, row.Status)
		assert.Contains(t, row.LastError, "deadline exceeded")
		assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE job_id = $1`, row.ID), "the job ran after its deadline")
	}
}

type panickyStepArgs struct{}

func (panickyStepArgs) Kind() string { return "panicky_step" }

// A step whose function panics, recovered by the handler, gives its place back as a step
// that failed does: the handler's next try of it records at that place, and the next
// attempt replays the steps at their places and records a new one after them.
func TestStep_PanickingStepGivesItsPlaceBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	durableSetup(t, b)
	w := durableWorker(t, b, skiplock.WorkerConfig{RetryPolicy: fixedDelay(10 * time.Millisecond)})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[panickyStepArgs]) error {
		try := func(boom bool) (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("step panicked: %v", p)
				}
			}()
			_, err = skiplock.Step(ctx, "fetch", func(ctx context.Context) (int, error) {
				if boom {
					panic("boom")
				}
				return 7, audit(ctx, b, b.pool, job.JobRow, "fetch")
			})
			return err
		}
		if job.Attempts == 1 && try(true) == nil {
			return skiplock.Permanent(errors.New("the first try did not panic"))
		}
		if err := try(false); err != nil {
			return err
		}
		if _, err := skiplock.StepTx(ctx, "store", func(ctx context.Context, tx pgx.Tx) (int, error) {
			return 8, audit(ctx, b, tx, job.JobRow, "store")
		}); err != nil {
			return err
		}
		if job.Attempts == 1 {
			return errors.New("try again")
		}
		_, err := skiplock.StepTx(ctx, "ship", func(ctx context.Context, tx pgx.Tx) (int, error) {
			return 9, audit(ctx, b, tx, job.JobRow, "ship")
		})
		return err
	}))
	job, err := b.client.Enqueue(b.ctx, panickyStepArgs{}, nil)
	require.NoError(t, err)
	runWorker(t, w)
	waitStatus(t, b, job.ID, skiplock.StatusSucceeded, 30*time.Second, "the job succeeded at its second attempt")
	steps, err := b.client.Steps(b.ctx, job.ID)
	require.NoError(t, err)
	require.Len(t, steps, 3)
	for i, name := range []string{"fetch", "store", "ship"} {
		assert.Equal(t, name, steps[i].Name)
		assert.Equal(t, i, steps[i].Seq)
	}
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE step = 'store'`))
}

type cancelledSleepArgs struct{}

func (cancelledSleepArgs) Kind() string { return "cancelled_sleep" }

// A Sleep or an AwaitSignal of an attempt whose job was cancelled meanwhile records
// nothing, parks nothing, and its ErrAttemptLost names the call: the sleep, the wait for
// the signal.
func TestSleep_StaleAttemptErrorNamesTheWait(t *testing.T) {
	t.Parallel()
	b := setup(t)
	durableSetup(t, b)
	inside, goOn := make(chan struct{}), make(chan struct{})
	errs := make(chan error, 2)
	w := durableWorker(t, b, skiplock.WorkerConfig{JobTimeout: -1})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[cancelledSleepArgs]) error {
		close(inside)
		<-goOn // meanwhile the job is cancelled
		ctx = context.WithoutCancel(ctx)
		errs <- skiplock.Sleep(ctx, time.Hour)
		_, err := skiplock.AwaitSignal(ctx, "approve", time.Hour)
		errs <- err
		return err
	}))
	job, err := b.client.Enqueue(b.ctx, cancelledSleepArgs{}, nil)
	require.NoError(t, err)
	runWorker(t, w)
	<-inside
	_, err = b.client.Cancel(b.ctx, job.ID)
	require.NoError(t, err)
	close(goOn)
	for _, what := range []string{`the sleep was not recorded`, `the wait for signal "approve" was not recorded`} {
		select {
		case err := <-errs:
			assert.ErrorIs(t, err, skiplock.ErrAttemptLost)
			assert.ErrorContains(t, err, what)
		case <-time.After(30 * time.Second):
			t.Fatal("the durable call did not return")
		}
	}
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.job_steps`), "the stale attempt recorded a wait")
	waitStatus(t, b, job.ID, skiplock.StatusCancelled, 30*time.Second, "the job stays cancelled")
}

type parkedRetryArgs struct {
	Timeout time.Duration `json:"timeout"`
	Fail    bool          `json:"fail"` // the attempt after the park fails before it waits
}

func (parkedRetryArgs) Kind() string { return "parked_retry" }

// A job parked in a signal wait whose timeout passed is claimed; that attempt fails before
// it reaches the wait again, and is retried an hour later. A signal sent now is kept for
// the wait, and leaves the retry to its backoff: the job is no longer parked in its wait.
// It made the retry due at once before (the claim left awaiting set). A job parked until
// its deadline, sooner than its wait's timeout, is still woken by its signal.
func TestSignal_LeavesARetryOfAnAttemptAfterTheWaitToItsBackoff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs atomic.Int32 // of the failing job
	w := durableWorker(t, b, skiplock.WorkerConfig{RetryPolicy: fixedDelay(time.Hour)})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[parkedRetryArgs]) error {
		if job.Args.Fail && runs.Add(1) == 2 {
			return errors.New("the attempt after the timeout fails before its wait")
		}
		_, err := skiplock.AwaitSignal(ctx, "approve", job.Args.Timeout)
		return err
	}))
	job, err := b.client.Enqueue(b.ctx, parkedRetryArgs{Timeout: 200 * time.Millisecond, Fail: true}, nil)
	require.NoError(t, err)
	deadline := time.Now().Add(time.Hour)
	bounded, err := b.client.Enqueue(b.ctx, parkedRetryArgs{Timeout: 2 * time.Hour}, &skiplock.EnqueueOptions{Deadline: deadline})
	require.NoError(t, err)
	runWorker(t, w)
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND status = 'queued' AND attempts = 1
			AND run_at > now() + interval '30 minutes'`, job.ID) == 1
	}, "the attempt after the timeout failed and was retried an hour later")
	require.EqualValues(t, 2, runs.Load())

	require.NoError(t, b.client.Signal(b.ctx, job.ID, "approve", "yes"))
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND status = 'queued'
		AND run_at > now() + interval '30 minutes'`, job.ID), "the signal made the retry due before its backoff")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.job_signals WHERE job_id = $1 AND consumed_seq IS NULL`, job.ID),
		"the signal is kept for the wait")
	assert.EqualValues(t, 2, runs.Load())

	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND status = 'queued' AND awaiting = 'approve'
			AND run_at < now() + interval '90 minutes'`, bounded.ID) == 1
	}, "the job with a deadline parks until its deadline")
	require.NoError(t, b.client.Signal(b.ctx, bounded.ID, "approve", "yes"))
	waitStatus(t, b, bounded.ID, skiplock.StatusSucceeded, 30*time.Second, "the signal woke the job parked until its deadline")
}

type afterCompleteArgs struct{}

func (afterCompleteArgs) Kind() string { return "after_complete" }

// A durable call made after CompleteTx, while the handler's transaction still holds the
// job's row, returns an error at once naming CompleteTx, and runs nothing: it waited for
// that row lock until the job's timeout before. The transaction then commits the success.
func TestDurable_CallAfterCompleteTxFailsFast(t *testing.T) {
	t.Parallel()
	b := setup(t)
	type call struct {
		what string
		err  error
		took time.Duration
	}
	calls := make(chan call, 3)
	var ran atomic.Bool
	w := durableWorker(t, b, skiplock.WorkerConfig{JobTimeout: 20 * time.Second})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[afterCompleteArgs]) error {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if err := skiplock.CompleteTx(ctx, tx, job); err != nil {
			return err
		}
		timed := func(what string, f func() error) {
			began := time.Now()
			err := f()
			select {
			case calls <- call{what, err, time.Since(began)}:
			default: // a later attempt's: the test reads the first one's
			}
		}
		timed("step", func() error {
			_, err := skiplock.Step(ctx, "after", func(context.Context) (int, error) { ran.Store(true); return 1, nil })
			return err
		})
		timed("sleep", func() error { return skiplock.Sleep(ctx, time.Hour) })
		timed("signal", func() error { _, err := skiplock.AwaitSignal(ctx, "approve", time.Hour); return err })
		return tx.Commit(ctx)
	}))
	job, err := b.client.Enqueue(b.ctx, afterCompleteArgs{}, &skiplock.EnqueueOptions{MaxAttempts: 1})
	require.NoError(t, err)
	runWorker(t, w)
	for range 3 {
		select {
		case c := <-calls:
			assert.ErrorContains(t, c.err, "after CompleteTx", c.what)
			assert.NotErrorIs(t, c.err, skiplock.ErrSuspended, c.what)
			assert.Less(t, c.took, 5*time.Second, "the %s waited for the job's row lock", c.what)
		case <-time.After(60 * time.Second):
			t.Fatal("the durable call did not return")
		}
	}
	waitStatus(t, b, job.ID, skiplock.StatusSucceeded, 30*time.Second, "the handler's transaction committed the success")
	assert.False(t, ran.Load(), "the step's function ran")
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.job_steps WHERE job_id = $1`, job.ID))
}

type nestedArgs struct{}

func (nestedArgs) Kind() string { return "nested" }

// A durable call inside a Step's or a StepTx's function is refused with ErrNestedStep and
// takes no place: the steps recorded are the handler's own, in order, and a retry replays
// them. Before, the nested step took the place after the outer one, so the retry (which
// replays the outer step without running its function) met it at the next call's place.
func TestStep_NestedDurableCallsAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	nested := make(chan error, 16)
	w := durableWorker(t, b, skiplock.WorkerConfig{RetryPolicy: fixedDelay(10 * time.Millisecond)})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[nestedArgs]) error {
		if _, err := skiplock.Step(ctx, "outer", func(ctx context.Context) (int, error) {
			_, err := skiplock.Step(ctx, "inner", func(context.Context) (int, error) { return 2, nil })
			nested <- err
			return 1, nil // the nested call's error ignored: the outer step is recorded
		}); err != nil {
			return err
		}
		if _, err := skiplock.StepTx(ctx, "tx", func(_ context.Context, tx pgx.Tx) (int, error) {
			nested <- skiplock.Sleep(ctx, time.Hour) // the handler's ctx, not the step's
			_, err := skiplock.AwaitSignal(ctx, "approve", time.Hour)
			nested <- err
			return 3, nil
		}); err != nil {
			return err
		}
		if _, err := skiplock.Step(ctx, "next", func(context.Context) (int, error) { return 4, nil }); err != nil {
			return err
		}
		if job.Attempts == 1 {
			return errors.New("the first attempt fails after its steps")
		}
		return nil
	}))
	job, err := b.client.Enqueue(b.ctx, nestedArgs{}, &skiplock.EnqueueOptions{MaxAttempts: 3})
	require.NoError(t, err)
	runWorker(t, w)
	waitStatus(t, b, job.ID, skiplock.StatusSucceeded, 30*time.Second, "the retry replayed the handler's steps")
	for range 3 {
		err := <-nested
		assert.ErrorIs(t, err, skiplock.ErrNestedStep)
	}
	assert.Empty(t, nested, "the retry ran no step function again")
	steps, err := b.client.Steps(b.ctx, job.ID)
	require.NoError(t, err)
	var names []string
	for _, s := range steps {
		names = append(names, s.Name)
	}
	assert.Equal(t, []string{"outer", "tx", "next"}, names)
}

type forkKeysArgs struct{}

func (forkKeysArgs) Kind() string { return "fork_keys" }

// A fork runs under the flow-control keys of the job it was forked from: its partition
// key and its concurrency keys (EnqueueOptions.ConcurrencyKeys), so the queue's per-key
// limits count it as they count the original.
func TestFork_KeepsTheJobsFlowControlKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j, err := b.client.Enqueue(b.ctx, forkKeysArgs{}, &skiplock.EnqueueOptions{
		RunAt: time.Now().Add(time.Hour), PartitionKey: "tenant-1",
		ConcurrencyKeys: map[string]string{"account": "a-7", "region": "eu"}})
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.job_steps (job_id, seq, name, kind, result, attempt, started_at, finished_at)
		VALUES ($1, 0, 'a', 'step', '1', 1, now(), now())`), j.ID)
	require.NoError(t, err)
	fork, err := b.client.Fork(b.ctx, j.ID, "a")
	require.NoError(t, err)
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs f JOIN {s}.jobs o ON o.id = $2
		WHERE f.id = $1 AND f.partition_key = 'tenant-1'
		AND f.concurrency_keys = '{"account": "a-7", "region": "eu"}' AND f.concurrency_keys = o.concurrency_keys`, fork.ID, j.ID),
		"the fork has the job's partition key and concurrency keys")
}

type completeInStepArgs struct {
	Tx bool `json:"tx"`
}

func (completeInStepArgs) Kind() string { return "complete_in_step" }

// CompleteTx inside a step's function is an error at the step's return, naming
// CompleteTx, and records nothing: a StepTx's transaction (which held the success and
// the step's writes) rolls back, and a Step does not wait for the job's row that the
// handler's transaction holds. Before, the StepTx failed at every attempt with
// ErrAttemptLost ("cancelled or finished, or taken back") and the Step waited for the
// row until the job's timeout.
func TestDurable_CompleteTxInsideAStepFailsFast(t *testing.T) {
	t.Parallel()
	b := setup(t)
	durableSetup(t, b)
	type result struct {
		tx   bool
		err  error
		took time.Duration
	}
	results := make(chan result, 2)
	w := durableWorker(t, b, skiplock.WorkerConfig{JobTimeout: 20 * time.Second})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[completeInStepArgs]) error {
		began := time.Now()
		var err error
		if job.Args.Tx {
			_, err = skiplock.StepTx(ctx, "final", func(ctx context.Context, tx pgx.Tx) (int, error) {
				if err := audit(ctx, b, tx, job.JobRow, "final"); err != nil {
					return 0, err
				}
				return 1, skiplock.CompleteTx(ctx, tx, job)
			})
		} else {
			tx, berr := b.pool.Begin(ctx)
			if berr != nil {
				return berr
			}
			defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
			_, err = skiplock.Step(ctx, "final", func(ctx context.Context) (int, error) {
				if err := audit(ctx, b, tx, job.JobRow, "final"); err != nil {
					return 0, err
				}
				return 1, skiplock.CompleteTx(ctx, tx, job)
			})
		}
		results <- result{job.Args.Tx, err, time.Since(began)}
		return err
	}))
	var ids []int64
	for _, tx := range []bool{true, false} {
		j, err := b.client.Enqueue(b.ctx, completeInStepArgs{Tx: tx}, &skiplock.EnqueueOptions{MaxAttempts: 1})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	runWorker(t, w)
	for range 2 {
		select {
		case r := <-results:
			assert.ErrorContains(t, r.err, "CompleteTx was called inside the function of step \"final\"", "tx %v", r.tx)
			assert.NotErrorIs(t, r.err, skiplock.ErrAttemptLost, "tx %v", r.tx)
			assert.Less(t, r.took, 5*time.Second, "tx %v: the step waited for the job's row lock", r.tx)
		case <-time.After(60 * time.Second):
			t.Fatal("the step did not return")
		}
	}
	for _, id := range ids {
		waitStatus(t, b, id, skiplock.StatusDead, 30*time.Second, "job %d: the success rolled back, the attempt failed", id)
	}
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.job_steps WHERE job_id = ANY($1)`, ids), "no step recorded")
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.step_audit`), "the steps' writes rolled back")
}

type outputArgs struct {
	InStep bool `json:"in_step"`
}

func (outputArgs) Kind() string { return "durable_output" }

// SetOutput belongs to the attempt that calls it (docs/durable.md, "How a job runs
// again"): made inside a step's function, it is lost when a later attempt replays the
// step and succeeds; made after the steps, from their results, it is stored.
func TestDurable_SetOutputIsTheSucceedingAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := durableWorker(t, b, skiplock.WorkerConfig{})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[outputArgs]) error {
		v, err := skiplock.Step(ctx, "compute", func(ctx context.Context) (int, error) {
			if job.Args.InStep {
				return 7, skiplock.SetOutput(ctx, 7)
			}
			return 7, nil
		})
		if err != nil {
			return err
		}
		if err := skiplock.Sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
		if job.Args.InStep {
			return nil
		}
		return skiplock.SetOutput(ctx, v)
	}))
	in, err := b.client.Enqueue(b.ctx, outputArgs{InStep: true}, nil)
	require.NoError(t, err)
	after, err := b.client.Enqueue(b.ctx, outputArgs{}, nil)
	require.NoError(t, err)
	runWorker(t, w)
	waitStatus(t, b, in.ID, skiplock.StatusSucceeded, 30*time.Second, "in-step job")
	waitStatus(t, b, after.ID, skiplock.StatusSucceeded, 30*time.Second, "after-steps job")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND output IS NULL`, in.ID), "the replayed step set no output")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND output = '7'`, after.ID))
}
