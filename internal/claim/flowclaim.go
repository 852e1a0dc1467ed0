// This file holds the claim paths of queues with limits (QueueLimits): the slot path for a
// queue with only a global concurrency limit, and the lock path for per-key limits, rate
// limits and fair sharing. A queue without limits never comes here (claim.go).

package claim

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// flowLockSQL takes the queue's claim lock for the rest of the (implicit) transaction.
// Its first key, 1936419190, is flow control's; the second is a hash of the schema and the
// queue ($1). (The sweeper's lock has another first key: the two never collide; two
// queues whose names hash alike share a lock, which costs them waiting, not exactness.)
//
// This is what keeps every limit exact at READ COMMITTED. It runs as its own statement,
// before the claim statement of the same transaction: a statement's snapshot is taken when
// it starts, so a lock taken inside the claim statement itself would be taken after the
// snapshot, and the claim would count the running jobs as they were before the previous
// holder committed. Here the previous holder has committed (and is visible) by the time
// the lock is granted, and the claim statement's snapshot is taken after that.
//
// Why the count cannot drift: a job of the queue becomes running only through a claim
// under this lock (or a slot claim under it in shared mode, which the count includes), and stops being running by any other statement (success, failure,
// snooze, release, cancel, the sweeper's reclaim of a dead worker's job) without needing
// it. A claim may see a job as running that has just finished, and so take one slot
// fewer than it could; it can never see a free slot that is not. Nothing is counted in
// memory: a worker that dies holds its slots exactly as long as its jobs stay running,
// i.e. until the sweeper reclaims them.
//
// The slot claims of the queue take the same lock in shared mode (flowSharedLockSQL):
// they run side by side, while a lock-path claim waits for those in flight and they wait
// for it. So while a change of limits moves the queue from one path to the other, and
// workers that have heard of it claim on the new path beside workers that have not yet,
// every claim still sees the jobs the others started, whatever path took them.
const flowLockSQL = `SELECT pg_advisory_xact_lock(1936419190, hashtext($1))`

// flowSharedLockSQL is flowLockSQL in shared mode, taken by the slot claims, as their own
// statement before the claim for the same reason.
const flowSharedLockSQL = `SELECT pg_advisory_xact_lock_shared(1936419190, hashtext($1))`

// flowPrefixSQL is the head of both limited claim statements: how many jobs this claim
// may take. Parameters: $1 queue, $2 free slots of this worker, $3 worker id,
// $4 Concurrency (NULL: none), $5 Rate (NULL: none), $6 RatePeriod in seconds, $7 the
// worker's visibility timeout (the lease the claim writes).
//
//   - clock is read once, after the lock was granted (now() is the transaction's start,
//     before the wait): it measures the refill of the token bucket, and since claims of a
//     queue are serialized, it never goes back.
//   - bucket refills the tokens by the time elapsed since the last limited claim, at Rate
//     per RatePeriod, up to Rate: the bucket state lives in queue_flow, shared by all hosts.
//   - budget is the most jobs this claim may take: the worker's free slots, the queue's
//     free global slots (Concurrency minus its running jobs, counted through
//     jobs_limited_running_idx), and the whole tokens in the bucket. The count is skipped
//     when there is no global limit (CASE evaluates lazily). attempts >= 0 reads the heap
//     row: a plain index scan marks entries of finished jobs dead as it passes them.
const flowPrefixSQL = `WITH RECURSIVE clock AS MATERIALIZED (
	SELECT clock_timestamp() AS t
), bucket AS MATERIALIZED (
	SELECT CASE WHEN $5::float8 IS NULL THEN NULL::float8
		ELSE least($5::float8, coalesce(f.tokens, 0) + $5::float8 / $6::float8
			* greatest(0, extract(epoch FROM c.t - coalesce(f.refilled_at, c.t))::float8)) END AS tokens,
		f.cursor_key
	FROM clock c LEFT JOIN {s}.queue_flow f ON f.queue = $1
), budget AS MATERIALIZED (
	SELECT greatest(0, least($2::int,
		CASE WHEN $4::int IS NULL THEN NULL ELSE $4::int - (
			SELECT count(*) FROM {s}.jobs
			WHERE queue = $1 AND status = 'running' AND limited AND attempts >= 0)::int END,
		floor(b.tokens)::int)) AS n
	FROM bucket b
)`

