package skiplock_test

// This file holds the tests of job deadlines (EnqueueOptions.Deadline, Workflow.Deadline;
// issue 42): no attempt starts after the deadline, a running attempt is cancelled at it, a
// retry due after it ends the job. Each handler writes an audit row per attempt it starts:
// the audit table and the jobs' attempts column are the judges.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

type deadlineArgs struct {
	Mode string `json:"mode"` // "block": wait for ctx; "fail": fail (retried in an hour); else succeed
}

func (deadlineArgs) Kind() string { return "deadline" }

// hourRetry retries a failed job an hour later.
type hourRetry struct{}

func (hourRetry) NextRetry(*skiplock.JobRow) time.Duration { return time.Hour }

// deadlineWorker starts a worker whose handler audits each attempt it starts (with the
// cause its context ended with, for "block").
func deadlineWorker(t *testing.T, b *bundle) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.audit (job_id bigint, attempt int, cause text)`))
	require.NoError(t, err)
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 20 * time.Millisecond, SweepInterval: -1, Logger: testLogger(),
		RetryPolicy: hourRetry{}})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[deadlineArgs]) error {
		cause := ""
		switch job.Args.Mode {
		case "block":
			<-ctx.Done()
			cause = context.Cause(ctx).Error()
		case "fail":
			cause = "failed"
		}
		_, err := b.pool.Exec(context.WithoutCancel(ctx), b.q(`INSERT INTO {s}.audit VALUES ($1, $2, $3)`), job.ID, job.Attempts, cause)
		require.NoError(t, err)
		if job.Args.Mode == "fail" {
			return errors.New("transient")
		}
		return ctx.Err()
	}))
	runWorker(t, w)
}

// dbNow is the database's clock.
func dbNow(t *testing.T, b *bundle) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT now()`).Scan(&now))
	return now
}

// A job whose deadline passed before a worker could claim it — enqueued late, or
// scheduled after it — ends failed without an attempt: no audit row, attempts 0.
func TestDeadline_NoAttemptStartsAfterIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := dbNow(t, b)
	past, err := b.client.Enqueue(b.ctx, deadlineArgs{}, &skiplock.EnqueueOptions{Deadline: now.Add(-time.Second)})
	require.NoError(t, err)
	assert.True(t, past.Deadline.Equal(now.Add(-time.Second)), "JobRow.Deadline shows it: %v", past.Deadline)
	late, err := b.client.Enqueue(b.ctx, deadlineArgs{}, &skiplock.EnqueueOptions{
		RunAt: now.Add(300 * time.Millisecond), Deadline: now.Add(100 * time.Millisecond)})
	require.NoError(t, err)
	inTime, err := b.client.Enqueue(b.ctx, deadlineArgs{}, &skiplock.EnqueueOptions{Deadline: now.Add(time.Hour)})
	require.NoError(t, err)
	wf, err := b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "late", Deadline: now.Add(-time.Second),
		Tasks: []skiplock.WorkflowTask{{Name: "a", Args: deadlineArgs{}}, {Name: "b", Args: deadlineArgs{}, DependsOn: []string{"a"}}}})
	require.NoError(t, err)
	deadlineWorker(t, b)

	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	for _, id := range []int64{past.ID, late.ID} {
		row, err := b.client.Wait(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, skiplock.StatusFailed, row.Status)
		assert.Zero(t, row.Attempts, "no attempt counted")
		assert.Contains(t, row.LastError, "deadline exceeded")
		assert.Contains(t, row.LastError, "no attempt was started")
	}
	row, err := b.client.Wait(ctx, inTime.ID)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusSucceeded, row.Status)
	got, err := b.client.WaitWorkflow(ctx, wf.ID)
	require.NoError(t, err)
	assert.Equal(t, "failed", got.Task("a").State)
	assert.Equal(t, "cancelled", got.Task("b").State, "the default OnFailure cancels the dependent")

	// SQL is the judge: only the job in time ran.
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.audit`))
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.audit WHERE job_id = $1`, inTime.ID))
	assert.Zero(t, b.count(t, `SELECT coalesce(sum(attempts), 0) FROM {s}.jobs WHERE id <> $1`, inTime.ID))
}

