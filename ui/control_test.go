package ui_test

import (
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/ui"
)

func TestClientControl_PausesQueuesAndListsSchedules(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctl := ui.NewClientControl(b.client)
	b.serve(ui.Config{Queues: ctl, Periodic: ctl})
	b.insert(job{queue: "emails", status: "queued"})

	r := b.act("/queues", "/queues/emails/pause", nil)
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	stats, err := b.client.Stats(b.ctx)
	require.NoError(t, err)
	require.Len(t, stats, 1)
	assert.True(t, stats[0].Paused, "the button paused the queue in the database")
	r = b.get("/queues")
	assert.Contains(t, r.body, ">paused<")
	assert.Contains(t, r.body, "/queues/emails/resume")

	require.NoError(t, b.client.SetQueueLimits(b.ctx, "emails", skiplock.QueueLimits{Concurrency: 7}))
	r = b.get("/queues")
	assert.Contains(t, r.body, "/ 7", "running vs the limit set at run time")

	r = b.act("/queues", "/queues/emails/resume", nil)
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	stats, err = b.client.Stats(b.ctx)
	require.NoError(t, err)
	assert.False(t, stats[0].Paused)

	_, err = b.pool.Exec(b.ctx, `INSERT INTO `+pgx.Identifier{b.schema, "periodic"}.Sanitize()+`
		(name, kind, queue, schedule, misfire, next_run_at, last_run_at, last_job_id) VALUES
		('nightly', 'report', 'reports', '0 3 * * *', 'run_once', now() + interval '1 day', now() - interval '1 hour', 7)`)
	require.NoError(t, err)
	r = b.get("/periodic")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, "nightly")
	assert.Contains(t, r.body, "0 3 * * *")
	assert.Contains(t, r.body, ">active<")
}
