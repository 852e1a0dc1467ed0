// This file holds the sweeper's engine: the sweep under its lock, the reclaim of
// expired leases and the leader's maintenance loop.

package maintenance

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/ownership"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/internal/settle"
)

// Sweeper is the Sweeper's engine: the sweep, the purges past retention, the vacuum and
// analyze checks.
type Sweeper struct {
	db     pgutil.DB
	flows  *settle.Settler
	notify *notify.Notifier
	cfg    Config // with defaults filled
	logger *slog.Logger
	sql    sweepSQL
	id     string // leader_id in the election
	// VacuumAfter (Unix ns) is when the jobs table may be vacuumed again: vacuumDuty
	// times the last vacuum's duration after it ended.
	VacuumAfter atomic.Int64
	// analyzed is the last ANALYZE for growth (analyzeIfGrown): the table's pages then and
	// the pages its statistics recorded then. Until the statistics change, the next one
	// waits for a fourfold growth from there: a role that may not analyze the table (only
	// its owner may) tries once per fourfold growth, not at every check.
	analyzedMu sync.Mutex
	analyzed   map[string]analyzedSize // by table, sanitized

	// rulesMu guards the retention rules and how far each has purged the archive.
	rulesMu sync.Mutex
	rules   map[retentionRule]time.Duration // per queue and per kind (QueueRetention, KindRetention)
	purged  map[retentionRule]time.Time     // see purgeArchiveSQL's $3
	// rescanAt is when the purges next walk the archive from its beginning
	// (purgeRescanEvery).
	rescanAt time.Time
	// logsPurged is when purgeOrphanLogs last ran (Unix ns; 0: never).
	logsPurged atomic.Int64
	// waitersPruned is when pruneStaleWaiters last ran (Unix ns; 0: never).
	waitersPruned atomic.Int64
	// rollup writes the dashboard's timing rollup (timingrollup.go); only Maintain's
	// goroutine uses it.
	rollup *TimingRollup
}

// sweepSQL holds the sweeper's statements, rendered for the client's schema.
type sweepSQL struct {
	reclaim, purgeArchive string
	pickWorkflows         string // workflowretention.go
	purgeWorkflows        string // workflowretention.go
	purgeDead             string // deadretention.go
	endCancelledSequences string // cancelledseq.go
}

// newSweeper returns the engine of a Sweeper whose cfg has its defaults filled; id is its
// leader_id in the election.
func New(db pgutil.DB, flows *settle.Settler, n *notify.Notifier, cfg Config, id string) *Sweeper {
	s := &Sweeper{db: db, flows: flows, notify: n, cfg: cfg, logger: cfg.Logger, analyzed: map[string]analyzedSize{}, id: id, sql: sweepSQL{
		reclaim:               db.Render(ReclaimSQL),
		purgeArchive:          db.Render(PurgeArchiveSQL),
		pickWorkflows:         db.Render(pickWorkflowsSQL),
		purgeWorkflows:        db.Render(purgeWorkflowsSQL),
		purgeDead:             db.Render(purgeDeadSQL),
		endCancelledSequences: db.Render(EndCancelledSequencesSQL),
	}, rules: map[retentionRule]time.Duration{}, purged: map[retentionRule]time.Time{}, rollup: NewTimingRollup(db)}
	for q, d := range cfg.QueueRetention {
		s.rules[retentionRule{queue: q}] = d
	}
	for k, d := range cfg.KindRetention {
		s.rules[retentionRule{kind: k}] = d
	}
	return s
}

// Run is Sweeper.Run.
func (s *Sweeper) Run(ctx context.Context) error {
	e := ownership.NewElector(s.db, s.id, ownership.MaintenanceRole, s.logger)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.Run(ctx) }()
	e.WhileLeader(ctx, s.Maintain)
	wg.Wait()
	return nil
}

// Maintain is the leader's maintenance loop: it sweeps every Interval, and checks the
// jobs table's dead rows and writes the dashboard's timing rollup when a minute is over
// every vacuumCheckInterval, until ctx ends.
func (s *Sweeper) Maintain(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	v := time.NewTicker(min(s.cfg.Interval, vacuumCheckInterval))
	defer v.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-v.C:
			var res jobtype.SweepResult
			s.vacuumIfBloated(ctx, &res)
			if _, err := s.rollup.Run(ctx, time.Now()); err != nil && ctx.Err() == nil {
				s.logger.Warn("skiplock: timing rollup failed", "err", err)
			}
			continue
		case <-t.C:
		}
		res, err := s.Sweep(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.logger.Warn("skiplock: sweep failed", "err", err)
		case res.Requeued+res.Dead > 0:
			s.logger.Warn("skiplock: reclaimed jobs whose worker stopped heartbeating",
				"requeued", res.Requeued, "dead", res.Dead)
		}
	}
}

// vacuumCheckInterval is how often the leading Sweeper looks at the jobs table's dead rows.
const vacuumCheckInterval = time.Second

