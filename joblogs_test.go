package skiplock_test

// This file holds the tests of per-job logs (skiplock.Logger, Client.Logs; issue 42):
// records kept per attempt with their attributes, bounded, none for a job that logs
// nothing, and gone with their job.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

type loggingArgs struct {
	Records int `json:"records"` // how many to log
}

func (loggingArgs) Kind() string                      { return "logging" }
func (loggingArgs) RetryPolicy() skiplock.RetryPolicy { return retryOnce{} }

// logsWorker runs a worker whose handler logs: a first attempt logs a warning and fails,
// a second logs Records records (with attributes and a group) and succeeds.
func logsWorker(t *testing.T, b *bundle) {
	t.Helper()
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 20 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[loggingArgs]) error {
		log := skiplock.Logger(ctx)
		if job.Attempts == 1 && job.Args.Records > 0 {
			log.Warn("first try", "err", errors.New("downstream down"))
			return errors.New("retry me")
		}
		l := log.With("order", 42).WithGroup("step")
		for i := range job.Args.Records {
			l.Info(fmt.Sprintf("record %d", i), "i", i, "took", time.Millisecond)
		}
		return nil
	}))
	runWorker(t, w)
}

// The records of each attempt are kept in order with their attributes, and Logs returns
// them oldest first; a job that logs nothing has none and writes no row.
func TestLogs_KeptPerAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logsWorker(t, b)
	row, err := b.client.Enqueue(b.ctx, loggingArgs{Records: 3}, nil)
	require.NoError(t, err)
	quiet, err := b.client.Enqueue(b.ctx, loggingArgs{}, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	for _, id := range []int64{row.ID, quiet.ID} {
		got, err := b.client.Wait(ctx, id)
		require.NoError(t, err)
		require.Equal(t, skiplock.StatusSucceeded, got.Status)
	}

	logs, err := b.client.Logs(b.ctx, row.ID)
	require.NoError(t, err)
	require.Len(t, logs, 4)
	assert.Equal(t, 1, logs[0].Attempt)
	assert.Equal(t, slog.LevelWarn, logs[0].Level)
	assert.Equal(t, "first try", logs[0].Message)
	assert.JSONEq(t, `{"err":"downstream down"}`, string(logs[0].Attrs))
	for i, r := range logs[1:] {
		assert.Equal(t, 2, r.Attempt)
		assert.Equal(t, i+1, r.Seq)
		assert.Equal(t, fmt.Sprintf("record %d", i), r.Message)
		assert.JSONEq(t, fmt.Sprintf(`{"order":42,"step":{"i":%d,"took":"1ms"}}`, i), string(r.Attrs))
		assert.Greater(t, r.Fence, logs[0].Fence, "a later attempt's token")
	}
	assert.Equal(t, 4, b.count(t, `SELECT count(*) FROM {s}.job_logs WHERE job_id = $1`, row.ID))
	got, err := b.client.Get(b.ctx, row.ID)
	require.NoError(t, err)
	assert.Equal(t, logs, got.Logs, "Get returns the records Logs reads")

	none, err := b.client.Logs(b.ctx, quiet.ID)
	require.NoError(t, err)
	assert.Empty(t, none)
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.job_logs WHERE job_id = $1`, quiet.ID), "nothing logged, nothing written")
}

// An attempt keeps at most MaxLogRecords records; one marker record says how many more
// were dropped.
func TestLogs_BoundedPerAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logsWorker(t, b)
	row, err := b.client.Enqueue(b.ctx, loggingArgs{Records: skiplock.MaxLogRecords + 500}, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	_, err = b.client.Wait(ctx, row.ID)
	require.NoError(t, err)
	n := b.count(t, `SELECT count(*) FROM {s}.job_logs WHERE job_id = $1 AND attempt = 2`, row.ID)
	assert.Equal(t, skiplock.MaxLogRecords+1, n, "the bound and the marker")
	var msg string
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT message FROM {s}.job_logs WHERE job_id = $1 AND attempt = 2 ORDER BY seq DESC LIMIT 1`),
		row.ID).Scan(&msg))
	assert.Contains(t, msg, "log records dropped: 500 more")
	assert.LessOrEqual(t, b.count(t, `SELECT sum(length(message) + coalesce(length(attrs::text), 0)) FROM {s}.job_logs
		WHERE job_id = $1 AND attempt = 2 AND seq <= $2`, row.ID, skiplock.MaxLogRecords), skiplock.MaxLogBytes+skiplock.MaxLogRecords*8)
}