// flowPlainPickSQL picks the jobs of a limited queue without keys: claimSQL's walk
// (priority by priority, due jobs only, SKIP LOCKED), cut at the budget. It follows
// flowPrefixSQL, which begins WITH RECURSIVE.
var flowPlainPickSQL = `, ` + prioritiesCTE("$1") + `, picked AS (
	SELECT c.ctid FROM prios p CROSS JOIN LATERAL (
		` + dueScan(`ctid`, `(SELECT n FROM budget)`, true) + `
	) c
	LIMIT (SELECT n FROM budget)
), cursor AS (
	SELECT NULL::text AS k
)`

// flowKeyedPickSQL picks the jobs of a queue with per-key limits or fair sharing; $8 is
// KeyConcurrency (NULL: none).
//
//   - walk_after / walk_before step through the distinct keys of the queue's queued jobs,
//     one seek of jobs_partition_idx each, starting after the round-robin cursor (the last
//     key the previous claim reached) and wrapping around to the first key. ord keeps the
//     walk's order.
//   - ready keeps the keys that have a due job and free per-key slots (KeyConcurrency
//     minus the key's running jobs), and stops the walk once it has as many keys as the
//     budget: a claim never walks more keys than it could serve, except saturated ones.
//     Both checks are scalar subqueries in the LATERAL, one index probe per key: written
//     as EXISTS, the planner (with no statistics on a fresh queue) turned the check into
//     a hash semi-join over every queued job of the queue; without the ORDER BY (which
//     changes no answer), statistics that say most rows are the key's queued jobs made it
//     read the table from its start for the first due one.
//   - nokey serves the jobs without a key as one more key, with an equal share of the
//     budget. They are not in jobs_partition_idx, and finding them anywhere in the queue
//     would mean walking every keyed job, so only the first 64 queued jobs of the queue
//     (in claim order, jobs_claim_idx) are looked through: give every job of a keyed
//     queue a key. They are then read by ctid (a TID scan); the other conditions are
//     written so that no index matches them (status with an empty string appended is
//     hidden from the partial indexes), or the planner may walk the claim index instead.
//   - slots splits the rest of the budget evenly across the ready keys (the first ones in
//     walk order get the remainder); each key then gives at most its share and its free
//     slots, in its own claim order, SKIP LOCKED.
//   - picked and cursor are flowKeyedPickedSQL's.
const flowKeyedPickSQL = `, walk_after AS (
	(SELECT partition_key AS k, 1::bigint AS ord FROM {s}.jobs
	 WHERE status = 'queued' AND queue = $1 AND partition_key IS NOT NULL AND attempts >= 0
	   AND partition_key > coalesce((SELECT cursor_key FROM bucket), '')
	 ORDER BY partition_key LIMIT 1)
	UNION ALL
	SELECT (SELECT j.partition_key FROM {s}.jobs j
	        WHERE j.status = 'queued' AND j.queue = $1 AND j.partition_key IS NOT NULL
	          AND j.attempts >= 0 AND j.partition_key > w.k
	        ORDER BY j.partition_key LIMIT 1), w.ord + 1
	FROM walk_after w WHERE w.k IS NOT NULL
), walk_before AS (
	(SELECT partition_key AS k, 1::bigint AS ord FROM {s}.jobs
	 WHERE status = 'queued' AND queue = $1 AND partition_key IS NOT NULL AND attempts >= 0
	   AND partition_key <= (SELECT cursor_key FROM bucket)
	 ORDER BY partition_key LIMIT 1)
	UNION ALL
	SELECT (SELECT j.partition_key FROM {s}.jobs j
	        WHERE j.status = 'queued' AND j.queue = $1 AND j.partition_key IS NOT NULL
	          AND j.attempts >= 0 AND j.partition_key > w.k
	          AND j.partition_key <= (SELECT cursor_key FROM bucket)
	        ORDER BY j.partition_key LIMIT 1), w.ord + 1
	FROM walk_before w WHERE w.k IS NOT NULL
), walk AS (
	SELECT k, ord FROM walk_after WHERE k IS NOT NULL
	UNION ALL
	SELECT k, ord + 1000000000 FROM walk_before WHERE k IS NOT NULL
), ready AS MATERIALIZED (
	SELECT w.k, w.ord, fr.free, fr.tokens FROM walk w
	CROSS JOIN LATERAL (
		SELECT least(CASE WHEN $8::int IS NULL THEN bu.n
			ELSE least(bu.n, $8::int - (SELECT count(*) FROM {s}.jobs r
				WHERE r.queue = $1 AND r.partition_key = w.k AND r.status = 'running'
				  AND r.limited AND r.attempts >= 0)::int) END, floor(kt.tokens)::int) AS free,
			kt.tokens,
			(SELECT true FROM {s}.jobs d
			 WHERE d.status = 'queued' AND d.queue = $1 AND d.partition_key = w.k
			   AND d.run_at <= now() AND d.attempts >= 0
			 ORDER BY d.priority DESC, d.run_at LIMIT 1) AS due
		FROM budget bu CROSS JOIN LATERAL (` + keyTokensSQL + `w.k` + keyTokensEndSQL + `) kt
		OFFSET 0
	) fr
	WHERE fr.free > 0 AND fr.due
	LIMIT (SELECT n FROM budget)
), nokey_free AS MATERIALIZED (
	SELECT greatest(0, least(
		CASE WHEN $8::int IS NULL THEN bu.n
			ELSE $8::int - (SELECT count(*) FROM {s}.jobs r
				WHERE r.queue = $1 AND r.partition_key IS NULL AND r.status = 'running'
				  AND r.limited AND r.attempts >= 0)::int END,
		ceil(bu.n::numeric / ((SELECT count(*) FROM ready) + 1))::int,
		floor(kt.tokens)::int)) AS n,
		kt.tokens
	FROM budget bu CROSS JOIN LATERAL (` + keyTokensSQL + `''` + keyTokensEndSQL + `) kt
), nokey AS (
	SELECT j.ctid FROM {s}.jobs j
	WHERE j.ctid = ANY (ARRAY(
		SELECT h.ctid FROM {s}.jobs h
		WHERE h.status = 'queued' AND h.queue = $1 AND h.attempts >= 0
		ORDER BY h.priority DESC, h.run_at, h.id
		LIMIT 64))
	  AND (j.status || '') = 'queued' AND j.partition_key IS NULL AND j.run_at <= now()
	LIMIT (SELECT n FROM nokey_free)
	FOR UPDATE SKIP LOCKED
), slots AS MATERIALIZED (
	SELECT r.k, r.free,
		m.rest / m.cnt + CASE WHEN row_number() OVER (ORDER BY r.ord) <= m.rest % m.cnt THEN 1 ELSE 0 END AS share
	FROM ready r, (
		SELECT greatest(0, (SELECT n FROM budget) - (SELECT count(*) FROM nokey)::int) AS rest,
			greatest(1, (SELECT count(*) FROM ready)::int) AS cnt
	) m
)`

