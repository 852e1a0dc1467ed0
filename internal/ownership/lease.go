// This file holds the lease a worker keeps on the jobs it runs (the attempts it holds,
// heldJobs, are in held.go): the one fence predicate every write about a claimed attempt
// matches (fenceSQL), the heartbeat that renews each row's lease and
// notices jobs taken away, the watchdog that cancels handlers whose lease could not be
// renewed in time, the release of jobs cut off by shutdown, and the remote cancel of a
// held job (control).

package ownership

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/lifecycle"
	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/internal/settle"
)

// FenceSQL is the condition that picks, among the attempts given as pairs of an id in $1
// (ascending) and the fencing token in $2 at the same place, the rows this worker ($3)
// still holds: the fence of every statement about a worker's own jobs (heartbeat,
// release, success, failure, snooze). A job that was reclaimed by the sweeper,
// re-claimed by any worker (this one included: the claim took a new token), cancelled or
// released no longer matches, so a stale write — a late result, a statement replayed
// after a lost reply — changes nothing. Statements about one job pass one-element arrays.
//
//   - The pairs are matched as pairs: one worker can hold two attempts of one job (an
//     attempt it lost, its handler not yet returned, and the job's next claim), so the
//     same id can come twice with two tokens. Looking a token up by the id's place
//     (array_position) compared only the first, and then the live attempt's heartbeat
//     failed and its success was dropped.
//   - The pairs are a hashed subplan: unnest($1, $2) is read once per statement into a
//     hash table that each row probes. "OR false" keeps it one: the planner turns an IN
//     at the top of a WHERE into a join, before it folds constants, and as a join a
//     generic plan (a prepared statement run more than five times, as pgx runs them)
//     chose a nested loop that read every pair for every row: 35–55 ms for a batch of
//     500 against 2–8 ms for this, or for array_position (same run, 30 executions each).
//   - fence is the token: claims add one and nothing else changes it, so unlike attempts
//     (given back by a snooze or a shutdown release, reset by a requeue) it never repeats.
//   - locked_by keeps a fleet of mixed releases safe while migration 002 rolls out: a
//     worker of the previous release claims without taking a new token, but it writes its
//     own locked_by.
//   - id = ANY($1) is the only index condition the planner can use: status has an empty
//     string appended before the comparison, which the planner cannot match to the
//     partial indexes' predicates. With a table that had no statistics, it once preferred
//     scanning jobs_running_idx once per id — a million rows read for a batch of 500.
//   - The statements act by id, never by a ctid read earlier in the statement: a row
//     updated (by a heartbeat, say) after the statement's snapshot would be invisible at
//     its new ctid, and its success silently dropped. By id, Postgres waits for the other
//     update, rechecks this condition on the newest row version and acts on it.
const FenceSQL = `id = ANY ($1::bigint[]) AND (status || '') = 'running' AND locked_by = $3
	AND ((id, fence) IN (SELECT * FROM unnest($1::bigint[], $2::bigint[])) OR false)`

// pairProgress and pairOutput give, for the row's attempt, the JSON at its pair's place in
// $5 (progress) or $4 (output), NULL where that is NULL. The values are gathered once per
// statement (an uncorrelated subquery, run once) into an object keyed "id:fence", which
// each row looks up by its own id and token: of two attempts of one job, the row's token
// picks whose value it gets.
const (
	PairProgress = `((SELECT jsonb_object_agg(i || ':' || f, v::jsonb) FILTER (WHERE v IS NOT NULL)
		FROM unnest($1::bigint[], $2::bigint[], $5::text[]) AS u (i, f, v)) -> (id || ':' || fence))`
	PairOutput = `((SELECT jsonb_object_agg(i || ':' || f, v::jsonb) FILTER (WHERE v IS NOT NULL)
		FROM unnest($1::bigint[], $2::bigint[], $4::text[]) AS u (i, f, v)) -> (id || ':' || fence))`
)

