package ui_test

import (
	"context"
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

type stepper struct{}

func (stepper) Kind() string { return "stepper" }

// hostileStepName is a step and signal name a page must escape.
const hostileStepName = `<script>alert("x")</script>`

// TestJobPage_ShowsStepsAndSignals runs a durable job on a real worker: two steps, then a
// wait for a signal. Its page lists the steps (name, kind, status, result size, attempt)
// and the signals, one taken by the wait and one not, every name and payload escaped; a
// job without steps has no such section.
func TestJobPage_ShowsStepsAndSignals(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	row, err := b.client.Enqueue(b.ctx, stepper{}, nil)
	require.NoError(t, err)
	plain, err := b.client.Enqueue(b.ctx, flaky{}, &skiplock.EnqueueOptions{RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.NoError(t, b.client.Signal(b.ctx, row.ID, hostileStepName, map[string]string{"note": "<b>bold</b>"}))
	w, err := skiplock.NewWorker(b.client, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, Completion: skiplock.CompletionKeep})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[stepper]) error {
		if _, err := skiplock.Step(ctx, "reserve", func(context.Context) (string, error) { return "r-1", nil }); err != nil {
			return err
		}
		if _, err := skiplock.Step(ctx, hostileStepName, func(context.Context) (int, error) { return 7, nil }); err != nil {
			return err
		}
		_, err := skiplock.AwaitSignal(ctx, "approve", 0)
		return err
	}))
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()
	require.Eventually(t, func() bool {
		return b.count(`SELECT count(*) FROM {s}.jobs WHERE id = $1 AND awaiting = 'approve'`, row.ID) == 1
	}, 30*time.Second, 20*time.Millisecond, "the job waits for its signal")

	r := b.get("/jobs/" + strconv.FormatInt(row.ID, 10))
	require.Equal(t, http.StatusOK, r.code, r.body)
	start := strings.Index(r.body, `<section class="card" data-durable>`)
	require.True(t, start >= 0, "no steps section on the page")
	sec := r.body[start:]
	sec = sec[:strings.Index(sec, "</section>")]
	assert.Contains(t, sec, `<tr data-step="0">`)
	assert.Contains(t, sec, `<code>reserve</code>`)
	assert.Contains(t, sec, `<span class="badge step-done">done</span>`)
	assert.Contains(t, sec, `<summary>5 B</summary>`, "the result's size")
	assert.Contains(t, sec, `<tr data-step="2">`)
	assert.Contains(t, sec, `<span class="badge step-waiting">waiting</span>`)
	assert.Contains(t, sec, `&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;`)
	assert.NotContains(t, r.body, hostileStepName, "every name is escaped")
	assert.NotContains(t, r.body, "<b>bold</b>")
	assert.Contains(t, sec, `<tr data-signal=`)
	assert.Contains(t, sec, `not yet`, "the hostile signal is not the awaited one")

	require.NoError(t, b.client.Signal(b.ctx, row.ID, "approve", "ok"))
	require.Eventually(t, func() bool { return b.status(row.ID) == "succeeded" }, 30*time.Second, 20*time.Millisecond)
	r = b.get("/jobs/" + strconv.FormatInt(row.ID, 10))
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, `<td>step 2</td>`, "the signal taken by the wait at step 2")

	r = b.get("/jobs/" + strconv.FormatInt(plain.ID, 10))
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.NotContains(t, r.body, "data-durable", "a job without steps has no steps section")
}

// A job sent 3,000 signals of 4 KB, with 1,000 recorded steps, has a page that reads and
// shows the newest 200 signals and the first and newest 100 steps, and says how many it
// left out: not the 12 MB of every signal.
func TestJobPage_ManySignalsAndStepsAreCutAndCounted(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	rc := b.countRows()
	b.serve(ui.Config{})
	id := b.insert(job{kind: "stepper", status: "running"})
	_, err := b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.job_signals (job_id, name, payload)
		SELECT $1, 'tick', jsonb_build_object('n', g, 'pad', repeat('x', 4096)) FROM generate_series(1, 3000) g`), id)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.job_steps (job_id, seq, name, kind, result, attempt, started_at, finished_at)
		SELECT $1, g, 'step-' || g, 'step', jsonb_build_object('pad', repeat('y', 10000)), 1, now(), now() FROM generate_series(0, 999) g`), id)
	require.NoError(t, err)
	var newest, oldest int64
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT max(id), min(id) FROM {s}.job_signals WHERE job_id = $1`), id).Scan(&newest, &oldest))

	before := rc.rows.Load()
	r := b.get("/jobs/" + strconv.FormatInt(id, 10))
	require.Equal(t, http.StatusOK, r.code)
	read := rc.rows.Load() - before
	assert.Less(t, len(r.body), 4<<20, "the page stays small")
	assert.Equal(t, 200, strings.Count(r.body, `<tr data-signal="`), "the newest 200 signals")
	assert.True(t, strings.Contains(r.body, `<tr data-signal="`+strconv.FormatInt(newest, 10)+`">`), "the newest signal is shown")
	assert.False(t, strings.Contains(r.body, `<tr data-signal="`+strconv.FormatInt(oldest, 10)+`">`), "the oldest is not")
	assert.True(t, strings.Contains(r.body, `data-signals-cut="2800"`), "the page says how many signals it left out")
	assert.Equal(t, 200, strings.Count(r.body, `<tr data-step="`), "the first and the newest 100 steps")
	assert.True(t, strings.Contains(r.body, `<tr data-step="99">`))
	assert.True(t, strings.Contains(r.body, `<tr data-steps-cut="800">`), "the page says how many steps it left out, where")
	assert.True(t, strings.Contains(r.body, `<tr data-step="900">`))
	assert.False(t, strings.Contains(r.body, `<tr data-step="100">`))
	assert.True(t, strings.Contains(r.body, `<summary>9.8 KiB</summary>`), "a step's size is its whole result's")
	assert.Less(t, read, int64(1000), "the page reads the signals and steps it shows, not all of them")
}
