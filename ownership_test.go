//go:build ownership

package skiplock_test

// Tests of ownership by liveness (issue 30): while a worker is alive and reaches the
// database, a job whose handler has not returned is never given to another worker — not
// during shutdown, not after its timeout — and a handler that returns after its timeout
// is a failed attempt. They use the public API and an audit table written by the
// handlers only, so they hold whatever shape the engine takes.
//
// They fail on the code before the ownership work (see docs/ownership.md, which lists
// how each failed), so they are behind the build tag "ownership" until it lands:
//
//	go test -race -count=1 -tags ownership -run TestOwnership .

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// Point 1: Run must not return, and the job's lease must keep being renewed, while a
// handler that ignores cancellation still runs. On the code before the ownership work,
// Run returned after ShutdownTimeout and min(ShutdownTimeout, 5s), the lease ended, and
// worker b ran the same job while a's handler still ran.
func TestOwnership_ShutdownNeverHandsARunningJobToAnotherWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	log := newAttemptLog(t, b)
	stuck, started := make(chan struct{}), make(chan int64, 1)
	a, startB := ownershipPair(t, b, log, skiplock.WorkerConfig{ShutdownTimeout: 300 * time.Millisecond,
		VisibilityTimeout: time.Second, SweepInterval: -1, JobTimeout: -1, Completion: skiplock.CompletionKeep}, stuck, started)
	job, err := b.client.Enqueue(b.ctx, deafArgs{}, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var returned atomic.Int64
	go func() { err := a.Run(ctx); returned.Store(time.Now().UnixNano()); done <- err }()
	t.Cleanup(func() {
		select {
		case <-stuck:
		default:
			close(stuck)
		}
		cancel()
		<-done
	})
	<-started
	startB()
	cancel()
	// Five leases of a's and fifty sweeps of b's.
	noTwinFor(t, b, log, job.ID, 5*time.Second)
	assert.Zero(t, returned.Load(), "Run returned while a handler still ran")
	close(stuck)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the last handler returned")
	}
	var ended time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT at FROM {s}.attempt_log WHERE job_id = $1 AND worker = 'a' AND event = 'end'`),
		job.ID).Scan(&ended))
	assert.False(t, time.Unix(0, returned.Load()).Before(ended.Add(-50*time.Millisecond)),
		"Run returned before the handler did")
	// The job goes on: whatever a's late return recorded, no attempt ran twice.
	assert.Zero(t, b.count(t, `SELECT count(*) FROM (SELECT attempt FROM {s}.attempt_log
		WHERE job_id = $1 AND event = 'start' GROUP BY attempt HAVING count(*) > 1) d`, job.ID), "an attempt ran twice: %v", log.events(t, job.ID))
}