// sweepLockSQL takes the sweep lock for this transaction only, or reports that another
// sweeper holds it. The second key is the schema's hash: schemas sweep independently.
const sweepLockSQL = `SELECT pg_try_advisory_xact_lock(1936419185, hashtext($1))`

// ReclaimSQL takes back running jobs whose lease has ended. The lost attempt counts: a
// job whose attempts are used up goes dead, so a job that kills every worker that runs it
// cannot loop forever.
//
//   - A job whose owner has a row in the workers table is never taken here, whatever its
//     own lease or the row's expires_at say: whether that worker is alive is judged by
//     the other workers, each over its own clock (internal/ownership, reclaim.go and
//     observer.go), and they take back a dead one's jobs. Both leases are timestamps
//     compared with the database's now(): a forward step of the server's clock past the
//     visibility timeout would make every live worker's jobs look expired here at once.
//     So the job's own lease decides only for an owner without a row: a worker of a
//     release before the workers table (a rolling deploy), or one whose row was pruned
//     (a minute after the other workers judged it dead).
//   - The lease end is the row's own lease_until, written by the claiming worker from its
//     own visibility timeout: workers with different timeouts, and this sweeper, agree on
//     it. A row without one was claimed by a worker of the release before migration 002;
//     its lease is judged as that release did, by locked_at + $1. So is a row whose
//     lease_until is older than its locked_at: every claim and heartbeat of this release
//     writes both from one now(), lease_until the later, so such a lease was left by an
//     earlier claim (an old sweeper took the job back without clearing it) and the current
//     one, by an old worker, has none.
//   - status = 'running' ... ORDER BY locked_at walks jobs_running_idx, which holds only
//     running rows (a few per worker slot), so no index on lease_until is needed.
//   - FOR UPDATE SKIP LOCKED: a row being written by its worker (a success, a heartbeat)
//     is left for the next sweep rather than waited for.
//   - id = ANY (ARRAY(SELECT id FROM expired)): the UPDATE reaches the expired rows
//     through the primary key whatever the table's statistics say (see heartbeatSQL).
//   - The fence token is left alone (the next claim takes a new one); lease_until is
//     cleared with the rest of the claim's state.
//   - run_at is left alone: the job was due when it was claimed, so it goes back to its
//     place in line (claims take the oldest run_at first) rather than behind every job
//     queued since. With run_at = now(), a killed worker's jobs waited for the whole
//     backlog: in a chaos run with a 50,000-job backlog they were done 35–99 s after the
//     kill, most of it in the queue.
var ReclaimSQL = `WITH expired AS (
	SELECT id FROM {s}.jobs
	WHERE status = 'running'
		AND CASE WHEN lease_until >= locked_at THEN lease_until ELSE locked_at + $1::interval END < now()
		AND NOT EXISTS (SELECT FROM {s}.workers w WHERE w.id = locked_by)
	ORDER BY locked_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED
)
UPDATE {s}.jobs SET ` + ownership.TakeBackSet(`'lease expired: worker ' || coalesce(locked_by, '?') || ' stopped heartbeating'`) + `
WHERE id = ANY (ARRAY(SELECT id FROM expired))
RETURNING id, status, queue, metadata ? '` + settle.MetaWorkflow + `'`

// Limits of one sweep. The sweep lock is held by a transaction: if that transaction
// hangs (its connection half-open, a statement stuck), no one sweeps until it ends, so
// every way it can hang is bounded, on both sides of the connection.
const (
	// sweepTimeout bounds one sweep transaction, on the worker's side (its context).
	sweepTimeout = 30 * time.Second
	// sweepStatementTimeout is the transaction's statement_timeout.
	sweepStatementTimeout = 10 * time.Second
	// sweepLockTimeout is the transaction's lock_timeout: the statements skip locked rows,
	// so a wait is on a table lock (a migration, a manual LOCK).
	sweepLockTimeout = 2 * time.Second
	// sweepIdleTimeout is the transaction's idle_in_transaction_session_timeout: the server
	// ends the session, and with it the sweep lock, when the sweeper stops talking
	// mid-transaction (killed, or its connection black-holed).
	sweepIdleTimeout = 5 * time.Second
)

// sweepLimitsSQL sets the sweep transaction's time limits, for this transaction only
// (set_config with is_local: SET LOCAL, with parameters).
const sweepLimitsSQL = `SELECT set_config('statement_timeout', $1, true),
	set_config('lock_timeout', $2, true),
	set_config('idle_in_transaction_session_timeout', $3, true)`

// setSweepLimits bounds the waits of the transaction tx.
func setSweepLimits(ctx context.Context, tx pgx.Tx) error {
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	_, err := tx.Exec(ctx, sweepLimitsSQL, ms(sweepStatementTimeout), ms(sweepLockTimeout), ms(sweepIdleTimeout))
	return err
}

