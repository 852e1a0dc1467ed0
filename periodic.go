// This file holds periodic jobs: the Schedule interface and the Every interval, the
// PeriodicJob a worker declares, and the periodic runner: it records the declared
// schedules in the periodic table and enqueues each due occurrence exactly once, with
// no leader: whichever worker locks a due row enqueues its job and moves the row on in
// one transaction.

package skiplock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/claim"
	"github.com/skiplock/skiplock/internal/lifecycle"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// Schedule says when a periodic job runs: Next returns the first occurrence after t.
// [Every] gives a fixed interval; the package github.com/skiplock/skiplock/cron parses
// cron expressions. A Schedule that is also a fmt.Stringer is described by its String in
// the periodic table; a changed description makes the schedule start over from now.
type Schedule interface {
	Next(t time.Time) time.Time
}

// Every returns a Schedule with an occurrence every d, aligned to the Unix epoch (Every
// of a minute runs on the minute), so every worker computes the same occurrences. d must
// be positive; [NewWorker] refuses a PeriodicJob with a non-positive interval.
func Every(d time.Duration) Schedule { return every{d} }

type every struct{ d time.Duration }

func (e every) Next(t time.Time) time.Time {
	if e.d <= 0 {
		return time.Time{}
	}
	return t.Truncate(e.d).Add(e.d)
}

func (e every) String() string { return "every " + e.d.String() }

// Misfire says what a periodic job does with occurrences missed while no worker ran it
// (an occurrence is missed when it is more than [PeriodicJob].MisfireAfter late).
// Occurrences less late than that are on time and always enqueued.
type Misfire int

// The misfire policies.
const (
	// MisfireRunOnce enqueues one job for all the missed occurrences (the latest), unless
	// an occurrence on time is enqueued anyway. The default.
	MisfireRunOnce Misfire = iota
	// MisfireSkip drops missed occurrences: the job next runs at its next occurrence.
	MisfireSkip
	// MisfireBackfill enqueues the latest [PeriodicJob].BackfillLimit missed occurrences,
	// each with RunAt set to its scheduled time.
	MisfireBackfill
)

func (m Misfire) describe(limit int) string {
	switch m {
	case MisfireSkip:
		return "skip"
	case MisfireBackfill:
		return "backfill:" + strconv.Itoa(limit)
	default:
		return "run_once"
	}
}

// Defaults of [PeriodicJob].
const (
	// DefaultMisfireAfter is the default of [PeriodicJob].MisfireAfter.
	DefaultMisfireAfter = time.Minute
	// DefaultBackfillLimit is the default of [PeriodicJob].BackfillLimit.
	DefaultBackfillLimit = 10
)

// PeriodicJob is a job a worker enqueues on a schedule. Declare it in
// [WorkerConfig].PeriodicJobs of every worker that may enqueue it: the schedule's state
// lives in the database, and any of those workers enqueues each occurrence, exactly once.
type PeriodicJob struct {
	// Name identifies the schedule across workers and deploys (1-128 bytes of UTF-8, no
	// NUL). Renaming a schedule makes a new one. Required.
	Name string
	// Schedule says when it runs. Required.
	Schedule Schedule
	// Args is the job enqueued at each occurrence. Required.
	Args JobArgs
	// Options for each job; nil means the args' defaults. RunAt must be zero: each job's
	// RunAt is its occurrence. Without UniqueKey or Unique, each job gets a unique key
	// made of Name and the occurrence, counted in every state, so no occurrence can be
	// enqueued twice; with them, the caller's uniqueness applies instead.
	Options *EnqueueOptions
	// Misfire is the policy for missed occurrences. Defaults to MisfireRunOnce.
	Misfire Misfire
	// BackfillLimit is how many missed occurrences MisfireBackfill enqueues. Defaults to
	// [DefaultBackfillLimit] (10); zero means the default, negative is an error.
	BackfillLimit int
	// MisfireAfter is how late an occurrence may be enqueued and still be on time.
	// Defaults to [DefaultMisfireAfter] (1m); zero means the default, negative is an error.
	MisfireAfter time.Duration
}

