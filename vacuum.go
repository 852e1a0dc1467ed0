// This file holds the sweeper's maintenance vacuum: with autovacuum off or behind, the
// jobs table (and the small tables that churn with it) is vacuumed when its dead tuples
// pile up, throttled and spaced by its own duration.

package skiplock

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

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
