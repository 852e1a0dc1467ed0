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
