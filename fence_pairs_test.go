package skiplock_test

// Tests of the fence by pairs: one worker can hold two attempts of one job (an attempt it
// lost whose handler has not returned yet, and the job's next claim); every fenced
// statement must match each attempt by its (id, token) pair, so the live attempt is
// renewed and recorded whatever order the pairs come in (issue 30, point 5).

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

type twinArgs struct{}

func (twinArgs) Kind() string { return "twin" }

// attemptLog is a test's audit table of handler events, one row per event: the job, the
// attempt (as the handler saw it), what happened ("start", "end", "cancelled: <cause>")
// and when, by the database's clock.
type attemptLog struct{ b *bundle }

func newAttemptLog(t *testing.T, b *bundle) attemptLog {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.attempt_log (
		job_id bigint, attempt int, worker text, event text, at timestamptz DEFAULT clock_timestamp())`))
	require.NoError(t, err)
	return attemptLog{b}
}

// note records an event; it uses its own context, so a cancelled handler still records.
func (l attemptLog) note(jobID int64, attempt int, worker, event string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := l.b.pool.Exec(ctx, l.b.q(`INSERT INTO {s}.attempt_log (job_id, attempt, worker, event)
		VALUES ($1, $2, $3, $4)`), jobID, attempt, worker, event)
	return err
}

// events lists the events of job id, oldest first, as "attempt/event".
func (l attemptLog) events(t *testing.T, id int64) []string {
	t.Helper()
	rows, err := l.b.pool.Query(l.b.ctx, l.b.q(`SELECT attempt || '/' || event FROM {s}.attempt_log
		WHERE job_id = $1 ORDER BY at, attempt`), id)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// has reports whether job id has the event for attempt.
func (l attemptLog) has(t *testing.T, id int64, attempt int, event string) bool {
	t.Helper()
	var n int
	require.NoError(t, l.b.pool.QueryRow(l.b.ctx, l.b.q(`SELECT count(*) FROM {s}.attempt_log
		WHERE job_id = $1 AND attempt = $2 AND event LIKE $3`), id, attempt, event).Scan(&n))
	return n > 0
}

// takeBack makes the running job id's lease end, and deletes its owner's row in the
// workers table, and sweeps until a sweeper took the job back, as one does when its
// worker's row was pruned (the sweeper leaves the jobs of a worker with a row to the
// other workers' judgement, docs/ownership.md). The worker may write its row again
// between the statements: then it tries again.
func takeBack(t *testing.T, b *bundle, id int64) {
	t.Helper()
	sw, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{Logger: testLogger()})
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET locked_at = now() - interval '2 hours',
			lease_until = now() - interval '1 hour' WHERE id = $1 AND status = 'running'`), id)
		require.NoError(t, err)
		_, err = b.pool.Exec(b.ctx, b.q(`DELETE FROM {s}.workers WHERE id = (SELECT locked_by FROM {s}.jobs WHERE id = $1)`), id)
		require.NoError(t, err)
		res, err := sw.Sweep(b.ctx)
		require.NoError(t, err)
		for _, r := range res.Reclaimed {
			if r == id {
				return
			}
		}
		require.True(t, time.Now().Before(deadline), "job %d was not taken back", id)
	}
}

