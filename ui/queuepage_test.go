package ui_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/maintenance"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/ui"
)

// rollup writes the dashboard's timing rollup as the maintenance leader does when a
// minute is over, until it has caught up.
func (b *bundle) rollup() {
	b.t.Helper()
	r := maintenance.NewTimingRollup(pgutil.DB{Pool: b.pool, Schema: b.schema})
	for range 100 {
		behind, err := r.Run(b.ctx, time.Now())
		require.NoError(b.t, err)
		if !behind {
			return
		}
	}
	b.t.Fatal("the rollup did not catch up")
}

// archiveTimed writes n archived jobs of queue and kind: job i (1..n) waited wait(i)
// and ran run(i), and finished finishedAgo before now.
func (b *bundle) archiveTimed(queue, kind string, n int, finishedAgo time.Duration, wait, run func(i int) time.Duration) {
	b.t.Helper()
	_, err := b.pool.Exec(b.ctx, b.q(`
		INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
			created_at, finished_at, started_at)
		SELECT nextval(pg_get_serial_sequence('{s}.jobs', 'id')), $1, $2, '{}', 'succeeded', 0,
			f - make_interval(secs => r.run + r.wait), 1, 3, f - make_interval(secs => r.run + r.wait), f,
			f - make_interval(secs => r.run)
		FROM unnest($3::float8[], $4::float8[]) AS r (wait, run), (SELECT now() - make_interval(secs => $5) AS f) t`),
		queue, kind, secondsOf(n, wait), secondsOf(n, run), finishedAgo.Seconds())
	require.NoError(b.t, err)
}

func secondsOf(n int, f func(int) time.Duration) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = f(i + 1).Seconds()
	}
	return out
}

var (
	spanRowRE = regexp.MustCompile(`<tr><td>([^<]+)</td><td class="num" data-jobs="(\d+)">[^<]*</td><td class="num">([^<]*)</td><td class="num" data-wait-p95>([^<]*)</td><td class="num">([^<]*)</td><td class="num">([^<]*)</td><td class="num" data-run-p95>([^<]*)</td><td class="num">([^<]*)</td><td class="num" data-span-failed="(\d+)">[^<]*</td><td class="num" data-fail-rate>([^<]*)</td></tr>`)
	chartRE   = regexp.MustCompile(`data-chart="(wait|run)" data-points="(\d+)"`)
)

// spans reads the queue page's span table: label → its cells (jobs, wait p50, p95, max,
// run p50, p95, max, failed, failure rate).
func spans(t *testing.T, body string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, m := range spanRowRE.FindAllStringSubmatch(body, -1) {
		out[m[1]] = m[2:]
	}
	require.GreaterOrEqual(t, len(out), 2, "the spans are on the page")
	return out
}

