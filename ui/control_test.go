package ui_test

import (
	"html"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
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
	action, form := queueForm(t, r.body, "emails")
	assert.Equal(t, "/queues/resume", action)
	assert.Equal(t, "emails", form.Get("queue"))

	require.NoError(t, b.client.SetQueueLimits(b.ctx, "emails", skiplock.QueueLimits{Concurrency: 7}))
	r = b.get("/queues")
	assert.Contains(t, r.body, "/ 7", "running vs the limit set at run time")

	r = b.post(action, form)
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

var queueLinkRE = regexp.MustCompile(`<td><a href="([^"]+)">`)

// Queues whose names the library refuses but the tables hold (written by SQL or an older
// version) are paused and resumed by their exact names, through ClientControl; their names
// stay text in the page, in the form and in the audit, quoted there.
func TestClientControl_PausesAndResumesQueuesTheLibraryRefuses(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	var logs lockedBuffer
	ctl := ui.NewClientControl(b.client)
	b.serve(ui.Config{Queues: ctl, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	target := b.insert(job{queue: "default"})
	names := []string{
		"../jobs/" + strconv.FormatInt(target, 10) + "/delete?",
		"a?b#c&d=e",
		`<img src=x onerror=alert(1)>`,
		"..",
		"x\" result=\"done\"\nwho=admin \u202etxt.exe",
	}
	for _, name := range names {
		b.insert(job{queue: name})
		require.ErrorIs(t, b.client.PauseQueue(b.ctx, name), skiplock.ErrInvalidQueue, "the library refuses %q", name)
	}
	// One was paused by an older version, straight in the table.
	_, err := b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.queues (name, paused_at, updated_at) VALUES ($1, now(), now())`), names[1])
	require.NoError(t, err)
	paused := func(name string) bool {
		return b.count(`SELECT count(*) FROM {s}.queues WHERE name = $1 AND paused_at IS NOT NULL`, name) == 1
	}
	click := func(name, want string) {
		t.Helper()
		r := b.get("/queues")
		require.Equal(t, http.StatusOK, r.code, r.body)
		assert.NotContains(t, r.body, "<img src", "names are text, not markup")
		action, form := queueForm(t, r.body, name)
		require.True(t, strings.HasSuffix(action, "/"+want), "%q offers %s", name, action)
		r = b.post(action, form)
		require.Equal(t, http.StatusSeeOther, r.code, "%s %q: %s", want, name, r.body)
	}

	click(names[1], "resume")
	assert.False(t, paused(names[1]), "the queue an older version paused is resumed")
	for _, name := range names {
		click(name, "pause")
		assert.True(t, paused(name), "paused %q", name)
		click(name, "resume")
		assert.False(t, paused(name), "resumed %q", name)
	}
	assert.Equal(t, "queued", b.status(target), "no button acted on anything but its queue")

	// Each row's link lists its queue's job, by the exact name (escaped into the query).
	page := b.get("/queues").body
	for _, row := range queueRowRE.FindAllStringSubmatch(page, -1) {
		name := html.UnescapeString(row[1])
		link := queueLinkRE.FindStringSubmatch(row[2])
		require.NotNil(t, link, row[2])
		want := b.ids(`SELECT id FROM {s}.jobs WHERE queue = $1 ORDER BY id DESC`, name)
		assert.Equal(t, want, listed(b.get(html.UnescapeString(link[1])).body), "the link of %q", name)
	}
	assert.Equal(t, 0, b.count(`SELECT count(*) FROM {s}.queues WHERE name <> ALL($1)`, names), "no other queue was written")

	// The audit quotes each name: no line or row can be made to say something else.
	body := html.UnescapeString(b.get("/audit").body)
	for _, name := range names {
		assert.Contains(t, findRows(body, "pause"), "<code>queue "+strconv.Quote(name)+"</code>")
	}
	assert.NotContains(t, body, "\u202e", "an invisible override is escaped")
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		assert.True(t, strings.HasPrefix(line, "time="), "one log line per entry: %q", line)
	}
}