// flowKeyedPickedSQL ends flowKeyedPickSQL when the queue has no per-dimension limits
// (flowkeys.go has the variant that has): the jobs nokey locked, and each ready key's
// share of its jobs. cursor is the last key reached: the next claim starts after it.
const flowKeyedPickedSQL = `, picked AS (
	SELECT ctid FROM nokey
	UNION ALL
	SELECT c.ctid FROM slots s CROSS JOIN LATERAL (
		SELECT ctid FROM {s}.jobs
		WHERE status = 'queued' AND queue = $1 AND partition_key = s.k AND run_at <= now()
		ORDER BY priority DESC, run_at, id
		LIMIT least(s.free, s.share)
		FOR UPDATE SKIP LOCKED
	) c
), cursor AS (
	SELECT (SELECT k FROM ready ORDER BY ord DESC LIMIT 1) AS k
)`

// flowSuffixSQL claims the picked jobs and records the claim state.
//
//   - The UPDATE is claimSQL's (by ctid, status running committed by the statement, the
//     fencing columns: keep its SET list in step with claimSQL's), and sets limited:
//     only rows claimed under a limit enter jobs_limited_running_idx, which is what the
//     next claim counts.
//   - state stores the bucket minus the tokens this claim spent (one per start), the time
//     it was refilled to, the budget (so the worker tells "limited" from "no more jobs")
//     and the round-robin cursor. It is the only writer of its row, under the lock.
const flowSuffixSQL = `, claimed AS (
	UPDATE {s}.jobs
	SET status = 'running', locked_at = now(), locked_by = $3, attempts = attempts + 1,
		fence = fence + 1, lease_until = now() + $7::interval, limited = true
	WHERE ctid = ANY (ARRAY(SELECT ctid FROM picked))
	RETURNING ` + jobtype.Columns + `, fence, timeout_ms, partition_key
)` + flowStateTailSQL

