package record

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/ownership"
)

// cancelledWith returns a context already cancelled with cause.
func cancelledWith(cause error) context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	return ctx
}

// pastDeadline returns a context whose deadline has passed, as a hook's deadline leaves
// the handler's context: its cause is context.DeadlineExceeded.
func pastDeadline(t *testing.T) context.Context {
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	t.Cleanup(cancel)
	return ctx
}

func TestOutcomeOf_NamesHowAFailedAttemptEnded(t *testing.T) {
	t.Parallel()
	plain := errors.New("downstream refused")
	live := context.Background()
	tests := []struct {
		name   string
		ctx    func(t *testing.T) context.Context
		status jobtype.JobStatus
		herr   error
		want   jobtype.Outcome
	}{
		{"a failure whose write failed is lost", nil, jobtype.StatusRunning, plain, jobtype.OutcomeLost},
		{"a snooze whose write failed is lost", nil, jobtype.StatusRunning, jobtype.Snooze(time.Minute), jobtype.OutcomeLost},
		{"a stale result (row succeeded elsewhere) is lost", nil, jobtype.StatusSucceeded, plain, jobtype.OutcomeLost},
		{"a snooze queued again is snoozed", nil, jobtype.StatusQueued, jobtype.Snooze(time.Minute), jobtype.OutcomeSnoozed},
		{"a wrapped snooze queued again is snoozed", nil, jobtype.StatusQueued, fmt.Errorf("later: %w", jobtype.Snooze(0)), jobtype.OutcomeSnoozed},
		{"a snooze past the job's timeout is still snoozed", func(*testing.T) context.Context { return cancelledWith(jobtype.ErrJobTimeout) },
			jobtype.StatusQueued, jobtype.Snooze(time.Second), jobtype.OutcomeSnoozed},
		{"a snooze of a stale attempt is lost", nil, jobtype.StatusSucceeded, jobtype.Snooze(time.Minute), jobtype.OutcomeLost},
		{"a permanent error is failed", nil, jobtype.StatusFailed, jobtype.Permanent(plain), jobtype.OutcomeFailed},
		{"a cancel by the handler is cancelled", nil, jobtype.StatusCancelled, jobtype.CancelJob(plain), jobtype.OutcomeCancelled},
		{"a failure past the job's timeout is timed out", func(*testing.T) context.Context { return cancelledWith(jobtype.ErrJobTimeout) },
			jobtype.StatusQueued, plain, jobtype.OutcomeTimedOut},
		{"a last attempt past the job's timeout is timed out, not dead", func(*testing.T) context.Context { return cancelledWith(jobtype.ErrJobTimeout) },
			jobtype.StatusDead, plain, jobtype.OutcomeTimedOut},
		{"a wrapped job timeout cause is timed out", func(*testing.T) context.Context { return cancelledWith(fmt.Errorf("limit: %w", jobtype.ErrJobTimeout)) },
			jobtype.StatusQueued, plain, jobtype.OutcomeTimedOut},
		{"a hook's deadline the handler failed on is timed out", pastDeadline, jobtype.StatusQueued, fmt.Errorf("query: %w", context.DeadlineExceeded), jobtype.OutcomeTimedOut},
		{"a hook's deadline the handler failed otherwise on is a retry", pastDeadline, jobtype.StatusQueued, plain, jobtype.OutcomeRetry},
		{"the handler's own deadline, its context live, is a retry", nil, jobtype.StatusQueued, context.DeadlineExceeded, jobtype.OutcomeRetry},
		{"a failure with no attempts left is dead", nil, jobtype.StatusDead, plain, jobtype.OutcomeDead},
		{"a failure cancelled by shutdown with no attempts left is dead", func(*testing.T) context.Context { return cancelledWith(ErrShutdown) },
			jobtype.StatusDead, plain, jobtype.OutcomeDead},
		{"a failure queued again is a retry", nil, jobtype.StatusQueued, plain, jobtype.OutcomeRetry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := live
			if tt.ctx != nil {
				ctx = tt.ctx(t)
			}
			if got := outcomeOf(ctx, tt.status, tt.herr); got != tt.want {
				t.Fatalf("outcomeOf(status %s, %v) = %s, want %s", tt.status, tt.herr, got, tt.want)
			}
		})
	}
}

