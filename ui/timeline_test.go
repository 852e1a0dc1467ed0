package ui_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/ui"
)

type flaky struct{}

func (flaky) Kind() string { return "flaky" }

// TestJobPage_TimelineShowsEachAttemptAndItsWorker runs a job that fails twice on a real
// worker: the error history records which worker ran each attempt, and the job page's
// timeline shows them in order, then the job's end.
func TestJobPage_TimelineShowsEachAttemptAndItsWorker(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	row, err := b.client.Enqueue(b.ctx, flaky{}, &skiplock.EnqueueOptions{MaxAttempts: 2})
	require.NoError(t, err)
	w, err := skiplock.NewWorker(b.client, skiplock.WorkerConfig{ID: "worker-timeline", PollInterval: 50 * time.Millisecond,
		RetryPolicy: skiplock.BackoffPolicy{Base: time.Millisecond, Max: time.Millisecond}})
	require.NoError(t, err)
	skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[flaky]) error {
		return errors.New("upstream said no\nstack line")
	})
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	require.Eventually(t, func() bool { return b.status(row.ID) == "dead" }, 30*time.Second, 20*time.Millisecond)
	cancel()
	require.NoError(t, <-done)

	assert.Equal(t, 2, b.count(`SELECT count(*) FROM {s}.jobs, jsonb_array_elements(errors) e
		WHERE id = $1 AND e->>'worker' = 'worker-timeline'`, row.ID), "the history names the worker of each attempt")
	r := b.get("/jobs/" + strconv.FormatInt(row.ID, 10))
	require.Equal(t, http.StatusOK, r.code, r.body)
	start, end := strings.Index(r.body, `<ol class="timeline">`), strings.Index(r.body, `</ol>`)
	require.True(t, start >= 0 && end > start, "no timeline on the page")
	tl := r.body[start:end]
	for _, what := range []string{"created", "attempt 1 failed", "attempt 2 failed", "dead"} {
		assert.Contains(t, tl, `data-event="`+what+`"`)
	}
	assert.Contains(t, tl, "on <code>worker-timeline</code>")
	assert.Contains(t, tl, "upstream said no")
	assert.NotContains(t, tl, "stack line", "only the error's first line")
}
