// This file holds the leader election: per-fleet maintenance (the sweep, the archive purge,
// the dead-row vacuum check) runs on one elected process at a time, while the others idle
// for it. The leader is the process whose row in the leader table has not expired; it
// renews the row every few seconds, and when it dies the row expires and another process
// takes it over. Each statement is a single autocommit statement, and nothing is held on a
// session between them, so the election works through a transaction-pooling PgBouncer.

package ownership

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/lifecycle"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/internal/settle"
)

// leaderTTL is how long a leader's term lasts without a renewal: the longest a fleet goes
// without maintenance after its leader dies, give or take a follower's retry.
const leaderTTL = 5 * time.Second

// Timing of the election, as fractions of the term.
const (
	// leaderRenewEvery: a leader renews three times per term, so two renewals in a row may
	// fail (a slow statement, a reconnect) before its term runs out.
	leaderRenewEvery = leaderTTL / 3
	// leaderRetryEvery: a follower tries to take over twice per term (with jitter), so a
	// dead leader is replaced within about 1.5 terms. Each try is one statement: this is
	// what a follower costs the database while idle.
	leaderRetryEvery = leaderTTL / 2
	// leaderStatementTimeout bounds one election statement; a renewal that takes longer
	// than this is treated as failed.
	leaderStatementTimeout = leaderTTL / 3
)

// MaintenanceRole names the leader row of the per-fleet maintenance.
const MaintenanceRole = "maintenance"

// electSQL takes or renews the lead of role $1 for the process $2, for a term of $3.
//
//   - INSERT … ON CONFLICT: the first process to ever run creates the row; after that the
//     conflict branch decides. (A deleted row is simply created again.)
//   - WHERE l.expires_at < now() OR l.leader_id = $2: a process takes the row only when
//     the current term ran out, or when it is its own (a renewal). Row locking makes two
//     takers queue: the second one re-checks the WHERE against the first one's new
//     expires_at and gets nothing, so one term has one leader.
//   - elected_at stays put across renewals: it says since when the leader leads.
//   - expires_at and the comparison use the database's clock, the one clock every
//     process shares.
//   - RETURNING: a row back means this process leads until expires_at; no row means
//     another process leads.
const electSQL = `INSERT INTO {s}.leader AS l (name, leader_id, elected_at, expires_at)
VALUES ($1, $2, now(), now() + $3::interval)
ON CONFLICT (name) DO UPDATE SET
	leader_id = excluded.leader_id,
	elected_at = CASE WHEN l.leader_id = excluded.leader_id THEN l.elected_at ELSE now() END,
	expires_at = excluded.expires_at
WHERE l.expires_at < now() OR l.leader_id = excluded.leader_id
RETURNING l.leader_id`

// registrationCTEs are the two steps of a worker's registration in the workers table (see
// the root's admin.go, Client.Workers), written with the placeholders of the statement
// that holds them: the rows of the workers this one judged dead long enough ago (ids in
// deadIDs, the expires_at seen of each at the same place in deadSeen: reclaimer.prunable)
// are deleted on the way, and this worker's row is written with its queues and an expiry
// ttl from now.
//
//   - The pruning follows the judgement that takes back a dead worker's jobs (observer.go),
//     never the database's clock: a forward step of it past a minute deleted every live
//     worker's row. A row is deleted only while its expires_at is still the value seen
//     (its worker has not renewed since) and it owns no running job (reclaimDeadSQL takes
//     them back first; one left, say a workflow task's last attempt, keeps the row).
//   - id = ANY(deadIDs) is the index condition: with none judged dead (nearly always)
//     the step reads nothing.
//   - Never this worker's own row: two writes in one statement must not touch the same row.
//   - me returns the expires_at it wrote, which the statement's caller compares with the
//     value the next statement finds there (sharedID).
func registrationCTEs(id, queues, ttl, deadIDs, deadSeen string) string {
	return `pruned AS (
	DELETE FROM {s}.workers w WHERE w.id = ANY (` + deadIDs + `::text[]) AND w.id <> ` + id + `
		AND ((w.id, w.expires_at) IN (SELECT * FROM unnest(` + deadIDs + `::text[], ` + deadSeen + `::timestamptz[])) OR false)
		AND NOT EXISTS (SELECT FROM {s}.jobs j WHERE j.status = 'running' AND j.locked_by = w.id)
), me AS (
	INSERT INTO {s}.workers AS w (id, queues, started_at, expires_at)
	VALUES (` + id + `, ` + queues + `::text[], now(), now() + ` + ttl + `::interval)
	ON CONFLICT (id) DO UPDATE SET queues = excluded.queues, expires_at = excluded.expires_at
	RETURNING w.expires_at
)`
}

