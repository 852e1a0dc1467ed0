// This file holds the Sweeper: it takes back running jobs whose lease ended (their worker
// died) and deletes finished jobs past retention, one sweeper at a time per schema.

package skiplock

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// SweeperConfig configures a [Sweeper]. The zero value is valid.
type SweeperConfig struct {
	// Interval between sweeps. Defaults to [DefaultSweepInterval] (30s); zero or negative
	// means the default; a positive value under 1ms is an error.
	Interval time.Duration
	// VisibilityTimeout applies only to running jobs without a lease of their own: those
	// claimed by workers of a release before migration 002, which record no lease end. Such
	// a job is taken back once its locked_at (refreshed by its heartbeats) is older than
	// this, so set it to the old workers' visibility timeout during a rolling deploy. A job
	// claimed by a current worker carries its lease end (that worker's own visibility
	// timeout) and is taken back when it passes, whatever this is. Defaults to
	// [DefaultVisibilityTimeout] (1m); zero or negative means the default; a positive value
	// under 1ms is an error.
	VisibilityTimeout time.Duration
	// ArchiveRetention is how long finished jobs are kept. Defaults to
	// [DefaultArchiveRetention] (7 days); zero or negative means the default.
	ArchiveRetention time.Duration
	// QueueRetention sets, per queue, how long its finished jobs are kept, over
	// ArchiveRetention. Defaults to none; a key that is not a valid queue name, or a value
	// that is not positive, is an error.
	QueueRetention map[string]time.Duration
	// KindRetention sets, per job kind, how long its finished jobs are kept, over
	// QueueRetention and ArchiveRetention. Defaults to none; an invalid kind, or a value
	// that is not positive, is an error.
	KindRetention map[string]time.Duration
	// BatchSize bounds the rows one statement reclaims or deletes, so a sweep never holds
	// many locks or writes a huge transaction. Defaults to [DefaultSweepBatchSize] (1000);
	// zero or negative means the default.
	BatchSize int
	// Logger defaults to the client's logger.
	Logger *slog.Logger
}

// SweepResult counts what one sweep did.
type SweepResult struct {
	Skipped  bool  // another sweeper held the lock: this one did nothing
	Requeued int64 // expired jobs put back in the queue
	Dead     int64 // expired jobs that had no attempts left
	Purged   int64 // finished jobs deleted past retention
	// PurgedWorkflows counts the workflows deleted (with their tasks and edges) because
	// every task had ended and their jobs finished past ArchiveRetention.
	PurgedWorkflows int64
	Vacuumed        bool // the jobs table had many dead rows and was vacuumed and analyzed
	Reclaimed       []int64
}

// Sweeper takes back running jobs whose worker stopped heartbeating (it crashed, was
// killed, or lost the database) and deletes finished jobs past retention. Every [Worker]
// runs one unless its SweepInterval is negative; any number may run. Their Run loops elect
// one leader per schema (a row with a deadline in the leader table, renewed every few
// seconds and taken over within seconds when its process dies), and only the leader
// sweeps, purges and checks for dead rows; the others cost the database one election
// statement every few seconds. Each sweep also holds a transaction-scoped advisory lock,
// so a direct call to [Sweeper.Sweep] never overlaps another sweep. Both work behind a
// transaction-pooling PgBouncer.
type Sweeper struct {
	client *Client
	cfg    SweeperConfig
	logger *slog.Logger
	sql    sweepSQL
	id     string // leader_id in the election
	// vacuumAfter (Unix ns) is when the jobs table may be vacuumed again: vacuumDuty
	// times the last vacuum's duration after it ended.
	vacuumAfter atomic.Int64

	// rulesMu guards the retention rules and how far each has purged the archive.
	rulesMu sync.Mutex
	rules   map[retentionRule]time.Duration // per queue and per kind (QueueRetention, KindRetention)
	purged  map[retentionRule]time.Time     // see purgeArchiveSQL's $3
	// rescanAt is when the purges next walk the archive from its beginning
	// (purgeRescanEvery).
	rescanAt time.Time
}

// retentionRule names the jobs a retention applies to: one queue's, one kind's, or (the
// zero value) all the others.
type retentionRule struct{ queue, kind string }

