package ui_test

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/ui"
)

// The job page reschedules a job and changes its priority (Client.Update), audited; a
// running job is left as it is, and bad input is refused with nothing changed.
func TestJobPage_EditReschedulesAndChangesPriority(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	id := b.insert(job{runIn: time.Hour})
	page := "/jobs/" + strconv.FormatInt(id, 10)
	r := b.get(page)
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, `action="/jobs/`+strconv.FormatInt(id, 10)+`/edit"`)

	r = b.act(page, page+"/edit", url.Values{"run_at": {"2031-05-06T07:08"}, "priority": {"9"}})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.Contains(t, b.get(r.location).body, "Updated the job.")
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.jobs WHERE id = $1 AND priority = 9
		AND run_at = '2031-05-06 07:08:00+00'`, id))
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.ui_audit WHERE action = 'edit' AND target LIKE 'job '||$1||' run_at="2031-05-06T07:08" priority="9"%'`,
		strconv.FormatInt(id, 10)))

	for name, form := range map[string]url.Values{
		"bad time":     {"run_at": {"tomorrow"}},
		"bad priority": {"priority": {"99999"}},
		"nothing":      {},
	} {
		r = b.act(page, page+"/edit", form)
		assert.Equal(t, http.StatusBadRequest, r.code, name)
	}
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.jobs WHERE id = $1 AND priority = 9`, id), "a refused edit changed the job")

	running := b.insert(job{status: "running"})
	rp := "/jobs/" + strconv.FormatInt(running, 10)
	r = b.get(rp)
	assert.NotContains(t, r.body, rp+`/edit"`, "no edit form for a running job")
	r = b.act(rp, rp+"/edit", url.Values{"priority": {"3"}})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.Contains(t, b.get(r.location).body, "Not changed: a worker started the job first.")
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.jobs WHERE id = $1 AND priority = 0`, running))
}

// A dead job is retried with edited args: the job gets them and is queued again,
// audited with the args' size; args that are not a JSON object, or a job that is not dead or
// failed, are refused with nothing changed. Its page shows each attempt's duration (the
// history keeps when it started), its progress and output formatted, and escapes all.
func TestJobPage_RetryWithEditedArgsAndAttemptDurations(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	id := b.insert(job{status: "dead", attempts: 2, payload: `{"sku":"SKU-42"}`, lastError: "boom",
		errorsJSON: `[{"attempt":1,"at":"2026-01-02T03:05:05Z","started_at":"2026-01-02T03:04:05Z","worker":"w-1","error":"timeout"},
			{"attempt":2,"at":"2026-01-02T04:00:00Z","error":"boom"}]`})
	_, err := b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET progress = '{"value": 25, "message": "<b>step 2</b>"}',
		output = '{"rows": 3}' WHERE id = $1`), id)
	require.NoError(t, err)
	page := "/jobs/" + strconv.FormatInt(id, 10)
	r := b.get(page)
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, `ran <span data-attempt-duration>1m 0s</span> · on <code>w-1</code>`, "attempt 1: started and ended")
	assert.Equal(t, 1, strings.Count(r.body, "data-attempt-duration"), "attempt 2's record has no start")
	assert.Contains(t, r.body, `data-progress="25%"`)
	assert.Contains(t, r.body, "&lt;b&gt;step 2&lt;/b&gt;")
	assert.Contains(t, r.body, "&#34;rows&#34;: 3")

	for name, args := range map[string]string{"not JSON": `{"sku":`, "not an object": `[1]`} {
		r = b.act(page, page+"/retry-args", url.Values{"args": {args}})
		assert.Equal(t, http.StatusBadRequest, r.code, name)
	}
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.jobs WHERE id = $1 AND status = 'dead' AND payload = '{"sku":"SKU-42"}'`, id))

	r = b.act(page, page+"/retry-args", url.Values{"args": {`{"sku": "SKU-43", "note": "<script>"}`}})
	require.Equal(t, http.StatusSeeOther, r.code, r.body)
	assert.Contains(t, b.get(r.location).body, "Gave the job its edited args and requeued it.")
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.jobs WHERE id = $1 AND status = 'queued' AND attempts = 0
		AND payload = '{"sku": "SKU-43", "note": "<script>"}'`, id))
	assert.Equal(t, 1, b.count(`SELECT count(*) FROM {s}.ui_audit WHERE action = 'retry with edited args' AND target = 'job '||$1||' args edited (37 bytes)'`,
		strconv.FormatInt(id, 10)), "audited with the args' size, not their content")

	r = b.get(page)
	assert.Contains(t, r.body, "Changed from the dashboard")
	assert.Contains(t, r.body, "retry with edited args")
	assert.Contains(t, r.body, "SKU-43", "the job's args")
	assert.NotContains(t, r.body, `"<script>"`, "the args are escaped")

	r = b.act(page, page+"/retry-args", url.Values{"args": {`{"sku": "SKU-44"}`}})
	assert.Equal(t, http.StatusConflict, r.code, "queued now: refused")
	assert.Zero(t, b.count(`SELECT count(*) FROM {s}.jobs WHERE payload->>'sku' = 'SKU-44'`))
}

