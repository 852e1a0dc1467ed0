package skiplock_test

// Edge cases of durable execution checked in one run (docs/durable.md): a step result
// that cannot be recorded (not JSON, too large) fails the job and records nothing; a
// recorded result that no longer decodes is a Permanent error naming the step; sleeps of
// no, negative and the longest length; a job cancelled while it sleeps or waits for a
// signal ends and never runs again; two signals of a name sent before the waits reach
// them in order, one per wait; and Requeue of a dead durable job replays its recorded
// steps. The audit table is the judge.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

type edgeArgs struct {
	Mode string `json:"mode"`
}

func (edgeArgs) Kind() string { return "durable_edge" }

func TestDurable_EdgeCases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	durableSetup(t, b)
	w := durableWorker(t, b, skiplock.WorkerConfig{RetryPolicy: fixedDelay(10 * time.Millisecond)})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[edgeArgs]) error {
		switch job.Args.Mode {
		case "nan":
			_, err := skiplock.Step(ctx, "nan", func(ctx context.Context) (float64, error) {
				return math.NaN(), audit(ctx, b, b.pool, job.JobRow, "nan")
			})
			return err
		case "nantx":
			_, err := skiplock.StepTx(ctx, "nantx", func(ctx context.Context, tx pgx.Tx) (float64, error) {
				return math.NaN(), audit(ctx, b, tx, job.JobRow, "nantx")
			})
			return err
		case "huge":
			_, err := skiplock.Step(ctx, "huge", func(ctx context.Context) (string, error) {
				return strings.Repeat("x", 2<<20), audit(ctx, b, b.pool, job.JobRow, "huge")
			})
			return err
		case "typechange":
			if job.Attempts == 1 {
				_, err := skiplock.Step(ctx, "a", func(ctx context.Context) (string, error) { return "x", nil })
				if err != nil {
					return err
				}
				return errors.New("again")
			}
			_, err := skiplock.Step(ctx, "a", func(ctx context.Context) (int, error) { return 1, nil })
			return err
		case "sleeps":
			if err := skiplock.Sleep(ctx, 0); err != nil {
				return skiplock.Permanent(err)
			}
			if err := skiplock.Sleep(ctx, -time.Hour); err != nil {
				return skiplock.Permanent(err)
			}
			return skiplock.Sleep(ctx, time.Duration(math.MaxInt64))
		case "sleepcancel":
			if err := audit(ctx, b, b.pool, job.JobRow, "sleepcancel-run"); err != nil {
				return err
			}
			return skiplock.Sleep(ctx, time.Hour)
		case "awaitcancel":
			if err := audit(ctx, b, b.pool, job.JobRow, "awaitcancel-run"); err != nil {
				return err
			}
			_, err := skiplock.AwaitSignal(ctx, "go", 0)
			return err
		case "twosig":
			for i := range 3 {
				p, err := skiplock.AwaitSignal(ctx, "go", 0)
				if err != nil {
					return err
				}
				if _, err := skiplock.StepTx(ctx, fmt.Sprint("rec", i), func(ctx context.Context, tx pgx.Tx) (bool, error) {
					return true, audit(ctx, b, tx, job.JobRow, fmt.Sprint("sig", i, string(p)))
				}); err != nil {
					return err
				}
			}
			return nil
		case "requeue":
			if _, err := skiplock.StepTx(ctx, "one", func(ctx context.Context, tx pgx.Tx) (bool, error) {
				return true, audit(ctx, b, tx, job.JobRow, "rq-one")
			}); err != nil {
				return err
			}
			_, err := skiplock.StepTx(ctx, "two", func(ctx context.Context, tx pgx.Tx) (bool, error) {
				if err := audit(ctx, b, b.pool, job.JobRow, "rq-two-try"); err != nil {
					return false, err
				}
				var n int
				if err := tx.QueryRow(ctx, b.q(`SELECT count(*) FROM {s}.step_audit WHERE step = 'rq-two-try'`)).Scan(&n); err != nil {
					return false, err
				}
				if n == 1 {
					return false, errors.New("first fails")
				}
				return true, audit(ctx, b, tx, job.JobRow, "rq-two")
			})
			return err
		}
		return nil
	}))
	enq := func(mode string, opts *skiplock.EnqueueOptions) int64 {
		j, err := b.client.Enqueue(b.ctx, edgeArgs{Mode: mode}, opts)
		require.NoError(t, err)
		return j.ID
	}
	nan, nantx, huge, tc, sl, sc, ac, two := enq("nan", nil), enq("nantx", nil), enq("huge", nil), enq("typechange", nil), enq("sleeps", nil), enq("sleepcancel", nil), enq("awaitcancel", nil), enq("twosig", nil)
	rq := enq("requeue", &skiplock.EnqueueOptions{MaxAttempts: 1})
	require.NoError(t, b.client.Signal(b.ctx, two, "go", "A"))
	require.NoError(t, b.client.Signal(b.ctx, two, "go", "B"))
	runWorker(t, w)
	for _, id := range []int64{nan, nantx, huge, tc} {
		waitStatus(t, b, id, skiplock.StatusFailed, 30*time.Second, "job %d", id)
		assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.job_steps WHERE job_id = $1 AND name <> 'a'`, id), "job %d recorded nothing", id)
	}
	for id, want := range map[int64]string{nan: `step "nan": its result cannot be recorded as JSON`,
		nantx: `step "nantx": its result cannot be recorded as JSON`, huge: `step "huge": its result is 2097154 bytes, the limit is 1048576`,
		tc: `step 0 "a" of job`} {
		j, err := b.client.Get(b.ctx, id)
		require.NoError(t, err)
		assert.Contains(t, j.LastError, want)
	}
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE step = 'nan'`), "the failed step ran once (Permanent)")
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE step = 'nantx'`), "the StepTx's writes rolled back")
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND status = 'queued' AND run_at > now() + interval '200 years'`, sl) == 1
	}, "the longest sleep parks")
	assert.Equal(t, 2, b.count(t, `SELECT count(*) FROM {s}.job_steps WHERE job_id = $1 AND kind = 'sleep' AND finished_at IS NOT NULL AND seq < 2`, sl),
		"the zero and negative sleeps are recorded done")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.job_steps WHERE job_id = $1 AND seq = 2 AND finished_at IS NULL`, sl))
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = ANY($1) AND status = 'queued' AND attempts = 0`, []int64{sc, ac}) == 2
	}, "parked")
	for _, id := range []int64{sc, ac} {
		r, err := b.client.Cancel(b.ctx, id)
		require.NoError(t, err)
		assert.Equal(t, skiplock.StatusCancelled, r.Status)
		done, err := b.client.Wait(b.ctx, id)
		require.NoError(t, err)
		assert.Equal(t, skiplock.StatusCancelled, done.Status)
		assert.ErrorIs(t, b.client.Signal(b.ctx, id, "go", 1), skiplock.ErrJobFinished)
		assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.job_steps WHERE job_id = $1`, id), "its wait stays recorded (keep mode)")
	}
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND status = 'queued' AND awaiting = 'go'`, two) == 1
	}, "two parks for the third")
	require.NoError(t, b.client.Signal(b.ctx, two, "go", "C"))
	require.NoError(t, b.client.Signal(b.ctx, two, "go", "D"))
	waitStatus(t, b, two, skiplock.StatusSucceeded, 30*time.Second, "two")
	rows, err := b.pool.Query(b.ctx, b.q(`SELECT step FROM {s}.step_audit WHERE job_id = $1 ORDER BY n`), two)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	assert.Equal(t, []string{`sig0"A"`, `sig1"B"`, `sig2"C"`}, got, "one signal per wait, oldest first")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.job_signals WHERE job_id = $1 AND payload = '"D"' AND consumed_seq IS NULL`, two),
		"the fourth signal is kept, unread")
	waitStatus(t, b, rq, skiplock.StatusDead, 30*time.Second, "rq dead")
	res, err := b.client.Requeue(b.ctx, skiplock.RequeueFilter{IDs: []int64{rq}})
	require.NoError(t, err)
	assert.EqualValues(t, 1, res.Requeued)
	waitStatus(t, b, rq, skiplock.StatusSucceeded, 30*time.Second, "rq")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE step = 'rq-one'`))
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE step = 'rq-two'`))
	for _, id := range []int64{sc, ac} {
		assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.step_audit WHERE job_id = $1`, id), "cancelled job ran once")
	}
}