// DefaultSweepBatchSize is the default of [SweeperConfig].BatchSize.
const DefaultSweepBatchSize = 1000

// sweepSQL holds the sweeper's statements, rendered for the client's schema.
type sweepSQL struct {
	reclaim, purgeArchive string
	purgeWorkflows        string // workflowretention.go
}

// NewSweeper returns a Sweeper for client. A field out of range is an error that
// matches [ErrInvalidConfig] and names the field.
func NewSweeper(client *Client, cfg SweeperConfig) (*Sweeper, error) {
	if client == nil {
		return nil, errors.New("skiplock: NewSweeper: client is nil")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultSweepInterval
	}
	if cfg.VisibilityTimeout <= 0 {
		cfg.VisibilityTimeout = DefaultVisibilityTimeout
	}
	if cfg.ArchiveRetention <= 0 {
		cfg.ArchiveRetention = DefaultArchiveRetention
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultSweepBatchSize
	}
	if cfg.Logger == nil {
		cfg.Logger = client.logger
	}
	s := &Sweeper{client: client, cfg: cfg, logger: cfg.Logger, id: "sweeper-" + defaultWorkerID(), sql: sweepSQL{
		reclaim:        renderSQL(client.schema, reclaimSQL),
		purgeArchive:   renderSQL(client.schema, purgeArchiveSQL),
		purgeWorkflows: renderSQL(client.schema, purgeWorkflowsSQL),
	}, rules: map[retentionRule]time.Duration{}, purged: map[retentionRule]time.Time{}}
	for q, d := range cfg.QueueRetention {
		s.rules[retentionRule{queue: q}] = d
	}
	for k, d := range cfg.KindRetention {
		s.rules[retentionRule{kind: k}] = d
	}
	return s, nil
}

// setQueueRetention sets (d > 0) or removes (d == 0) the retention of one queue's jobs,
// from the next sweep on (a queue added to a running worker, Worker.AddQueue).
func (s *Sweeper) setQueueRetention(queue string, d time.Duration) {
	s.rulesMu.Lock()
	defer s.rulesMu.Unlock()
	r := retentionRule{queue: queue}
	if d > 0 {
		s.rules[r] = d
	} else {
		delete(s.rules, r)
	}
	delete(s.purged, r)
	delete(s.purged, retentionRule{}) // the default's exclusions changed: walk it again
}

// purgePass is one retention rule's purge: its arguments to purgeArchiveSQL.
type purgePass struct {
	rule                retentionRule
	keep                time.Duration
	from                time.Time // $3
	queue, kind         *string   // $4, $5: NULL matches any
	notQueues, notKinds []string  // $6, $7
}

// purgePasses lists the purges of one sweep: one per queue rule, one per kind rule and
// the default, each excluding the jobs a more specific rule covers (a kind's rule over
// its queue's, both over the default).
func (s *Sweeper) purgePasses() []purgePass {
	s.rulesMu.Lock()
	defer s.rulesMu.Unlock()
	if now := time.Now(); now.After(s.rescanAt) {
		clear(s.purged)
		s.rescanAt = now.Add(purgeRescanEvery)
	}
	// Empty, not nil: pgx sends a nil slice as NULL, and x <> ALL (NULL) is never true.
	queues, kinds := []string{}, []string{}
	for r := range s.rules {
		if r.kind != "" {
			kinds = append(kinds, r.kind)
		} else {
			queues = append(queues, r.queue)
		}
	}
	passes := []purgePass{{keep: s.cfg.ArchiveRetention, from: s.purged[retentionRule{}], notQueues: queues, notKinds: kinds}}
	for r, d := range s.rules {
		p := purgePass{rule: r, keep: d, from: s.purged[r], notQueues: []string{}, notKinds: []string{}}
		if r.kind != "" {
			p.kind = &r.kind
		} else {
			p.queue, p.notKinds = &r.queue, kinds
		}
		passes = append(passes, p)
	}
	return passes
}

