-- Migration 8: a key per coalesced enqueue statement, so that the library can send the
-- statement again after an answer it did not get (a lost connection, a pooler's own
-- error) without inserting its jobs twice.
--
-- A new, small table: nothing on the jobs table changes, so it is safe on a live system
-- and takes no lock the workers wait on. (A key column on jobs would have needed a unique
-- index built inside Migrate's transaction, which cannot be CONCURRENTLY, and would not
-- have outlived the job: a job that ran and was deleted before the retry would have been
-- inserted again.) Workers and clients of the previous release never read it. A try
-- that finds its key taken fails on the primary key, which rolls back its jobs with it:
-- no grant beyond INSERT is needed (the jobs take their ids from the identity, as always).
--
-- One row per coalesced statement, not per job: a batch of 50 jobs writes 51 rows. The
-- sweeper deletes rows older than enqueueKeyRetention (far past the 30 s a statement and
-- its retries may take).
CREATE TABLE enqueue_batches (
    key        uuid        PRIMARY KEY,            -- random, one per coalesced statement
    ids        bigint[]    NOT NULL,               -- its jobs' ids, ascending: the statement's order
    created_at timestamptz NOT NULL DEFAULT now()  -- its transaction's now(): its jobs' created_at
);