// renewalSQL is what a registering statement returns after its own answers: the
// expires_at this worker's row held before the statement (the statement's snapshot; NULL:
// no row) and the one the statement wrote (sharedID compares them). id is the statement's
// placeholder of the worker id.
func renewalSQL(id string) string {
	return `(SELECT w.expires_at FROM {s}.workers w WHERE w.id = ` + id + `), (SELECT expires_at FROM me)`
}

// peersSQL counts the other live workers that serve at least one of queues. It reads
// expires_at against now(): a step of the server's clock miscounts for at most a renewal
// period (every row is written again), and the count only sizes the statements each
// worker keeps in flight (the root's admin.go).
func peersSQL(id, queues string) string {
	return `(SELECT count(*) FROM {s}.workers w WHERE w.id <> ` + id + ` AND w.expires_at > now() AND w.queues && ` + queues + `::text[])`
}

// fleetElectSQL is electSQL for a worker that also registers (registrationCTEs) in the
// same statement and commit, so that registering costs the database no statement of its
// own: $4 is the worker's queues, $5 how long the registration lasts, $6 and $7 the
// workers whose rows may be pruned and the expires_at seen of each. It returns whether
// this process leads, how many other live workers serve at least one of its queues, and
// renewalSQL's two values.
var fleetElectSQL = `WITH ` + registrationCTEs("$2", "$4", "$5", "$6", "$7") + `, lead AS (
	` + electSQL + `
)
SELECT EXISTS (SELECT FROM lead), ` + peersSQL("$2", "$4") + `, ` + renewalSQL("$2")

// registerSQL is the registration alone, for a worker that takes no part in the election
// (no per-fleet task): $1 is the worker id, $2 its queues, $3 how long the registration
// lasts, $4 and $5 the workers whose rows may be pruned and the expires_at seen of each.
// It returns how many other live workers serve at least one of its queues, and
// renewalSQL's two values.
var registerSQL = `WITH ` + registrationCTEs("$1", "$2", "$3", "$4", "$5") + `
SELECT ` + peersSQL("$1", "$2") + `, ` + renewalSQL("$1")

// leaveSQL deletes this worker's registration when it stops.
const leaveSQL = `DELETE FROM {s}.workers WHERE id = $1`

// resignSQL ends this process's term at once, so a follower takes over at its next try
// instead of waiting for the term to run out. It matches leader_id: a process that lost
// the lead meanwhile cannot end its successor's term.
const resignSQL = `UPDATE {s}.leader SET expires_at = '-infinity' WHERE name = $1 AND leader_id = $2`

