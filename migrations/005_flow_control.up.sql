-- Migration 5: flow control (QueueConfig.Limits, Client.SetQueueLimits).
--
-- Safe on a live table: the new jobs columns have no default (a catalog change, no
-- rewrite). The two new indexes are partial on rows that no existing job matches (limited
-- and partition_key are NULL on every row until this release writes them), so they start
-- empty; building them still reads the jobs table once under a SHARE lock, during which
-- enqueues and claims wait: the hot table is thin (finished jobs leave it), so that is a
-- short scan. No existing statement gets dearer: the unlimited claim never sets limited,
-- so its rows never enter jobs_limited_running_idx, and jobs without a key never enter
-- jobs_partition_idx.

-- The flow-control partition of a job (EnqueueOptions.PartitionKey): per-key limits and
-- fair sharing act per value. NULL: no key.
ALTER TABLE jobs ADD COLUMN partition_key text;
ALTER TABLE jobs ADD CONSTRAINT jobs_partition_key_check
    CHECK (partition_key IS NULL OR char_length(partition_key) BETWEEN 1 AND 255) NOT VALID;

-- Set by the claim of a queue that has limits, on the rows it claims: only those rows
-- enter jobs_limited_running_idx, so unlimited queues pay nothing for it.
ALTER TABLE jobs ADD COLUMN limited boolean;

-- The limited claim counts the running jobs of its queue (and of each key) here: an entry
-- exists only while a job claimed under a limit is running, so a count reads at most the
-- queue's limit of live entries.
CREATE INDEX jobs_limited_running_idx ON jobs (queue, partition_key)
    WHERE status = 'running' AND limited;

-- The keyed claim walks the distinct keys of a queue's queued jobs here, and takes each
-- key's jobs in claim order. Only jobs with a key are in it: queues that use no keys pay
-- nothing.
CREATE INDEX jobs_partition_idx ON jobs (queue, partition_key, priority DESC, run_at, id)
    WHERE status = 'queued' AND partition_key IS NOT NULL;

-- Limits set at run time (Client.SetQueueLimits, skiplock limits set): while a row exists
-- it replaces the limits the workers declare in code for that queue. NULL: no such limit.
CREATE TABLE queue_limits (
    queue           text        PRIMARY KEY,
    concurrency     integer     CHECK (concurrency > 0),
    key_concurrency integer     CHECK (key_concurrency > 0),
    rate            integer     CHECK (rate > 0),
    rate_period_ms  bigint      NOT NULL DEFAULT 1000 CHECK (rate_period_ms > 0),
    fair            boolean     NOT NULL DEFAULT false,
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- The claim state of a limited queue, written by every limited claim under the queue's
-- claim lock: its token bucket (tokens, refilled_at), the budget the claim had (so the
-- worker can tell "limited" from "empty"), and the round-robin cursor of fair sharing.
CREATE TABLE queue_flow (
    queue       text        PRIMARY KEY,
    tokens      double precision,
    refilled_at timestamptz NOT NULL DEFAULT now(),
    budget      integer     NOT NULL DEFAULT 0,
    cursor_key  text
) WITH (
    -- One row per queue, updated by every claim: room on its page for the new versions,
    -- so updates stay HOT and the page prunes itself (nothing here is ever vacuumed).
    fillfactor = 10
);

-- The slots of a queue that has only a global concurrency limit: Concurrency rows, each
-- free or held by one claim of a job (job_id, and the fence token the claim gave it)
-- that committed in transaction claim_xid. A slot is free again as soon as its job stops
-- running under that claim: nothing has to release it, so a worker that dies holds its slots exactly until the sweeper
-- reclaims its jobs. Claims lock different slot rows (SKIP LOCKED) and so run, and
-- commit, side by side.
CREATE TABLE queue_slots (
    queue     text    NOT NULL,
    slot      integer NOT NULL,
    job_id    bigint,
    fence     bigint,
    claim_xid xid8,
    PRIMARY KEY (queue, slot)
) WITH (
    -- Every claim rewrites the slots it fills: leave room on each page for the new
    -- versions, so updates stay HOT and pages prune themselves instead of growing.
    fillfactor = 10
);