// recorderBundle is an OutcomeRecorder with its collaborators, none of which touches a
// database: the completer is never started (its channel is read by the test), the
// failure batches are written by a fake, and the release records what it is given.
type recorderBundle struct {
	rec       *OutcomeRecorder
	held      *ownership.HeldJobs
	completer *Completer
	failures  *FailureRecorder
	failed    chan []*failedAttempt // what the failure batches would write
	// states are the held attempts' states (hold), which the runner passes with each
	// result (AttemptResult.State).
	states map[jobtype.AttemptKey]*jobtype.State

	mu       sync.Mutex
	released [][]jobtype.AttemptKey // each call of the release
	finished []jobtype.JobResult    // what the hook was told
}

func (b *recorderBundle) releases() [][]jobtype.AttemptKey {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.released)
}

// hook records what JobFinished is told.
type hook struct{ b *recorderBundle }

func (h hook) JobStarted(ctx context.Context, _ *jobtype.JobRow) context.Context { return ctx }
func (h hook) JobFinished(_ context.Context, _ *jobtype.JobRow, res jobtype.JobResult) {
	h.b.mu.Lock()
	h.b.finished = append(h.b.finished, res)
	h.b.mu.Unlock()
}

func setupRecorder(t *testing.T) *recorderBundle {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	b := &recorderBundle{held: ownership.NewHeldJobs(), failed: make(chan []*failedAttempt, 16), states: map[jobtype.AttemptKey]*jobtype.State{}}
	b.completer = NewCompleter(nil, "skiplock", func(string, string) jobtype.Completion { return jobtype.CompletionArchive },
		"w1", 10, time.Hour, nil, BatchListeners{}, nil, logger)
	b.failures = NewFailureRecorder(nil, "skiplock", "w1", 10, time.Hour, nil, BatchListeners{}, nil, nil, logger)
	b.failures.batch.Write = func(batch []*failedAttempt) { b.failed <- slices.Clone(batch) }
	release := func(keys []jobtype.AttemptKey) {
		b.mu.Lock()
		b.released = append(b.released, slices.Clone(keys))
		b.mu.Unlock()
	}
	b.rec = NewOutcomeRecorder(b.held, b.completer, b.failures, release, &SlotJobs{}, []jobtype.Hook{hook{b}}, logger)
	return b
}

// hold registers attempt k as running, with its state, as the claim does, and returns
// its row.
func (b *recorderBundle) hold(k jobtype.AttemptKey, attempts, maxAttempts int) *jobtype.JobRow {
	row := &jobtype.JobRow{ID: k.ID, Queue: "default", Kind: "email", Status: jobtype.StatusRunning, Attempts: attempts, MaxAttempts: maxAttempts}
	b.states[k] = new(jobtype.State)
	b.held.Add(k, jobtype.CancelFunc(func(error) {}), time.Now(), b.states[k], row)
	return row
}

// sentTo says where a result went: "completer", "failures" or "" (nowhere).
func (b *recorderBundle) sentTo(t *testing.T, k jobtype.AttemptKey) string {
	t.Helper()
	b.failures.Flush() // a failure posted is in b.failed once Flush returns
	select {
	case s := <-b.completer.Ch:
		if s.key != k {
			t.Fatalf("the completer got %v, want %v", s.key, k)
		}
		return "completer"
	case batch := <-b.failed:
		if len(batch) != 1 || batch[0].key != k {
			t.Fatalf("the failure batch holds %d attempts, want only %v", len(batch), k)
		}
		return "failures"
	default:
		return ""
	}
}