// flowKeyedSuffixSQL is flowSuffixSQL for the keyed claim: it also spends the per-key
// tokens (KeyRate, $9; NULL: none, and the insert writes nothing).
//
//   - keyspent stores, for each key this claim started jobs of, its bucket as the claim
//     read it (ready's tokens, or nokey_free's for the jobs without a key, bucket ”)
//     minus one token per start, refilled to the claim's clock. The claim took at most the
//     whole tokens of each key (ready's free), so a bucket never goes below zero. Under the
//     queue's claim lock, like the queue's bucket: the only writer of the queue's rows.
//     Keys this claim started nothing of are not written: their bucket refills the same
//     whether it is written now or later.
const flowKeyedSuffixSQL = `, claimed AS (
	UPDATE {s}.jobs
	SET status = 'running', locked_at = now(), locked_by = $3, attempts = attempts + 1,
		fence = fence + 1, lease_until = now() + $7::interval, limited = true
	WHERE ctid = ANY (ARRAY(SELECT ctid FROM picked))
	RETURNING ` + jobtype.Columns + `, fence, timeout_ms, partition_key
), keyspent AS (
	INSERT INTO {s}.queue_key_flow AS kf (queue, partition_key, tokens, refilled_at)
	SELECT $1, coalesce(c.partition_key, ''),
		coalesce(r.tokens, (SELECT tokens FROM nokey_free)) - count(*), (SELECT t FROM clock)
	FROM claimed c LEFT JOIN ready r ON r.k = c.partition_key
	WHERE $9::float8 IS NOT NULL
	GROUP BY c.partition_key, r.tokens
	ON CONFLICT (queue, partition_key) DO UPDATE SET tokens = excluded.tokens,
		refilled_at = excluded.refilled_at
)` + flowStateTailSQL

// flowStateTailSQL ends both limited claim statements: the queue's claim state.
const flowStateTailSQL = `, state AS (
	INSERT INTO {s}.queue_flow AS f (queue, tokens, refilled_at, budget, cursor_key)
	SELECT $1, b.tokens - (SELECT count(*) FROM claimed), c.t, bu.n, (SELECT k FROM cursor)
	FROM bucket b, clock c, budget bu
	ON CONFLICT (queue) DO UPDATE SET tokens = excluded.tokens, refilled_at = excluded.refilled_at,
		budget = excluded.budget, cursor_key = coalesce(excluded.cursor_key, f.cursor_key)
)
SELECT ` + jobtype.Columns + `, fence, timeout_ms FROM claimed`

// flowStateSQL reads what the claim just recorded, in the same transaction.
const flowStateSQL = `SELECT tokens, budget, NULL::float8 FROM {s}.queue_flow WHERE queue = $1`

// flowKeyStateSQL is flowStateSQL for a queue with KeyRate ($2, per $3 seconds): it also
// reads the fewest tokens of a key whose bucket holds less than one whole token now (NULL:
// none), so that the worker claims again when that key's next token comes. A bucket
// under one token was spent within the last token interval; the keys with nothing queued
// make the worker claim once more in vain, at most once per key spent dry. It reads the
// queue's rows of queue_key_flow at every claim: one per key started within about the
// last minute and KeyRatePeriod (the flow watch deletes refilled ones, pruneKeyFlowSQL);
// the worker uses the answer only when the claim took fewer jobs than it asked for.
const flowKeyStateSQL = `SELECT f.tokens, f.budget, (
	SELECT min(least($2::float8, k.tokens + $2::float8 / $3::float8
		* greatest(0, extract(epoch FROM clock_timestamp() - k.refilled_at)::float8)))
	FROM {s}.queue_key_flow k
	WHERE k.queue = $1 AND k.tokens + $2::float8 / $3::float8
		* greatest(0, extract(epoch FROM clock_timestamp() - k.refilled_at)::float8) < 1)
FROM {s}.queue_flow f WHERE f.queue = $1`