// ReleaseSQL gives jobs cut off by shutdown (their handlers returned) back to the queue
// and gives back the attempt: the job did not fail, the worker stopped. Its run_at is
// kept: it was due when it was claimed, so it goes back to its place in line, not behind
// the jobs queued since (a rolling deploy would otherwise send every running job to the
// back of a backlog). The fence token stays: the next claim takes a new one. Fenced like
// every other update.
const ReleaseSQL = `UPDATE {s}.jobs SET
	status = 'queued', attempts = attempts - 1, locked_at = NULL, locked_by = NULL,
	lease_until = NULL
WHERE ` + FenceSQL

// HeartbeatSQL renews the lease of this worker's running jobs to now() + $4 and returns the
// ones it still holds, each with whether its lease was renewed; a job missing from the
// result was cancelled or reclaimed.
//
//   - The refresh locks with SKIP LOCKED: a row locked by another statement (its success
//     being recorded, the sweeper, a cancel) is one the heartbeat need not touch, and never
//     waiting means the heartbeat can never deadlock with them. Skipped rows are reported
//     held but not renewed: the watchdog keeps counting from their last renewal.
//   - The refresh finds the locked rows with id = ANY (ARRAY(SELECT id FROM lockable)):
//     the ids are gathered once, and the UPDATE reaches them through the primary key
//     whatever the table's statistics say. With id IN (SELECT id FROM lockable), statistics
//     taken while the table was nearly empty (an ANALYZE before a backlog arrived) led
//     the planner to a nested-loop semi join that walked every row of jobs per heartbeat.
//     The other statements that take ids from a subquery do the same.
//   - locked_at is refreshed too: a sweeper of the release before migration 002 judges a
//     lease by locked_at alone, and must not take back a live job during a rolling deploy.
//   - The final SELECT sees the rows as they were before the refresh (one snapshot): it
//     reports what this worker holds, which the refresh does not change.
//   - $5 holds each job's latest progress, at its pair's place (NULL: none recorded,
//     keep the column): written by the update that renews the lease, so progress costs no
//     statement of its own.
const HeartbeatSQL = `WITH lockable AS (
	SELECT id FROM {s}.jobs WHERE ` + FenceSQL + `
	FOR UPDATE SKIP LOCKED
), refreshed AS (
	UPDATE {s}.jobs SET locked_at = now(), lease_until = now() + $4::interval,
		progress = coalesce(` + PairProgress + `, progress)
	WHERE id = ANY (ARRAY(SELECT id FROM lockable))
	RETURNING id
)
SELECT id, fence, id IN (SELECT id FROM refreshed) FROM {s}.jobs WHERE ` + FenceSQL

// errLeaseExpiring is the cancel cause of a job whose lease this worker could not renew in
// time (its database connection is down or hanging): another worker may soon hold it.
var errLeaseExpiring = errors.New("skiplock: the lease of this job could not be renewed (database unreachable); another worker may run it")

// Lease renews and gives back the leases of one worker's held jobs.
type Lease struct {
	pool *pgxpool.Pool
	// hb is the heartbeats' own connection: through the pool they queued behind handlers
	// that held every connection (CompleteTx in long transactions), and at a short
	// visibility timeout the watchdog cancelled a healthy worker's handlers.
	hb         *leaseConn
	workerID   string
	logger     *slog.Logger
	visibility time.Duration // the lease each claim and heartbeat writes
	Interval   time.Duration // between heartbeats: a third of the visibility timeout
	held       *HeldJobs
	// sinceRenewal, when set, says how long ago the worker's own lease (its row in the
	// workers table) was last renewed: the watchdog cancels every handler
	// workerCancelAfter after that, before the row can expire (reclaim.go).
	sinceRenewal func() (time.Duration, bool)
	heartbeat    string // heartbeatSQL, rendered
	release      string // releaseSQL, rendered
	orphans      string // orphansSQL, rendered (orphan.go)
	// orphanCandidates is orphanCandidatesSQL, rendered (orphan.go).
	orphanCandidates string
	// unheldSince holds, for each running job of this worker it did not hold at the last
	// look, when it was first seen so (orphan.go). Used by the heartbeat loop only.
	unheldSince map[jobtype.AttemptKey]time.Time
	unrecorded  string           // unrecordedSQL, rendered (orphan.go)
	cancelled   *cancelledLeases // leases of jobs cancelled while they ran (cancelled.go)
	loop        *lifecycle.Loop
	// stranded counts the jobs putBack could not put back (Stranded).
	stranded atomic.Int64
	// Flows settles the workflow tasks whose jobs PutBackUnrecorded sends dead, and the
	// sequence tasks whose cancelled attempts EndCancelled ends; nil: none are settled.
	Flows *settle.Settler
}