// purgedUpTo records that the archive holds no row of rule's jobs finished before
// cutoff (the database's now() minus the rule's retention): the rule's next purges start
// purgeMargin before it.
func (s *Sweeper) purgedUpTo(rule retentionRule, cutoff time.Time) {
	s.rulesMu.Lock()
	defer s.rulesMu.Unlock()
	s.purged[rule] = cutoff.Add(-purgeMargin)
}

// purgeRescanEvery is how often the purges walk the whole archive again rather than
// from where they last ended: a row the sweeper would otherwise never see again (its
// finished_at written back by hand, or a rule changed) is deleted within this long. A
// whole walk of a 1,000,000-row archive is measured in README "Retention per queue and
// kind".
const purgeRescanEvery = time.Hour

// purgeMargin is how far before the last cutoff a rule's next purge starts: a row's
// finished_at is its transaction's now(), and a success batch commits at most its 30 s
// timeout after it, so a row may appear behind a cutoff already passed.
const purgeMargin = 5 * time.Minute

// Run takes part in the schema's leader election until ctx is cancelled, then returns
// nil. While this Sweeper leads, it sweeps every Interval and checks every second whether
// the jobs table needs a vacuum; while another process leads, it only stands by to take
// over. A Sweeper that leads when ctx ends gives up the lead, so another takes over at
// once.
func (s *Sweeper) Run(ctx context.Context) error {
	e := newElector(s.client, s.id, maintenanceRole, s.logger)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.run(ctx) }()
	e.whileLeader(ctx, s.maintain)
	wg.Wait()
	return nil
}