// periodicEntry is a validated PeriodicJob.
type periodicEntry struct {
	PeriodicJob
	desc    string // the schedule's description
	misfire string // the policy's description
	queue   string
}

// Timing of the periodic runner.
const (
	// periodicTick is the longest the runner sleeps between looks for due occurrences.
	periodicTick = time.Second
	// periodicDeclareEvery is how often a worker re-declares its schedules.
	periodicDeclareEvery = 15 * time.Second
	// periodicStaleAfter: a schedule no running worker has declared for this long is
	// marked inactive (four missed declarations).
	periodicStaleAfter = time.Minute
	// periodicBatch is the most due schedules one transaction handles.
	periodicBatch = 10
	// maxOccurrences bounds the occurrences kept while walking missed ones.
	maxOccurrences = 10_000
)

// farFuture stands for "never" in next_run_at, for a schedule with no next occurrence.
var farFuture = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// validPeriodic checks the PeriodicJobs of a worker and prepares their entries.
func validPeriodic(c *Client, jobs []PeriodicJob) (map[string]*periodicEntry, error) {
	out := map[string]*periodicEntry{}
	for i, p := range jobs {
		bad := func(field, value, fix string) error {
			return &configError{field: fmt.Sprintf("WorkerConfig.PeriodicJobs[%d].%s", i, field), value: value, fix: fix}
		}
		switch {
		case p.Name == "" || len(p.Name) > 128 || !validText(p.Name):
			return nil, bad("Name", strconv.Quote(truncate(p.Name, 40)), "use 1-128 bytes of UTF-8 without NUL")
		case out[p.Name] != nil:
			return nil, bad("Name", strconv.Quote(truncate(p.Name, 40)), "it is declared twice: names must be unique")
		case p.Schedule == nil:
			return nil, bad("Schedule", "nil", "set one, such as skiplock.Every(time.Hour) or a cron.Parse result")
		case p.Misfire < MisfireRunOnce || p.Misfire > MisfireBackfill:
			return nil, bad("Misfire", strconv.Itoa(int(p.Misfire)), "use MisfireRunOnce, MisfireSkip or MisfireBackfill")
		case p.BackfillLimit < 0:
			return nil, bad("BackfillLimit", strconv.Itoa(p.BackfillLimit), "use 0 for the default or a positive count")
		case p.MisfireAfter < 0:
			return nil, bad("MisfireAfter", p.MisfireAfter.String(), "use 0 for the default or a positive duration")
		case p.Options != nil && !p.Options.RunAt.IsZero():
			return nil, bad("Options.RunAt", p.Options.RunAt.Format(time.RFC3339), "leave it zero: each job runs at its occurrence")
		}
		if e, ok := p.Schedule.(every); ok && e.d <= 0 {
			return nil, bad("Schedule", "Every("+e.d.String()+")", "use a positive interval")
		}
		if p.BackfillLimit == 0 {
			p.BackfillLimit = DefaultBackfillLimit
		}
		if p.MisfireAfter == 0 {
			p.MisfireAfter = DefaultMisfireAfter
		}
		j, err := c.prepare(p.Args, p.Options) // the same validation every occurrence gets
		if err != nil {
			return nil, fmt.Errorf("%w: WorkerConfig.PeriodicJobs[%d] (%q): %w", ErrInvalidConfig, i, truncate(p.Name, 40), err)
		}
		desc := fmt.Sprintf("%T", p.Schedule)
		if s, ok := p.Schedule.(fmt.Stringer); ok {
			desc = s.String()
		}
		out[p.Name] = &periodicEntry{PeriodicJob: p, desc: desc, misfire: p.Misfire.describe(p.BackfillLimit), queue: j.Queue}
	}
	return out, nil
}

