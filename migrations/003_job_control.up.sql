-- Migration 3: job control. Paused queues, durable periodic schedules, and the index
-- unique jobs need to look up finished jobs by key.
--
-- Live-table safety: two tables are new; jobs and jobs_archive only gain partial indexes.
-- CREATE INDEX (not CONCURRENTLY: a migration runs in a transaction) blocks writes to
-- the table while it builds. On jobs the index holds only finished rows that carry a
-- unique key, a handful while jobs flow, and the build reads the hot table once. On
-- jobs_archive the build reads the whole archive once: schedule this migration when a
-- pause of archiving (successes wait in the workers' batches) is acceptable.

-- One row per queue that has control state. A row exists only once a queue was paused
-- (or resumed): the claim never reads this table, the workers keep the paused set in
-- memory and re-read it once per poll interval. A later migration adds flow-control
-- columns here.
CREATE TABLE queues (
    name       text        PRIMARY KEY,
    paused_at  timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queues_name_check CHECK (char_length(name) BETWEEN 1 AND 64)
);

-- One row per periodic schedule ever declared. next_run_at is the occurrence to enqueue
-- next: a worker locks the due row (FOR UPDATE SKIP LOCKED), enqueues the job and moves
-- next_run_at on in one transaction, so an occurrence is enqueued exactly once whoever
-- runs it and whatever crashes. declared_at is refreshed by every running worker that
-- declares the schedule; a schedule nobody has declared for a while is marked inactive.
CREATE TABLE periodic (
    name        text        PRIMARY KEY,
    kind        text        NOT NULL,
    queue       text        NOT NULL,
    schedule    text        NOT NULL, -- a description: the cron expression, "every 1m0s"
    misfire     text        NOT NULL, -- run_once, skip or backfill:N
    next_run_at timestamptz NOT NULL,
    last_run_at timestamptz,          -- the scheduled time of the last occurrence enqueued
    last_job_id bigint,
    active      boolean     NOT NULL DEFAULT true,
    declared_at timestamptz NOT NULL DEFAULT now(),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT periodic_name_check CHECK (char_length(name) BETWEEN 1 AND 128)
);

-- Unique jobs whose finished states count (a job succeeded within the period blocks
-- another) look their key up among finished jobs: in the hot table (dead, failed,
-- cancelled, or succeeded under CompletionKeep) and in the archive. Active jobs are
-- covered by jobs_unique_key_idx from migration 1.
CREATE INDEX jobs_unique_key_done_idx ON jobs (unique_key)
    WHERE unique_key IS NOT NULL AND status NOT IN ('queued', 'running');
CREATE INDEX jobs_archive_unique_key_idx ON jobs_archive (unique_key)
    WHERE unique_key IS NOT NULL;
