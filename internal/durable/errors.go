// This file holds the errors of durable execution, the kinds of steps, and the checks of
// step and signal names.

package durable

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/skiplock/skiplock/internal/enqueue"
)

// The errors users test for; the root package re-exports them.
var (
	// ErrSuspended is wrapped by the error Sleep and AwaitSignal return when they ended
	// the attempt: the job is queued again until its wake-up (or a signal), its attempt
	// given back. The handler returns it; the worker records nothing more for the attempt
	// whatever the handler returns.
	ErrSuspended = errors.New("skiplock: the job is suspended until its wake-up: return this error from the handler")
	// ErrSignalTimeout is returned by AwaitSignal when no signal came before its timeout.
	// It is recorded: a later run of the handler gets it again at the same step.
	ErrSignalTimeout = errors.New("skiplock: no signal came before the wait's timeout")
	// ErrStepOrderChanged is returned when a handler's step does not match the step
	// recorded at its place: its code renamed, reordered or removed recorded steps.
	ErrStepOrderChanged = errors.New("skiplock: the handler's steps do not match the job's recorded steps")
	// ErrStepNotFound is returned by Fork when the job has no recorded step of that name.
	ErrStepNotFound = errors.New("skiplock: the job has no recorded step of that name")
	// ErrInvalidName is returned for a step or signal name that is empty, longer than
	// MaxName bytes, or not valid UTF-8 text.
	ErrInvalidName = errors.New("skiplock: invalid step or signal name")
	// ErrNestedStep is returned by a durable call made while the function of a Step or
	// StepTx of the same attempt runs: a recorded step's function does not run again, so
	// a call inside it would not be made on replay, and the places of the calls after it
	// would shift. The call does nothing and takes no place.
	ErrNestedStep = errors.New("skiplock: a durable call inside a step's function cannot be replayed")
)

// MaxName is the longest step or signal name, in bytes.
const MaxName = 255

// Kind is what a recorded step is.
type Kind string

// The kinds of steps.
const (
	KindStep   Kind = "step"   // Step or StepTx: a function's result
	KindSleep  Kind = "sleep"  // Sleep: a wake-up time
	KindSignal Kind = "signal" // AwaitSignal: a signal's payload, or its timeout
)

// sleepName is the name Sleep's steps are recorded with.
const sleepName = "sleep"

// CheckName returns an error wrapping ErrInvalidName when name cannot name a step or a
// signal.
func CheckName(what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: the %s name is empty: give it a name of 1-%d bytes", ErrInvalidName, what, MaxName)
	case len(name) > MaxName:
		return fmt.Errorf("%w: the %s name %q is %d bytes: use 1-%d", ErrInvalidName, what, enqueue.Truncate(name, 32), len(name), MaxName)
	case !utf8.ValidString(name) || strings.ContainsRune(name, 0):
		return fmt.Errorf("%w: the %s name %q is not valid UTF-8 text", ErrInvalidName, what, name)
	}
	return nil
}

// orderError says which step was recorded at seq and which the handler called there.
func orderError(seq int, rec recorded, kind Kind, name string) error {
	return fmt.Errorf("%w: step %d was recorded as %s %q, the handler now calls %s %q there: "+
		"recorded steps may not be renamed, reordered or removed (new steps go after them, docs/durable.md \"Versioning\"); "+
		"run the code that recorded them until the job ends, or Fork the job from the step that changed",
		ErrStepOrderChanged, seq, rec.kind, rec.name, kind, name)
}