// The entry a job claimed past its deadline adds to its error history numbers its
// attempt as every other entry does: the job's attempts as recorded (the attempt given
// back), not one more. A job that never ran says attempt 0; one that ran once, went dead
// and was requeued (attempts reset) after its deadline fails at its next claim without
// running, and says attempt 0 after its first attempt's 1.
func TestDeadline_NotStartedEntryNumbersTheAttemptAsTheJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	deadlineWorker(t, b)
	now := dbNow(t, b)
	never, err := b.client.Enqueue(b.ctx, deadlineArgs{}, &skiplock.EnqueueOptions{Deadline: now.Add(-time.Second)})
	require.NoError(t, err)
	deadline := now.Add(2 * time.Second)
	once, err := b.client.Enqueue(b.ctx, deadlineArgs{Mode: "fail"}, &skiplock.EnqueueOptions{MaxAttempts: 1, Deadline: deadline})
	require.NoError(t, err)
	waitStatus(t, b, once.ID, skiplock.StatusDead, 30*time.Second, "its one attempt fails in time")
	eventually(t, 30*time.Second, func() bool { return dbNow(t, b).After(deadline) }, "the deadline passes")
	res, err := b.client.Requeue(b.ctx, skiplock.RequeueFilter{IDs: []int64{once.ID}})
	require.NoError(t, err)
	require.Equal(t, int64(1), res.Requeued)
	waitStatus(t, b, once.ID, skiplock.StatusFailed, 30*time.Second, "the requeued job is claimed past its deadline")

	row, err := b.client.Get(b.ctx, never.ID)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusFailed, row.Status)
	assert.Zero(t, row.Attempts)
	require.Len(t, row.Errors, 1)
	assert.Contains(t, row.Errors[0].Error, "no attempt was started")
	assert.Equal(t, 0, row.Errors[0].Attempt, "no attempt ran")

	row, err = b.client.Get(b.ctx, once.ID)
	require.NoError(t, err)
	assert.Zero(t, row.Attempts, "reset by Requeue, the deadline's attempt given back")
	require.Len(t, row.Errors, 2)
	assert.Equal(t, 1, row.Errors[0].Attempt)
	assert.Equal(t, "transient", row.Errors[0].Error)
	assert.Contains(t, row.Errors[1].Error, "no attempt was started")
	assert.Equal(t, 0, row.Errors[1].Attempt, "the attempt given back is not numbered")

	// SQL is the judge: each job's latest entry numbers its attempts, and only the first
	// attempt of once ran.
	assert.Equal(t, 2, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id IN ($1, $2)
		AND status = 'failed' AND (errors -> -1 ->> 'attempt')::int = attempts`, never.ID, once.ID))
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.audit`))
}

// A running attempt's context ends at the deadline, with ErrDeadlineExceeded as its
// cause (before its timeout), and the job fails for good.
func TestDeadline_CancelsTheRunningAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	deadlineWorker(t, b)
	now := dbNow(t, b)
	row, err := b.client.Enqueue(b.ctx, deadlineArgs{Mode: "block"}, &skiplock.EnqueueOptions{
		Deadline: now.Add(500 * time.Millisecond), Timeout: time.Hour})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	row, err = b.client.Wait(ctx, row.ID)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusFailed, row.Status, "not retried")
	assert.Equal(t, 1, row.Attempts)
	assert.Contains(t, row.LastError, "deadline exceeded")
	assert.Less(t, row.FinishedAt.Sub(now), 20*time.Second)
	var cause string
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT cause FROM {s}.audit WHERE job_id = $1`), row.ID).Scan(&cause))
	assert.Equal(t, skiplock.ErrDeadlineExceeded.Error(), cause)
}

// A failed attempt whose retry would be due after the deadline ends the job: failed,
// one attempt, not queued for the retry.
func TestDeadline_RetryAfterItIsFinal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	deadlineWorker(t, b)
	row, err := b.client.Enqueue(b.ctx, deadlineArgs{Mode: "fail"}, &skiplock.EnqueueOptions{
		Deadline: dbNow(t, b).Add(time.Minute)}) // the retry is due in an hour
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	row, err = b.client.Wait(ctx, row.ID)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusFailed, row.Status)
	assert.Equal(t, 1, row.Attempts)
	assert.Contains(t, row.LastError, "deadline exceeded: the retry would be due after the job's deadline")
	assert.Contains(t, row.LastError, "transient")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.audit`))
}

// The deadline key is skiplock's: a caller's metadata may not set it.
func TestDeadline_ReservedMetadataKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.client.Enqueue(b.ctx, deadlineArgs{}, &skiplock.EnqueueOptions{Metadata: map[string]string{"skiplock_deadline": "x"}})
	assert.ErrorIs(t, err, skiplock.ErrInvalidOptions)
}

// A deadline outside the years 1 to 9999 is refused, by every enqueue path, with
// ErrInvalidOptions and nothing written: its RFC 3339 form could not be read back, and
// the job ran as if it had none (a deadline in year -1, long past, did not stop it). The
// years 1 and 9999 themselves are kept, and JobRow.Deadline shows them.
func TestDeadline_OutsideTheYears1To9999IsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, d := range []time.Time{time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(0, 12, 31, 0, 0, 0, 0, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)} {
		opts := &skiplock.EnqueueOptions{Deadline: d}
		_, err := b.client.Enqueue(b.ctx, deadlineArgs{}, opts)
		assert.ErrorIs(t, err, skiplock.ErrInvalidOptions, "Enqueue, deadline %v", d)
		_, err = b.client.EnqueueMany(b.ctx, []skiplock.EnqueueParams{{Args: deadlineArgs{}, Options: opts}})
		assert.ErrorIs(t, err, skiplock.ErrInvalidOptions, "EnqueueMany, deadline %v", d)
		_, err = b.client.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "w", Deadline: d, Tasks: []skiplock.WorkflowTask{{Name: "a", Args: deadlineArgs{}}}})
		assert.ErrorIs(t, err, skiplock.ErrInvalidOptions, "EnqueueWorkflow, deadline %v", d)
	}
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs`), "nothing was written")
	for _, d := range []time.Time{time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)} {
		row, err := b.client.Enqueue(b.ctx, deadlineArgs{}, &skiplock.EnqueueOptions{Deadline: d})
		require.NoError(t, err)
		got, err := b.client.Get(b.ctx, row.ID)
		require.NoError(t, err)
		assert.True(t, got.Deadline.Equal(d), "deadline %v read back as %v", d, got.Deadline)
	}
}