// Elector campaigns for one role on behalf of one process and runs tasks while the
// process leads. A leader thinks it leads until the end of its term measured from the
// moment it sent its last successful renewal, which is never later than the term written
// in the database: it steps down before anyone else can take over. (Maintenance
// statements take their own transaction-scoped locks too, so a brief overlap would be
// harmless.)
//
// Internal API for per-fleet work: [elector.whileLeader] runs a function only while this
// process leads, with a context that ends when it stops leading.
type Elector struct {
	// conn runs the election and registration statements, on a connection of its own
	// (leaseconn.go): a renewal never waits for the pool the handlers use.
	conn   *leaseConn
	id     string // this process's leader_id: the worker or sweeper id
	role   string
	logger *slog.Logger
	elect  string // electSQL, rendered
	resign string // resignSQL, rendered

	// A worker registers in the workers table with each statement (newWorkerElector):
	// queues returns those it serves (they change at run time); fleet is told, after each statement, how many live
	// processes serve them (this one included).
	queues     func() []string
	fleet      func(n int)
	electFleet string // fleetElectSQL, rendered
	leave      string // leaveSQL, rendered
	// registerOnly: the process only registers, at a follower's pace, and never leads
	// (a worker with no per-fleet task).
	registerOnly bool
	registerSQL  string // registerSQL, rendered
	// The worker lease (reclaim.go): renewed holds the start, by this process's clock, of
	// the last registration that committed (nil: none yet); after each, reclaim takes
	// back the jobs of workers whose lease has ended. expireOnLeave says, when the worker
	// stops, whether to end its lease rather than delete its row (handlers still run).
	renewed       atomic.Pointer[time.Time]
	lapseEnded    atomic.Pointer[time.Time] // when the last renewal after a lapse committed; nil: none
	registered    chan struct{}             // closed at the first committed registration
	regOnce       sync.Once
	Reclaim       *reclaimer
	reclaimKick   chan struct{} // renewedAt kicks reclaimLoop; nil without Reclaim
	expireOnLeave func() bool
	expire        string // expireWorkerSQL, rendered
	// wrote is the expires_at this worker's last registering statement wrote (zero: none,
	// or its outcome unknown), sharedLogged when sharedID last logged; owned by the
	// election loop's goroutine.
	wrote        time.Time
	sharedLogged time.Time

	mu      sync.Mutex
	term    context.Context    // nil while not leading
	endTerm context.CancelFunc // ends term
	expiry  *time.Timer        // ends term when it was not renewed in time
	changed chan struct{}      // closed (and replaced) whenever a term starts or ends
}

func NewElector(db pgutil.DB, id, role string, logger *slog.Logger) *Elector {
	return &Elector{
		conn: newLeaseConn(db.Pool, "skiplock-lease "+id), id: id, role: role, logger: logger,
		elect:      db.Render(electSQL),
		resign:     db.Render(resignSQL),
		changed:    make(chan struct{}),
		registered: make(chan struct{}),
	}
}

// NewWorkerElector is newElector for a worker: the worker registers as serving queues
// with each statement, and fleet is told the number of processes serving them.
// campaign: it also campaigns for the lead in the same statement; otherwise it only
// registers, at a follower's pace.
func NewWorkerElector(db pgutil.DB, flows *settle.Settler, id string, queues func() []string, campaign bool, fleet func(n int), expireOnLeave func() bool, logger *slog.Logger) *Elector {
	e := NewElector(db, id, MaintenanceRole, logger)
	e.expireOnLeave = expireOnLeave
	e.queues, e.fleet, e.registerOnly = queues, fleet, !campaign
	e.electFleet = db.Render(fleetElectSQL)
	e.leave = db.Render(leaveSQL)
	e.registerSQL = db.Render(registerSQL)
	e.Reclaim = newReclaimer(db, flows)
	e.expire = db.Render(expireWorkerSQL)
	return e
}

// current returns the context of the current term (nil when not leading) and a channel
// closed at the next change.
func (e *Elector) current() (context.Context, <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.term, e.changed
}

// leading reports whether this process leads now.
func (e *Elector) leading() bool {
	term, _ := e.current()
	return term != nil
}

// extend starts a term, or extends the current one, to end at deadline.
func (e *Elector) extend(parent context.Context, deadline time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.term != nil {
		e.expiry.Reset(time.Until(deadline))
		return
	}
	e.term, e.endTerm = context.WithCancel(parent)
	term := e.term
	e.expiry = time.AfterFunc(time.Until(deadline), func() { e.stepDown(term, "term expired before it could be renewed") })
	close(e.changed)
	e.changed = make(chan struct{})
	e.logger.Info("skiplock: this process now leads the fleet's maintenance", "role", e.role)
}

