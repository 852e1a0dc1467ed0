-- Migration 17: several concurrency keys per job (EnqueueOptions.ConcurrencyKeys,
-- QueueLimits.ConcurrencyKeys; docs/flow-control.md, "Several keys per job"). Numbered 17:
-- 15 and 16 may be taken by other changes in flight; the migrator applies any version it
-- has not applied, gaps included.
--
-- Safe on a live system: two new columns without default (catalog changes, no rewrite) and
-- a CHECK added NOT VALID (no scan). No index: the claim of a queue with per-dimension
-- limits reads the keys of the queue's running limited jobs through
-- jobs_limited_running_idx, which it reads already, and the keys of the queued jobs it
-- looks at. Queues and jobs without them run no new statement.

-- The job's keys by dimension, a JSON object of strings ({"region": "eu", "account":
-- "a-7"}). NULL: none. The claim of a queue whose limits name a dimension counts the job
-- against its key in that dimension while it runs.
ALTER TABLE jobs ADD COLUMN concurrency_keys jsonb;
ALTER TABLE jobs ADD CONSTRAINT jobs_concurrency_keys_check
    CHECK (concurrency_keys IS NULL OR jsonb_typeof(concurrency_keys) = 'object') NOT VALID;

-- The per-dimension limits set at run time (Client.SetQueueLimits), a JSON object of
-- positive integers ({"region": 50}). NULL: none.
ALTER TABLE queue_limits ADD COLUMN concurrency_keys jsonb;
