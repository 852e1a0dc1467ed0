// This file holds durable execution (docs/durable.md): steps inside a job whose results
// are recorded, so that a later attempt of the job (a retry, a crash, a take-back) does
// not run them again, durable sleeps and waits for signals that end the attempt and
// resume the job later, and the operator's calls on a job's records. The engine is
// internal/durable.

package skiplock

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/durable"
)

// The errors of durable execution.
var (
	// ErrSuspended is wrapped by the error [Sleep] and [AwaitSignal] return when they
	// ended the attempt: the job is queued again until the wait is over, the attempt not
	// counted. Return it from the handler (errors.Is(err, ErrSuspended)); the worker writes
	// nothing more for the attempt whatever the handler returns, and later durable calls
	// of the same run return it again.
	ErrSuspended = durable.ErrSuspended
	// ErrSignalTimeout is returned by [AwaitSignal] when no signal came before its
	// timeout. It is recorded: a later run of the handler gets it again at that step.
	ErrSignalTimeout = durable.ErrSignalTimeout
	// ErrStepOrderChanged is returned by [Step], [StepTx], [Sleep] and [AwaitSignal] when
	// the step recorded at the call's place has another name or kind: the handler's code
	// renamed, reordered or removed recorded steps (docs/durable.md, "Versioning"). The
	// message names the place, the recorded step and the called one.
	ErrStepOrderChanged = durable.ErrStepOrderChanged
	// ErrStepNotFound is returned by [Client.Fork] when the job recorded no step of that
	// name.
	ErrStepNotFound = durable.ErrStepNotFound
	// ErrInvalidStepName is returned for a step or signal name that is empty, longer than
	// [MaxStepName] bytes, or not valid UTF-8.
	ErrInvalidStepName = durable.ErrInvalidName
	// ErrNestedStep is returned by [Step], [StepTx], [Sleep] and [AwaitSignal] when called
	// while the function of a Step or StepTx of the same attempt runs (with that step's
	// context or the handler's). A recorded step's function does not run again, so a
	// durable call inside it could not be replayed: the call does nothing and records
	// nothing. Make it a step of its own, before or after.
	ErrNestedStep = durable.ErrNestedStep
)

// MaxStepName is the longest step or signal name, in bytes.
const MaxStepName = durable.MaxName

// StepKind is what a recorded step is: [StepKindStep], [StepKindSleep] or
// [StepKindSignal].
type StepKind = durable.Kind

// The kinds of steps.
const (
	StepKindStep   = durable.KindStep   // Step or StepTx: a function's result
	StepKindSleep  = durable.KindSleep  // Sleep: its wake-up time
	StepKindSignal = durable.KindSignal // AwaitSignal: the signal's payload, or its timeout
)

// StepInfo is one step a job recorded, as [Client.Steps] lists it: its place, name, kind,
// status ("done", "waiting", "timed_out"), result and size, the attempt that recorded it,
// and its times.
type StepInfo = durable.StepInfo

// SignalInfo is one signal sent to a job, as [Client.Signals] lists it; ConsumedSeq is the
// step of the wait that took it (nil while none has).
type SignalInfo = durable.SignalInfo

// Step runs fn as the durable step name of the job whose handler's context is ctx, and
// records its result (fn's value, marshalled to JSON) for the job, fenced on the attempt:
// a later attempt of the same job (a retry, a crash, a take-back by another worker) gets
// the recorded result back, unmarshalled into T, without running fn again.
//
// A handler's durable calls (Step, [StepTx], [Sleep], [AwaitSignal]) are matched to the
// job's records by their order: the k-th call must have the name and kind of the k-th
// recorded step, else [ErrStepOrderChanged]; calls after the recorded ones run and are
// recorded (docs/durable.md, "Versioning"). Make them one at a time, from the handler's
// goroutine.
//
// When fn returns an error, nothing is recorded and Step returns the error: the
// handler returns it, the attempt fails and is retried by the job's policy, and fn runs
// again in that retry (a [Permanent] error fails the job). fn may therefore run more than
// once until one run is recorded: it must be safe to repeat (idempotent), or write only
// to the database through [StepTx]. A recorded result is never run again, but a step
// whose fn finished and whose attempt lost its job before the record committed runs
// again elsewhere; its record then fails with [ErrAttemptLost].
//
// The result costs one INSERT (and, at the first step of an attempt, one read of the
// job's records); it must marshal to JSON of at most [Config].MaxPayloadBytes, and must
// unmarshal back into T (unexported fields are lost). Outside a handler Step returns
// [ErrNotInJob].
func Step[T any](ctx context.Context, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	return durable.Step(ctx, name, fn)
}

