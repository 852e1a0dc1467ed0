// This file holds the periodic runner: it records the declared schedules in the periodic
// table and enqueues each due occurrence exactly once, with no leader: whichever worker
// locks a due row enqueues its job and moves the row on in one transaction.

package periodic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/enqueue"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/lifecycle"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// Timing of the periodic runner.
const (
	// tick is the longest the runner sleeps between looks for due occurrences.
	tick = time.Second
	// declareEvery is how often a worker re-declares its schedules.
	declareEvery = 15 * time.Second
	// staleAfter: a schedule no running worker has declared for this long is marked
	// inactive (four missed declarations).
	staleAfter = time.Minute
	// batch is the most due schedules one transaction handles.
	batch = 10
	// statementTimeout bounds one round of the runner's statements (claim.ClaimTimeout's
	// bound).
	statementTimeout = 30 * time.Second
)

// declaredSQL locks the stored rows of the schedules about to be declared, in name
// order (the order declareSQL then takes them in, so concurrent declarations do not
// deadlock), and reads their schedules: a declaration that replaces a different one is
// logged once it commits.
const declaredSQL = `SELECT name, schedule FROM {s}.periodic WHERE name = ANY ($1) ORDER BY name FOR UPDATE`

// declareSQL records the declared schedules, or refreshes them. An unchanged schedule
// keeps its next_run_at (the durable state: a restart neither loses nor repeats an
// occurrence). A new one starts from its next occurrence after now ($6). A changed one
// starts from the earlier of that and the stored next_run_at if it is still to come: a
// declaration never puts off an occurrence already planned. During a rolling deploy
// that changes a schedule, the old and new workers re-declare the name in turn; when
// each reset next_run_at, a declaration of the slower schedule pushed the faster one's
// next occurrence out until the next re-declaration, and occurrences were lost (see
// docs/periodic.md). An occurrence already due is not kept: after the schedule changed
// while none ran, it starts over from now, as before. Rows come sorted by name, so
// concurrent declarations lock them in one order.
const declareSQL = `INSERT INTO {s}.periodic AS p (name, kind, queue, schedule, misfire, next_run_at, active, declared_at, updated_at)
SELECT n, k, q, sc, m, nr, true, now(), now()
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[]) AS t(n, k, q, sc, m, nr)
ON CONFLICT (name) DO UPDATE SET
	kind = EXCLUDED.kind, queue = EXCLUDED.queue, misfire = EXCLUDED.misfire,
	next_run_at = CASE
		WHEN p.schedule = EXCLUDED.schedule THEN p.next_run_at
		WHEN p.next_run_at > now() AND p.next_run_at < EXCLUDED.next_run_at THEN p.next_run_at
		ELSE EXCLUDED.next_run_at END,
	schedule = EXCLUDED.schedule, active = true, declared_at = now(),
	updated_at = CASE WHEN p.schedule = EXCLUDED.schedule AND p.active THEN p.updated_at ELSE now() END`

// retireSQL marks inactive the schedules no running worker declared for $1 seconds:
// removed from the code, or only declared by workers that are all gone.
const retireSQL = `UPDATE {s}.periodic SET active = false, updated_at = now()
WHERE active AND declared_at < now() - make_interval(secs => $1)`

// dueSQL locks this worker's due schedules. SKIP LOCKED: a schedule another worker is
// enqueueing is its business. Under READ COMMITTED, a row another worker moved on since
// this statement's snapshot is re-checked on its latest version and dropped, so an
// occurrence is never handled twice.
const dueSQL = `SELECT name, next_run_at, now() FROM {s}.periodic
WHERE name = ANY ($1) AND active AND NOT disabled AND next_run_at <= now()
ORDER BY next_run_at
LIMIT $2
FOR UPDATE SKIP LOCKED`

// advanceSQL moves a locked schedule on, in the transaction that enqueued its jobs.
const advanceSQL = `UPDATE {s}.periodic
SET next_run_at = $2, last_run_at = coalesce($3, last_run_at), last_job_id = coalesce($4, last_job_id), updated_at = now()
WHERE name = $1`

// nextSQL is how long until this worker's next occurrence is due.
const nextSQL = `SELECT coalesce(extract(epoch FROM min(next_run_at) - now()), 3600)::float8
FROM {s}.periodic WHERE name = ANY ($1) AND active AND NOT disabled`

// runnerSQL holds the runner's statements, rendered for the client's schema.
type runnerSQL struct {
	declared, declare, retire, due, advance, next string
}

// Runner enqueues the occurrences of one worker's periodic jobs. It is a
// lifecycle.Service.
type Runner struct {
	db      pgutil.DB
	ins     *enqueue.Inserter
	entries map[string]*Entry
	names   []string // sorted
	logger  *slog.Logger
	sql     runnerSQL
	// BeforeCommit, when set (by tests), runs between the enqueues and the commit.
	BeforeCommit func()
	loop         *lifecycle.Loop
	// failing holds the schedules whose occurrence could not be enqueued (an insert
	// middleware refused it, or its insert failed), with when to try them again:
	// until then the runner leaves them out, so that they do not hold back the schedules
	// due with them. Only the run loop's goroutine uses it.
	failing map[string]time.Time
}