// stepDown ends the term term if it is still the current one.
func (e *Elector) stepDown(term context.Context, why string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.term == nil || e.term != term {
		return
	}
	e.expiry.Stop()
	e.endTerm()
	e.term, e.endTerm, e.expiry = nil, nil, nil
	close(e.changed)
	e.changed = make(chan struct{})
	e.logger.Info("skiplock: this process no longer leads the fleet's maintenance", "role", e.role, "reason", why)
}

// Run campaigns until ctx ends: a follower tries to take the lead every leaderRetryEvery,
// a leader renews every leaderRenewEvery. When ctx ends it steps down and resigns, so
// another process takes over without waiting for the term to run out.
func (e *Elector) Run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	defer e.conn.close()
	if e.Reclaim != nil {
		// The reclaim after each renewal runs beside the renewals, on the pool: a slow
		// one (many jobs to take back, a busy pool) never delays the next renewal.
		e.reclaimKick = make(chan struct{}, 1)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); e.reclaimLoop(ctx) }()
		defer wg.Wait()
	}
	for {
		select {
		case <-ctx.Done():
			term, _ := e.current()
			if term != nil {
				e.stepDown(term, "shutting down")
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaderStatementTimeout)
				if err := e.conn.exec(rctx, e.resign, e.role, e.id); err != nil {
					e.logger.Debug("skiplock: resigning the lead failed; it expires on its own", "err", err)
				}
				cancel()
			}
			if e.queues != nil {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaderStatementTimeout)
				leave := e.leave
				if e.expireOnLeave != nil && e.expireOnLeave() {
					leave = e.expire // handlers still run: their jobs go to the next reclaim
				}
				if err := e.conn.exec(rctx, leave, e.id); err != nil {
					e.logger.Debug("skiplock: removing this worker's registration failed; it expires on its own", "err", err)
				}
				cancel()
			}
			return
		case <-t.C:
		}
		e.try(ctx)
		wait := leaderRenewEvery
		if !e.leading() {
			wait = leaderRetryEvery - leaderRetryEvery/5 + rand.N(2*leaderRetryEvery/5+1)
		}
		t.Reset(wait)
	}
}

// try takes or renews the lead once.
func (e *Elector) try(ctx context.Context) {
	sent := time.Now()
	cctx, cancel := context.WithTimeout(ctx, leaderStatementTimeout)
	var reg registration
	if e.registerOnly {
		dead, seen := e.Reclaim.prunable()
		err := e.conn.queryRow(cctx, e.registerSQL, []any{e.id, e.queues(), workerTTL, dead, seen}, reg.dest()...)
		cancel()
		e.afterRegistration(ctx, sent, reg, err)
		if err != nil && ctx.Err() == nil {
			e.logger.Warn("skiplock: registering this worker failed; trying again", "err", err)
		}
		return
	}
	var err error
	if e.queues != nil {
		var leads bool
		dead, seen := e.Reclaim.prunable()
		err = e.conn.queryRow(cctx, e.electFleet, []any{e.role, e.id, leaderTTL, e.queues(), workerTTL, dead, seen},
			append([]any{&leads}, reg.dest()...)...)
		e.afterRegistration(ctx, sent, reg, err)
		if err == nil && !leads {
			err = pgx.ErrNoRows // what electSQL alone answers when another process leads
		}
	} else {
		var got string
		err = e.conn.queryRow(cctx, e.elect, []any{e.role, e.id, leaderTTL}, &got)
	}
	cancel()
	term, _ := e.current()
	switch {
	case err == nil:
		e.extend(ctx, sent.Add(leaderTTL))
	case errors.Is(err, pgx.ErrNoRows):
		if term != nil {
			e.stepDown(term, "another process took over")
		}
	case ctx.Err() == nil:
		// The term, if any, runs on until its expiry timer ends it.
		e.logger.Warn("skiplock: leader election statement failed; trying again", "role", e.role, "err", err)
	}
}

