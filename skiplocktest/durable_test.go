package skiplocktest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/skiplocktest"
)

type reminder struct{}

func (reminder) Kind() string { return "reminder" }

// A durable job's sleep in a test: RunOne ends the attempt at the Sleep (the job parked,
// its attempt given back), Advance moves the recorded wake-up into the past with the
// rest of the schema's times, and the next RunOne goes on after the Sleep, the step
// before it not run again.
func TestRunOne_DurableSleepWithAdvance(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{})
	require.NoError(t, err)
	var before, after int
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[reminder]) error {
		if _, err := skiplock.Step(ctx, "before", func(context.Context) (int, error) { before++; return before, nil }); err != nil {
			return err
		}
		if err := skiplock.Sleep(ctx, 24*time.Hour); err != nil {
			return err
		}
		after++
		return nil
	}))
	_, err = client.Enqueue(t.Context(), reminder{}, nil)
	require.NoError(t, err)

	ran := skiplocktest.RunOne(t, w, skiplock.DefaultQueue)
	require.NotNil(t, ran)
	assert.Equal(t, skiplock.OutcomeSnoozed, ran.Result.Outcome, "the sleep suspended the attempt")
	assert.Nil(t, skiplocktest.RunOne(t, w, skiplock.DefaultQueue), "nothing is due while it sleeps")

	skiplocktest.Advance(t, pool, client, 24*time.Hour)
	ran = skiplocktest.RunOne(t, w, skiplock.DefaultQueue)
	require.NotNil(t, ran)
	assert.Equal(t, skiplock.OutcomeSucceeded, ran.Result.Outcome)
	assert.Equal(t, 1, before, "the step before the sleep ran once")
	assert.Equal(t, 1, after)
}