// maintain is the leader's maintenance loop: it sweeps every Interval and checks the
// jobs table's dead rows every vacuumCheckInterval, until ctx ends.
func (s *Sweeper) maintain(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	v := time.NewTicker(min(s.cfg.Interval, vacuumCheckInterval))
	defer v.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-v.C:
			var res SweepResult
			s.vacuumIfBloated(ctx, &res)
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

// reclaimSQL takes back running jobs whose lease has ended. The lost attempt counts: a
// job whose attempts are used up goes dead, so a job that kills every worker that runs it
// cannot loop forever.
//
//   - A job whose owner's worker lease (its row in the workers table) has not ended is
//     never taken, whatever its own lease says: its worker is alive and reaches the
//     database, and a handler that has not returned keeps its job (reclaim.go: the
//     owner's lease decides). So the job's own lease decides only for an owner without
//     a live row: a worker of a release before the workers table (a rolling deploy),
//     or a dead one (which reclaimDeadSQL takes back sooner).
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
const reclaimSQL = `WITH expired AS (
	SELECT id FROM {s}.jobs
	WHERE status = 'running'
		AND CASE WHEN lease_until >= locked_at THEN lease_until ELSE locked_at + $1::interval END < now()
		AND NOT EXISTS (SELECT FROM {s}.workers w WHERE w.id = locked_by AND w.expires_at >= now())
	ORDER BY locked_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED
)
UPDATE {s}.jobs SET
	status = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'queued' END,
	finished_at = CASE WHEN attempts >= max_attempts THEN now() END,
	last_error = 'lease expired: worker ' || coalesce(locked_by, '?') || ' stopped heartbeating',
	errors = ` + appendHistory + `'lease expired: worker ' || coalesce(locked_by, '?') || ' stopped heartbeating'))` + `,
	locked_at = NULL, lease_until = NULL,
	locked_by = CASE WHEN attempts >= max_attempts THEN locked_by END
WHERE id = ANY (ARRAY(SELECT id FROM expired))
RETURNING id, status, queue, metadata ? '` + metaWorkflow + `'`

// purgeArchiveSQL deletes one batch of one retention rule's finished jobs past their
// retention $1, from the archive and (kept or cancelled jobs) from the hot table. Each
// DELETE takes its batch's ids as an array (id = ANY (ARRAY(...))), found once and then
// reached through the primary key: with id IN (SELECT ... LIMIT), statistics that said
// the table was empty made the planner rescan the whole table for every one of its rows.
// k deletes the keys of coalesced enqueues (coalesce.go) older than $8
// (enqueueKeyRetention); the second column counts them, apart from the jobs. The third
// is the cutoff, now() - $1.
//
//   - The rule: $4 the queue, $5 the kind (NULL: any); $6 and $7 the queues and kinds that
//     rules of their own cover, left to those.
//   - finished_at >= $3: where the rule's last complete purge ended (purgeMargin before
//     its cutoff). The archive has no index by queue or kind, only the BRIN index on
//     finished_at (rows arrive in that order); with both bounds it reads only the pages
//     finished since the last purge. Without the lower bound, a queue kept 1 h while the
//     rest is kept 7 days made every sweep read every row finished in between, to find
//     the few of that queue: measured on a 1,000,000-row archive (README "Retention per
//     queue and kind"). The first purge of a sweeper walks from the beginning, once.
const purgeArchiveSQL = `WITH a AS (
	DELETE FROM {s}.jobs_archive WHERE id = ANY (ARRAY(
		SELECT id FROM {s}.jobs_archive
		WHERE finished_at >= $3 AND finished_at < now() - $1::interval
			AND ($4::text IS NULL OR queue = $4) AND ($5::text IS NULL OR kind = $5)
			AND queue <> ALL ($6::text[]) AND kind <> ALL ($7::text[])
		LIMIT $2))
	RETURNING 1
), h AS (
	DELETE FROM {s}.jobs WHERE id = ANY (ARRAY(
		SELECT id FROM {s}.jobs
		WHERE status IN ('succeeded', 'cancelled') AND finished_at < now() - $1::interval
			AND ($4::text IS NULL OR queue = $4) AND ($5::text IS NULL OR kind = $5)
			AND queue <> ALL ($6::text[]) AND kind <> ALL ($7::text[])
		LIMIT $2))
	RETURNING 1
), k AS (
	DELETE FROM {s}.enqueue_batches WHERE key = ANY (ARRAY(
		SELECT key FROM {s}.enqueue_batches WHERE created_at < now() - $8::interval LIMIT $2))
	RETURNING 1
)
SELECT (SELECT count(*) FROM a) + (SELECT count(*) FROM h), (SELECT count(*) FROM k), now() - $1::interval`

// enqueueKeyRetention is how long the key of a coalesced enqueue statement is kept: it is
// needed only while the statement may be sent again, at most coalesceTimeout.
const enqueueKeyRetention = 10 * time.Minute

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

// Sweep runs one sweep now, if no other sweeper is running one: it reclaims every expired
// job (in batches, in one transaction holding the sweep lock), then deletes finished jobs
// past retention in batches of their own short transactions. Each transaction is bounded
// (see sweepTimeout and the limits beside it).
func (s *Sweeper) Sweep(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	c := s.client
	queues := map[string]bool{}
	tctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	err := pgx.BeginFunc(tctx, c.pool, func(tx pgx.Tx) error {
		ctx := tctx
		var dead []int64 // reclaimed workflow tasks that went dead
		if err := setSweepLimits(ctx, tx); err != nil {
			return err
		}
		var got bool
		if err := tx.QueryRow(ctx, sweepLockSQL, c.schema).Scan(&got); err != nil {
			return err
		}
		if !got {
			res.Skipped = true
			return nil
		}
		for {
			rows, err := tx.Query(ctx, s.sql.reclaim, s.cfg.VisibilityTimeout, s.cfg.BatchSize)
			if err != nil {
				return err
			}
			var (
				id            int64
				status, queue string
				task          bool // a workflow task (workflowsettle.go)
				n             int
			)
			_, err = pgx.ForEachRow(rows, []any{&id, &status, &queue, &task}, func() error {
				n++
				res.Reclaimed = append(res.Reclaimed, id)
				if status == string(StatusDead) {
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
				return err
			}
			if n < s.cfg.BatchSize {
				break
			}
		}
		if len(dead) == 0 {
			return nil
		}
		// The dependents of workflow tasks that died here are settled (cancelled, or
		// released under RunDependents) in the same transaction (workflowsettle.go).
		return newWorkflowSettler(c.schema).settle(ctx, tx, dead)
	})
	if err != nil {
		return SweepResult{}, c.wrapErr("sweep", err)
	}
	if res.Skipped {
		return res, nil
	}
	if len(queues) > 0 {
		// Reclaimed jobs are due now: wake the workers rather than wait for their poll.
		names := make([]string, 0, len(queues))
		for q := range queues {
			names = append(names, q)
		}
		nctx, cancel := context.WithTimeout(ctx, sweepStatementTimeout)
		err := c.notify.queues(nctx, c.pool, names)
		cancel()
		if err != nil {
			s.logger.Debug("skiplock: wake-up after reclaim failed", "err", err)
		}
	}
	s.vacuumIfBloated(ctx, &res)
	batches := 0
	for _, p := range s.purgePasses() {
		for ; batches < maxPurgeBatches; batches++ {
			n, done, err := s.purgeBatch(ctx, p)
			if err != nil {
				return res, c.wrapErr("sweep: purge", err)
			}
			res.Purged += n
			if done {
				break
			}
		}
	}
	n, err := s.purgeWorkflows(ctx)
	res.PurgedWorkflows = n
	if err != nil {
		return res, c.wrapErr("sweep: purge workflows", err)
	}
	return res, nil
}

// purgeBatch deletes one batch of p's jobs past retention (and of old enqueue keys), in
// a transaction of its own holding the sweep lock, and reports whether p is done: the
// lock was taken by another sweeper, or neither the batch of jobs nor that of old
// enqueue keys, which goes along with every batch, was full.
func (s *Sweeper) purgeBatch(ctx context.Context, p purgePass) (n int64, done bool, err error) {
	c := s.client
	var got bool
	var keys int64
	var cutoff time.Time
	pctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	err = pgx.BeginFunc(pctx, c.pool, func(tx pgx.Tx) error {
		if err := setSweepLimits(pctx, tx); err != nil {
			return err
		}
		if err := tx.QueryRow(pctx, sweepLockSQL, c.schema).Scan(&got); err != nil || !got {
			return err
		}
		return tx.QueryRow(pctx, s.sql.purgeArchive, p.keep, s.cfg.BatchSize, p.from, p.queue, p.kind,
			p.notQueues, p.notKinds, enqueueKeyRetention).Scan(&n, &keys, &cutoff)
	})
	if err != nil || !got {
		return 0, true, err
	}
	if n < int64(s.cfg.BatchSize) {
		s.purgedUpTo(p.rule, cutoff)
	}
	return n, n < int64(s.cfg.BatchSize) && keys < int64(s.cfg.BatchSize), nil
}

// deadTuplesSQL reads how many dead row versions the jobs table holds, from the
// statistics Postgres keeps for autovacuum.
const deadTuplesSQL = `SELECT coalesce(n_dead_tup, 0), coalesce(n_live_tup, 0) FROM pg_stat_user_tables WHERE relid = $1::regclass`

// vacuumDeadTuples is the dead row count past which a sweep vacuums the jobs table (and a
// quarter of the live rows: a big backlog is not vacuumed over and over).
const vacuumDeadTuples = 5000

// vacuumIfBloated vacuums and analyzes the jobs table when many dead rows have piled up.
// Every job is inserted, updated and deleted, so a queue table bloats as fast as jobs
// flow; autovacuum may be slow to notice (its naptime) or switched off, and a bloated
// table makes every claim walk dead index entries. Errors (no privilege, say) are logged,
// not returned.
//
// ANALYZE, because a VACUUM alone made every claim far dearer where nothing else
// analyzes the table (autovacuum off): it writes the table's size into pg_class but
// leaves no column statistics, and with a size and no statistics the planner guessed
// that a queue holds about one queued job, and planned the claim's first step (the
// highest priority among the queue's queued jobs) as a bitmap scan of all of them and a
// sort instead of one read of jobs_claim_idx. Measured in bench -flow (100,000 jobs):
// from the first vacuum on, a claim read the whole backlog (65,551 index entries for
// one), and the drain ran at 12–23k jobs/s unlimited, 4–8k/s under a limit, against
// 27–33k and 11–12k with the sweeper off. With statistics the planner sees the backlog
// and reads the index in order. The ANALYZE reads a sample of at most 30,000 rows of a
// table that stays small.
//
// A vacuum is also spaced by its own cost: the next comes at the earliest vacuumDuty
// times its duration after it ended, so vacuuming takes at most a tenth of the time
// whatever the table's size. A vacuum of a big backlog's table, each of its indexes read
// whole, at full speed (a VACUUM statement has no cost delay, unlike autovacuum) and,
// every second on a busy drain, took the CPU and the index pages from the claims: in the
// bench's fleet drain (16 processes on one queue, 100,000 jobs) the maintenance vacuum
// ran 3–4 times and the fleet drained at 6–10k jobs/s, against 13.6–14.6k spaced by its
// duration and 15.7–18.9k with no vacuum at all.
func (s *Sweeper) vacuumIfBloated(ctx context.Context, res *SweepResult) {
	if time.Now().UnixNano() < s.vacuumAfter.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, vacuumTimeout)
	defer cancel()
	c := s.client
	table := pgx.Identifier{c.schema, "jobs"}.Sanitize()
	var dead, live int64
	if err := c.pool.QueryRow(ctx, deadTuplesSQL, table).Scan(&dead, &live); err != nil ||
		dead < vacuumDeadTuples || dead < live/4 {
		return
	}
	// SKIP_LOCKED: never wait behind a long lock on the table; the next sweep tries again.
	// The small tables that every claim of a limited queue and every coalesced enqueue
	// update go with it (vacuumWithJobs): nothing else vacuums them when autovacuum is off.
	tables := table
	for _, t := range vacuumWithJobs {
		tables += ", " + pgx.Identifier{c.schema, t}.Sanitize()
	}
	began := time.Now()
	err := s.vacuum(ctx, `VACUUM (SKIP_LOCKED, ANALYZE) `+tables)
	took := time.Since(began)
	s.vacuumAfter.Store(time.Now().Add(vacuumDuty * took).UnixNano())
	if err != nil {
		s.logger.Debug("skiplock: vacuuming the jobs table failed", "err", err)
		return
	}
	res.Vacuumed = true
}

// vacuum runs the maintenance VACUUM statement stmt with autovacuum's cost delay
// (vacuumCostDelay), on a connection of its own: a VACUUM statement runs at full speed
// by default, and on a busy server a full-speed vacuum of a big table takes the CPU and
// the index pages from the claims. VACUUM cannot run in a transaction block, so the delay
// is a session setting, set before and reset after. (Behind a transaction-pooling
// PgBouncer the three statements may meet different server sessions: the vacuum may then
// run at full speed, and another session keep the delay, which slows only VACUUM and
// ANALYZE statements run there.)
func (s *Sweeper) vacuum(ctx context.Context, stmt string) error {
	conn, err := s.client.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET vacuum_cost_delay = '`+vacuumCostDelay+`'`); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, stmt)
	if _, rerr := conn.Exec(ctx, `RESET vacuum_cost_delay`); rerr != nil {
		// The connection keeps the delay: close it rather than hand it to other work.
		_ = conn.Conn().Close(ctx)
	}
	return err
}

// vacuumWithJobs are the tables the maintenance vacuum of the jobs table also vacuums:
// queue_slots (a slot row is rewritten by every claim that fills it: with autovacuum off it
// grew by 320–688 kB per 100,000-job drain of a limited queue, never given back), queue_flow
// (one row per limited queue, rewritten by every lock-path claim) and enqueue_batches (a
// row per coalesced enqueue, purged by the sweeper). They are a few pages each: vacuuming
// them adds next to nothing to the jobs table's vacuum, which comes as often as jobs flow.
var vacuumWithJobs = []string{"queue_slots", "queue_flow", "enqueue_batches"}

// vacuumCostDelay is the cost delay of the maintenance vacuum: autovacuum's default.
const vacuumCostDelay = "2ms"

// vacuumDuty spaces the maintenance vacuums: after one that took d, the next waits at
// least vacuumDuty × d.
const vacuumDuty = 10

// vacuumTimeout bounds the check and the vacuum of the jobs table, which stays small.
const vacuumTimeout = time.Minute

// maxPurgeBatches bounds the retention work of one sweep.
const maxPurgeBatches = 1000
