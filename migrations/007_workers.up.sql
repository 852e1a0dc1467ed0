-- Migration 7: the workers table. Each worker process that takes part in the election
-- keeps a row here, renewed with its election statement (no statement of its own), so
-- that a worker knows how many processes serve its queues. A fleet of many processes on
-- one queue bounds the claims and outcome batches each process keeps in flight by that
-- count (fleet.go): past a few dozen statements at once on one queue's head, claims walk
-- each other's fresh entries and the drain collapses. A row whose expires_at has passed
-- is a process that stopped renewing; the election statement deletes such rows a minute
-- later. A new, empty table: nothing on the jobs table changes, so it is safe on a live
-- system.

CREATE TABLE workers (
    id         text        PRIMARY KEY,   -- the worker id (WorkerConfig.ID)
    queues     text[]      NOT NULL,      -- the queues it serves
    started_at timestamptz NOT NULL,      -- its first registration
    expires_at timestamptz NOT NULL       -- it counts as alive until then unless it renews
) WITH (
    -- Every renewal updates a row; leave room for HOT updates on its page.
    fillfactor = 50
);
