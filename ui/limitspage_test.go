package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/ui"
)

type slowReport struct {
	N int `json:"n"`
}

func (slowReport) Kind() string { return "slow_report" }

// The limits page sets a queue's limits on every worker (Client.SetQueueLimits), audited,
// and a worker applies them: with Concurrency 1 set on the page, a worker of 4 slots runs
// the queue's jobs one at a time. Bad input changes nothing; Reset drops the limits.
func TestLimitsPage_SetsLimitsThatAWorkerApplies(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	b.insert(job{queue: "reports", runIn: time.Hour})
	r := b.get("/limits")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, `data-limits="reports"`)

	for name, form := range map[string]url.Values{
		"not a number":  {"queue": {"reports"}, "concurrency": {"two"}},
		"negative":      {"queue": {"reports"}, "rate": {"-1"}},
		"invalid queue": {"queue": {"Reports!"}, "concurrency": {"1"}},
		"bad pair":      {"queue": {"reports"}, "concurrency_keys": {"region"}},
		"bad dimension": {"queue": {"reports"}, "concurrency_keys": {"Region=2"}},
	} {
		r = b.act("/limits", "/limits", form)
		assert.Equal(t, http.StatusBadRequest, r.code, name)
	}
	set, err := b.client.QueueLimitsSet(b.ctx)
	require.NoError(t, err)
	assert.Empty(t, set, "a refused form set limits")

	r = b.act("/limits", "/limits", url.Values{"queue": {"reports"}, "concurrency": {"1"}, "rate": {"50"}, "rate_period": {"2"},
		"key_rate": {"7"}, "key_rate_period": {"3"}, "fair": {"on"}, "concurrency_keys": {"region=50, tenant=2"}})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.Contains(t, b.get(r.location).body, "Set the queue&#39;s limits")
	set, err = b.client.QueueLimitsSet(b.ctx)
	require.NoError(t, err)
	assert.Equal(t, skiplock.QueueLimits{Concurrency: 1, Rate: 50, RatePeriod: 2 * time.Second, KeyRate: 7, KeyRatePeriod: 3 * time.Second, Fair: true,
		ConcurrencyKeys: map[string]int{"region": 50, "tenant": 2}}, set["reports"])
	assert.Contains(t, b.get("/limits").body, `value="region=50, tenant=2"`, "the form shows the limits per dimension")
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.ui_audit WHERE action = 'set limits' AND target LIKE 'queue "reports" concurrency="1"%'`))

	// A worker of 4 slots on the queue runs its 6 jobs one at a time.
	_, err = b.pool.Exec(b.ctx, b.q(`DELETE FROM {s}.jobs; CREATE TABLE {s}.runs (job_id bigint, started timestamptz, ended timestamptz)`))
	require.NoError(t, err)
	for i := range 6 {
		_, err := b.client.Enqueue(b.ctx, slowReport{N: i}, &skiplock.EnqueueOptions{Queue: "reports"})
		require.NoError(t, err)
	}
	w, err := skiplock.NewWorker(b.client, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond,
		Queues: map[string]skiplock.QueueConfig{"reports": {MaxWorkers: 4}}})
	require.NoError(t, err)
	run := b.q(`INSERT INTO {s}.runs VALUES ($1, $2, clock_timestamp())`)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[slowReport]) error {
		started := time.Now()
		tick := time.NewTimer(150 * time.Millisecond)
		defer tick.Stop()
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		_, err := b.pool.Exec(ctx, run, job.ID, started)
		return err
	}))
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	require.Eventually(t, func() bool { return b.count(`SELECT count(*) FROM {s}.runs`) == 6 }, 30*time.Second, 20*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	assert.Zero(t, b.count(`SELECT count(*) FROM {s}.runs a JOIN {s}.runs o ON a.job_id < o.job_id
		AND a.started < o.ended AND o.started < a.ended`), "two jobs of the queue ran at once under a limit of 1")

	r = b.act("/limits", "/limits/reset", url.Values{"queue": {"reports"}})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	set, err = b.client.QueueLimitsSet(b.ctx)
	require.NoError(t, err)
	assert.Empty(t, set)
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.ui_audit WHERE action = 'reset limits'`))
}

// The limits page drew a form for every queue: 20,000 queues (a queue per tenant) made a
// page of 27 MB. It shows the first 500 by name, says how many more there are, and
// shows any one queue by name (?queue=), which sets its limits as the full page does.
func TestLimitsPage_BoundsTheQueuesItDraws(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	_, err := b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.jobs (queue, kind, payload, status)
		SELECT 'tenant-' || lpad(g::text, 4, '0'), 'k', '{}', 'queued' FROM generate_series(1, 620) g`))
	require.NoError(t, err)

	r := b.get("/limits")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Equal(t, 500, strings.Count(r.body, `<tr data-limits=`))
	assert.Contains(t, r.body, `data-limits="tenant-0500"`)
	assert.NotContains(t, r.body, `data-limits="tenant-0501"`)
	assert.Contains(t, r.body, `data-limits-hidden="120"`)

	r = b.get("/limits?queue=tenant-0610")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Equal(t, 1, strings.Count(r.body, `<tr data-limits=`))
	assert.Contains(t, r.body, `data-limits="tenant-0610"`)
	r = b.act("/limits?queue=tenant-0610", "/limits", url.Values{"queue": {"tenant-0610"}, "concurrency": {"3"}})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	set, err := b.client.QueueLimitsSet(b.ctx)
	require.NoError(t, err)
	assert.Equal(t, 3, set["tenant-0610"].Concurrency)

	assert.Equal(t, http.StatusBadRequest, b.get("/limits?queue="+strings.Repeat("q", 65)).code)
}