// declarePeriodicSQL records the declared schedules, or refreshes them. An unchanged
// schedule keeps its next_run_at (the durable state: a restart neither loses nor repeats
// an occurrence); a new or changed one starts from the next occurrence after now. Rows
// come sorted by name, so concurrent declarations lock them in one order.
const declarePeriodicSQL = `INSERT INTO {s}.periodic AS p (name, kind, queue, schedule, misfire, next_run_at, active, declared_at, updated_at)
SELECT n, k, q, sc, m, nr, true, now(), now()
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[]) AS t(n, k, q, sc, m, nr)
ON CONFLICT (name) DO UPDATE SET
	kind = EXCLUDED.kind, queue = EXCLUDED.queue, misfire = EXCLUDED.misfire,
	next_run_at = CASE WHEN p.schedule = EXCLUDED.schedule THEN p.next_run_at ELSE EXCLUDED.next_run_at END,
	schedule = EXCLUDED.schedule, active = true, declared_at = now(),
	updated_at = CASE WHEN p.schedule = EXCLUDED.schedule AND p.active THEN p.updated_at ELSE now() END`

// retirePeriodicSQL marks inactive the schedules no running worker declared for $1
// seconds: removed from the code, or only declared by workers that are all gone.
const retirePeriodicSQL = `UPDATE {s}.periodic SET active = false, updated_at = now()
WHERE active AND declared_at < now() - make_interval(secs => $1)`

// duePeriodicSQL locks this worker's due schedules. SKIP LOCKED: a schedule another
// worker is enqueueing is its business. Under READ COMMITTED, a row another worker moved
// on since this statement's snapshot is re-checked on its latest version and dropped, so
// an occurrence is never handled twice.
const duePeriodicSQL = `SELECT name, next_run_at, now() FROM {s}.periodic
WHERE name = ANY ($1) AND active AND NOT disabled AND next_run_at <= now()
ORDER BY next_run_at
LIMIT $2
FOR UPDATE SKIP LOCKED`

// advancePeriodicSQL moves a locked schedule on, in the transaction that enqueued its jobs.
const advancePeriodicSQL = `UPDATE {s}.periodic
SET next_run_at = $2, last_run_at = coalesce($3, last_run_at), last_job_id = coalesce($4, last_job_id), updated_at = now()
WHERE name = $1`

// nextPeriodicSQL is how long until this worker's next occurrence is due.
const nextPeriodicSQL = `SELECT coalesce(extract(epoch FROM min(next_run_at) - now()), 3600)::float8
FROM {s}.periodic WHERE name = ANY ($1) AND active AND NOT disabled`

// listPeriodicSQL lists every schedule for ListPeriodic. A schedule whose declarations
// stopped is shown inactive even before a worker marks it so (none may be running).
const listPeriodicSQL = `SELECT name, kind, queue, schedule, misfire, next_run_at, last_run_at, last_job_id,
	active AND declared_at >= now() - make_interval(secs => $1), declared_at, updated_at, disabled
FROM {s}.periodic ORDER BY name`

// enablePeriodicSQL turns schedule $1 on or off ($2: disabled).
const enablePeriodicSQL = `UPDATE {s}.periodic SET disabled = $2, updated_at = now() WHERE name = $1 RETURNING name`

// runPeriodicNowSQL makes schedule $1's next occurrence due now, unless it is disabled.
const runPeriodicNowSQL = `UPDATE {s}.periodic SET next_run_at = least(next_run_at, now()), updated_at = now()
WHERE name = $1 AND NOT disabled RETURNING name`

// periodicSQL holds the periodic runner's statements, rendered for the client's schema.
type periodicSQL struct {
	declare, retire, due, advance, next string
}

// periodicRunner enqueues the occurrences of one worker's periodic jobs.
type periodicRunner struct {
	client  *Client
	pool    *pgxpool.Pool
	entries map[string]*periodicEntry
	names   []string // sorted
	logger  *slog.Logger
	sql     periodicSQL
	// beforeCommit, when set (by tests), runs between the enqueues and the commit.
	beforeCommit func()
	loop         *lifecycle.Loop
}

