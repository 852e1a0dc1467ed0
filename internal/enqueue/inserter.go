// Package enqueue is skiplock's enqueue engine: the validation of jobs before anything is
// written, the single insert (alone, coalesced with concurrent calls, or in the caller's
// transaction), unique inserts, the bulk insert (COPY), the database/sql adapter, and the
// writes of workflows and sequences. The root package's Client holds an [Inserter] and
// converts its public types to this package's; this package never imports the root.
//
// This file holds the Inserter: what a Client's enqueue calls run, with the enqueue hooks.
package enqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/settle"
)

// Config configures an [Inserter]. Every field is required unless its comment says
// otherwise.
type Config struct {
	Pool     *pgxpool.Pool
	Schema   string
	Notifier *notify.Notifier // the wake-ups' channel and Enqueue's throttle
	Mapper   settle.JobMapper // maps a sequence's released job to its task
	// Hooks see each enqueue. Nil means none.
	Hooks []jobtype.EnqueueHook
	// InsertMiddleware rewrite each job before the hooks see it. Nil means none.
	InsertMiddleware []jobtype.InsertMiddleware
	// MaxPayloadBytes bounds a payload after the middleware and the encryption; zero or
	// negative: no bound.
	MaxPayloadBytes int
	// CoalesceWindow is how long Enqueue may wait for concurrent calls to share its
	// statement; zero or negative turns coalescing off.
	CoalesceWindow time.Duration
}

// Inserter writes jobs: the enqueue engine of one Client. It is safe for concurrent use.
type Inserter struct {
	*Workflows    // WriteWorkflow (workflow.go)
	*Sequences    // InsertSequence (sequence.go)
	*Dependencies // Attach (dependson.go)

	w     *writer
	co    *coalescer // shares statements among concurrent enqueues; nil when off (coalesce.go)
	hooks []jobtype.EnqueueHook
	mw    []jobtype.InsertMiddleware // rewrite.go
	// maxBytes is the payload limit (the root's Config.MaxPayloadBytes), checked again
	// after the middleware and the encryption.
	maxBytes int
}

// New returns the Inserter cfg describes. It does no I/O.
func New(cfg Config) *Inserter {
	w := newWriter(cfg.Pool, cfg.Schema, cfg.Notifier)
	e := &Inserter{
		Workflows:    newWorkflows(cfg.Schema, cfg.Notifier.Channel),
		Sequences:    newSequences(cfg.Schema, cfg.Mapper),
		Dependencies: NewDependencies(cfg.Schema),
		w:            w,
		hooks:        slices.Clone(cfg.Hooks),
		mw:           slices.Clone(cfg.InsertMiddleware),
		maxBytes:     cfg.MaxPayloadBytes,
	}
	if cfg.CoalesceWindow > 0 {
		e.co = newCoalescer(w, cfg.CoalesceWindow)
	}
	return e
}

// Idle reports whether the coalescer has no batch collecting, waiting or being written
// (and so no goroutine running); true when coalescing is off.
func (e *Inserter) Idle() bool { return e.co == nil || e.co.batch.Idle() }

// Enqueue writes one prepared job outside any transaction of the caller, after the
// enqueue hooks: with concurrent calls when it can, else alone.
func (e *Inserter) Enqueue(ctx context.Context, j Job) (*jobtype.JobRow, error) {
	done, err := e.Enqueuing(ctx, &j)
	if err != nil {
		return nil, err
	}
	row, err := e.enqueueJob(ctx, j)
	done(row, err)
	return row, err
}

// enqueueJob writes one prepared job of Enqueue: with concurrent calls when it can, else
// alone.
func (e *Inserter) enqueueJob(ctx context.Context, j Job) (*jobtype.JobRow, error) {
	if e.co != nil && j.coalescable() {
		rows, err := e.co.coalesce(ctx, &enqueueRequest{jobs: []Job{j}})
		if err == nil {
			return rows[0], nil
		}
		if !errors.Is(err, errInsertAlone) {
			return nil, err
		}
		// The batch was refused as a whole: write this job alone.
	}
	return e.w.enqueueAlone(ctx, &j)
}

// EnqueueTx writes one prepared job inside the caller's transaction tx, after the enqueue
// hooks, with its wake-up in the same transaction.
func (e *Inserter) EnqueueTx(ctx context.Context, tx jobtype.DBTX, j Job) (*jobtype.JobRow, error) {
	done, err := e.Enqueuing(ctx, &j)
	if err != nil {
		return nil, err
	}
	row, err := e.w.insertOne(ctx, tx, &j, j.dueNow(), true)
	done(row, err)
	return row, err
}

