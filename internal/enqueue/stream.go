// This file holds the streamed bulk insert: an EnqueueMany of many jobs prepares each job
// (its payload marshalled and checked, its metadata encoded) while COPY sends the jobs
// before it, so that the client's work overlaps with the server's instead of preceding
// it. pgx pulls a COPY source's rows lazily, in a goroutine of its own, a buffer of rows
// at a time, and the server inserts one buffer while the next is built.

package enqueue

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// streamMin is the fewest jobs EnqueueManyFunc streams: below it, preparing every job
// before the COPY costs little, and the streamed path's fallbacks (streamRows) would
// cost more than they save.
const streamMin = 1000

// PrepareFunc prepares the i-th job of an [Inserter.EnqueueManyFunc] call: the root's
// validation of its args and options, with the payload marshalled. It must not write
// anything; it may be called from another goroutine than EnqueueManyFunc's caller, but
// never for two jobs at once, and in the order of i.
type PrepareFunc func(i int) (Job, error)

// EnqueueManyFunc is EnqueueMany of n jobs, the i-th prepared by prepare(i), with the
// result and the error that preparing them all and then calling EnqueueMany would give:
// the first job prepare refuses, else the first the enqueue hooks or the metadata check
// refuse ("job i of n: ..."), else the insert's. n of zero writes nothing.
//
// At least streamMin jobs with no enqueue hooks and no insert middleware are streamed:
// each job is prepared while COPY sends those before it. A refused job then ends the COPY
// and its transaction writes nothing; the jobs after it are still prepared, to find a
// refusal that takes precedence. A panic in prepare reaches the caller, after the
// transaction was rolled back.
func (e *Inserter) EnqueueManyFunc(ctx context.Context, n int, prepare PrepareFunc) (int, error) {
	if n >= streamMin && len(e.hooks) == 0 && len(e.mw) == 0 {
		return e.stream(ctx, newJobStream(ctx, e, n, prepare))
	}
	jobs := make([]Job, n)
	for i := range jobs {
		j, err := prepare(i)
		if err != nil {
			return 0, fmt.Errorf("job %d of %d: %w", i, n, err)
		}
		jobs[i] = j
	}
	if n == 0 {
		return 0, nil
	}
	return e.EnqueueMany(ctx, jobs)
}

// stream writes s's jobs with a COPY that pulls them from s as it goes (streamRows), in a
// transaction of its own; the jobs that COPY leaves (scheduled jobs, jobs after the first
// with metadata) are written after it as insertMany writes them. When a job turns out to
// need what the streamed COPY cannot do, the transaction is rolled back and the jobs,
// all prepared by then, are written by enqueueMany instead.
func (e *Inserter) stream(ctx context.Context, s *jobStream) (int, error) {
	if !s.step() {
		return 0, s.finish()
	}
	if s.jobs[0].needsUnnest() { // the unnest insert takes every job at once: nothing to stream
		if err := s.finish(); err != nil {
			return 0, err
		}
		return e.enqueueMany(ctx, s.jobs)
	}
	// READ COMMITTED whatever the server's default, as enqueueMany's transaction.
	tx, err := e.w.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		if ferr := s.finish(); ferr != nil { // a refused job is the answer, as before any I/O
			return 0, ferr
		}
		return 0, wrapErr(e.w.schema, "enqueue many", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	src := &streamRows{s: s, later: s.jobs[0].RunAt != nil, meta: s.jobs[0].hasMetadata()}
	copied, err := tx.CopyFrom(ctx, jobsTable(e.w.schema), src.columns(), src)
	if src.panicked {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		panic(src.panicValue)
	}
	if ferr := s.finish(); ferr != nil { // the refusal that ended the COPY, or one after
		return 0, ferr
	}
	if src.fallback {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return e.enqueueMany(ctx, s.jobs)
	}
	if err != nil {
		return 0, wrapErr(e.w.schema, "enqueue many", err)
	}
	// What the COPY left: the jobs from the one that ended it, the scheduled ones after
	// the due ones (a scheduled stream ends only at the last job or by falling back).
	var rest int64
	if src.left() {
		nowFrom, laterFrom := src.cut, 0
		if src.later {
			nowFrom, laterFrom = len(s.jobs), len(s.jobs)
		}
		if rest, err = e.w.copyJobs(ctx, tx, s.jobs, nowFrom, laterFrom); err != nil {
			return 0, err
		}
	}
	if err := e.w.notifyDue(ctx, tx, s.jobs); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, wrapErr(e.w.schema, "enqueue many", err)
	}
	return int(copied + rest), nil
}

