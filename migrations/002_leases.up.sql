-- Migration 2: a lease per row and a fencing token that never repeats.
--
-- Safe on a live table: ADD COLUMN with no default or a constant default only changes the
-- catalog on PostgreSQL 11 and later (no table rewrite), and the ACCESS EXCLUSIVE lock it
-- takes is held for that catalog change only. No index is added: the sweeper finds expired
-- leases through jobs_running_idx, which holds only running rows.
--
-- Workers of the previous release keep working while this migration is applied and after:
-- they never read these columns; their claims leave lease_until NULL, and the sweeper of
-- this release treats a running row without a lease by its locked_at, as before.

-- When the lease of a running job ends: written by the claiming worker (now() plus its own
-- visibility timeout) at the claim and at every heartbeat, and cleared when the job leaves
-- running. The sweeper takes back only rows whose lease has ended.
ALTER TABLE jobs ADD COLUMN lease_until timestamptz;

-- The fencing token: every claim adds one, nothing ever lowers or resets it (not a retry,
-- a snooze, a shutdown release or a requeue). Every write about a claimed attempt matches
-- (id, fence, locked_by, status = 'running').
ALTER TABLE jobs ADD COLUMN fence bigint NOT NULL DEFAULT 0;

-- A per-job limit on one attempt's run time (EnqueueOptions.Timeout); NULL means the kind's
-- or the worker's.
ALTER TABLE jobs ADD COLUMN timeout_ms bigint;

ALTER TABLE jobs ADD CONSTRAINT jobs_timeout_ms_check CHECK (timeout_ms IS NULL OR timeout_ms > 0) NOT VALID;

-- The archive keeps the token of the attempt that succeeded, for audits.
ALTER TABLE jobs_archive ADD COLUMN fence bigint NOT NULL DEFAULT 0;