// EnqueueTxUntold is EnqueueTx for a caller that writes more with the job (DependsOn's
// edges) and may yet roll it back: it runs the hooks' JobEnqueuing and the insert, and
// returns the function that tells the hooks the outcome (never nil once the hooks ran,
// whatever err), which the caller calls once it knows whether the job is there. An err
// of the hooks or of the middleware returns a nil told: nothing was attempted.
func (e *Inserter) EnqueueTxUntold(ctx context.Context, tx jobtype.DBTX, j Job) (row *jobtype.JobRow, told func(*jobtype.JobRow, error), err error) {
	done, err := e.Enqueuing(ctx, &j)
	if err != nil {
		return nil, nil, err
	}
	row, err = e.w.insertOne(ctx, tx, &j, j.dueNow(), true)
	return row, done, err
}

// InsertOne writes one prepared job, whose hooks have run, through db, with its wake-up
// when notify is set. callerTx says db is the caller's transaction, whose isolation level
// this cannot know: a unique insert then guards against a serialization failure.
func (e *Inserter) InsertOne(ctx context.Context, db jobtype.DBTX, j *Job, notify, callerTx bool) (*jobtype.JobRow, error) {
	return e.w.insertOne(ctx, db, j, notify, callerTx)
}

// EnqueueMany writes prepared jobs in one transaction of their own, after the enqueue
// hooks, and returns how many were inserted: with concurrent calls when it can, else
// with COPY (or one unnest insert).
func (e *Inserter) EnqueueMany(ctx context.Context, jobs []Job) (int, error) {
	finish, err := e.enqueuingMany(ctx, jobs)
	if err != nil {
		return 0, err
	}
	n, err := e.enqueueMany(ctx, jobs)
	finish(err)
	return n, err
}

// enqueueMany writes the prepared jobs of EnqueueMany: with concurrent calls when it can,
// else in a transaction of their own.
func (e *Inserter) enqueueMany(ctx context.Context, jobs []Job) (int, error) {
	if e.co != nil && len(jobs) <= coalesceManyMax && !slices.ContainsFunc(jobs, func(j Job) bool { return !j.coalescable() }) {
		rows, err := e.co.coalesce(ctx, &enqueueRequest{jobs: jobs, many: true})
		if err == nil {
			return len(rows), nil
		}
		if !errors.Is(err, errInsertAlone) {
			return 0, err
		}
		// The batch was refused as a whole: write these jobs alone.
	}
	// READ COMMITTED whatever the server's default: a unique conflict then never raises.
	tx, err := e.w.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return 0, wrapErr(e.w.schema, "enqueue many", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	n, err := e.w.insertMany(ctx, tx, jobs, false)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, wrapErr(e.w.schema, "enqueue many", err)
	}
	return n, nil
}

// EnqueueManyTx writes prepared jobs inside the caller's transaction tx, after the
// enqueue hooks, and returns how many were inserted.
func (e *Inserter) EnqueueManyTx(ctx context.Context, tx jobtype.DBTX, jobs []Job) (int, error) {
	finish, err := e.enqueuingMany(ctx, jobs)
	if err != nil {
		return 0, err
	}
	n, err := e.w.insertMany(ctx, tx, jobs, true)
	finish(err)
	return n, err
}

// Enqueuing runs the enqueue hooks for j, then encodes and checks its metadata.
// The returned function must be called once with the insert's result; on error it has
// been called already.
func (e *Inserter) Enqueuing(ctx context.Context, j *Job) (func(*jobtype.JobRow, error), error) {
	if err := rewrite(ctx, e.mw, e.maxBytes, j); err != nil {
		return nil, err
	}
	if err := j.Seal(e.maxBytes); err != nil {
		return nil, err
	}
	var dones []func(*jobtype.JobRow, error)
	if len(e.hooks) > 0 {
		if j.Meta == nil {
			j.Meta = map[string]string{}
		}
		ev := &jobtype.EnqueueEvent{Kind: j.Kind, Queue: j.Queue, Metadata: j.Meta}
		for _, h := range e.hooks {
			if d := h.JobEnqueuing(ctx, ev); d != nil {
				dones = append(dones, d)
			}
		}
		j.Meta = ev.Metadata
	}
	finish := func(row *jobtype.JobRow, err error) {
		for _, d := range dones {
			d(row, err)
		}
	}
	if err := j.encodeMetadata(); err != nil {
		finish(nil, err)
		return nil, err
	}
	return finish, nil
}

// enqueuingMany runs Enqueuing for every job of an EnqueueMany call. The returned function
// must be called once with the insert's result (there are no rows to give the hooks); on
// error it has been called already.
func (e *Inserter) enqueuingMany(ctx context.Context, jobs []Job) (func(error), error) {
	dones := make([]func(*jobtype.JobRow, error), 0, len(jobs))
	finish := func(err error) {
		for _, d := range dones {
			d(nil, err)
		}
	}
	for i := range jobs {
		done, err := e.Enqueuing(ctx, &jobs[i])
		if err != nil {
			err = fmt.Errorf("job %d of %d: %w", i, len(jobs), err)
			finish(err)
			return nil, err
		}
		dones = append(dones, done)
	}
	return finish, nil
}