// keyTokensSQL, the key's SQL expression (” for the jobs without a key) and
// keyTokensEndSQL make the subquery of one key's tokens now, by the claim's clock: its
// bucket in queue_key_flow refilled at KeyRate ($9) per KeyRatePeriod ($10 seconds) since
// it was last spent, up to KeyRate; a key without a row has a full bucket. NULL, and no
// read, without KeyRate (CASE evaluates lazily).
const keyTokensSQL = `SELECT CASE WHEN $9::float8 IS NULL THEN NULL::float8 ELSE coalesce((
		SELECT least($9::float8, kf.tokens + $9::float8 / $10::float8
			* greatest(0, extract(epoch FROM (SELECT t FROM clock) - kf.refilled_at)::float8))
		FROM {s}.queue_key_flow kf WHERE kf.queue = $1 AND kf.partition_key = `

// keyTokensEndSQL ends keyTokensSQL.
const keyTokensEndSQL = `), $9::float8) END AS tokens`

// slotClaimSQL claims up to $2 due jobs of queue $1 for worker $3 when the queue's only
// limit is Concurrency ($4 slots; $5 is the worker's visibility timeout): one statement,
// after the queue's claim lock in shared mode (flowSharedLockSQL), so the claims of all
// processes run and commit side by side, and wait only for a lock-path claim (while the
// queue changes path). Each job claimed takes one free slot row of
// queue_slots, and the slot row records it.
//
//   - running counts every running job of the queue that a limited claim took, or that a
//     worker adopted when the queue got its limits (flowQueue.adopt): the jobs holding
//     slots, and the others — claimed under other limits (the lock path, or more slots
//     before the limit was lowered). Through jobs_limited_running_idx, as the lock path.
//   - bound is the slot number below which this claim may take slots: just past the
//     ($4 - running)-th slot not held, in slot order; 0 when running is $4 or more. While
//     every running job holds a slot under the limit (the steady state), that is every
//     slot under the limit, and the claim is the plain slot claim. After a change, the
//     jobs that hold no slot under the limit count against it: the slots a claim may
//     take, plus the running jobs, are never more than $4. Claims that see different
//     counts agree anyway: a job that holds no slot under the limit only ever stops
//     running (new jobs take slots under the limit), so a later count is never higher,
//     and claims with a lower bound take a subset of the slots of those with a higher one.
//   - free locks up to $2 free slots under the bound, SKIP LOCKED: another claim in flight holds the rows
//     it is filling. A slot is free when its holder (job_id, fence) is no longer running
//     under that claim (finished, failed, retried, released, cancelled or reclaimed: none of
//     those statements has to touch the slot), and when the claim that filled it is
//     visible to this statement's snapshot (pg_visible_in_snapshot). That second test is
//     what keeps two claims from filling one slot at READ COMMITTED: if another claim
//     filled the slot and committed after this statement's snapshot was taken, FOR UPDATE
//     re-reads the newest row version and re-checks these conditions on it (EvalPlanQual)
//     but evaluates the running test against the old snapshot, where the new holder is
//     still queued; the holder's claim transaction is invisible to that snapshot, so the
//     slot is skipped instead of taken twice. A claim can thus see a slot taken that was
//     just freed (it takes one job fewer), never a taken slot free.
//   - prios and picked are claimSQL's walk (prioritiesCTE, each priority's scan starting
//     at its first queued job), cut at the number of slots locked.
//   - The jobs and the slots are paired by row number; the slot records the fencing token
//     the claim gives the job (fence + 1, never given again) and this transaction's id.
//   - The UPDATE of the jobs is claimSQL's, $5 being the worker's visibility timeout.
var slotClaimSQL = `WITH RECURSIVE running AS MATERIALIZED (
	SELECT count(*)::int AS n FROM {s}.jobs
	WHERE queue = $1 AND status = 'running' AND limited AND attempts >= 0
), bound AS MATERIALIZED (
	SELECT CASE WHEN r.n >= $4 THEN 0 ELSE coalesce((
		SELECT s.slot + 1 FROM {s}.queue_slots s
		WHERE s.queue = $1 AND s.slot < $4
		  AND NOT EXISTS (
			SELECT 1 FROM {s}.jobs h
			WHERE h.id = s.job_id AND (h.status || '') = 'running' AND h.fence = s.fence)
		ORDER BY s.slot
		OFFSET $4 - r.n - 1 LIMIT 1), $4) END AS slot
	FROM running r
), free AS MATERIALIZED (
	SELECT s.ctid AS sctid, s.slot FROM {s}.queue_slots s
	WHERE s.queue = $1 AND s.slot < (SELECT slot FROM bound)
	  AND (s.claim_xid IS NULL OR pg_visible_in_snapshot(s.claim_xid, pg_current_snapshot()))
	  AND NOT EXISTS (
		SELECT 1 FROM {s}.jobs h
		WHERE h.id = s.job_id AND (h.status || '') = 'running' AND h.fence = s.fence)
	ORDER BY s.slot
	LIMIT $2
	FOR UPDATE SKIP LOCKED
), ` + prioritiesCTE("$1") + `, picked AS MATERIALIZED (
	SELECT c.ctid, c.id, c.fence FROM prios p CROSS JOIN LATERAL (
		` + dueScan(`ctid, id, fence`, `(SELECT count(*) FROM free)`, true) + `
	) c
	LIMIT (SELECT count(*) FROM free)
), pairs AS (
	SELECT f.sctid, p.id, p.fence
	FROM (SELECT sctid, row_number() OVER (ORDER BY slot) AS rn FROM free) f
	JOIN (SELECT id, fence, row_number() OVER (ORDER BY id) AS rn FROM picked) p USING (rn)
), held AS (
	UPDATE {s}.queue_slots s
	SET job_id = p.id, fence = p.fence + 1, claim_xid = pg_current_xact_id()
	FROM pairs p WHERE s.ctid = p.sctid
)
UPDATE {s}.jobs
SET status = 'running', locked_at = now(), locked_by = $3, attempts = attempts + 1,
	fence = fence + 1, lease_until = now() + $5::interval, limited = true
WHERE ctid = ANY (ARRAY(SELECT ctid FROM picked))
RETURNING ` + jobtype.Columns + `, fence, timeout_ms`

