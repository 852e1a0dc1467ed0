-- Migration 14: per-key rate limits (QueueLimits.KeyRate, KeyRatePeriod). Numbered 14, not
-- 13: 13 may be taken by another change in flight; the migrator applies any version it
-- has not applied, gaps included.
--
-- Safe on a live system: one new column without default on queue_limits (a catalog
-- change) and one new, empty table. Nothing on the jobs table changes, and no statement of
-- a queue without KeyRate reads or writes the new table.

-- The per-key rate set at run time (Client.SetQueueLimits). NULL: none.
ALTER TABLE queue_limits ADD COLUMN key_rate integer CHECK (key_rate > 0);
ALTER TABLE queue_limits ADD COLUMN key_rate_period_ms bigint NOT NULL DEFAULT 1000
    CHECK (key_rate_period_ms > 0);

-- The token bucket of each partition key of a queue with KeyRate, written only by the
-- queue's limited claims, under its claim lock, for the keys they start jobs of. Jobs
-- without a key share one bucket, partition_key '' (a real key is never empty). A key
-- without a row has a full bucket: a row whose bucket has refilled is the same as none.
CREATE TABLE queue_key_flow (
    queue         text             NOT NULL,
    partition_key text             NOT NULL,
    tokens        double precision NOT NULL,
    refilled_at   timestamptz      NOT NULL,
    PRIMARY KEY (queue, partition_key)
) WITH (
    -- Updated by every claim that starts a job of the key: room for HOT updates.
    fillfactor = 50
);