func TestQueuePage_WaitAndRunPercentilesPerSpanAndKind(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	// Two minutes ago: 100 jobs waiting 10 ms to 1 s and running 2 s.
	b.archiveTimed("mailers", "email.send", 100, 2*time.Minute, func(i int) time.Duration { return ms(10 * i) },
		func(int) time.Duration { return 2 * time.Second })
	// Half an hour ago: 10 slow ones of another kind; three hours ago, 5 more.
	b.archiveTimed("mailers", "email.digest", 10, 30*time.Minute, func(int) time.Duration { return time.Minute },
		func(int) time.Duration { return 90 * time.Second })
	b.archiveTimed("mailers", "email.digest", 5, 3*time.Hour, func(int) time.Duration { return time.Second },
		func(int) time.Duration { return time.Second })
	// Not counted: another queue, a day and more ago, and a job archived without a start.
	b.archiveTimed("reports", "email.send", 50, time.Minute, func(int) time.Duration { return time.Hour }, ms)
	b.archiveTimed("mailers", "email.send", 7, 25*time.Hour, func(int) time.Duration { return time.Hour }, ms)
	b.archive(b.insert(job{queue: "mailers"}), time.Minute)
	// Two minutes ago, a minute the rollup always writes: another job without a start,
	// which counts as succeeded with no times there too.
	b.archive(b.insert(job{queue: "mailers"}), 2*time.Minute)
	b.insert(job{queue: "mailers", status: "dead"})
	b.insert(job{queue: "mailers", status: "cancelled"})
	b.rollup() // what the maintenance leader writes once a minute is over

	r := b.get("/queue?name=mailers")
	require.Equal(t, http.StatusOK, r.code, r.body)
	s := spans(t, r.body)
	// The stats count what ended in the hour: 112 archived (100 + 10 + the two without a
	// start), one dead and one cancelled.
	assert.Contains(t, r.body, `data-failed="1"`)
	assert.Contains(t, r.body, `data-cancelled="1"`)
	assert.Contains(t, r.body, `data-ended="114"`)
	assert.Contains(t, r.body, `data-oldest-due>—<`, "no job is waiting")
	assert.Equal(t, []string{"100", "502 ms", "1.0 s", "1.0 s", "2.0 s", "2.0 s", "2.0 s"}, s["Last 5 minutes"][:7],
		"p50 and p95 within 7% of 500 ms and 950 ms, never above the max; the max exact")
	assert.Equal(t, "110", s["Last hour"][0])
	assert.Equal(t, "1m 0s", s["Last hour"][3], "the slow kind makes the hour's p95 wait")
	assert.Equal(t, "1m 30s", s["Last hour"][6])
	assert.Equal(t, []string{"1", "0.9%"}, s["Last hour"][7:], "one dead among 112 archived and itself")
	assert.Equal(t, "115", s["Last 24 hours"][0], "three hours ago, from the rollup's quarters")
	assert.NotContains(t, s, "Last 7 days", "the week's view only")
	assert.NotContains(t, r.body, "data-rollup-behind")
	assert.Contains(t, r.body, `<tr data-kind="email.send">`)
	assert.Less(t, strings.Index(r.body, `data-kind="email.send"`), strings.Index(r.body, `data-kind="email.digest"`), "the busiest kind first")
	charts := chartRE.FindAllStringSubmatch(r.body, -1)
	require.Len(t, charts, 2)
	assert.Equal(t, "2", charts[0][2], "the hour's wait chart has the two minutes with jobs")
	assert.Contains(t, r.body, `<polyline class="p95" points="`)

	r = b.get("/queue?name=mailers&range=24h")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Equal(t, "115", spans(t, r.body)["Last 24 hours"][0])
	assert.Equal(t, "110", spans(t, r.body)["Last hour"][0])
	assert.Equal(t, "3", chartRE.FindStringSubmatch(r.body)[2], "the day's chart: three 15-minute slots with jobs")
	assert.Contains(t, r.body, `data-kind="email.digest"`)

	r = b.get("/queue?name=mailers&range=7d")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Equal(t, "122", spans(t, r.body)["Last 7 days"][0], "25 hours ago too")
	assert.Equal(t, "3", chartRE.FindStringSubmatch(r.body)[2], "the week's chart: three 2-hour slots with jobs")

	// Jobs archived now count at once: the minutes the rollup has not written are read
	// from the archive.
	b.archiveTimed("mailers", "email.send", 20, 0, func(int) time.Duration { return time.Second }, ms)
	s = spans(t, b.get("/queue?name=mailers").body)
	assert.Equal(t, "120", s["Last 5 minutes"][0])
	assert.Equal(t, "135", s["Last 24 hours"][0])

	assert.Equal(t, http.StatusOK, b.get("/queue?name=nothing.here").code, "a queue with no jobs has a page")
	for _, bad := range []string{"/queue", "/queue?name=" + strings.Repeat("q", 65), "/queue?name=mailers&range=30d"} {
		assert.Equal(t, http.StatusBadRequest, b.get(bad).code, bad)
	}
}

