-- Migration 19: the dashboard's history of wait and run times and failures, per queue
-- and kind, kept small by the maintenance leader.
--
-- ui_timing_rollup: one row per queue, kind and slot (width 1: a minute, kept 3 hours;
-- width 15: a quarter of an hour, kept 7 days), written once the slot is over by the
-- process that leads the maintenance (a Worker with SweepInterval, or a Sweeper; see
-- internal/maintenance, timingrollup.go) from the archive's rows of that slot, read
-- through its BRIN index on finished_at, and the jobs that ended dead or failed in it.
-- succeeded counts the archived jobs, failed the dead and failed ones; the histograms are
-- sparse: wait_b[i] is a bucket (0 below 1 ms, b for [1.15^(b-1), 1.15^b) ms) and
-- wait_n[i] its count, wait_max the largest wait in milliseconds; the same for run.
-- Bounded: at most 51 kinds per queue and slot (the rest as "(other kinds)"), 180
-- minute rows and 672 quarter rows per queue and kind; each write deletes what is past.
--
-- ui_timing_rollup_mark: per width, the start of the first slot not written yet.
--
-- jobs_ended_idx: the dead and failed jobs by finished_at (a partial index: only those
-- rows), so the rollup's and the queues page's failure counts read the jobs of the slot,
-- not every dead one. Its predicate names finished_at IS NOT NULL, which a range on
-- finished_at implies and a list of dead jobs by queue or kind does not: those keep
-- jobs_stuck_idx (with the same predicate as jobs_stuck_idx, the planner took this one
-- for them and read every dead row: 80 ms instead of 1 at a million jobs). Building it reads the jobs table once and blocks its writes for
-- that long (a second or two per million rows): run it when a pause is acceptable. The
-- two tables are new and small; workers of earlier releases ignore them.
CREATE TABLE ui_timing_rollup (
    queue     text        NOT NULL,
    width     smallint    NOT NULL,          -- minutes: 1 or 15
    start_at  timestamptz NOT NULL,
    kind      text        NOT NULL,
    succeeded bigint      NOT NULL,
    failed    bigint      NOT NULL,
    wait_b    smallint[]  NOT NULL,
    wait_n    bigint[]    NOT NULL,
    wait_max  float8      NOT NULL,
    run_b     smallint[]  NOT NULL,
    run_n     bigint[]    NOT NULL,
    run_max   float8      NOT NULL,
    PRIMARY KEY (queue, width, start_at, kind)
);

CREATE TABLE ui_timing_rollup_mark (
    width   smallint    PRIMARY KEY,
    through timestamptz NOT NULL
);

CREATE INDEX jobs_ended_idx ON jobs (finished_at) WHERE status IN ('dead', 'failed') AND finished_at IS NOT NULL;