// jobStream prepares the jobs of an EnqueueManyFunc call one at a time, in order, and
// keeps the refusal that call answers with.
type jobStream struct {
	ctx     context.Context
	e       *Inserter
	prepare PrepareFunc
	jobs    []Job
	next    int // jobs[:next] have been prepared (or refused)
	// refused is the first job prepare refused: the answer, whatever came before.
	refused error
	// late is the first job Enqueuing refused (its metadata), the answer unless prepare
	// refuses a job after it: EnqueueMany prepares every job before it runs Enqueuing.
	late error
}

func newJobStream(ctx context.Context, e *Inserter, n int, prepare PrepareFunc) *jobStream {
	return &jobStream{ctx: ctx, e: e, prepare: prepare, jobs: make([]Job, n)}
}

// step prepares the next job, then runs Enqueuing on it unless a job before it was
// refused there, and reports whether no job has been refused so far.
func (s *jobStream) step() bool {
	i := s.next
	j, err := s.prepare(i)
	s.next++
	if err != nil {
		s.refused = fmt.Errorf("job %d of %d: %w", i, len(s.jobs), err)
		return false
	}
	if s.late == nil {
		// No hooks run here (EnqueueManyFunc streams only without any), so Enqueuing's
		// function for the result does nothing.
		if _, err := s.e.Enqueuing(s.ctx, &j); err != nil {
			s.late = fmt.Errorf("job %d of %d: %w", i, len(s.jobs), err)
		}
	}
	s.jobs[i] = j
	return s.late == nil
}

// finish prepares the jobs not prepared yet, unless prepare refused one, and returns the
// refusal that answers the call, nil when every job is ready to write.
func (s *jobStream) finish() error {
	for s.refused == nil && s.next < len(s.jobs) {
		s.step()
	}
	if s.refused != nil {
		return s.refused
	}
	return s.late
}

// errStreamEnded is what a streamRows that stopped early gives pgx, which then ends the
// COPY with CopyFail (and the server aborts the transaction). The reason is in the
// streamRows and its jobStream; the server's error is not returned.
var errStreamEnded = errors.New("skiplock: the enqueue stream ended the COPY")

// streamRows is the streamed COPY's source: it prepares jobs as pgx asks for rows and
// gives the rows of the class of the first job (due now, or with later, scheduled). It
// ends the COPY with errStreamEnded on a refused job or a panic, and when a job needs
// what this COPY cannot do (fallback): the unnest insert, or, in a stream of scheduled
// jobs, a job due now (which EnqueueMany writes before them) or metadata the COPY leaves
// out. In a stream of due jobs, the first job with metadata while the COPY leaves it out
// ends the COPY without error at cut: copyJobs writes the rest. Scheduled jobs met in a
// stream of due ones are left for copyJobs too.
type streamRows struct {
	s     *jobStream
	i     int // the next job to look at
	later bool
	meta  bool
	row   []any
	// cut is the job at which a stream of due jobs ended: every due job before it has
	// been copied. len(jobs) when the stream went to the end.
	cut        int
	skipped    bool // a scheduled job was left in a stream of due jobs
	fallback   bool
	failed     bool // a job was refused, or prepare panicked
	panicked   bool
	panicValue any
}

func (r *streamRows) columns() []string {
	return (&copyRows{later: r.later, meta: r.meta}).columns()
}

func (r *streamRows) Next() (more bool) {
	defer func() {
		// This runs in pgx's goroutine: a panic would end the process. Stop the COPY and
		// let stream panic in the caller's goroutine.
		if p := recover(); p != nil {
			r.panicked, r.panicValue, r.failed, more = true, p, true, false
		}
	}()
	s := r.s
	for ; r.i < len(s.jobs); r.i++ {
		if r.i == s.next && !s.step() { // else prepared before the COPY began
			r.failed = true
			return false
		}
		i, j := r.i, &s.jobs[r.i]
		switch {
		case j.needsUnnest():
			r.fallback = true
			return false
		case (j.RunAt != nil) != r.later:
			if r.later { // a due job after scheduled ones: EnqueueMany writes it first
				r.fallback = true
				return false
			}
			r.skipped = true
			continue // scheduled, in a stream of due jobs: copyJobs writes it afterwards
		case j.hasMetadata() && !r.meta:
			if r.later {
				r.fallback = true
				return false
			}
			r.cut = i
			return false
		}
		r.row = j.copyRow(r.row[:0], r.later, r.meta)
		r.i++
		return true
	}
	r.cut = len(s.jobs)
	return false
}

// left reports whether the COPY left jobs for copyJobs to write.
func (r *streamRows) left() bool { return r.cut < len(r.s.jobs) || r.skipped }

func (r *streamRows) Values() ([]any, error) { return r.row, nil }

func (r *streamRows) Err() error {
	if r.failed || r.fallback {
		return errStreamEnded
	}
	return nil
}