// fenceOf returns the running job id's fencing token.
func fenceOf(t *testing.T, b *bundle, id int64) int64 {
	t.Helper()
	var f int64
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT fence FROM {s}.jobs WHERE id = $1`), id).Scan(&f))
	return f
}

// TestFencing_TwoAttemptsOfOneJobInOneWorkerKeepTheLiveOne: a worker runs attempt 1 of a
// job, the job is taken back from it, and the same worker claims attempt 2 while attempt
// 1's handler, deaf to its cancellation, still runs. Its heartbeats then carry the job's
// id twice ([id, id], [old token, new token]) and must renew attempt 2; a batch holding
// both attempts' successes must record attempt 2's.
func TestFencing_TwoAttemptsOfOneJobInOneWorkerKeepTheLiveOne(t *testing.T) {
	t.Parallel()

	// setup starts a worker with two slots per job whose handler, for attempt 1, waits
	// for release1 whatever its context says, and for attempt 2 waits for release2 or its
	// context; released, each returns nil, or with fail an error naming its attempt. It
	// enqueues n jobs of maxAttempts and returns them once each runs attempt 2.
	setup := func(t *testing.T, n int, visibility, flush time.Duration, fail bool, maxAttempts int) (b *bundle, log attemptLog, ids []int64, release1, release2 chan struct{}) {
		b = setup(t)
		log = newAttemptLog(t, b)
		release1, release2 = make(chan struct{}), make(chan struct{})
		started := make(chan int, 2*n)
		w := newWorker(t, b, skiplock.WorkerConfig{ID: "w",
			Queues:            map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 2 * n}},
			VisibilityTimeout: visibility, JobTimeout: -1, SweepInterval: -1, PollInterval: 20 * time.Millisecond,
			CompleteFlushInterval: flush, Completion: skiplock.CompletionKeep, Logger: testLogger()})
		require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[twinArgs]) error {
			if err := log.note(job.ID, job.Attempts, "w", "start"); err != nil {
				return err
			}
			started <- job.Attempts
			end := func() error {
				if err := log.note(job.ID, job.Attempts, "w", "end"); err != nil || !fail {
					return err
				}
				return fmt.Errorf("attempt %d failed", job.Attempts)
			}
			if job.Attempts == 1 {
				<-release1
				return end()
			}
			select {
			case <-release2:
				return end()
			case <-ctx.Done():
				_ = log.note(job.ID, job.Attempts, "w", fmt.Sprintf("cancelled: %v", context.Cause(ctx)))
				return ctx.Err()
			}
		}))
		for range n {
			job, err := b.client.Enqueue(b.ctx, twinArgs{}, &skiplock.EnqueueOptions{MaxAttempts: maxAttempts})
			require.NoError(t, err)
			ids = append(ids, job.ID)
		}
		runWorker(t, w)
		// Registered after runWorker's, so it runs first: the worker's stop waits for
		// handlers that wait for these.
		t.Cleanup(func() {
			select {
			case <-release1:
			default:
				close(release1)
			}
			select {
			case <-release2:
			default:
				close(release2)
			}
		})
		for range n {
			require.Equal(t, 1, <-started)
		}
		fences := map[int64]int64{}
		for _, id := range ids {
			fences[id] = fenceOf(t, b, id)
			takeBack(t, b, id)
		}
		for range n {
			select {
			case a := <-started:
				require.Equal(t, 2, a)
			case <-time.After(30 * time.Second):
				t.Fatal("attempt 2 did not start")
			}
		}
		for _, id := range ids {
			require.Greater(t, fenceOf(t, b, id), fences[id], "attempt 2 took a new token")
		}
		return b, log, ids, release1, release2
	}

	t.Run("HeartbeatsRenewTheLiveAttempt", func(t *testing.T) {
		t.Parallel()
		// Heartbeats every 500 ms. In each, the two pairs come in map order; with a token
		// looked up by the id's place, every heartbeat that listed attempt 1 first failed
		// to find attempt 2 and cancelled it as lost.
		b, log, ids, release1, release2 := setup(t, 1, 1500*time.Millisecond, 0, false, 5)
		id := ids[0]
		var last time.Time
		renewals := 0
		eventually(t, 60*time.Second, func() bool {
			require.False(t, log.has(t, id, 2, "cancelled%"), "the live attempt was cancelled: %v", log.events(t, id))
			var lease time.Time
			var status string
			require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT status, lease_until FROM {s}.jobs WHERE id = $1`), id).
				Scan(&status, &lease))
			require.Equal(t, "running", status, "events: %v", log.events(t, id))
			if !lease.Equal(last) {
				if !last.IsZero() {
					renewals++
				}
				last = lease
			}
			return renewals >= 8
		}, "8 renewals of the live attempt's lease")
		close(release2)
		waitStatus(t, b, id, skiplock.StatusSucceeded, 30*time.Second, "job %d succeeded", id)
		close(release1) // its late success changes nothing
		j, err := b.client.Get(b.ctx, id)
		require.NoError(t, err)
		assert.Equal(t, 2, j.Attempts)
		assert.False(t, log.has(t, id, 3, "start"), "no third attempt: %v", log.events(t, id))
	})

	t.Run("ABatchWithBothSuccessesRecordsTheLiveOne", func(t *testing.T) {
		t.Parallel()
		// A long lease (no heartbeat within the test) and a long flush interval, so that
		// the successes of attempt 1 (returned first) and attempt 2 of a job share one
		// batch, in that order, whenever the same one of the completer's loops reads both
		// (about one job in two): with a token looked up by the id's place, the batch
		// compared attempt 1's token only, matched nothing, and attempt 2's success was
		// dropped. Eight jobs make that all but certain.
		const n = 8
		b, log, ids, release1, release2 := setup(t, n, time.Minute, 500*time.Millisecond, false, 5)
		close(release1)
		for _, id := range ids {
			eventually(t, 10*time.Second, func() bool { return log.has(t, id, 1, "end") }, "attempt 1 of job %d ended", id)
		}
		close(release2)
		eventually(t, 15*time.Second, func() bool {
			return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = ANY($1) AND status = 'succeeded'`, ids) == n
		}, "every job succeeded with attempt 2's batch")
		for _, id := range ids {
			j, err := b.client.Get(b.ctx, id)
			require.NoError(t, err)
			assert.Equal(t, 2, j.Attempts)
			assert.Equal(t, "w", j.LockedBy)
		}
	})

	t.Run("ABatchWithBothFailuresRecordsTheLiveOnesVerdict", func(t *testing.T) {
		t.Parallel()
		// Both attempts of each job fail at once, so that failure batches hold both (a
		// failure waits for others while one is being written). Keyed by id alone, the
		// batch's per-job values kept one of the two, and the row could be given attempt
		// 1's message, or its result read back as attempt 1's. Attempt 2 is the last: the
		// job ends dead with attempt 2's error.
		const n = 8
		b, log, ids, release1, release2 := setup(t, n, time.Minute, 50*time.Millisecond, true, 2)
		close(release1)
		close(release2)
		eventually(t, 15*time.Second, func() bool {
			return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = ANY($1) AND status = 'dead'`, ids) == n
		}, "every job dead after attempt 2's failure")
		for _, id := range ids {
			j, err := b.client.Get(b.ctx, id)
			require.NoError(t, err)
			assert.Equal(t, 2, j.Attempts)
			assert.Equal(t, "attempt 2 failed", j.LastError, "events: %v", log.events(t, id))
			require.NotEmpty(t, j.Errors)
			last := j.Errors[len(j.Errors)-1]
			assert.Equal(t, 2, last.Attempt)
			assert.Equal(t, "attempt 2 failed", last.Error)
		}
	})
}