func NewLease(pool *pgxpool.Pool, schema, workerID string, visibility time.Duration, held *HeldJobs, sinceRenewal func() (time.Duration, bool), logger *slog.Logger) *Lease {
	return &Lease{
		pool: pool, hb: newLeaseConn(pool, "skiplock-heartbeat "+workerID),
		workerID: workerID, logger: logger, visibility: visibility, Interval: HeartbeatInterval(visibility), held: held,
		sinceRenewal:     sinceRenewal,
		heartbeat:        pgutil.Render(schema, HeartbeatSQL),
		release:          pgutil.Render(schema, ReleaseSQL),
		orphans:          pgutil.Render(schema, orphansSQL),
		orphanCandidates: pgutil.Render(schema, orphanCandidatesSQL),
		unrecorded:       pgutil.Render(schema, unrecordedSQL),
		cancelled:        newCancelledLeases(pool, schema, workerID, visibility, logger),
	}
}

// CancelMargin is how long before a held job's lease could end the watchdog cancels its
// handler, as a fraction of the visibility timeout: a lease renewed at t lasts until at
// least t + visibility, and the handler is told at t + visibility - visibility/cancelMargin.
const CancelMargin = 3

// HeartbeatInterval is how often a worker renews the leases of the jobs it holds: a third
// of the visibility timeout.
func HeartbeatInterval(visibility time.Duration) time.Duration { return visibility / 3 }

// StaleClaimAfter is how old a claim may be, from the start of its statement, when its
// reply arrives for its jobs to start (internal/claim, ClaimLoopConfig.StaleAfter): their
// leases, counted from that start, must outlast the worker's next heartbeat. The watchdog
// cancels a handler whose lease went unrenewed for visibility - visibility/CancelMargin
// (watch), and the next heartbeat may come a whole HeartbeatInterval after the job starts:
// a job started later than this could be cancelled at the watchdog's next look, before
// any heartbeat renewed its lease, its attempt spent for nothing.
func StaleClaimAfter(visibility time.Duration) time.Duration {
	return visibility - visibility/CancelMargin - HeartbeatInterval(visibility)
}

// run heartbeats every interval, and watches the leases, until ctx ends.
func (l *Lease) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); l.watch(ctx) }()
	defer wg.Wait()
	defer l.hb.close()
	t := time.NewTicker(l.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.Beat(ctx)
			l.takeBackOrphans(ctx)
		}
	}
}

// watch cancels the handlers of held jobs whose lease was not renewed for
// visibility - visibility/cancelMargin: their heartbeats are not landing (the database
// is unreachable, or the connection black-holed), and once the lease ends another worker
// may claim the job. Told in time, a handler stops before anyone else can start it.
func (l *Lease) watch(ctx context.Context) {
	t := time.NewTicker(watchEvery(l.visibility))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cutoff := time.Now().Add(-(l.visibility - l.visibility/CancelMargin))
		if lost := l.held.expiring(cutoff, errLeaseExpiring); len(lost) > 0 {
			l.logger.Warn("skiplock: heartbeats are not landing; cancelling handlers before their leases end",
				"jobs", len(lost))
		}
		if d, ending := l.sinceOwnRenewal(); ending {
			// Every attempt held now: the worker's lease covers them all.
			if lost := l.held.expiring(time.Now().Add(time.Hour), errWorkerLeaseExpiring); len(lost) > 0 {
				l.logger.Warn("skiplock: this worker's lease is not being renewed; cancelling its handlers before other workers may take their jobs",
					"jobs", len(lost), "since_renewal", d)
			}
		}
	}
}