func TestOutcomeRecorder_RoutesEachResult(t *testing.T) {
	t.Parallel()
	plain := errors.New("downstream refused")
	snooze := jobtype.Snooze(time.Minute)
	tests := []struct {
		name        string
		cause       error // the handler context's cancel cause; nil: not cancelled
		err         error // what the handler returned
		attempts    int   // of 3
		before      func(b *recorderBundle)
		wantOutcome jobtype.Outcome
		wantStatus  jobtype.JobStatus
		wantErr     error // errors.Is the result's error; nil: no error
		wantTo      string
		wantRunning int // held attempts whose handler still runs, after Record
	}{
		{name: "a success goes to the completer", wantOutcome: jobtype.OutcomeSucceeded, wantStatus: jobtype.StatusSucceeded, wantTo: "completer"},
		{name: "a success after a shutdown cancel goes to the completer", cause: ErrShutdown,
			wantOutcome: jobtype.OutcomeSucceeded, wantStatus: jobtype.StatusSucceeded, wantTo: "completer"},
		{name: "a success the stopped completer refuses is lost", before: func(b *recorderBundle) { b.completer.stop() },
			wantOutcome: jobtype.OutcomeLost, wantStatus: jobtype.StatusRunning},
		{name: "a nil return past the timeout is a timed out failure", cause: jobtype.ErrJobTimeout, attempts: 1,
			wantOutcome: jobtype.OutcomeTimedOut, wantStatus: jobtype.StatusQueued, wantErr: jobtype.ErrJobTimeout, wantTo: "failures"},
		{name: "a failure past the timeout names the timeout", cause: jobtype.ErrJobTimeout, err: plain, attempts: 1,
			wantOutcome: jobtype.OutcomeTimedOut, wantStatus: jobtype.StatusQueued, wantErr: jobtype.ErrJobTimeout, wantTo: "failures"},
		{name: "a failure with attempts left is retried", err: plain, attempts: 1,
			wantOutcome: jobtype.OutcomeRetry, wantStatus: jobtype.StatusQueued, wantErr: plain, wantTo: "failures"},
		{name: "a failure of the last attempt is dead", err: plain, attempts: 3,
			wantOutcome: jobtype.OutcomeDead, wantStatus: jobtype.StatusDead, wantErr: plain, wantTo: "failures"},
		{name: "a snooze is snoozed, even of the last attempt", err: snooze, attempts: 3,
			wantOutcome: jobtype.OutcomeSnoozed, wantStatus: jobtype.StatusQueued, wantErr: snooze, wantTo: "failures"},
		{name: "a permanent failure is failed", err: jobtype.Permanent(plain), attempts: 1,
			wantOutcome: jobtype.OutcomeFailed, wantStatus: jobtype.StatusFailed, wantErr: plain, wantTo: "failures"},
		{name: "a failure the stopped failure recorder refuses is lost", err: plain, attempts: 1, before: func(b *recorderBundle) { b.failures.Stop() },
			wantOutcome: jobtype.OutcomeLost, wantStatus: jobtype.StatusRunning, wantErr: plain},
		{name: "the result of a job no longer held is dropped", cause: ownership.ErrJobLost, err: context.Canceled,
			wantOutcome: jobtype.OutcomeLost, wantStatus: jobtype.StatusRunning, wantErr: context.Canceled},
		{name: "a success of a job no longer held is dropped", cause: ownership.ErrJobLost,
			wantOutcome: jobtype.OutcomeLost, wantStatus: jobtype.StatusRunning},
		{name: "a failure cut off by shutdown is released, not recorded", cause: ErrShutdown, err: context.Canceled,
			wantOutcome: jobtype.OutcomeReleased, wantStatus: jobtype.StatusQueued, wantErr: context.Canceled, wantRunning: 1},
		{name: "a success after the recorder stopped is dropped", before: func(b *recorderBundle) { b.rec.Stop() },
			wantOutcome: jobtype.OutcomeLost, wantStatus: jobtype.StatusRunning},
		{name: "a failure after the recorder stopped is dropped", err: plain, before: func(b *recorderBundle) { b.rec.Stop() },
			wantOutcome: jobtype.OutcomeLost, wantStatus: jobtype.StatusRunning, wantErr: plain},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupRecorder(t)
			k := jobtype.AttemptKey{ID: 7, Fence: 2}
			row := b.hold(k, tt.attempts, 3)
			if tt.before != nil {
				tt.before(b)
			}
			ctx := context.Background()
			if tt.cause != nil {
				ctx = cancelledWith(tt.cause)
			}
			res := b.rec.Record(k, AttemptResult{Ctx: ctx, State: b.states[k], Row: row, Err: tt.err, Timeout: time.Second, Policy: jobtype.BackoffPolicy{}})
			if res.Outcome != tt.wantOutcome || res.Status != tt.wantStatus {
				t.Errorf("outcome %s, status %s; want %s, %s", res.Outcome, res.Status, tt.wantOutcome, tt.wantStatus)
			}
			if !errors.Is(res.Err, tt.wantErr) {
				t.Errorf("error %v, want one that is %v", res.Err, tt.wantErr)
			}
			if to := b.sentTo(t, k); to != tt.wantTo {
				t.Errorf("the result went to %q, want %q", to, tt.wantTo)
			}
			if n := b.held.Count(); n != tt.wantRunning {
				t.Errorf("%d held attempts left running, want %d", n, tt.wantRunning)
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			if len(b.finished) != 1 || b.finished[0].Outcome != res.Outcome {
				t.Errorf("the hook was told %v, want once %s", b.finished, res.Outcome)
			}
		})
	}
}

