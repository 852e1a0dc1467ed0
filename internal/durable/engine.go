// This file holds the worker's side of durable execution: the Engine each attempt's
// state carries, and the attempt's run, which numbers the handler's durable calls and
// matches each to the step recorded at its place.

package durable

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// Engine is a worker's durable-execution engine: the database and the worker's id that
// fence every step record on the attempt. One per worker; safe for concurrent use.
type Engine struct {
	db       pgutil.DB
	workerID string
	sql      engineSQL
}

// NewEngine returns the engine of the worker workerID on db.
func NewEngine(db pgutil.DB, workerID string) *Engine {
	return &Engine{db: db, workerID: workerID, sql: renderEngineSQL(db)}
}

// recorded is one row of job_steps as the run knows it.
type recorded struct {
	name     string
	kind     Kind
	result   json.RawMessage
	errMsg   string     // "timeout" for a signal wait that timed out
	wakeAt   *time.Time // a sleep's end, a signal wait's timeout
	finished bool
}

// run is one attempt's durable state: the job's recorded steps, read at its first durable
// call, and the place of its next call. The calls of one handler are numbered in the
// order they are made: a handler makes them one at a time, from one goroutine.
type run struct {
	e        *Engine
	row      *jobtype.JobRow
	maxBytes int

	mu        sync.Mutex
	loaded    bool
	steps     []recorded // by seq
	next      int        // the seq of the next call
	suspended bool       // a wait ended the attempt: later calls return ErrSuspended
	// inFn names the Step or StepTx whose function runs ("" when none): a durable call
	// meanwhile is nested (ErrNestedStep).
	inFn string
}

// runOf returns the durable run of the attempt whose handler's context is ctx.
func runOf(ctx context.Context) (*run, error) {
	st := jobtype.StateOf(ctx)
	if st == nil || st.Row == nil {
		return nil, jobtype.ErrNotInJob
	}
	if jobtype.InBatchCall(ctx) {
		return nil, fmt.Errorf("%w: in a HandleBatch handler, give durable steps each job's own context (job.Context()), not the call's", jobtype.ErrNotInJob)
	}
	e, ok := st.Durable.(*Engine)
	if !ok || e == nil {
		return nil, jobtype.ErrNotInJob
	}
	return st.RunOf(func() any { return &run{e: e, row: st.Row, maxBytes: st.MaxBytes} }).(*run), nil
}

// enter takes the place of the handler's next durable call, a kind step named name: its
// seq and, when the job recorded a step there, a copy of it. A recorded step of another
// name or kind is ErrStepOrderChanged. A step that fails leaves no record and gives its
// place back (release), so the next call takes it. A call after CompleteTx is refused
// (afterCompleteTx).
func (r *run) enter(ctx context.Context, kind Kind, name string) (int, *recorded, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.suspended {
		return 0, nil, fmt.Errorf("%w: a wait already ended this attempt (job %d)", ErrSuspended, r.row.ID)
	}
	if r.inFn != "" {
		return 0, nil, fmt.Errorf("%w: the %s was called inside the function of step %q (job %d): "+
			"a recorded step's function does not run again, so the call would not be made on replay; "+
			"make it a step of its own, before or after %q", ErrNestedStep, callWhat(kind, name), r.inFn, r.row.ID, r.inFn)
	}
	if jobtype.CompletedInTx(r.row) {
		return 0, nil, afterCompleteTx(r.row, kind, name)
	}
	if !r.loaded {
		steps, err := r.e.load(ctx, r.row.ID)
		if err != nil {
			return 0, nil, err
		}
		r.steps, r.loaded = steps, true
	}
	seq := r.next
	if seq < len(r.steps) {
		rec := r.steps[seq]
		if rec.name != name || rec.kind != kind {
			return 0, nil, orderError(seq, rec, kind, name)
		}
		r.next++
		return seq, &rec, nil
	}
	r.next++
	return seq, nil, nil
}

// release gives back the place seq took by enter: its step failed and left no record.
func (r *run) release(seq int) {
	r.mu.Lock()
	if r.next == seq+1 {
		r.next = seq
	}
	r.mu.Unlock()
}