// TestQueuePage_HistoryFromTheRollupALeaderWrites runs a Sweeper, which leads the
// maintenance and writes the rollup: the week's view shows jobs whose archive rows are
// gone (only the rollup holds them), and their failure rate; the rollup keeps at most 51
// kinds per queue and slot, and drops what is older than a week. Without the writer the
// week shows nothing and this fails.
func TestQueuePage_HistoryFromTheRollupALeaderWrites(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	sec := func(int) time.Duration { return time.Second }
	b.archiveTimed("hist", "old.kind", 30, 3*24*time.Hour, sec, sec)
	b.archiveTimed("hist", "recent", 10, 2*time.Hour, sec, sec)
	for i := range 60 {
		b.archiveTimed("many", "k"+strconv.Itoa(i), 1, 2*time.Hour, sec, sec)
	}
	id := b.insert(job{queue: "hist", kind: "old.kind", status: "dead"})
	_, err := b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET finished_at = now() - interval '2 days' WHERE id = $1`), id)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.ui_timing_rollup VALUES ('hist', 15, now() - interval '8 days', 'ancient',
		5, 0, '{1}', '{5}', 1, '{1}', '{5}', 1)`))
	require.NoError(t, err)

	sw, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{Interval: time.Hour, Logger: quietLogger()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- sw.Run(ctx) }()
	require.Eventually(t, func() bool {
		return b.count(`SELECT count(*) FROM {s}.ui_timing_rollup_mark
			WHERE through >= to_timestamp((floor(date_part('epoch', now()) / 60) - 2) * 60) - (width - 1) * interval '1 minute'`) == 2
	}, 60*time.Second, 50*time.Millisecond, "the leader wrote the rollup up to the last minute that is over")
	cancel()
	require.NoError(t, <-done)

	_, err = b.pool.Exec(b.ctx, b.q(`DELETE FROM {s}.jobs_archive WHERE queue = 'hist'`))
	require.NoError(t, err)
	r := b.get("/queue?name=hist&range=7d")
	require.Equal(t, http.StatusOK, r.code, r.body)
	s := spans(t, r.body)
	assert.Equal(t, []string{"40", "1", "2.4%"}, []string{s["Last 7 days"][0], s["Last 7 days"][7], s["Last 7 days"][8]},
		"40 jobs from the rollup alone, one failed")
	assert.Equal(t, "10", s["Last 24 hours"][0])
	assert.Contains(t, r.body, `data-kind="old.kind"`)
	assert.NotContains(t, r.body, "ancient", "older than a week: deleted")
	assert.Zero(t, b.count(`SELECT count(*) FROM {s}.ui_timing_rollup WHERE kind = 'ancient'`))

	assert.Equal(t, 51*2, b.count(`SELECT count(*) FROM {s}.ui_timing_rollup WHERE queue = 'many'`),
		"50 kinds and the rest together, per width")
	assert.Equal(t, 10*2, b.count(`SELECT sum(succeeded) FROM {s}.ui_timing_rollup WHERE queue = 'many' AND kind = '(other kinds)'`))
	r = b.get("/queue?name=many&range=24h")
	assert.Equal(t, "60", spans(t, r.body)["Last 24 hours"][0])
	assert.Contains(t, r.body, `<tr data-kind="(other kinds)">`)
}

// Without a leader writing the rollup, the page reads the archive's last hour and says so.
func TestQueuePage_WithoutTheRollupShowsTheHourAndSaysSo(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	sec := func(int) time.Duration { return time.Second }
	b.archiveTimed("q", "k", 4, 10*time.Minute, sec, sec)
	b.archiveTimed("q", "k", 3, 3*time.Hour, sec, sec)
	r := b.get("/queue?name=q")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, "data-rollup-behind")
	assert.Contains(t, r.body, "it has written nothing yet")
	assert.Equal(t, "4", spans(t, r.body)["Last 24 hours"][0], "the hour only")
}

func TestQueuePage_HostileQueueNameIsEscapedAndLinked(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	name := `<img src=x onerror=alert(1)>&"/../jobs`
	b.archiveTimed(name, `<script>k</script>`, 3, time.Minute, func(int) time.Duration { return time.Second },
		func(int) time.Duration { return time.Second })
	b.insert(job{queue: name})
	r := b.get("/queues")
	require.Equal(t, http.StatusOK, r.code)
	assert.Contains(t, r.body, `href="/queue?name=%3cimg%20src%3dx%20onerror%3dalert%281%29%3e%26%22%2f..%2fjobs"`, "the queues page links the queue page")
	r = b.get("/queue?name=" + url.QueryEscape(name))
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.NotContains(t, r.body, "<img src=x")
	assert.NotContains(t, r.body, "<script>k")
	assert.Contains(t, r.body, "&lt;script&gt;k&lt;/script&gt;")
	assert.Equal(t, "3", spans(t, r.body)["Last 5 minutes"][0])
}