// ensureSlotsSQL makes sure queue $1 has slot rows 0..$2-1. Rows past a lowered limit
// stay, unused (claims read slots under the limit only).
const ensureSlotsSQL = `INSERT INTO {s}.queue_slots (queue, slot)
SELECT $1, g FROM generate_series(0, $2::int - 1) g
ON CONFLICT DO NOTHING`

// pruneKeyFlowSQL deletes the buckets of queue $1 (KeyRate) that have refilled: spent
// last more than one KeyRatePeriod ($2 seconds) ago. A bucket never holds less than zero
// tokens and refills KeyRate per period, so such a bucket is full, and a key without a
// row has a full bucket: deleting it changes nothing but the number of rows, which
// flowKeyStateSQL reads on every claim. Without it the queue kept a row per key ever
// started. It needs no lock: a claim that read the row full and writes it back after
// the delete inserts it again, and a delete that meets a row a claim just wrote
// re-checks refilled_at on the new version and leaves it.
const pruneKeyFlowSQL = `DELETE FROM {s}.queue_key_flow
WHERE queue = $1 AND refilled_at < clock_timestamp() - make_interval(secs => $2)`

// slotted reports whether limits l take the slot claim: a global limit and nothing else.
func slotted(l jobtype.QueueLimits) bool {
	return l.Concurrency > 0 && l.Rate == 0 && !keyed(l) && !dimmed(l)
}

// none reports whether l limits nothing.
func none(l jobtype.QueueLimits) bool {
	return l.Concurrency == 0 && l.KeyConcurrency == 0 && l.Rate == 0 && l.KeyRate == 0 && !l.Fair && !dimmed(l)
}

// keyed reports whether the claim must walk partition keys.
func keyed(l jobtype.QueueLimits) bool { return l.KeyConcurrency > 0 || l.KeyRate > 0 || l.Fair }

// claimHint is what a claim tells its loop besides the jobs.
type claimHint struct {
	// more: the claim was cut by a limit, not by a lack of jobs; a finished job of this
	// worker frees a slot worth claiming for.
	more bool
	// slotWait: a slot claim that may have been cut by the queue's slots (it got fewer
	// jobs than it asked for, or took as many as the limit): claim again when this
	// worker's finished jobs are recorded, not when their handlers return (their slots
	// are still held then), and leave the queue to the fallback poll meanwhile.
	slotWait bool
	// again: claim again at once (a keyed claim whose per-key shares left free slots).
	again bool
	// retryIn: the next rate-limit token comes this soon; claim then.
	retryIn time.Duration
}