func newPeriodicRunner(c *Client, entries map[string]*periodicEntry, logger *slog.Logger) *periodicRunner {
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	slices.Sort(names)
	r := func(q string) string { return pgutil.Render(c.schema, q) }
	return &periodicRunner{client: c, pool: c.pool, entries: entries, names: names, logger: logger, sql: periodicSQL{
		declare: r(declarePeriodicSQL), retire: r(retirePeriodicSQL), due: r(duePeriodicSQL),
		advance: r(advancePeriodicSQL), next: r(nextPeriodicSQL),
	}}
}

// declare records this worker's schedules and retires those nobody declares any more.
func (p *periodicRunner) declare(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, claim.ClaimTimeout)
	defer cancel()
	var now time.Time
	if err := p.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return p.client.wrapErr("declare periodic jobs", err)
	}
	n := len(p.names)
	kinds, queues, descs, misfires, next := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]time.Time, n)
	for i, name := range p.names {
		e := p.entries[name]
		kinds[i], queues[i], descs[i], misfires[i] = e.Args.Kind(), e.queue, e.desc, e.misfire
		next[i] = nextAfter(e.Schedule, now)
	}
	if _, err := p.pool.Exec(ctx, p.sql.declare, p.names, kinds, queues, descs, misfires, next); err != nil {
		return p.client.wrapErr("declare periodic jobs", err)
	}
	tag, err := p.pool.Exec(ctx, p.sql.retire, periodicStaleAfter.Seconds())
	if err != nil {
		return p.client.wrapErr("retire periodic jobs", err)
	}
	if tag.RowsAffected() > 0 {
		p.logger.Info("skiplock: marked periodic schedules no running worker declares inactive", "count", tag.RowsAffected())
	}
	return nil
}