// watchEvery is how often the watchdog (watch) looks at the leases of a worker whose
// visibility timeout is visibility.
func watchEvery(visibility time.Duration) time.Duration {
	return max(min(visibility, workerTTL)/(4*CancelMargin), time.Millisecond)
}

// sinceOwnRenewal returns how long ago the last committed renewal of the worker's own
// lease (its row in the workers table) started, and whether that is past
// workerCancelAfter: the lease is ending, and the worker's handlers are cancelled (watch).
func (l *Lease) sinceOwnRenewal() (time.Duration, bool) {
	if l.sinceRenewal == nil {
		return 0, false
	}
	d, ok := l.sinceRenewal()
	return d, ok && d > workerCancelAfter
}

// OwnLeaseEnding reports whether the worker's own lease is ending for its claims: whether
// its last committed renewal started at least claimStopAfter ago. The worker then claims
// nothing, and starts no job a claim returns (internal/claim, ClaimLoopConfig.LeaseEnding),
// until a renewal lands.
func (l *Lease) OwnLeaseEnding() bool {
	if l.sinceRenewal == nil {
		return false
	}
	d, ok := l.sinceRenewal()
	return ok && d >= claimStopAfter(l.visibility)
}

// claimStopAfter is how long after the start of its last committed renewal a worker of
// visibility timeout visibility stops claiming and starting jobs: one watchdog look
// (watchEvery) before workerCancelAfter. Judged at workerCancelAfter itself, a job
// started just short of the cut was cancelled at the watchdog's next look, its attempt
// spent. Renewals land at most ~4.2 s apart under CPU starvation (docs/ownership.md §7),
// well short of this (5.8 s at defaults): a healthy worker never pauses its claims.
func claimStopAfter(visibility time.Duration) time.Duration {
	return workerCancelAfter - watchEvery(visibility)
}

// Beat renews the lease of every held job and cancels, with errJobLost, the context of
// each one the worker no longer holds. The statement may take at most one heartbeat
// interval: a heartbeat that hangs (a half-open connection) is given up, and the next one
// gets a fresh try.
func (l *Lease) Beat(ctx context.Context) {
	ids, fences := l.held.renewable()
	if len(ids) == 0 {
		return
	}
	l.renew(ctx, ids, fences)
}

// renew runs the heartbeat statement for the attempts (ids, fences) and acts on its
// result. Between reading those keys and the statement, an attempt may end and a new
// claim of the same job begin; the new claim has its own key, which this never touches.
func (l *Lease) renew(ctx context.Context, ids, fences []int64) {
	ctx, cancel := context.WithTimeout(ctx, l.Interval)
	defer cancel()
	began := time.Now()
	still := map[jobtype.AttemptKey]bool{}
	var renewed []jobtype.AttemptKey
	var key jobtype.AttemptKey
	var ok bool
	args := []any{ids, fences, l.workerID, l.visibility, l.held.progress(ids, fences)}
	err := l.hb.forEachRow(ctx, l.heartbeat, args, []any{&key.ID, &key.Fence, &ok}, func() error {
		still[key] = true
		if ok {
			renewed = append(renewed, key)
		}
		return nil
	})
	if err != nil {
		l.logger.Warn("skiplock: heartbeat failed", "jobs", len(ids), "err", err)
		return
	}
	l.held.renewedAt(renewed, began)
	var lost []jobtype.AttemptKey
	for i := range ids {
		k := jobtype.AttemptKey{ID: ids[i], Fence: fences[i]}
		if still[k] {
			continue
		}
		if l.held.cancel(k, ErrJobLost) {
			lost = append(lost, k)
			l.logger.Warn("skiplock: job no longer held by this worker; cancelling its context", "job", k.ID, "fence", k.Fence)
		}
	}
	l.cancelled.keep(ctx, lost)
}