// flowClaimer runs the limited claims of one schema.
type flowClaimer struct {
	pool                   *pgxpool.Pool
	schema                 string
	lock, plain, keyed, st string
	plainDims, keyedDims   string // the variants for per-dimension limits (flowkeys.go)
	keySt                  string
	sharedLock             string
	slots, ensure, adopt   string
	pruneKeys              string
	visibility             time.Duration // the lease a claim writes
	wrapErr                func(op string, err error) error
}

func NewFlowClaimer(db pgutil.DB, visibility time.Duration) *flowClaimer {
	return &flowClaimer{
		pool: db.Pool, schema: db.Schema, wrapErr: db.WrapErr, visibility: visibility,
		lock:       flowLockSQL,
		sharedLock: flowSharedLockSQL,
		plain:      db.Render(flowPrefixSQL + flowPlainPickSQL + flowSuffixSQL),
		keyed:      db.Render(flowPrefixSQL + flowKeyedPickSQL + flowKeyedPickedSQL + flowKeyedSuffixSQL),
		plainDims:  db.Render(dimStatement(flowPrefixSQL, dimPlainCandSQL, flowSuffixSQL, "$8", "$9")),
		keyedDims:  db.Render(dimStatement(flowPrefixSQL, flowKeyedPickSQL+dimKeyedCandSQL, flowKeyedSuffixSQL, "$11", "$12")),
		st:         db.Render(flowStateSQL),
		keySt:      db.Render(flowKeyStateSQL),
		slots:      db.Render(slotClaimSQL),
		ensure:     db.Render(ensureSlotsSQL),
		adopt:      db.Render(adoptRunningSQL),
		pruneKeys:  db.Render(pruneKeyFlowSQL),
	}
}

// Claim takes up to n due jobs of queue under limits l for worker workerID. It runs three
// statements in one round trip and one implicit transaction: the queue's claim lock, the
// claim, and the read of the state it recorded. The lock ends with the transaction.
func (f *flowClaimer) Claim(ctx context.Context, queue string, l jobtype.QueueLimits, n int, workerID string) ([]ClaimedJob, claimHint, error) {
	if slotted(l) {
		return f.claimSlots(ctx, queue, l, n, workerID)
	}
	var rate, period any
	if l.Rate > 0 {
		rate, period = float64(l.Rate), l.RatePeriod.Seconds()
	}
	args := []any{queue, int32(n), workerID, nullLimit(l.Concurrency), rate, period, f.visibility}
	sql := f.plain
	if keyed(l) {
		sql = f.keyed
		var keyRate, keyPeriod any
		if l.KeyRate > 0 {
			keyRate, keyPeriod = float64(l.KeyRate), l.KeyRatePeriod.Seconds()
		}
		args = append(args, nullLimit(l.KeyConcurrency), keyRate, keyPeriod)
	}
	if dimmed(l) {
		sql = f.plainDims
		if keyed(l) {
			sql = f.keyedDims
		}
		dims, lims := dimArgs(l)
		args = append(args, dims, lims)
	}
	b := &pgx.Batch{}
	b.Queue(f.lock, f.schema+"."+queue)
	b.Queue(sql, args...)
	if l.KeyRate > 0 {
		b.Queue(f.keySt, queue, float64(l.KeyRate), l.KeyRatePeriod.Seconds())
	} else {
		b.Queue(f.st, queue)
	}
	began := time.Now()
	br := f.pool.SendBatch(ctx, b)
	jobs, tokens, budget, keyTokens, err := readFlowClaim(br, began)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, claimHint{}, f.wrapErr("claim", err)
	}
	var h claimHint
	m := len(jobs)
	if m < n && m == budget {
		// Cut by a limit: by the global one (a finished job frees a slot) or by the rate
		// (the next token comes at a known time).
		h.more = l.Concurrency > 0 || l.KeyConcurrency > 0
		if l.Rate > 0 && tokens != nil && *tokens < 1 {
			perToken := l.RatePeriod.Seconds() / float64(l.Rate)
			h.retryIn = max(time.Millisecond, time.Duration((1-*tokens)*perToken*float64(time.Second)))
		}
	} else if m < n && m > 0 && keyed(l) {
		h.again = true // some keys had fewer jobs than their share: the others may have more
	}
	if m < n && dimmed(l) {
		h.more = true // perhaps cut by a full key: a finished job may free it
	}
	if m < n && keyTokens != nil {
		// A key ran out of tokens (KeyRate): its next one comes at a known time.
		perToken := l.KeyRatePeriod.Seconds() / float64(l.KeyRate)
		wait := max(time.Millisecond, time.Duration((1-*keyTokens)*perToken*float64(time.Second)))
		if h.retryIn == 0 || wait < h.retryIn {
			h.retryIn = wait
		}
	}
	return jobs, h, nil
}