// NewRunner returns the runner of entries (from Validate), which enqueues through ins:
// the client's enqueue hooks see each occurrence.
func NewRunner(db pgutil.DB, ins *enqueue.Inserter, entries map[string]*Entry, logger *slog.Logger) *Runner {
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	slices.Sort(names)
	return &Runner{db: db, ins: ins, entries: entries, names: names, logger: logger, sql: runnerSQL{
		declared: db.Render(declaredSQL), declare: db.Render(declareSQL), retire: db.Render(retireSQL), due: db.Render(dueSQL),
		advance: db.Render(advanceSQL), next: db.Render(nextSQL),
	}}
}

// declare records this worker's schedules and retires those nobody declares any more.
func (p *Runner) declare(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	var now time.Time
	if err := p.db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return p.db.WrapErr("declare periodic jobs", err)
	}
	n := len(p.names)
	kinds, queues, descs, misfires, next := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]time.Time, n)
	for i, name := range p.names {
		e := p.entries[name]
		kinds[i], queues[i], descs[i], misfires[i] = e.kind, e.queue, e.desc, e.misfire
		next[i] = nextAfter(e.Schedule, now)
	}
	replaced, err := p.upsert(ctx, kinds, queues, descs, misfires, next)
	if err != nil {
		return p.db.WrapErr("declare periodic jobs", err)
	}
	for _, r := range replaced {
		p.logger.Warn("skiplock: periodic declaration replaced a different schedule of the same name; "+
			"workers that declare it differently (a rolling deploy) take turns replacing it",
			"name", r.name, "old", r.old, "new", r.new)
	}
	tag, err := p.db.Pool.Exec(ctx, p.sql.retire, staleAfter.Seconds())
	if err != nil {
		return p.db.WrapErr("retire periodic jobs", err)
	}
	if tag.RowsAffected() > 0 {
		p.logger.Info("skiplock: marked periodic schedules no running worker declares inactive", "count", tag.RowsAffected())
	}
	return nil
}

// replacement is a stored schedule a declaration replaced with a different one.
type replacement struct{ name, old, new string }

// upsert runs declareSQL in a transaction that first locks and reads the stored rows
// (declaredSQL), and returns the schedules it replaced with different ones.
func (p *Runner) upsert(ctx context.Context, kinds, queues, descs, misfires []string, next []time.Time) ([]replacement, error) {
	tx, err := p.db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	rows, err := tx.Query(ctx, p.sql.declared, p.names)
	if err != nil {
		return nil, err
	}
	stored := map[string]string{}
	var name, schedule string
	if _, err := pgx.ForEachRow(rows, []any{&name, &schedule}, func() error {
		stored[name] = schedule
		return nil
	}); err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, p.sql.declare, p.names, kinds, queues, descs, misfires, next); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	var out []replacement
	for i, n := range p.names {
		if old, ok := stored[n]; ok && old != descs[i] {
			out = append(out, replacement{name: n, old: old, new: descs[i]})
		}
	}
	return out, nil
}