// A job cut off by shutdown stays held (its lease renewed) until ReleaseCutOff puts it
// back with the others; one whose handler returns after that is put back on its own.
func TestOutcomeRecorder_ReleasesCutOffJobsOnceTheirHandlersReturned(t *testing.T) {
	t.Parallel()
	b := setupRecorder(t)
	shutdown := cancelledWith(ErrShutdown)
	k1, k2, late := jobtype.AttemptKey{ID: 1, Fence: 1}, jobtype.AttemptKey{ID: 2, Fence: 1}, jobtype.AttemptKey{ID: 3, Fence: 1}
	rows := map[jobtype.AttemptKey]*jobtype.JobRow{k1: b.hold(k1, 1, 3), k2: b.hold(k2, 1, 3), late: b.hold(late, 1, 3)}

	for _, k := range []jobtype.AttemptKey{k1, k2} {
		b.rec.Record(k, AttemptResult{Ctx: shutdown, State: b.states[k], Row: rows[k], Err: context.Canceled})
	}
	if r := b.releases(); len(r) != 0 {
		t.Fatalf("released %v before ReleaseCutOff", r)
	}
	if n := b.held.Count(); n != 3 {
		t.Fatalf("%d attempts held as running, want 3: cut-off jobs stay held until released", n)
	}

	b.rec.ReleaseCutOff()
	if r, want := b.releases(), [][]jobtype.AttemptKey{{k1, k2}}; !slices.EqualFunc(r, want, slices.Equal) {
		t.Fatalf("released %v, want %v", r, want)
	}
	if n := b.held.Count(); n != 1 {
		t.Fatalf("%d attempts held as running after the release, want 1 (the one still running)", n)
	}

	res := b.rec.Record(late, AttemptResult{Ctx: shutdown, State: b.states[late], Row: rows[late], Err: context.Canceled})
	if res.Outcome != jobtype.OutcomeReleased {
		t.Fatalf("a late cut-off job's outcome is %s, want %s", res.Outcome, jobtype.OutcomeReleased)
	}
	if r, want := b.releases(), [][]jobtype.AttemptKey{{k1, k2}, {late}}; !slices.EqualFunc(r, want, slices.Equal) {
		t.Fatalf("released %v, want %v", r, want)
	}
	if n := b.held.Count(); n != 0 {
		t.Fatalf("%d attempts held after every cut-off job was released, want 0", n)
	}
}

// The successes of jobs holding a concurrency slot wait for one another; the last such
// job to return sends them together.
func TestOutcomeRecorder_LastSlotJobSendsTheHeldSuccesses(t *testing.T) {
	t.Parallel()
	b := setupRecorder(t)
	written := make(chan []Success, 4)
	b.completer.urgent.Write = func(batch []Success) { written <- slices.Clone(batch) }
	k1, k2 := jobtype.AttemptKey{ID: 1, Fence: 1}, jobtype.AttemptKey{ID: 2, Fence: 1}
	r1, r2 := b.hold(k1, 1, 3), b.hold(k2, 1, 3)
	b.rec.slots.Take()
	b.rec.slots.Take()

	b.rec.Record(k1, AttemptResult{Ctx: context.Background(), State: b.states[k1], Row: r1, Slot: true})
	select {
	case batch := <-written:
		t.Fatalf("a batch of %d was sent while a slot job still ran", len(batch))
	default:
	}
	b.rec.Record(k2, AttemptResult{Ctx: context.Background(), State: b.states[k2], Row: r2, Slot: true})
	select {
	case batch := <-written:
		if len(batch) != 2 || batch[0].key != k1 || batch[1].key != k2 {
			t.Fatalf("the batch sent holds %v, want both successes", batch)
		}
	case <-time.After(10 * time.Second): // the batch's window is an hour
		t.Fatal("the last slot job's success sent nothing")
	}
}