// StepTx is [Step] whose fn writes to the database in tx, a transaction StepTx begins on
// the worker's pool: fn's writes and the step's record commit together, fenced on the
// attempt as [CompleteTx] is, so they happen exactly once for the job. An attempt that no
// longer holds its job (taken back, cancelled) commits nothing and gets
// [ErrAttemptLost]. fn must not commit or roll back tx. When fn returns an error, tx rolls
// back and nothing is recorded. The job's row is locked from the record to the commit,
// an instant: the step's writes hold no lock on it while fn runs.
func StepTx[T any](ctx context.Context, name string, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (T, error) {
	return durable.StepTx(ctx, name, fn)
}

// Sleep suspends the job for d. At its first run it records the wake-up time (now + d,
// by the database's clock) and ends the attempt: the job is queued again to run at that
// time, the attempt not counted, no worker slot held meanwhile, and Sleep returns an
// error wrapping [ErrSuspended] that the handler returns. When the job runs again, its
// handler runs from the top (recorded steps return their results) and the same Sleep
// returns nil once the wake-up time has passed. The job resumes within the worker's
// PollInterval after it. d <= 0 returns nil at once, recorded. A job whose deadline
// ([EnqueueOptions].Deadline) comes before the wake-up is due at the deadline instead,
// and ends failed then, as no attempt may start after it; so does a parked [AwaitSignal]
// that no signal woke by then.
func Sleep(ctx context.Context, d time.Duration) error {
	return durable.Sleep(ctx, d)
}

// AwaitSignal returns the payload of a signal named name sent to the job with
// [Client.Signal]: the oldest one that no earlier wait took, including signals sent
// before the wait began (they are kept). When there is none, it records the wait and ends
// the attempt as [Sleep] does, returning an error wrapping [ErrSuspended]: the job is
// parked until the signal comes (it is then woken at once) or timeout passes (timeout <=
// 0: no timeout). When the job runs again, the same AwaitSignal returns the payload, or
// [ErrSignalTimeout] once the timeout passed without a signal. Both are recorded: later
// runs of the handler get the same at this step.
func AwaitSignal(ctx context.Context, name string, timeout time.Duration) (json.RawMessage, error) {
	return durable.AwaitSignal(ctx, name, timeout)
}

// store is the client's side of durable execution.
func (c *Client) store() durable.Store { return durable.Store{DB: c.db, MaxBytes: c.maxBytes} }

// Signal sends the signal name with payload (marshalled to JSON, at most
// [Config].MaxPayloadBytes) to the job jobID: it is kept until an [AwaitSignal] of that
// name takes it, and a job parked waiting for it is woken at once. A signal sent before
// the job waits for it is not lost. Signal locks the job's row for an instant: a wait
// that begins at the same time sees the signal or is woken by it. It returns
// [ErrJobNotFound] for an unknown job and [ErrJobFinished] for one that has finished.
func (c *Client) Signal(ctx context.Context, jobID int64, name string, payload any) error {
	return c.store().Signal(ctx, jobID, name, payload)
}

// Steps returns the steps job jobID recorded, in their order (an empty list when none),
// from the jobs table or the archive; [ErrJobNotFound] when there is no such job. A
// job's steps and signals are deleted with it (Delete, retention, the delete completion
// mode); an archived job's stay until its archive row is purged.
func (c *Client) Steps(ctx context.Context, jobID int64) ([]StepInfo, error) {
	return c.store().Steps(ctx, jobID)
}

// Signals returns the signals sent to job jobID, oldest first, consumed or not (an empty
// list when none); [ErrJobNotFound] when there is no such job.
func (c *Client) Signals(ctx context.Context, jobID int64) ([]SignalInfo, error) {
	return c.store().Signals(ctx, jobID)
}

// Fork enqueues a new job with the args, queue, kind, priority and attempt limit of job
// jobID (in the jobs table or the archive, in any state; from the jobs table also its
// timeout, partition key and concurrency keys), whose recorded steps before the first one named fromStep
// are copied: its handler gets their results back, and runs fromStep and what follows
// again. Use it to run a finished or failed job again from a step, after fixing what
// made it fail. The new job's metadata is the old one's without skiplock's own keys (a
// workflow task's fork is a job of its own) plus "skiplock_forked_from"; signals are not
// copied. It returns [ErrStepNotFound] when the job recorded no such step.
func (c *Client) Fork(ctx context.Context, jobID int64, fromStep string) (*JobRow, error) {
	return c.store().Fork(ctx, jobID, fromStep)
}
