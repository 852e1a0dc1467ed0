-- Migration 6: the leader table. Per-fleet maintenance (the sweep, the archive purge, the
-- dead-row vacuum check) runs on one elected process at a time. A process leads while its
-- row's expires_at is in the future and renews it every few seconds; when it dies, the row
-- expires and another process takes it over with one statement. A row with a deadline, not
-- a session advisory lock, so the election works through a transaction-pooling PgBouncer.
-- A new, empty table: nothing on the jobs table changes, so it is safe on a live system.

CREATE TABLE leader (
    name       text        PRIMARY KEY,   -- what is led, e.g. 'maintenance'
    leader_id  text        NOT NULL,      -- the worker (or sweeper) id of the leader
    elected_at timestamptz NOT NULL,      -- start of the current leader's term
    expires_at timestamptz NOT NULL       -- the leader leads until then unless it renews
) WITH (
    -- Every renewal updates the one row; leave room for HOT updates on its page.
    fillfactor = 50
);
