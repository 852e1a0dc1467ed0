package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

type rowArgs struct {
	N int `json:"n"`
}

func (rowArgs) Kind() string { return "row" }

// A batch handler gets batches of at most MaxJobs, writes each batch with one statement,
// and each job ends with its own result.
func TestHandleBatch_BatchesOfUpToNWithEachJobsResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.rows (n int PRIMARY KEY, batch_size int)`))
	require.NoError(t, err)
	const n, maxJobs = 500, 50
	params := make([]skiplock.EnqueueParams, n)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: rowArgs{N: i}}
	}
	_, err = b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)

	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger(),
		Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 100}}})
	var mu sync.Mutex
	var sizes []int
	require.NoError(t, skiplock.HandleBatch(w, skiplock.BatchHandlerConfig{MaxJobs: maxJobs, MaxWait: 20 * time.Millisecond},
		func(ctx context.Context, jobs []*skiplock.Job[rowArgs]) []error {
			mu.Lock()
			sizes = append(sizes, len(jobs))
			mu.Unlock()
			errs := make([]error, len(jobs))
			var ns []int32
			for i, j := range jobs {
				if j.Args.N%7 == 0 {
					errs[i] = skiplock.Permanent(errors.New("multiple of 7"))
					continue
				}
				ns = append(ns, int32(j.Args.N))
			}
			// One statement for the whole batch.
			if _, err := b.pool.Exec(ctx, b.q(`INSERT INTO {s}.rows SELECT unnest($1::int[]), $2`), ns, len(jobs)); err != nil {
				return []error{err} // wrong length: every job fails and is retried
			}
			return errs
		}))
	runWorker(t, w)
	failed := (n + 6) / 7
	eventually(t, 60*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'failed'`) == failed &&
			b.count(t, `SELECT count(*) FROM {s}.jobs_archive`) == n-failed
	}, "the jobs did not all finish")
	assert.Equal(t, n-failed, b.count(t, `SELECT count(*) FROM {s}.rows`))
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs j JOIN {s}.rows r ON r.n = (j.payload->>'n')::int`),
		"a failed job's row was written")
	mu.Lock()
	defer mu.Unlock()
	total, most := 0, 0
	for _, s := range sizes {
		total += s
		most = max(most, s)
	}
	assert.Equal(t, n, total, "every job went through one call")
	assert.LessOrEqual(t, most, maxJobs)
	assert.Greater(t, most, 1, "jobs were batched")
	t.Logf("%d calls, largest %d", len(sizes), most)
}

// fn returning the wrong number of results, or panicking, fails each job of the call.
func TestHandleBatch_WrongResultCountOrPanicFailsEveryJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	params := make([]skiplock.EnqueueParams, 10)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: rowArgs{N: i}, Options: &skiplock.EnqueueOptions{MaxAttempts: 1}}
	}
	_, err := b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.HandleBatch(w, skiplock.BatchHandlerConfig{},
		func(ctx context.Context, jobs []*skiplock.Job[rowArgs]) []error {
			if jobs[0].Args.N%2 == 0 {
				panic("boom")
			}
			return nil
		}))
	runWorker(t, w)
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'dead'`) == 10
	}, "the jobs did not all die")
	assert.Equal(t, 10, b.count(t, `SELECT count(*) FROM {s}.jobs
		WHERE last_error LIKE '%batch handler panicked: boom%' OR last_error LIKE '%batch handler returned 0 results%'`))
}

type partArgs struct {
	Part string `json:"part"`
}

func (partArgs) Kind() string { return "batch_part" }

