// This file holds the sweeper's maintenance vacuum: with autovacuum off or behind, the
// jobs table (and the small tables that churn with it) is vacuumed when its dead tuples
// pile up, and analyzed when it has grown many times over, throttled and spaced by its
// own duration.

package maintenance

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/jobtype"
)

// deadTuplesSQL reads how many dead and live row versions the jobs table ($1) holds, from
// the statistics Postgres keeps for autovacuum, and the size in pages of it and of the
// workflow tasks table ($2): as their last VACUUM or ANALYZE recorded it (relpages) and
// as it is now (the file's size, known at once, where the statistics lag by seconds).
const deadTuplesSQL = `SELECT coalesce(s.n_dead_tup, 0), coalesce(s.n_live_tup, 0),
	c.relpages::bigint, pg_relation_size(c.oid) / current_setting('block_size')::bigint,
	w.relpages::bigint, pg_relation_size(w.oid) / current_setting('block_size')::bigint
FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid, pg_class w
WHERE s.relid = $1::regclass AND w.oid = $2::regclass`

// analyzeGrowth and analyzeFloor: the jobs table is analyzed when it holds more than
// analyzeGrowth times the pages its statistics recorded (counting at least analyzeFloor
// pages, 256 kB), so that Postgres plans the claims anew for a table that has grown (see
// analyzeIfGrown).
const (
	analyzeGrowth = 4
	analyzeFloor  = 32
)

// vacuumDeadTuples is the dead row count past which a sweep vacuums the jobs table, and a
// quarter of the live rows (a big backlog is not vacuumed over and over), but never more
// than vacuumDeadCap (vacuumDue).
const vacuumDeadTuples = 5000

// vacuumDeadCap bounds the quarter of the live rows: every claim walks the dead entries
// of the jobs it and the others took since the last vacuum at the head of the claim
// index, and with a backlog of 10^7 jobs a quarter is 2.5 million of them. Measured (bench
// -scale backlog, plain SQL on a 10^7 backlog): the claim's two index scans took 0.1 ms
// after a vacuum, 2.2 ms after 100,000 claimed jobs, 8.7 ms after 500,000 and 35 ms after
// 2.5 million. 100,000 is where the table's own autovacuum settings (migration 1: a
// threshold of 1,000 and a scale factor of 0.01) start a vacuum of such a table. The
// vacuums stay spaced by their own duration (vacuumDuty).
const vacuumDeadCap = 100_000

// vacuumDue says whether a table of live rows with dead dead ones is due for the
// maintenance vacuum.
func vacuumDue(dead, live int64) bool {
	return dead >= vacuumDeadTuples && dead >= min(live/4, vacuumDeadCap)
}

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
func (s *Sweeper) vacuumIfBloated(ctx context.Context, res *jobtype.SweepResult) {
	if time.Now().UnixNano() < s.VacuumAfter.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, vacuumTimeout)
	defer cancel()
	c := s.db
	table := pgx.Identifier{c.Schema, "jobs"}.Sanitize()
	tasks := pgx.Identifier{c.Schema, "workflow_tasks"}.Sanitize()
	var dead, live, recorded, pages, tasksRecorded, tasksPages int64
	if err := c.Pool.QueryRow(ctx, deadTuplesSQL, table, tasks).Scan(&dead, &live, &recorded, &pages,
		&tasksRecorded, &tasksPages); err != nil {
		return
	}
	if !vacuumDue(dead, live) || staleDeadCount(dead, pages) {
		s.analyzeIfGrown(ctx, table, recorded, pages)
		// workflow_tasks, which the settler reads and writes by job id and task name in
		// every outcome batch that holds workflow tasks, grows from empty the same way as
		// workflows are enqueued.
		s.analyzeIfGrown(ctx, tasks, tasksRecorded, tasksPages)
		return
	}
	// SKIP_LOCKED: never wait behind a long lock on the table; the next sweep tries again.
	// The small tables that every claim of a limited queue and every coalesced enqueue
	// update go with it (vacuumWithJobs): nothing else vacuums them when autovacuum is off.
	tables := table
	for _, t := range vacuumWithJobs {
		tables += ", " + pgx.Identifier{c.Schema, t}.Sanitize()
	}
	began := time.Now()
	err := s.vacuum(ctx, `VACUUM (SKIP_LOCKED, ANALYZE) `+tables)
	took := time.Since(began)
	s.VacuumAfter.Store(time.Now().Add(vacuumDuty * took).UnixNano())
	if err != nil {
		s.logger.Debug("skiplock: vacuuming the jobs table failed", "err", err)
		return
	}
	res.Vacuumed = true
}