// underSweepLock runs fn in a transaction of its own, bounded by sweepTimeout and the
// sweep's statement and lock limits, once it holds the schema's sweep lock; got is false
// (and fn not run) when another sweeper holds it.
func (s *Sweeper) underSweepLock(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) (got bool, err error) {
	return s.underSweepLockFor(ctx, sweepTimeout, fn)
}

// underSweepLockFor is underSweepLock bounded by timeout instead of sweepTimeout.
func (s *Sweeper) underSweepLockFor(ctx context.Context, timeout time.Duration, fn func(ctx context.Context, tx pgx.Tx) error) (got bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err = pgx.BeginFunc(ctx, s.db.Pool, func(tx pgx.Tx) error {
		if err := setSweepLimits(ctx, tx); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, sweepLockSQL, s.db.Schema).Scan(&got); err != nil || !got {
			return err
		}
		return fn(ctx, tx)
	})
	return got, err
}

// Sweep is Sweeper.Sweep.
func (s *Sweeper) Sweep(ctx context.Context) (jobtype.SweepResult, error) {
	var res jobtype.SweepResult
	queues := map[string]bool{}
	got, err := s.underSweepLock(ctx, func(ctx context.Context, tx pgx.Tx) error {
		dead, err := s.reclaimExpired(ctx, tx, &res, queues)
		if err != nil {
			return err
		}
		ended, err := s.endCancelledSequences(ctx, tx) // cancelledseq.go
		if err != nil {
			return err
		}
		if len(dead)+len(ended) == 0 {
			return nil
		}
		// The dependents of workflow tasks that died here are settled (cancelled, or
		// released under RunDependents) in the same transaction (internal/settle), and
		// so are the sequence tasks cancelled while they ran whose leases have passed.
		return s.flows.Settle(ctx, tx, append(dead, ended...))
	})
	if err != nil {
		return jobtype.SweepResult{}, s.db.WrapErr("sweep", err)
	}
	if !got {
		res.Skipped = true
		return res, nil
	}
	s.wake(ctx, queues)
	s.vacuumIfBloated(ctx, &res)
	s.summarizeArchive(ctx)
	if err := s.purgeExpired(ctx, &res); err != nil {
		return res, err
	}
	n, err := s.purgeDead(ctx)
	res.Purged += n
	if err != nil {
		return res, err
	}
	n, err = s.purgeWorkflows(ctx)
	res.PurgedWorkflows = n
	if err != nil {
		return res, s.db.WrapErr("sweep: purge workflows", err)
	}
	if err := purgeOrphanLogs(ctx, s.db, s.cfg.BatchSize, &s.logsPurged); err != nil { // logretention.go
		return res, err
	}
	return res, pruneStaleWaiters(ctx, s.db, s.cfg.BatchSize, &s.waitersPruned) // waiterretention.go
}

// reclaimExpired runs reclaimSQL in batches in tx until a batch is not full, adding what
// it reclaimed to res and the queues of the requeued jobs to queues. It returns the
// workflow tasks that went dead.
func (s *Sweeper) reclaimExpired(ctx context.Context, tx pgx.Tx, res *jobtype.SweepResult, queues map[string]bool) (dead []int64, err error) {
	for {
		rows, err := tx.Query(ctx, s.sql.reclaim, s.cfg.VisibilityTimeout, s.cfg.BatchSize)
		if err != nil {
			return nil, err
		}
		var (
			id            int64
			status, queue string
			task          bool // a workflow task (internal/settle)
			n             int
		)
		_, err = pgx.ForEachRow(rows, []any{&id, &status, &queue, &task}, func() error {
			n++
			res.Reclaimed = append(res.Reclaimed, id)
			if status == string(jobtype.StatusDead) {
				res.Dead++
				if task {
					dead = append(dead, id)
				}
			} else {
				res.Requeued++
				queues[queue] = true
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if n < s.cfg.BatchSize {
			return dead, nil
		}
	}
}

// wake notifies the queues whose reclaimed jobs are due now, rather than leave them to
// the workers' poll; a failure only costs that wait.
func (s *Sweeper) wake(ctx context.Context, queues map[string]bool) {
	if len(queues) == 0 {
		return
	}
	names := make([]string, 0, len(queues))
	for q := range queues {
		names = append(names, q)
	}
	nctx, cancel := context.WithTimeout(ctx, sweepStatementTimeout)
	defer cancel()
	if err := s.notify.Queues(nctx, s.db.Pool, names); err != nil {
		s.logger.Debug("skiplock: wake-up after reclaim failed", "err", err)
	}
}

// Config is the Sweeper's configuration with its defaults filled: the fields of the
// root's SweeperConfig (documented there), which converts to it.
type Config struct {
	Interval          time.Duration
	VisibilityTimeout time.Duration
	ArchiveRetention  time.Duration
	QueueRetention    map[string]time.Duration
	KindRetention     map[string]time.Duration
	DeadRetention     time.Duration
	BatchSize         int
	Logger            *slog.Logger
}
