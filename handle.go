// This file holds the handler registry: Handle, which registers a typed handler for a
// kind (its args decoded from the payload), and the refusal of registrations once Run was
// called.

package skiplock

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/skiplock/skiplock/internal/execute"
	"github.com/skiplock/skiplock/internal/jobtype"
)

// Handle registers fn as the handler for jobs of kind T{}.Kind(). The payload is decoded
// into T; a payload that does not decode fails the job permanently (status failed).
// Register every handler before Run; registering a kind twice is an error.
func Handle[T JobArgs](w *Worker, fn func(ctx context.Context, job *Job[T]) error) error {
	if w == nil || fn == nil {
		return errors.New("skiplock: Handle: nil worker or handler")
	}
	var zero T
	kindOf := any(zero)
	if t := reflect.TypeFor[T](); t.Kind() == reflect.Pointer {
		kindOf = reflect.New(t.Elem()).Interface()
	}
	args, ok := kindOf.(JobArgs)
	if !ok {
		return fmt.Errorf("skiplock: Handle: %T does not implement JobArgs", kindOf)
	}
	kind := args.Kind()
	if kind == "" || len(kind) > MaxKindLength {
		return fmt.Errorf("%w: %q (%T)", ErrInvalidKind, truncate(kind, 40), zero)
	}
	isPointer := reflect.TypeFor[T]().Kind() == reflect.Pointer
	h := execute.Handler{Run: func(ctx context.Context, row *JobRow) error {
		job := &Job[T]{JobRow: row, ctx: ctx} // the args are decoded in place: one allocation
		into := any(&job.Args)
		if isPointer {
			// Decoded into the value it points to: a JSON null (the SQL enqueue function
			// takes any JSON value) then leaves that value zero, as it leaves a T that is
			// not a pointer, instead of setting job.Args to nil for the handler to
			// dereference.
			job.Args = reflect.New(reflect.TypeFor[T]().Elem()).Interface().(T)
			into = any(job.Args)
		}
		// Opened for the handler alone: row.Payload stays as stored, so the middleware,
		// error handlers and hooks, which are given row, never see sealed args opened.
		payload, err := w.client.keyring.Open(row.Kind, row.Payload)
		if err != nil {
			if errors.Is(err, ErrNoKey) {
				return err // another worker may hold the key: retried like any failure
			}
			// Altered, or sealed for another kind: no key and no retry will open it. The
			// job fails for good (status failed), its payload kept for an operator.
			return Permanent(fmt.Errorf("%w: not retried", err))
		}
		// As json.Unmarshal, through a reused decoder (internal/jobtype, args.go).
		if err := jobtype.DecodeArgs(payload, into); err != nil {
			return Permanent(fmt.Errorf("decoding payload of kind %q into %T: %w", row.Kind, job.Args, err))
		}
		return fn(ctx, job)
	}}
	if p, ok := kindOf.(retryPolicyArgs); ok {
		h.Policy = p.RetryPolicy()
	}
	if p, ok := kindOf.(execute.TimeoutArgs); ok {
		h.Timeout = p.Timeout()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started.Load() {
		return w.startedErr(fmt.Sprintf("Handle(%q)", kind))
	}
	if _, dup := w.handlers[kind]; dup {
		return fmt.Errorf("skiplock: Handle: kind %q already has a handler", kind)
	}
	w.handlers[kind] = h
	return nil
}

// startedErr is the error of a registration (op: Handle, Use, HandleErrors) on a worker
// whose Run was called: it is running, or it ran and returned, and a Worker runs once.
func (w *Worker) startedErr(op string) error {
	select {
	case <-w.runDone:
		return fmt.Errorf("skiplock: %s: the worker has already run (a Worker runs once): register on a new Worker before its Run", op)
	default:
		return fmt.Errorf("skiplock: %s: the worker is already running: register before Run", op)
	}
}

// The rest of this file holds CompleteTx, the exactly-once call: a handler marks its own attempt
// succeeded inside its own transaction, fenced on the attempt's token, so that its
// business writes and the job's success commit together or not at all.

// ErrAttemptLost is returned by [CompleteTx] when the attempt is no longer held by the
// worker that runs the handler: its worker's lease ended and the job was taken back (it
// may run elsewhere), the job was cancelled, or the attempt already completed.
var ErrAttemptLost = jobtype.ErrAttemptLost

// CompleteTx marks the attempt of job succeeded inside tx, the handler's own transaction
// (a pgx.Tx, or anything with the same methods), fenced on the attempt's token
// (job.Fence) as every write of the worker is: the job's success and the handler's
// business writes commit together or not at all. It writes what the job's completion
// mode says (archive, delete or keep: its kind's, its queue's or the worker's), as the
// worker's own success batch would, with the output set by [SetOutput] and the last
// [RecordProgress] (when ctx is the handler's, or derived from it), and settles a workflow
// task's dependents in tx.
//
// If the attempt is no longer this worker's (its worker's lease ended and the job was
// taken back, the job was cancelled, or the attempt already completed), CompleteTx
// returns [ErrAttemptLost] and tx is aborted: it can only roll back, so the business
// writes of an attempt that lost its job never commit, even if the caller ignores the
// error.
//
// The row stays locked by tx until it commits or rolls back: the job cannot be taken
// away meanwhile, and the worker's own writes about it wait or pass over it. Call
// CompleteTx last, just before Commit: a durable call after it ([Step], [StepTx], [Sleep],
// [AwaitSignal]) returns an error at once and runs nothing, and a Step or StepTx whose
// function called it returns an error and records nothing (StepTx's transaction rolls
// back). After a commit, the attempt has succeeded
// whatever the handler returns: the worker writes nothing more for it, and its hooks are
// told it succeeded, even when the handler then returns an error (when, say,
// [Worker.StopAndCancel] cuts off what it does after the commit; the worker asks the
// database, one statement, when a handler that called CompleteTx returns an error). If tx
// rolls back instead, the worker records what the handler returns, as usual.
//
// job must be the one the worker handed to the handler: CompleteTx returns an error for
// a job read any other way (Client.Get, List).
func CompleteTx[T JobArgs](ctx context.Context, tx DBTX, job *Job[T]) error {
	if job == nil || job.JobRow == nil {
		return errors.New("skiplock: CompleteTx: job is nil")
	}
	return completeRowTx(ctx, tx, job.JobRow)
}

// completeRowTx is CompleteTx for a JobRow.
func completeRowTx(ctx context.Context, tx DBTX, row *JobRow) error {
	if tx == nil {
		return errors.New("skiplock: CompleteTx: tx is nil")
	}
	ref := jobtype.AttemptOf(row)
	if ref == nil {
		return fmt.Errorf("skiplock: CompleteTx: job %d is not an attempt this process runs (pass the job the handler was given)", row.ID)
	}
	return ref.CompleteTx(ctx, tx, row)
}