type oversizedLogArgs struct{}

func (oversizedLogArgs) Kind() string { return "logging_oversized" }

// A record that does not fit the attempt's bytes ends what the attempt keeps: it and
// every record after it are dropped, however small, so the marker's "N more" are the N
// records logged after the last one kept.
func TestLogs_ARecordOverTheByteBoundEndsTheKeptRecords(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 20 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[oversizedLogArgs]) error {
		log := skiplock.Logger(ctx)
		log.Info("before")
		log.Info(strings.Repeat("x", skiplock.MaxLogBytes)) // alone over the bound
		log.Info("after 1")
		log.Info("after 2")
		return nil
	}))
	runWorker(t, w)
	row, err := b.client.Enqueue(b.ctx, oversizedLogArgs{}, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	_, err = b.client.Wait(ctx, row.ID)
	require.NoError(t, err)
	logs, err := b.client.Logs(b.ctx, row.ID)
	require.NoError(t, err)
	msgs := make([]string, len(logs))
	for i, r := range logs {
		msgs[i] = r.Message
	}
	require.Len(t, msgs, 2, "the record before the oversized one, and the marker: %q", msgs)
	assert.Equal(t, "before", msgs[0])
	assert.Contains(t, msgs[1], "log records dropped: 3 more")
	assert.Equal(t, slog.LevelWarn, logs[1].Level)
}

// Logs go with their job: Delete removes them at once; the sweeper removes those of jobs
// gone from both tables another way (here a DELETE does what a retention purge does).
func TestLogs_GoneWithTheirJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logsWorker(t, b)
	a, err := b.client.Enqueue(b.ctx, loggingArgs{Records: 1}, nil)
	require.NoError(t, err)
	c, err := b.client.Enqueue(b.ctx, loggingArgs{Records: 1}, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	for _, id := range []int64{a.ID, c.ID} {
		_, err := b.client.Wait(ctx, id)
		require.NoError(t, err)
	}
	require.Equal(t, 4, b.count(t, `SELECT count(*) FROM {s}.job_logs`))
	_, err = b.client.Delete(b.ctx, a.ID)
	require.NoError(t, err)
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.job_logs WHERE job_id = $1`, a.ID))

	_, err = b.pool.Exec(b.ctx, b.q(`DELETE FROM {s}.jobs_archive WHERE id = $1`), c.ID)
	require.NoError(t, err)
	s, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{Logger: testLogger()})
	require.NoError(t, err)
	_, err = s.Sweep(b.ctx)
	require.NoError(t, err)
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.job_logs`))
}

// Outside a job, Logger discards.
func TestLogger_OutsideAJobDiscards(t *testing.T) {
	t.Parallel()
	l := skiplock.Logger(context.Background())
	l.Info("nowhere", "k", 1)
	assert.False(t, l.Enabled(context.Background(), slog.LevelError))
	_ = json.Valid
}

// The sweeper removes the records of every job gone from both tables, however many went
// since its last pass: it went on while its batches were full. It stopped after 10
// batches a minute, so above 10 × BatchSize such jobs a minute (a logging kind under
// CompletionDelete at 170 jobs/s with the default batch) the records piled up.
func TestLogs_ThePurgeOfOrphanedRecordsIsNotCappedPerMinute(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// 25 jobs gone from both tables, with 2 records each; batches of 2 jobs.
	_, err := b.pool.Exec(b.ctx, b.q(`INSERT INTO {s}.job_logs (job_id, fence, seq, attempt, at, level, message)
		SELECT j, 1, r, 1, now(), 0, 'm' FROM generate_series(1, 25) j, generate_series(0, 1) r`))
	require.NoError(t, err)
	s, err := skiplock.NewSweeper(b.client, skiplock.SweeperConfig{BatchSize: 2, Logger: testLogger()})
	require.NoError(t, err)
	_, err = s.Sweep(b.ctx)
	require.NoError(t, err)
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.job_logs`), "records of jobs gone from both tables were left")
}