// analyzeIfGrown analyzes table (sanitized: the jobs table, or workflow_tasks)
// when it has many times the pages its statistics recorded: a backlog written into a
// queue that was empty. The ANALYZE makes Postgres drop every session's cached plans of
// statements on the table.
//
// Why: pgx prepares each statement once per connection, and after five runs Postgres
// keeps a generic plan for it, made for the table as it was then. A worker that started
// on an empty queue had its claims planned for a table of a few pages, where reading the
// whole table is cheaper than following the claimed rows' ctids, and that plan stayed
// while a burst filled the table, until an ANALYZE (autovacuum's, up to a minute or more
// later; never with autovacuum off). auto_explain showed a claim reading 98,724 rows to
// update 48; such a worker drained a 100,000-job burst at 11-13k jobs/s, against 23-30k
// for a worker started after the burst (bench/README.md, "A worker started on an empty
// queue"). The check costs nothing but the read above; the ANALYZE reads a sample of at
// most 30,000 rows, once per fourfold growth of the table's file, spaced like the vacuum.
func (s *Sweeper) analyzeIfGrown(ctx context.Context, table string, recorded, pages int64) {
	s.analyzedMu.Lock()
	last := s.analyzed[table]
	base := max(recorded, analyzeFloor)
	if last.recorded == recorded {
		base = max(base, last.pages)
	}
	grown := pages > analyzeGrowth*base
	if grown {
		s.analyzed[table] = analyzedSize{pages: pages, recorded: recorded}
	}
	s.analyzedMu.Unlock()
	if !grown {
		return
	}
	began := time.Now()
	err := s.vacuum(ctx, `ANALYZE `+table)
	s.VacuumAfter.Store(time.Now().Add(vacuumDuty * time.Since(began)).UnixNano())
	if err != nil {
		s.logger.Debug("skiplock: analyzing a grown table failed", "table", table, "err", err)
	}
}

// maxTuplesPerPage is the most row versions a heap page of 8 kB holds (Postgres's
// MaxHeapTuplesPerPage: the page less its header, over the smallest tuple header and its
// line pointer). A job row is far bigger, so real tables hold a tenth of that or less.
const maxTuplesPerPage = (8192 - 24) / (24 + 4)

// staleDeadCount reports that the statistics count more dead rows than a table of pages
// pages can hold: they predate a TRUNCATE (which empties the file at once, while the
// counts of the rows the truncating session and others had written reach the statistics
// up to a second later, after it). Vacuuming such a table finds nothing to do, and its
// ANALYZE would do harm: it records an empty table, so Postgres drops every session's
// cached plans on it and plans the claims afresh for a table of no rows. Seen in the
// bench, which truncates the jobs table between workloads: the next workload's first
// vacuum check read 17,762–60,050 dead rows in a table of one page, and its VACUUM
// (ANALYZE) and the re-planning it caused landed among the latency workload's first job
// starts. (For a block size above 8 kB the bound is four times too low at worst, which only
// lets such a vacuum through as before.)
func staleDeadCount(dead, pages int64) bool {
	return dead > pages*maxTuplesPerPage
}

// analyzedSize is a table's size when analyzeIfGrown last analyzed it: its pages, and the
// pages its statistics recorded then.
type analyzedSize struct{ pages, recorded int64 }

// vacuum runs the maintenance VACUUM statement stmt with autovacuum's cost delay
// (vacuumCostDelay), on a connection of its own: a VACUUM statement runs at full speed
// by default, and on a busy server a full-speed vacuum of a big table takes the CPU and
// the index pages from the claims. VACUUM cannot run in a transaction block, so the delay
// is a session setting, set before and reset after. (Behind a transaction-pooling
// PgBouncer the three statements may meet different server sessions: the vacuum may then
// run at full speed, and another session keep the delay, which slows only VACUUM and
// ANALYZE statements run there.)
func (s *Sweeper) vacuum(ctx context.Context, stmt string) error {
	conn, err := s.db.Pool.Acquire(ctx)
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
// (one row per limited queue, rewritten by every lock-path claim), queue_key_flow (one row
// per key of a queue with KeyRate, rewritten by every claim that starts a job of the key)
// and enqueue_batches (a row per coalesced enqueue, purged by the sweeper). They are a few
// pages each: vacuuming them adds next to nothing to the jobs table's vacuum, which comes
// as often as jobs flow.
var vacuumWithJobs = []string{"queue_slots", "queue_flow", "queue_key_flow", "enqueue_batches"}

// vacuumCostDelay is the cost delay of the maintenance vacuum: autovacuum's default.
const vacuumCostDelay = "2ms"

// vacuumDuty spaces the maintenance vacuums: after one that took d, the next waits at
// least vacuumDuty × d.
const vacuumDuty = 10

// vacuumTimeout bounds the check and the vacuum of the jobs table, which stays small.
const vacuumTimeout = time.Minute