// releaseOnPanic gives back the place seq when its step's function panics, and lets the
// panic go on: a handler that recovers and calls its next durable call gets that place,
// as after a step that returned an error, rather than leaving a hole in the job's places
// that would shift every later record by one at the next attempt. Deferred by Step and
// StepTx.
func (r *run) releaseOnPanic(seq int) {
	if p := recover(); p != nil {
		r.release(seq)
		panic(p)
	}
}

// runFn runs f, the function of the step name, marking the run inside it until f
// returns or panics: a durable call meanwhile is refused (enter). A function that called
// CompleteTx is an error (completedInFn), and its step is not recorded.
func runFn[T any](r *run, name string, f func() (T, error)) (T, error) {
	r.mu.Lock()
	r.inFn = name
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.inFn = ""
		r.mu.Unlock()
	}()
	v, err := f()
	if err == nil && jobtype.CompletedInTx(r.row) {
		var zero T
		return zero, completedInFn(r.row, name)
	}
	return v, err
}

// completedInFn is the error of a step whose function called CompleteTx (enter refuses
// every durable call after it, so it was called inside). Its record would lock the job's
// row, which CompleteTx's transaction holds until it ends: a Step's record would wait for
// it until the job's timeout, and a StepTx's, in that same transaction, would find the
// job no longer running. The step is not recorded; StepTx's transaction, which holds the
// success, rolls back.
func completedInFn(row *jobtype.JobRow, name string) error {
	return fmt.Errorf("skiplock: job %d, attempt %d: CompleteTx was called inside the function of step %q: "+
		"the step cannot be recorded once the job's success is written; "+
		"call CompleteTx after the step, in the handler's own transaction", row.ID, row.Attempts, name)
}

// store keeps rec as the step at seq, once it was written.
func (r *run) store(seq int, rec recorded) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.steps) <= seq {
		r.steps = append(r.steps, recorded{})
	}
	r.steps[seq] = rec
}

// suspend marks the attempt ended by a wait: the outcome recorder writes nothing for it.
func (r *run) suspend() {
	r.mu.Lock()
	r.suspended = true
	r.mu.Unlock()
	jobtype.MarkSuspended(r.row)
}

// loadSQL reads a job's recorded steps, in their order.
const loadSQL = `SELECT name, kind, result, coalesce(error, ''), wake_at, finished_at IS NOT NULL
FROM {s}.job_steps WHERE job_id = $1 ORDER BY seq`

// load reads job's recorded steps.
func (e *Engine) load(ctx context.Context, job int64) ([]recorded, error) {
	rows, err := e.db.Pool.Query(ctx, e.sql.load, job)
	if err != nil {
		return nil, e.db.WrapErr("reading the job's steps", err)
	}
	var steps []recorded
	var rec recorded
	_, err = pgx.ForEachRow(rows, []any{&rec.name, &rec.kind, &rec.result, &rec.errMsg, &rec.wakeAt, &rec.finished}, func() error {
		steps = append(steps, rec)
		rec = recorded{}
		return nil
	})
	if err != nil {
		return nil, e.db.WrapErr("reading the job's steps", err)
	}
	return steps, nil
}

// afterCompleteTx is the error of a durable call made after CompleteTx wrote the
// attempt's success in the handler's transaction. Until that transaction ends it holds
// the job's row, which every durable call locks (to fence its record on the attempt) in
// a transaction of its own: the call would wait for it until the job's timeout. Once it
// committed, the job has succeeded and nothing more is recorded for it.
func afterCompleteTx(row *jobtype.JobRow, kind Kind, name string) error {
	return fmt.Errorf("skiplock: job %d, attempt %d: the %s was called after CompleteTx: "+
		"CompleteTx's transaction holds the job's row until it ends, and the job has succeeded once it commits; "+
		"make every durable call before CompleteTx", row.ID, row.Attempts, callWhat(kind, name))
}

// callWhat names a durable call in errors: `step "charge"`, "sleep", `wait for signal
// "approve"`.
func callWhat(kind Kind, name string) string {
	switch kind {
	case KindSleep:
		return sleepName
	case KindSignal:
		return waitWhat(name)
	}
	return fmt.Sprintf("step %q", name)
}
