// This file holds the claim: the statement that takes due jobs for a worker in one
// atomic step, and the claimed jobs it returns. The per-queue claim loops that decide when
// to run it are in claimloop.go; queues with limits claim through flowclaim.go.

package claim

import (
	"context"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// prioritiesCTE is prios: the walk of the distinct priorities of queue's queued jobs,
// highest first, one index seek each (a skip scan of jobs_claim_idx). queue is an
// expression of the statement that holds the walk: $1 in the claims, each queue's name in
// the fallback poll. Every walk of a queue's priorities is this one: claimSQL here,
// flowPlainPickSQL and slotClaimSQL in flowclaim.go, dimPlainCandSQL in flowkeys.go, and
// pollSQL in poll.go; a claim loop's resumed claim walks resumedPrioritiesCTE, the same
// walk (priorityWalk) with seeks that skip what its last claim took. Each priority comes
// with the place of its first queued job in the index (run_at, id): the scan of that
// priority's due jobs starts there (dueScan), not at the front of its range (the poll
// needs no scan: that job answers it).
//
// The front of a priority's range holds the index entries of the jobs claimed since the
// table was last vacuumed: a claim moves a job out of the index's predicate, but its entry
// stays until VACUUM. The seek here steps over them to the first queued job; starting the
// scan of due jobs at that job makes each claim step over them once, not twice. It is
// safe: the seek and the scan read one snapshot, so no job before that place is queued in
// it.
//
// The statement must begin WITH RECURSIVE: prios refers to itself.
func prioritiesCTE(queue string) string {
	return priorityWalk(func(below string) string { return firstQueued(queue, under("j.priority", below)) })
}

// under is the condition, for a seek, that expr is below the priority below: empty when
// below is (the walk's first seek).
func under(expr, below string) string {
	if below == "" {
		return ""
	}
	return ` AND ` + expr + ` < ` + below
}

// priorityWalk is a walk of the priorities, prios: seek(""), the first queued job of the
// queue at any priority, then seek("p.priority") for each step, the first one below the
// priority p the walk last found, until a seek finds none.
func priorityWalk(seek func(below string) string) string {
	return `prios AS (
	(` + seek("") + `)
	UNION ALL
	SELECT n.priority, n.run_at, n.id FROM prios p CROSS JOIN LATERAL (
		` + seek("p.priority") + `) n
)`
}

// firstQueued is one seek of a walk: the place (priority, run_at, id) of the first
// queued job of queue, in claim order, among those that cond (SQL on jobs j, starting
// with AND; empty: none) admits. One descent of jobs_claim_idx, and a walk over the
// entries it steps over. attempts >= 0 is always true: it reads the heap row, which
// turns the seek into a plain index scan (claimSQL says why).
func firstQueued(queue, cond string) string {
	return `SELECT j.priority, j.run_at, j.id FROM {s}.jobs j
		 WHERE j.status = 'queued' AND j.queue = ` + queue + ` AND j.attempts >= 0` + cond + `
		 ORDER BY j.priority DESC, j.run_at, j.id LIMIT 1`
}

// dueScan is the scan of one priority's due jobs of queue $1, joined with prios p: the
// rows of jobs_claim_idx from that priority's first queued job (a row comparison on the
// index's (run_at, id), a bound of the index scan) up to now, in claim order, at most
// limit of them, selecting cols, and with lock, locked FOR UPDATE SKIP LOCKED. Every
// claim runs its walk of the priorities (prioritiesCTE) with this scan; they differ only
// in what they select, how many they take and whether they lock.
func dueScan(cols, limit string, lock bool) string {
	scan := `SELECT ` + cols + ` FROM {s}.jobs
		WHERE status = 'queued' AND queue = $1 AND priority = p.priority AND run_at <= now()
			AND (run_at, id) >= (p.run_at, p.id)
		ORDER BY run_at, id
		LIMIT ` + limit
	if lock {
		scan += `
		FOR UPDATE SKIP LOCKED`
	}
	return scan
}

// claimSQL claims up to $2 due jobs of queue $1 for worker $3 in one autocommit statement
// (READ COMMITTED).
//
//   - prios walks the distinct priorities of the queue's queued jobs, highest first, one
//     index seek each (a skip scan over jobs_claim_idx). Stepping priority by priority makes
//     run_at <= now() a range bound of each scan, so jobs scheduled for later (retries in
//     backoff, jobs due tomorrow) are never walked over, whatever their priority: a million
//     future jobs cost the claim nothing. (attempts >= 0 is always true: it reads the heap
//     row, which turns the seek into a plain index scan. An index-only scan would visit the
//     heap for every entry of a job claimed since the last vacuum, and never mark those
//     entries dead, so a draining queue would cost each claim more than the last.)
//   - For each priority, the LATERAL scan reads jobs_claim_idx (queue, priority DESC, run_at,
//     id) WHERE status = 'queued': the rows come out already in claim order, so there is no
//     Sort, and the outer LIMIT stops pulling (and locking) once it has $2 jobs.
//   - FOR UPDATE SKIP LOCKED: concurrent claimers pass over each other's rows instead of
//     waiting on them, so each job goes to exactly one claimer.
//   - The UPDATE finds the locked rows by ctid (a TID scan, no second index descent per
//     row); a row locked FOR UPDATE cannot move before the statement ends.
//   - The UPDATE commits status 'running' with the statement. It is that committed state,
//     not a held lock or an open transaction, that protects the job while its handler runs.
//   - fence + 1 is the fencing token of this claim: no claim of the job before it took the
//     same value, and none after it will. Every later statement about this attempt matches
//     (id, fence, locked_by, status running; see fenceSQL), so a stale worker, or a stale
//     statement of this one, cannot touch a newer claim.
//   - lease_until is this worker's lease: now() + its own visibility timeout ($4). The
//     sweeper takes the job back only once it has passed, whatever its own settings.
//   - timeout_ms is returned beside the row: the job's own limit on this attempt, if any.
var claimSQL = `WITH RECURSIVE ` + prioritiesCTE("$1") + claimBody

// resumedPrioritiesCTE is prioritiesCTE("$1") for a claim that resumes where the claim
// loop's last one took jobs (Resume: priority $5, place ($6, $7) in the claim index).
// Each seek of the walk (resumedSeek), the first and each step to a lower priority, looks
// in three places and keeps the first in claim order: the higher priorities from the
// front of their range, priority $5 from the resume place on, and the lower priorities
// from the front. The entries of priority $5 before the resume place are not looked at:
// they belong to the jobs claimed since the last VACUUM, which every claim's walk from
// the front of the index steps over (about 0.45 ms per claim of 100 with 55,000 of them,
// 265 buffers; bench/README.md, "Issue 45 round 7").
//
// A job queued before the resume place after the last claim (one committed by a
// transaction that began before it, one enqueued with a past RunAt, one put back by a
// failed or late claim or by the sweeper) is not seen by a resumed claim: the claim
// loops walk from the front at least every FullWalkEvery, and after any claim that took
// fewer jobs than it asked for (resumeState), so such a job waits that long at most.
var resumedPrioritiesCTE = priorityWalk(resumedSeek)

// resumedSeek is one seek of resumedPrioritiesCTE: the first queued job of queue $1, in
// claim order, below priority below (empty: at any priority), never looking at the
// entries of priority $5 before the resume place ($6, $7). Each of its three parts is
// one descent of jobs_claim_idx (firstQueued), and the priorities outside the range of a
// part cost it nothing but that descent.
func resumedSeek(below string) string {
	part := func(cond string) string { return `(` + firstQueued("$1", ` AND `+cond) + `)` }
	return `SELECT f.priority, f.run_at, f.id FROM (
		` + part(`j.priority > $5::smallint`+under("j.priority", below)) + `
		UNION ALL
		` + part(`j.priority = $5::smallint`+under("$5::smallint", below)+` AND (j.run_at, j.id) >= ($6::timestamptz, $7::bigint)`) + `
		UNION ALL
		` + part(`j.priority < $5::smallint`+under("j.priority", below)) + `
	) f
	ORDER BY f.priority DESC, f.run_at, f.id LIMIT 1`
}

// claimBody is claimSQL after its walk of the priorities: the pick of due jobs and the
// UPDATE that claims them.
var claimBody = `, picked AS (
	SELECT c.ctid FROM prios p CROSS JOIN LATERAL (
		` + dueScan(`ctid`, `$2`, true) + `
	) c
	LIMIT $2
)
UPDATE {s}.jobs
SET status = 'running', locked_at = now(), locked_by = $3, attempts = attempts + 1,
	fence = fence + 1, lease_until = now() + $4::interval
WHERE ctid = ANY (ARRAY(SELECT ctid FROM picked))
RETURNING ` + jobtype.Columns + `, fence, timeout_ms`

// resumedClaimSQL is claimSQL with resumedPrioritiesCTE's walk ($5, $6, $7: the Resume).
var resumedClaimSQL = `WITH RECURSIVE ` + resumedPrioritiesCTE + claimBody

// FullWalkEvery is how often at least a claim loop's plain claim walks the claim index
// from the front while it resumes its claims where the last one took jobs (Resume): the
// longest a job queued behind that place waits beyond a claim that would have taken it.
// A walk from the front steps over every job claimed since the last VACUUM; in a
// sustained drain of a 10^7 backlog, walks every 100 ms were about 3 % of the claims and
// set their p99 (11.4–12.7 ms), every 500 ms the p99 was 6.1–7.6 ms (bench/README.md,
// "Issue 45 round 7").
const FullWalkEvery = 500 * time.Millisecond

// Resume is a place in a queue's claim index where a claim loop's next claim may start
// its walk of one priority: the earliest job (run_at, id) of the highest priority the
// loop's last claim took. The entries before it in that priority are, but for the jobs
// resumedPrioritiesCTE describes, those of jobs claimed since the last VACUUM.
type Resume struct {
	Priority int16
	RunAt    time.Time
	ID       int64
}

// resumeAt returns the Resume of a claim that took jobs: its highest priority, and the
// earliest job of it in claim order (run_at, id). False when jobs is empty.
func resumeAt(jobs []ClaimedJob) (Resume, bool) {
	if len(jobs) == 0 {
		return Resume{}, false
	}
	first := jobs[0].Row
	for _, j := range jobs[1:] {
		r := j.Row
		if r.Priority > first.Priority || r.Priority == first.Priority &&
			(r.RunAt.Before(first.RunAt) || r.RunAt.Equal(first.RunAt) && r.ID < first.ID) {
			first = r
		}
	}
	return Resume{Priority: int16(first.Priority), RunAt: first.RunAt, ID: first.ID}, true
}

// Claimer runs the claim statement, rendered for one schema.
type Claimer struct {
	pool       *pgxpool.Pool
	Sql        string        // claimSQL
	ResumedSql string        // resumedClaimSQL
	visibility time.Duration // the lease a claim writes
	wrapErr    func(op string, err error) error
}

func NewClaimer(db pgutil.DB, visibility time.Duration) *Claimer {
	return &Claimer{pool: db.Pool, Sql: db.Render(claimSQL), ResumedSql: db.Render(resumedClaimSQL),
		visibility: visibility, wrapErr: db.WrapErr}
}

// ClaimedJob is one job a claim returned: the row, the fencing token the claim took, the
// job's own timeout (0: none), and when the claim statement started, by the worker's clock
// (the lease lasts at least the visibility timeout from then).
type ClaimedJob struct {
	Row     *jobtype.JobRow
	Fence   int64
	Timeout time.Duration
	Leased  time.Time
}

// Claim takes up to limit due jobs of queue for the worker id.
//
// The claim runs after pgutil.PlanSettingsSQL, in its pipeline and transaction (no round
// trip of its own), so every claim runs its connection's cached plan, which walks the
// claim index whatever the table held when it was made. Without it Postgres planned the
// claim anew at nearly every run: its LIMIT $2 is a parameter, which a generic plan
// estimates at a tenth of the due jobs, so with 100,000 queued jobs the generic plan cost
// 7,287 against the custom plan's 115, for the same plan. In a 200,000-job drain 3,680
// of 4,141 claims were planned, 0.45–0.68 ms each, about 12 µs of server CPU per claimed
// job (pg_stat_statements; bench/README.md, "Issue 45 round 6").
//
// With from, the claim resumes there (resumedClaimSQL); nil: it walks from the front of
// the claim index (claimSQL).
func (c *Claimer) Claim(ctx context.Context, queue string, limit int, workerID string, from *Resume) ([]ClaimedJob, error) {
	b := &pgx.Batch{}
	b.Queue(pgutil.PlanSettingsSQL)
	if from != nil {
		b.Queue(c.ResumedSql, queue, limit, workerID, c.visibility, from.Priority, from.RunAt, from.ID)
	} else {
		b.Queue(c.Sql, queue, limit, workerID, c.visibility)
	}
	out, err := sendClaim(ctx, c.pool, b, limit)
	if err != nil {
		return nil, c.wrapErr("claim", err)
	}
	return out, nil
}

// sendClaim sends b, one round trip and one implicit transaction, whose last statement is
// a claim (read by scanClaimed, with limit) and whose others return nothing to read, and
// returns the claimed jobs.
func sendClaim(ctx context.Context, pool *pgxpool.Pool, b *pgx.Batch, limit int) ([]ClaimedJob, error) {
	began := time.Now()
	br := pool.SendBatch(ctx, b)
	var err error
	for range b.Len() - 1 {
		if _, err = br.Exec(); err != nil {
			break
		}
	}
	var out []ClaimedJob
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			out, err = scanClaimed(rows, began, limit)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return out, err
}

// scanClaimed reads the rows of a claim statement (jobColumns, fence, timeout_ms) whose
// statement started at began, by the worker's clock; limit is how many it asked for, the
// room made for them (0: unknown).
func scanClaimed(rows pgx.Rows, began time.Time, limit int) ([]ClaimedJob, error) {
	defer rows.Close()
	out := make([]ClaimedJob, 0, limit)
	var (
		r         jobtype.RowReader // one set of destinations for every row
		fence     int64
		timeoutMs pgtype.Int8
	)
	for rows.Next() {
		j := new(jobtype.JobRow) // one allocation per row, the row's own
		if err := r.Read(rows, j, &fence, &timeoutMs); err != nil {
			return nil, err
		}
		cj := ClaimedJob{Row: j, Fence: fence, Leased: began}
		if timeoutMs.Valid {
			cj.Timeout = TimeoutOf(timeoutMs.Int64)
		}
		out = append(out, cj)
	}
	return out, rows.Err()
}

// TimeoutOf is the limit of an attempt whose job's timeout_ms is ms (positive: the
// table's check). A limit past what a time.Duration holds (about 292 years; the SQL
// enqueue function takes any interval) is the longest one it holds, not a product that
// wrapped around to a few microseconds or a negative value.
func TimeoutOf(ms int64) time.Duration {
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// ClaimTimeout bounds one claim statement.
const ClaimTimeout = 30 * time.Second