// run enqueues due occurrences until ctx ends, looking at least every periodicTick, and
// re-declares the schedules every periodicDeclareEvery.
func (p *periodicRunner) run(ctx context.Context) {
	lastDeclare := time.Now()
	for {
		wait := periodicTick
		if time.Since(lastDeclare) >= periodicDeclareEvery {
			if err := p.declare(ctx); err != nil && ctx.Err() == nil {
				p.logger.Warn("skiplock: declaring periodic jobs failed; retrying", "err", err)
			} else {
				lastDeclare = time.Now()
			}
		}
		more, err := p.tick(ctx)
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
			cctx, cancel := context.WithTimeout(ctx, claim.ClaimTimeout)
			err := p.pool.QueryRow(cctx, p.sql.next, p.names).Scan(&secs)
			cancel()
			if err == nil {
				wait = min(periodicTick, max(time.Duration(secs*float64(time.Second)), 0))
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

// tick enqueues the due occurrences of up to periodicBatch schedules in one transaction
// and reports whether the batch was full.
func (p *periodicRunner) tick(ctx context.Context) (more bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, claim.ClaimTimeout)
	defer cancel()
	tx, err := p.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return false, p.client.wrapErr("periodic", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	rows, err := tx.Query(ctx, p.sql.due, p.names, periodicBatch)
	if err != nil {
		return false, p.client.wrapErr("periodic", err)
	}
	type due struct {
		name      string
		next, now time.Time
	}
	var dues []due
	var d due
	if _, err := pgx.ForEachRow(rows, []any{&d.name, &d.next, &d.now}, func() error {
		dues = append(dues, d)
		return nil
	}); err != nil {
		return false, p.client.wrapErr("periodic", err)
	}
	if len(dues) == 0 {
		return false, nil
	}
	for _, d := range dues {
		e := p.entries[d.name]
		occ, next := occurrences(e, d.next, d.now)
		var lastRun *time.Time
		var lastID *int64
		for _, at := range occ {
			id, err := p.enqueue(ctx, tx, e, at)
			if err != nil {
				return false, err
			}
			at := at
			lastRun = &at
			if id != 0 {
				lastID = &id
			}
		}
		if _, err := tx.Exec(ctx, p.sql.advance, d.name, next, lastRun, lastID); err != nil {
			return false, p.client.wrapErr("periodic", err)
		}
		if skipped := len(occ) == 0; skipped {
			p.logger.Info("skiplock: periodic job skipped missed occurrences", "name", d.name, "next", next)
		}
	}
	if p.beforeCommit != nil {
		p.beforeCommit()
	}
	if err := tx.Commit(ctx); err != nil {
		return false, p.client.wrapErr("periodic", err)
	}
	return len(dues) == periodicBatch, nil
}

// enqueue inserts the job of occurrence at of e inside tx and returns its id (the
// existing job's, if the occurrence was enqueued before).
func (p *periodicRunner) enqueue(ctx context.Context, tx pgx.Tx, e *periodicEntry, at time.Time) (int64, error) {
	var opts EnqueueOptions
	if e.Options != nil {
		opts = *e.Options
	}
	opts.RunAt = at
	j, err := p.client.prepare(e.Args, &opts)
	if err != nil {
		return 0, fmt.Errorf("skiplock: periodic job %q: %w", e.Name, err)
	}
	if j.UniqueKey == nil {
		k := "periodic:" + e.Name + ":" + at.UTC().Format(time.RFC3339Nano)
		j.UniqueKey, j.UniqueStates = &k, finishedStatuses
	}
	j.KeyIsCallers = false                   // a duplicate occurrence is not an error here
	done, err := p.client.enqueuing(ctx, &j) // enqueue hooks see occurrences too
	if err != nil {
		return 0, fmt.Errorf("skiplock: periodic job %q: %w", e.Name, err)
	}
	row, err := p.client.insertOne(ctx, tx, &j, true, true)
	done(row, err)
	if err != nil {
		if errors.Is(err, ErrDuplicateJob) {
			return 0, nil
		}
		return 0, err
	}
	return row.ID, nil
}

// finishedStatuses are the states besides queued and running, for occurrence keys.
var finishedStatuses = []string{string(StatusSucceeded), string(StatusFailed), string(StatusDead), string(StatusCancelled)}

// occurrences returns which of e's occurrences from first to now (inclusive) to enqueue,
// by its misfire policy, and the first occurrence after now.
func occurrences(e *periodicEntry, first, now time.Time) (enqueue []time.Time, next time.Time) {
	late := now.Add(-e.MisfireAfter)
	var missed, onTime []time.Time
	missedCount := 0
	t := first
	for !t.After(now) {
		if t.After(late) {
			onTime = append(onTime, t)
			if len(onTime) > maxOccurrences {
				onTime = onTime[1:]
			}
		} else {
			missedCount++
			missed = append(missed, t)
			if len(missed) > 2*maxOccurrences {
				missed = slices.Clone(missed[len(missed)-maxOccurrences:])
			}
		}
		nt := e.Schedule.Next(t)
		if !nt.After(t) { // no further occurrence (or a broken Schedule)
			nt = farFuture
		}
		t = nt
	}
	switch {
	case e.Misfire == MisfireBackfill:
		enqueue = append(enqueue, missed[max(0, len(missed)-e.BackfillLimit):]...)
	case e.Misfire == MisfireRunOnce && len(onTime) == 0 && missedCount > 0:
		enqueue = append(enqueue, missed[len(missed)-1])
	}
	return append(enqueue, onTime...), t
}

// nextAfter is the first occurrence of s after t, or farFuture when there is none.
func nextAfter(s Schedule, t time.Time) time.Time {
	n := s.Next(t)
	if !n.After(t) {
		return farFuture
	}
	return n
}

// PeriodicInfo is a periodic schedule as stored, for [Client.ListPeriodic].
type PeriodicInfo struct {
	Name        string    // the PeriodicJob's Name
	Kind, Queue string    // of the job it enqueues
	Schedule    string    // the schedule's description
	Misfire     string    // run_once, skip or backfill:N
	NextRunAt   time.Time // the next occurrence to enqueue
	LastRunAt   time.Time // the last occurrence enqueued; zero if none yet
	LastJobID   int64     // its job; 0 if none yet
	// Active is false once no running worker has declared the schedule for a minute (it
	// was removed from the code, or every worker declaring it stopped); inactive schedules
	// are not enqueued until a worker declares them again.
	Active     bool
	DeclaredAt time.Time // the last declaration by a running worker
	UpdatedAt  time.Time
	// Disabled says an operator turned the schedule off ([Client.SetPeriodicEnabled]):
	// nothing is enqueued until it is enabled again.
	Disabled bool
}

// ListPeriodic returns every periodic schedule ever declared in the schema, by name.
func (c *Client) ListPeriodic(ctx context.Context) ([]PeriodicInfo, error) {
	rows, err := c.pool.Query(ctx, c.db.Render(listPeriodicSQL), periodicStaleAfter.Seconds())
	if err != nil {
		return nil, c.wrapErr("list periodic", err)
	}
	var (
		out     []PeriodicInfo
		p       PeriodicInfo
		lastRun *time.Time
		lastID  *int64
	)
	_, err = pgx.ForEachRow(rows, []any{&p.Name, &p.Kind, &p.Queue, &p.Schedule, &p.Misfire, &p.NextRunAt, &lastRun, &lastID,
		&p.Active, &p.DeclaredAt, &p.UpdatedAt, &p.Disabled}, func() error {
		q := p
		if lastRun != nil {
			q.LastRunAt = *lastRun
		}
		if lastID != nil {
			q.LastJobID = *lastID
		}
		out = append(out, q)
		return nil
	})
	if err != nil {
		return nil, c.wrapErr("list periodic", err)
	}
	return out, nil
}

// SetPeriodicEnabled turns the periodic schedule name off (enabled false: workers
// enqueue none of its occurrences) or on again (the occurrences it missed meanwhile are
// handled by its Misfire policy: MisfireRunOnce enqueues one). The setting is the
// schema's, for every worker, and outlives their restarts. It returns
// [ErrPeriodicNotFound] when no worker ever declared a schedule of that name.
func (c *Client) SetPeriodicEnabled(ctx context.Context, name string, enabled bool) error {
	var got string
	err := c.pool.QueryRow(ctx, c.db.Render(enablePeriodicSQL), name, !enabled).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %q (see ListPeriodic)", ErrPeriodicNotFound, name)
	}
	if err != nil {
		return c.wrapErr("set periodic enabled", err)
	}
	return nil
}

// RunPeriodicNow makes the next occurrence of the periodic schedule name due now: a
// worker declaring it enqueues its job within about a second, and the schedule keeps
// its times: the occurrence after is the one it had (cron and Every schedules are
// aligned to the clock). It returns [ErrPeriodicNotFound] when no enabled schedule has that
// name (enable a disabled one first).
func (c *Client) RunPeriodicNow(ctx context.Context, name string) error {
	var got string
	err := c.pool.QueryRow(ctx, c.db.Render(runPeriodicNowSQL), name).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %q is unknown or disabled (see ListPeriodic)", ErrPeriodicNotFound, name)
	}
	if err != nil {
		return c.wrapErr("run periodic now", err)
	}
	return nil
}

// Start records the schedules before anything runs — a worker that cannot record them
// does not start (declaring again is harmless: it is what the worker does every
// periodicDeclareEvery) — then enqueues their occurrences until Run's ctx ends: a worker
// shutting down enqueues nothing more, and a transaction cut off by it rolls back whole,
// so that another worker enqueues that occurrence.
func (p *periodicRunner) Start(ctx context.Context) error {
	if err := pgutil.RetryAtStart(ctx, p.declare); err != nil {
		return err
	}
	p.loop = lifecycle.NewLoop(p.run, lifecycle.UntilCancel)
	return p.loop.Start(ctx)
}

// Stop waits for the enqueueing to end.
func (p *periodicRunner) Stop() { p.loop.Stop() }