// EndCancelled ends the lease of attempt k's row if its job was cancelled while k ran:
// its handler has returned (the outcome recorder calls it for a result it drops because
// the job is no longer held). A sequence task's job is settled with Flows as its lease
// ends (cancelled.go). For any other row it changes nothing.
func (l *Lease) EndCancelled(k jobtype.AttemptKey) { l.cancelled.end(k, l.Flows) }

// releaseTimeout bounds the shutdown release statement.
const releaseTimeout = 10 * time.Second

// ReleaseJobs puts back in the queue, with their attempts given back, the jobs cut off
// by shutdown whose handlers have returned.
func (l *Lease) ReleaseJobs(keys []jobtype.AttemptKey) {
	l.putBack(keys, func(ctx context.Context, ids, fences []int64) (int64, error) {
		tag, err := l.pool.Exec(ctx, l.release, ids, fences, l.workerID)
		return tag.RowsAffected(), err
	})
}

// Stranded returns how many jobs, since the worker started, putBack could not put back
// (its statement failed within releaseTimeout): jobs whose outcome was not written, or
// that a shutdown cut off, left running under this worker. While the worker runs, the
// take-back of its orphans puts them back at a later heartbeat (orphan.go); once it has
// stopped, other workers take them back when its lease ends (reclaim.go). Run compares
// it before and after its shutdown.
func (l *Lease) Stranded() int64 { return l.stranded.Load() }

// putBack runs put, a put-back of the attempts (ids, fences) that returns how many it put
// back (releaseSQL, unrecordedSQL), for keys.
func (l *Lease) putBack(keys []jobtype.AttemptKey, put func(ctx context.Context, ids, fences []int64) (int64, error)) {
	if len(keys) == 0 {
		return
	}
	ids, fences := sortedKeys(keys)
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	// Replaying the release after a lost reply is harmless: the first one, if it
	// committed, made the rows stop matching the fence.
	var n int64
	err := pgutil.Retry(ctx, func() (err error) {
		n, err = put(ctx, ids, fences)
		return err
	})
	if err != nil {
		l.stranded.Add(int64(len(ids)))
		l.logger.Error("skiplock: putting unfinished jobs back failed; they are taken back once this worker's lease ends (when it stops or dies)",
			"jobs", len(ids), "err", err)
		return
	}
	l.logger.Info("skiplock: unfinished jobs put back in the queue", "jobs", n)
}

// ErrJobLost is the cancel cause of a job whose lease this worker no longer holds
// (reclaimed by the sweeper, or cancelled).
var ErrJobLost = errors.New("skiplock: job is no longer held by this worker (cancelled or reclaimed)")

// Start starts the heartbeat and the watchdog. They outlive Run's ctx: an attempt keeps
// its lease renewed until its outcome is written, and the leases of handlers that ignore
// shutdown run out only once Stop ends the heartbeats.
func (l *Lease) Start(ctx context.Context) error {
	l.loop = lifecycle.NewLoop(l.run, lifecycle.UntilStop)
	return l.loop.Start(ctx)
}

// Stop ends the heartbeats and the watchdog.
func (l *Lease) Stop() { l.loop.Stop() }

// Control acts on a control message from another process: a job cancelled remotely has
// its handler's context cancelled at once, not at the next heartbeat.
func (l *Lease) Control(m notify.ControlMsg) {
	if m.Op == notify.ControlCancel && l.held.cancelID(m.ID, ErrJobLost) {
		l.logger.Info("skiplock: job cancelled remotely; cancelling its context", "job", m.ID)
	}
}