// registration is what a registering statement (registerSQL, fleetElectSQL) answers
// after the election's own answer: the other live workers serving this one's queues, and
// renewalSQL's two values.
type registration struct {
	others int
	found  *time.Time
	wrote  time.Time
}

// dest is the scan destinations of r's columns.
func (r *registration) dest() []any { return []any{&r.others, &r.found, &r.wrote} }

// afterRegistration takes in a registering statement sent at sent: with err nil, its
// answers r (sharedID, the fleet's size, the renewal); otherwise the statement may or
// may not have written the row, so the next one has nothing to compare with.
func (e *Elector) afterRegistration(ctx context.Context, sent time.Time, r registration, err error) {
	if err != nil {
		e.wrote = time.Time{}
		return
	}
	e.sharedID(r.found, r.wrote)
	e.fleet(r.others + 1)
	e.renewedAt(ctx, sent)
}

// sharedIDLogEvery bounds how often sharedID logs.
const sharedIDLogEvery = time.Minute

// sharedID checks, after a registering statement that committed, that no other process
// renews this worker's row: found is the expires_at the statement found there, wrote the
// one it wrote. Found differs from what this worker's previous statement wrote only when
// another statement wrote the row since, and no other process writes it but one with the
// same worker id (the others only prune it when its worker is judged dead). Two live
// processes sharing an id each take the other's running jobs for orphans and put them
// back, so jobs run twice; and both lead the maintenance. It logs that, at most every
// sharedIDLogEvery. After a statement whose outcome is unknown there is nothing to
// compare (wrote is zero).
func (e *Elector) sharedID(found *time.Time, wrote time.Time) {
	if found != nil && !e.wrote.IsZero() && !found.Equal(e.wrote) && time.Since(e.sharedLogged) >= sharedIDLogEvery {
		e.sharedLogged = time.Now()
		e.logger.Error("skiplock: another live process renews this worker's registration: two processes share this worker id, "+
			"and each takes the other's running jobs for orphans (they run twice); give each process its own WorkerConfig.ID, or leave it empty",
			"worker", e.id)
	}
	e.wrote = wrote
}

// renewedAt records that this worker's row was renewed by a statement sent at sent, and
// takes back the jobs of the workers whose rows have expired (reclaim.go).
func (e *Elector) renewedAt(ctx context.Context, sent time.Time) {
	if prev := e.renewed.Load(); prev != nil && time.Since(*prev) > workerCancelAfter {
		// The worker's lease went unrenewed long enough that its handlers were cancelled
		// and its row may have expired: whatever it claimed before now is lost
		// (LapsedSince).
		now := time.Now()
		e.lapseEnded.Store(&now)
	}
	e.renewed.Store(&sent)
	e.regOnce.Do(func() { close(e.registered) })
	if e.reclaimKick == nil {
		return
	}
	select {
	case e.reclaimKick <- struct{}{}:
	default: // a reclaim is pending already: it runs after this renewal
	}
}

// reclaimLoop runs the reclaim by liveness after each renewal of the worker's row (kicked
// by renewedAt; kicks coalesce), and when the judgement of a worker that stopped renewing
// falls due (observer.untilJudgement), until ctx ends.
func (e *Elector) reclaimLoop(ctx context.Context) {
	due := time.NewTimer(time.Hour)
	defer due.Stop()
	due.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.reclaimKick:
		case <-due.C:
		}
		e.reclaimOnce(ctx)
		due.Stop()
		if d, ok := e.Reclaim.obs.untilJudgement(time.Now()); ok {
			due.Reset(d)
		}
	}
}

// reclaimOnce takes back, once, the running jobs of workers whose lease ended.
func (e *Elector) reclaimOnce(ctx context.Context) {
	n, err := e.Reclaim.run(ctx, e.id)
	switch {
	case err != nil && ctx.Err() == nil:
		e.logger.Warn("skiplock: taking back the jobs of dead workers failed; trying again at the next renewal", "err", err)
	case n > 0:
		e.logger.Info("skiplock: took back the running jobs of workers whose lease ended", "jobs", n)
	}
}