// run enqueues due occurrences until ctx ends, looking at least every tick, and
// re-declares the schedules every declareEvery.
func (p *Runner) run(ctx context.Context) {
	lastDeclare := time.Now()
	for {
		wait := tick
		if time.Since(lastDeclare) >= declareEvery {
			if err := p.declare(ctx); err != nil && ctx.Err() == nil {
				p.logger.Warn("skiplock: declaring periodic jobs failed; retrying", "err", err)
			} else {
				lastDeclare = time.Now()
			}
		}
		more, err := p.tick(ctx, p.live())
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
			p.logger.Warn("skiplock: enqueueing periodic jobs failed; retrying", "err", err)
		case more:
			wait = 0 // a full batch: there may be more due
		default:
			var secs float64
			cctx, cancel := context.WithTimeout(ctx, statementTimeout)
			err := p.db.Pool.QueryRow(cctx, p.sql.next, p.live()).Scan(&secs)
			cancel()
			if err == nil {
				wait = min(tick, max(time.Duration(secs*float64(time.Second)), 0))
			}
		}
		if wait > 0 {
			pgutil.Sleep(ctx, wait)
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// due is a locked due schedule: its name, its first due occurrence, the database's now.
type due struct {
	name      string
	next, now time.Time
}

// live returns the names of this worker's schedules less those failing until later.
func (p *Runner) live() []string {
	if len(p.failing) == 0 {
		return p.names
	}
	now := time.Now()
	out := make([]string, 0, len(p.names))
	for _, n := range p.names {
		if until, ok := p.failing[n]; ok {
			if now.Before(until) {
				continue
			}
			delete(p.failing, n)
		}
		out = append(out, n)
	}
	return out
}

// tick enqueues the due occurrences of up to batch of the schedules names in one
// transaction and reports whether there may be more due: the batch was full, or a
// schedule failed. A schedule whose occurrence cannot be enqueued rolls the transaction
// back; it is logged and left out until the next tick, and the others go on at once
// without it (they used to be rolled back with it at every tick, for as long as it failed).
func (p *Runner) tick(ctx context.Context, names []string) (more bool, err error) {
	if len(names) == 0 {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	tx, err := p.db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return false, p.db.WrapErr("periodic", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	rows, err := tx.Query(ctx, p.sql.due, names, batch)
	if err != nil {
		return false, p.db.WrapErr("periodic", err)
	}
	var dues []due
	var d due
	if _, err := pgx.ForEachRow(rows, []any{&d.name, &d.next, &d.now}, func() error {
		dues = append(dues, d)
		return nil
	}); err != nil {
		return false, p.db.WrapErr("periodic", err)
	}
	if len(dues) == 0 {
		return false, nil
	}
	for _, d := range dues {
		if err := p.advance(ctx, tx, d); err != nil {
			var refused *enqueueError
			if !errors.As(err, &refused) || ctx.Err() != nil {
				return false, err
			}
			if p.failing == nil {
				p.failing = map[string]time.Time{}
			}
			p.failing[d.name] = time.Now().Add(tick)
			p.logger.Warn("skiplock: enqueueing a periodic job failed; retrying it at the next tick, the others go on",
				"name", d.name, "err", refused.err)
			return true, nil
		}
	}
	if p.BeforeCommit != nil {
		p.BeforeCommit()
	}
	if err := tx.Commit(ctx); err != nil {
		return false, p.db.WrapErr("periodic", err)
	}
	return len(dues) == batch, nil
}

// advance enqueues the occurrences of the locked schedule d that its misfire policy
// keeps, and moves it on to its next occurrence, inside tx.
func (p *Runner) advance(ctx context.Context, tx pgx.Tx, d due) error {
	e := p.entries[d.name]
	occ, next := occurrences(e, d.next, d.now)
	var lastRun *time.Time
	var lastID *int64
	for _, at := range occ {
		id, err := p.enqueue(ctx, tx, e, at)
		if err != nil {
			return &enqueueError{err}
		}
		lastRun = &at
		if id != 0 {
			lastID = &id
		}
	}
	if _, err := tx.Exec(ctx, p.sql.advance, d.name, next, lastRun, lastID); err != nil {
		return p.db.WrapErr("periodic", err)
	}
	if skipped := len(occ) == 0; skipped {
		p.logger.Info("skiplock: periodic job skipped missed occurrences", "name", d.name, "next", next)
	}
	return nil
}

// enqueueError is advance's failure to enqueue an occurrence of its schedule: that
// schedule's own, which tick keeps from holding back the others.
type enqueueError struct{ err error }

func (e *enqueueError) Error() string { return e.err.Error() }
func (e *enqueueError) Unwrap() error { return e.err }

// finishedStatuses are the states besides queued and running, for occurrence keys.
var finishedStatuses = []string{string(jobtype.StatusSucceeded), string(jobtype.StatusFailed), string(jobtype.StatusDead), string(jobtype.StatusCancelled)}

// enqueue inserts the job of occurrence at of e inside tx and returns its id (0 when the
// occurrence was enqueued before). A panic of the client's insert middleware or enqueue
// hooks is the occurrence's error: this goroutine has no caller to hand it to.
func (p *Runner) enqueue(ctx context.Context, tx pgx.Tx, e *Entry, at time.Time) (id int64, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("skiplock: periodic job %q: panic in an insert middleware or enqueue hook: %v", e.Name, r)
		}
	}()
	j, err := e.Prepare(at)
	if err != nil {
		return 0, fmt.Errorf("skiplock: periodic job %q: %w", e.Name, err)
	}
	if j.UniqueKey == nil {
		k := "periodic:" + e.Name + ":" + at.UTC().Format(time.RFC3339Nano)
		j.UniqueKey, j.UniqueStates = &k, finishedStatuses
	}
	j.KeyIsCallers = false                // a duplicate occurrence is not an error here
	done, err := p.ins.Enqueuing(ctx, &j) // enqueue hooks see occurrences too
	if err != nil {
		return 0, fmt.Errorf("skiplock: periodic job %q: %w", e.Name, err)
	}
	row, err := p.ins.InsertOne(ctx, tx, &j, true, true)
	done(row, err)
	if err != nil {
		if errors.Is(err, enqueue.ErrDuplicateJob) {
			return 0, nil
		}
		return 0, err
	}
	return row.ID, nil
}

// Start records the schedules before anything runs — a worker that cannot record them
// does not start (declaring again is harmless: it is what the worker does every
// declareEvery) — then enqueues their occurrences until Run's ctx ends: a worker shutting
// down enqueues nothing more, and a transaction cut off by it rolls back whole, so that
// another worker enqueues that occurrence.
func (p *Runner) Start(ctx context.Context) error {
	if err := pgutil.RetryAtStart(ctx, p.declare); err != nil {
		return err
	}
	p.loop = lifecycle.NewLoop(p.run, lifecycle.UntilCancel)
	return p.loop.Start(ctx)
}

// Stop waits for the enqueueing to end.
func (p *Runner) Stop() { p.loop.Stop() }