type timed struct{}

func (timed) Kind() string { return "timed" }

// TestQueuePage_WorkerRecordsTheStartOfArchivedJobs runs jobs on a real worker: the
// archive keeps when each started (migration 18), between its due time and its finish,
// and the queue page counts them.
func TestQueuePage_WorkerRecordsTheStartOfArchivedJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	for range 3 {
		_, err := b.client.Enqueue(b.ctx, timed{}, &skiplock.EnqueueOptions{Queue: "timed"})
		require.NoError(t, err)
	}
	w, err := skiplock.NewWorker(b.client, skiplock.WorkerConfig{Queues: map[string]skiplock.QueueConfig{"timed": {}}, PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[timed]) error { return nil }))
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	require.Eventually(t, func() bool { return b.count(`SELECT count(*) FROM {s}.jobs_archive`) == 3 }, 30*time.Second, 20*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	assert.Equal(t, 3, b.count(`SELECT count(*) FROM {s}.jobs_archive
		WHERE started_at IS NOT NULL AND started_at >= run_at AND started_at <= finished_at`))
	assert.Equal(t, "3", spans(t, b.get("/queue?name=timed").body)["Last 5 minutes"][0])
}

// A queue whose jobs have hundreds of kinds: the rollup keeps the busiest 50 and the
// rest together, so its rows stay bounded; the totals count every job. The row of the
// rest names no kind, so it links nowhere (it linked to /jobs?kind=(other kinds), which
// lists nothing, or a real kind of that name); each kind's row links to its jobs.
func TestQueuePage_ManyKindsAreKeptTogetherPastABound(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	_, err := b.pool.Exec(b.ctx, b.q(`
		INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
			created_at, finished_at, started_at)
		SELECT g, 'many', 'kind-' || g, '{}', 'succeeded', 0, now() - interval '5 min', 1, 3, now() - interval '5 min',
			now() - interval '4 min', now() - interval '5 min'
		FROM generate_series(1, 260) g`))
	require.NoError(t, err)
	b.rollup()
	r := b.get("/queue?name=many")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Equal(t, "260", spans(t, r.body)["Last 5 minutes"][0])
	assert.Contains(t, r.body, `<tr data-kind="(other kinds)">`, "210 kinds past the bound, together, the busiest row")
	assert.Contains(t, r.body, "The busiest kinds only")
	other := r.body[strings.Index(r.body, `<tr data-kind="(other kinds)">`):]
	other = other[:strings.Index(other, "</tr>")]
	assert.NotContains(t, other, "<a ", "the rest together is no kind to list")
	assert.Contains(t, other, `<td class="kind"><span class="muted" title="`)
	assert.NotContains(t, r.body, "other%20kinds")
	assert.NotContains(t, r.body, "kind=%28other")
	assert.Regexp(t, `<tr data-kind="kind-\d+"><td class="kind"><a href="/jobs\?queue=many&amp;kind=kind-\d+">`, r.body,
		"a kind's row links to its jobs")
}

// Queue pages of several queues read at once each count their own jobs (the race
// detector watches).
func TestQueuePage_ConcurrentReadsOfManyQueues(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	const queues = 10
	for i := range queues {
		b.archiveTimed("q"+strconv.Itoa(i), "k", i+1, time.Minute, func(int) time.Duration { return time.Second },
			func(int) time.Duration { return time.Second })
	}
	errs := make(chan string, 3*queues)
	var wg sync.WaitGroup
	for range 3 {
		for i := range queues {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := b.http.Get(b.srv.URL + "/queue?name=q" + strconv.Itoa(i))
				if err != nil {
					errs <- err.Error()
					return
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				if m := spanRowRE.FindStringSubmatch(string(body)); m == nil || m[2] != strconv.Itoa(i+1) {
					errs <- "q" + strconv.Itoa(i) + ": " + strconv.Itoa(resp.StatusCode)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	var bad []string
	for e := range errs {
		bad = append(bad, e)
	}
	assert.Empty(t, bad)
}