// Each job of a HandleBatch call has its own context (Job.Context), which ends when that
// job is cancelled or passes its timeout, while the call's context goes on for the
// others. Two jobs share one call: "stays" works until the test lets it finish, "ends"
// has its context ended mid-call (by its own 1 s timeout, or by Client.Cancel). The
// call sees "ends" end within seconds and stops working for it; "stays" finishes, with
// its own output, and succeeds; "ends" is recorded as its end says (a timed-out failure,
// or left cancelled). Before, the call had one context, the first job's: a timeout or
// cancel of the other job went unseen until the call returned, and one of the first job
// cut the other's work.
func TestHandleBatch_EachJobObservesItsOwnCancelAndTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		opts   *skiplock.EnqueueOptions          // of "ends"
		end    func(b *bundle, ends int64) error // ends "ends"'s context mid-call; nil: its timeout does
		status skiplock.JobStatus                // "ends" afterwards
		cause  string                            // in the cause its part of the call saw
	}{
		{name: "timeout", opts: &skiplock.EnqueueOptions{Timeout: time.Second, MaxAttempts: 1},
			status: skiplock.StatusDead, cause: "job timeout"},
		{name: "cancel", opts: &skiplock.EnqueueOptions{MaxAttempts: 1},
			end: func(b *bundle, ends int64) error {
				_, err := b.client.Cancel(b.ctx, ends)
				return err
			},
			status: skiplock.StatusCancelled, cause: "no longer held"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			log := newAttemptLog(t, b)
			w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, JobTimeout: -1,
				Logger: testLogger(), Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 2}}})
			release := make(chan struct{})
			var releaseOnce sync.Once
			t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
			require.NoError(t, skiplock.HandleBatch(w, skiplock.BatchHandlerConfig{MaxJobs: 2, MaxWait: 5 * time.Second},
				func(ctx context.Context, jobs []*skiplock.Job[partArgs]) []error {
					errs := make([]error, len(jobs))
					var wg sync.WaitGroup
					for i, j := range jobs {
						wg.Go(func() { errs[i] = batchPart(log, j, release) })
					}
					wg.Wait()
					// The call's own context outlived "ends": "stays" was still alive.
					if err := log.note(0, 0, "call", fmt.Sprintf("returned, ctx err %v", ctx.Err())); err != nil {
						return []error{err}
					}
					return errs
				}))
			rows, err := b.client.EnqueueMany(b.ctx, []skiplock.EnqueueParams{
				{Args: partArgs{Part: "stays"}, Options: &skiplock.EnqueueOptions{MaxAttempts: 1}},
				{Args: partArgs{Part: "ends"}, Options: tc.opts},
			})
			require.NoError(t, err)
			require.Equal(t, 2, rows)
			var stays, ends int64
			require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT
				(SELECT id FROM {s}.jobs WHERE payload->>'part' = 'stays'),
				(SELECT id FROM {s}.jobs WHERE payload->>'part' = 'ends')`)).Scan(&stays, &ends))
			runWorker(t, w)
			eventually(t, 30*time.Second, func() bool {
				return log.has(t, stays, 1, "working") && log.has(t, ends, 1, "working")
			}, "both jobs are in the call")
			if tc.end != nil {
				require.NoError(t, tc.end(b, ends))
			}
			// Its part of the call stops within seconds, while the call goes on.
			eventually(t, 10*time.Second, func() bool { return log.has(t, ends, 1, "stopped%") },
				"the call did not see job %d's context end: %v", ends, log.events(t, ends))
			assert.True(t, log.has(t, ends, 1, "stopped: %"+tc.cause+"%"), "its cause: %v", log.events(t, ends))
			assert.False(t, log.has(t, stays, 1, "stopped%"), "the other job's part was cut: %v", log.events(t, stays))
			releaseOnce.Do(func() { close(release) })

			waitStatus(t, b, stays, skiplock.StatusSucceeded, 30*time.Second, "job %d succeeded", stays)
			waitStatus(t, b, ends, tc.status, 30*time.Second, "job %d is %s", ends, tc.status)
			got, err := b.client.Get(b.ctx, stays)
			require.NoError(t, err)
			assert.JSONEq(t, `{"part":"stays"}`, string(got.Output), "the output it set with its own context")
			assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.attempt_log
				WHERE worker = 'call' AND event = 'returned, ctx err <nil>'`), "the call's own context ended early")
		})
	}
}