// SinceRenewal is how long ago the last committed renewal of this worker's row started;
// ok is false before the first.
func (e *Elector) SinceRenewal() (d time.Duration, ok bool) {
	t := e.renewed.Load()
	if t == nil {
		return 0, false
	}
	return time.Since(*t), true
}

// LapsedSince reports whether the worker's lease lapsed (went unrenewed for longer than
// workerCancelAfter, by this process's clock) at any time since t: a renewal that ended
// a lapse committed at or after t. A claim started at t whose reply arrives after such a
// lapse is lost: its jobs may have been taken back and run elsewhere meanwhile, so the
// worker puts them back and never runs them (internal/claim). The lapse still under way
// is LeaseEnding's.
func (e *Elector) LapsedSince(t time.Time) bool {
	le := e.lapseEnded.Load()
	return le != nil && !le.Before(t)
}

// WhileLeader runs task each time this process becomes leader, with a context that ends
// when the term ends or ctx ends, until ctx ends. A task that returns early is not run
// again in the same term. It returns once ctx ended and task returned.
func (e *Elector) WhileLeader(ctx context.Context, task func(ctx context.Context)) {
	for {
		term, changed := e.current()
		if term == nil {
			select {
			case <-ctx.Done():
				return
			case <-changed:
				continue
			}
		}
		tctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(term, cancel)
		task(tctx)
		stop()
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-term.Done():
		}
	}
}

// LeaderTasks is the Service of the per-fleet tasks of a worker (the embedded sweeper's
// maintenance): each runs in a goroutine of its own, only while the worker leads
// (elector.whileLeader), until Stop.
type LeaderTasks struct {
	Elector *Elector
	Tasks   []func(ctx context.Context)
	g       lifecycle.Goroutines
}

// Start starts a goroutine per task.
func (t *LeaderTasks) Start(ctx context.Context) error {
	ctx = t.g.Begin(ctx, lifecycle.UntilStop)
	for _, task := range t.Tasks {
		t.g.Go(func() { t.Elector.WhileLeader(ctx, task) })
	}
	return nil
}

// Stop ends the tasks' terms and waits for them.
func (t *LeaderTasks) Stop() { t.g.Stop() }

// registerStartWait bounds how long a worker's start waits for its first registration.
const registerStartWait = 5 * time.Second

// registeredElector is the Service of a worker's elector. Its Start returns once the
// worker's row in the workers table is written (or registerStartWait passed), so the
// worker claims nothing before it: a job's owner without a row is judged by the job's
// own lease (a worker of the release before the workers table), and a worker killed
// between its first claims and its first registration left its jobs to that lease, a
// minute and more at defaults, instead of to the reclaim by liveness (seen in the chaos
// recovery run: a worker killed 2 s after its start, its 16 jobs running elsewhere after
// 71 s).
type registeredElector struct {
	e    *Elector
	loop *lifecycle.Loop
}

func NewRegisteredElector(e *Elector) *registeredElector {
	return &registeredElector{e: e, loop: lifecycle.NewLoop(e.Run, lifecycle.UntilStop)}
}

// Start starts the elector and waits for the worker's first registration.
func (r *registeredElector) Start(ctx context.Context) error {
	if err := r.loop.Start(ctx); err != nil {
		return err
	}
	if !lifecycle.WaitAtMost(ctx, r.e.registered, registerStartWait) && ctx.Err() == nil {
		r.e.logger.Warn("skiplock: this worker's first registration has not committed yet; claiming anyway (until it does, a crash leaves its jobs to their own leases)",
			"waited", registerStartWait)
	}
	return nil
}

// Stop ends the elector: it resigns and unregisters.
func (r *registeredElector) Stop() { r.loop.Stop() }

// workerTTL is how long a worker counts as serving its queues after its last
// registration (with its election statement, every 1.7–3 s): a process that died stops
// counting within this.
const workerTTL = 2 * leaderTTL

// pruneWorkersAfter is how long after a worker judged another dead (observer.go) its
// registration statement deletes that worker's row.
const pruneWorkersAfter = time.Minute