// The job page shows a job's deadline and concurrency keys as given at enqueue, its
// metadata apart from skiplock's own keys (behind the internal toggle), all escaped.
func TestJobPage_ShowsDeadlineConcurrencyKeysAndMetadata(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	deadline := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
	row, err := b.client.Enqueue(b.ctx, timed{}, &skiplock.EnqueueOptions{Queue: "q", Deadline: deadline,
		ConcurrencyKeys: map[string]string{"tenant": "<acme>"}, Metadata: map[string]string{"trace": "<t1>"}})
	require.NoError(t, err)
	r := b.get("/jobs/" + strconv.FormatInt(row.ID, 10))
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, `<dd data-deadline><time title="`+deadline.Format("2006-01-02 15:04:05 UTC")+`"`)
	assert.Contains(t, r.body, `<code data-concurrency-keys>{
  &#34;tenant&#34;: &#34;&lt;acme&gt;&#34;
}</code>`)
	assert.Contains(t, r.body, `<dt><code>trace</code></dt><dd><code>&lt;t1&gt;</code></dd>`)
	internal := r.body[strings.Index(r.body, "<details data-internal>"):]
	assert.Contains(t, internal, "<code>skiplock_deadline</code>", "skiplock's own key, behind the toggle")
}

type docJob struct {
	Doc string `json:"doc"`
}

func (docJob) Kind() string { return "doc" }

// A job whose args a later unique enqueue replaced, or whose run it pushed back, says so
// on its page.
func TestJobPage_ShowsReplacedAndDebouncedJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	opts := func(f func(*skiplock.UniqueOpts)) *skiplock.EnqueueOptions {
		u := &skiplock.UniqueOpts{} // the kind alone is the key
		f(u)
		return &skiplock.EnqueueOptions{Queue: "q", Unique: u}
	}
	first, err := b.client.Enqueue(b.ctx, docJob{"a"}, opts(func(u *skiplock.UniqueOpts) { u.Replace = true }))
	require.NoError(t, err)
	page := "/jobs/" + strconv.FormatInt(first.ID, 10)
	assert.NotContains(t, b.get(page).body, "data-replaced")
	_, err = b.client.Enqueue(b.ctx, docJob{"b"}, opts(func(u *skiplock.UniqueOpts) { u.Replace = true }))
	require.NoError(t, err)
	assert.Contains(t, b.get(page).body, "<dd data-replaced>")
	_, err = b.client.Enqueue(b.ctx, docJob{"c"}, opts(func(u *skiplock.UniqueOpts) { u.Debounce = time.Minute }))
	require.NoError(t, err)
	assert.Contains(t, b.get(page).body, "<dd data-debounced>")
	assert.NotContains(t, b.get(page).body, "data-edited")
	_, err = b.client.Update(b.ctx, first.ID, skiplock.JobUpdate{RunNow: true})
	require.NoError(t, err)
	assert.Contains(t, b.get(page).body, "<dd data-edited>", "an edit by Client.Update outside the dashboard is marked")
}