// batchPart is a batch call's work for one job: it notes that it works, then waits for
// release or for the job's own context to end, and notes which came first.
func batchPart(log attemptLog, j *skiplock.Job[partArgs], release <-chan struct{}) error {
	if err := log.note(j.ID, j.Attempts, j.Args.Part, "working"); err != nil {
		return err
	}
	select {
	case <-release:
		if err := skiplock.SetOutput(j.Context(), j.Args); err != nil {
			return err
		}
		return log.note(j.ID, j.Attempts, j.Args.Part, "done")
	case <-j.Context().Done():
		cause := context.Cause(j.Context())
		return errors.Join(cause, log.note(j.ID, j.Attempts, j.Args.Part, "stopped: "+cause.Error()))
	}
}

// A batch handler that ends its goroutine with runtime.Goexit (t.FailNow, require.* in a
// handler) fails every job of the call, as a Handle handler's Goexit fails its job:
// the jobs that joined the leader's call do not wait for it for ever, and the worker
// stops.
func TestHandleBatch_GoexitFailsEveryJobOfTheCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	params := make([]skiplock.EnqueueParams, 4)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: rowArgs{N: i}, Options: &skiplock.EnqueueOptions{MaxAttempts: 1}}
	}
	_, err := b.client.EnqueueMany(b.ctx, params)
	require.NoError(t, err)
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	var mu sync.Mutex
	var sizes []int
	require.NoError(t, skiplock.HandleBatch(w, skiplock.BatchHandlerConfig{MaxJobs: 4, MaxWait: 2 * time.Second},
		func(ctx context.Context, jobs []*skiplock.Job[rowArgs]) []error {
			mu.Lock()
			sizes = append(sizes, len(jobs))
			mu.Unlock()
			runtime.Goexit()
			return nil
		}))
	stop := runWorker(t, w)
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'dead'`) == 4
	}, "every job of the call failed")
	assert.Equal(t, 4, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE last_error LIKE '%exited without returning%'`))
	stop()
	mu.Lock()
	defer mu.Unlock()
	assert.Contains(t, sizes, 4, "the four jobs shared a call")
}

// A panic in fn is recorded as a handler's is: each job's last_error and error history
// hold the panic's value and the stack where it happened, and error handlers get a
// *PanicError.
func TestHandleBatch_APanicIsRecordedWithItsStack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var rows []*skiplock.JobRow
	for i := range 3 {
		r, err := b.client.Enqueue(b.ctx, rowArgs{N: i}, &skiplock.EnqueueOptions{MaxAttempts: 1})
		require.NoError(t, err)
		rows = append(rows, r)
	}
	rec := &errRecorder{errs: map[int64][]string{}, panics: map[int64]*skiplock.PanicError{}}
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.HandleErrors(w, rec))
	require.NoError(t, skiplock.HandleBatch(w, skiplock.BatchHandlerConfig{},
		func(ctx context.Context, jobs []*skiplock.Job[rowArgs]) []error {
			batchPanicHere()
			return nil
		}))
	stop := runWorker(t, w)
	eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'dead'`) == len(rows)
	}, "the jobs did not all die")
	stop()
	for _, r := range rows {
		j, err := b.client.Get(b.ctx, r.ID)
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(j.LastError, "skiplock: batch handler panicked: boom\n\n"), j.LastError)
		assert.Contains(t, j.LastError, "batchPanicHere", "the stack names where it panicked")
		require.Len(t, j.Errors, 1)
		assert.Contains(t, j.Errors[0].Error, "batchPanicHere", "the history keeps the stack")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, r := range rows {
		pe := rec.panics[r.ID]
		require.NotNil(t, pe, "error handlers see a *PanicError")
		assert.Equal(t, "boom", pe.Value)
		assert.Contains(t, string(pe.Stack), "batchPanicHere")
	}
}

func batchPanicHere() { panic("boom") }
