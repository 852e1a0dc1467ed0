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