// claimSlots is claim for a queue whose only limit is Concurrency: the queue's claim lock
// in shared mode and slotClaimSQL, in one round trip and one implicit transaction.
func (f *flowClaimer) claimSlots(ctx context.Context, queue string, l jobtype.QueueLimits, n int, workerID string) ([]ClaimedJob, claimHint, error) {
	b := &pgx.Batch{}
	b.Queue(f.sharedLock, f.schema+"."+queue)
	b.Queue(f.slots, queue, int32(n), workerID, int32(l.Concurrency), f.visibility)
	jobs, err := sendClaim(ctx, f.pool, b, n)
	if err != nil {
		return nil, claimHint{}, f.wrapErr("claim", err)
	}
	// Fewer jobs than asked: no free slot, or no more due jobs. A slot frees when a job's
	// outcome is committed, so the next claim waits for this worker's to be recorded
	// (slotsFreed) or for the fallback poll (another worker's); due jobs are found by
	// the poll or a notification. A claim that took the whole limit has nothing to claim
	// until then either.
	return jobs, claimHint{slotWait: len(jobs) < n || n >= l.Concurrency}, nil
}

// readFlowClaim reads the three results of a limited claim's batch.
func readFlowClaim(br pgx.BatchResults, began time.Time) (jobs []ClaimedJob, tokens *float64, budget int, keyTokens *float64, err error) {
	if _, err = br.Exec(); err != nil {
		return nil, nil, 0, nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, 0, nil, err
	}
	if jobs, err = scanClaimed(rows, began, 0); err != nil {
		return nil, nil, 0, nil, err
	}
	var b int32
	if err = br.QueryRow().Scan(&tokens, &b, &keyTokens); err != nil {
		return nil, nil, 0, nil, err
	}
	return jobs, tokens, int(b), keyTokens, nil
}

// flowQueue is the limited claim path of one queue, as its claim loops see it.
type flowQueue struct {
	claimer *flowClaimer
	limits  jobtype.QueueLimits

	mu      sync.Mutex
	adopted bool // guarded by mu: adopt has run for this path
}

// adoptRunningSQL marks the running jobs of queue $1 that no limited claim took (the
// plain claim took them, before the queue had limits) as limited, so that the limited
// claims count them: a limit set on a busy queue holds from the start, not once the jobs
// running without it have ended. It reads the running jobs of every queue (through
// jobs_running_idx), once per worker and queue when the queue gets limits.
const adoptRunningSQL = `UPDATE {s}.jobs SET limited = true
WHERE queue = $1 AND status = 'running' AND limited IS NOT TRUE`

// adopt runs adoptRunningSQL for queue before the first limited claim of this path, once the
// plain claims of this worker that were in flight when the path changed have ended (their
// jobs must be marked too). The limited claims of the queue wait for it. It is a no-op on
// a path that replaced another limited one: the running jobs were adopted then, and since
// only limited claims took jobs.
func (f *flowQueue) adopt(ctx context.Context, queue string, plain *sync.RWMutex) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.adopted {
		return nil
	}
	// The plain claims hold plain (the queue runner's plainMu, read) from the moment they find no limited path to
	// the end of their statement; q.flow was set before this path could be claimed with.
	plain.Lock()
	plain.Unlock() //nolint:staticcheck // empty on purpose: a barrier
	// Under the queue's claim lock: the limited claims in flight (of other workers) end
	// first, and those that follow see the jobs marked.
	b := &pgx.Batch{}
	b.Queue(f.claimer.lock, f.claimer.schema+"."+queue)
	b.Queue(f.claimer.adopt, queue)
	if err := f.claimer.pool.SendBatch(ctx, b).Close(); err != nil {
		return f.claimer.wrapErr("claim: adopting the running jobs", err)
	}
	f.adopted = true
	return nil
}

// nullLimit is n as a statement argument: NULL for 0 (no limit).
func nullLimit(n int) any {
	if n == 0 {
		return nil
	}
	return int32(n)
}
