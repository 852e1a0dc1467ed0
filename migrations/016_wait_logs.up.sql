-- Migration 16: results you can wait for (Client.Wait) and per-job logs (Logger, Logs).
-- Numbered 16: 15 may be taken by another change in flight; the migrator applies any
-- version it has not applied, gaps included.
--
-- Safe on a live system: two new, empty tables. Nothing on the jobs table changes. A job's
-- deadline (EnqueueOptions.Deadline) needs no column: it is kept in the job's metadata
-- under the reserved key skiplock_deadline, which every insert path (single, bulk,
-- workflows, sequences, the SQL function) already carries and the archive keeps.

-- The jobs someone waits for (Client.Wait, Client.WaitWorkflow): one row per waiting
-- call and job, written by the waiter before it reads the job and deleted when it
-- returns. A success or failure batch reads it, in the batch's transaction, for the ids it
-- recorded and notifies the channel <schema>_done for each one found; the table is empty
-- when nobody waits, so the read costs a scan of no pages.
CREATE TABLE job_waiters (
    job_id    bigint      NOT NULL,
    waiter    bigint      NOT NULL, -- the waiting call's own number
    since     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, waiter)
);

-- What a handler logged through skiplock.Logger, per attempt (fence: the attempt's claim
-- token, which grows with every claim, so (fence, seq) orders a job's records in time).
-- Bounded per attempt by the worker (at most 1,000 records and 64 KiB of messages and
-- attributes, then one marker record). Rows are removed with their job: by Delete, and by
-- the sweeper for jobs that are in neither jobs nor jobs_archive any more (retention
-- purges, the delete completion mode).
CREATE TABLE job_logs (
    job_id    bigint      NOT NULL,
    fence     bigint      NOT NULL,
    seq       integer     NOT NULL,
    attempt   integer     NOT NULL,
    at        timestamptz NOT NULL,
    level     integer     NOT NULL, -- slog.Level: -4 debug, 0 info, 4 warn, 8 error
    message   text        NOT NULL,
    attrs     jsonb,
    PRIMARY KEY (job_id, fence, seq)
);
