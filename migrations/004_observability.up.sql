-- Migration 4: what a job carries for observers (metadata set at enqueue: user tags and
-- trace context), what its handler reports (progress while it runs, output when it
-- succeeds), and a one-row cache that lets every process share one stats query.
--
-- Safe on a live table: ADD COLUMN with a constant default (or none) only writes the
-- catalog on Postgres >= 11 — no table rewrite — and holds its ACCESS EXCLUSIVE lock for
-- a moment. No index is added.

-- metadata: a JSON object of strings, written at enqueue and never changed after.
ALTER TABLE jobs ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}';
-- progress: {"value": <number>, "message": <text>}, the latest a handler recorded,
-- written by the worker's heartbeat and with the attempt's completion. NULL until the
-- handler records any.
ALTER TABLE jobs ADD COLUMN progress jsonb;
-- output: the JSON a handler gave as its result, stored with the success.
ALTER TABLE jobs ADD COLUMN output jsonb;

ALTER TABLE jobs_archive ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}';
ALTER TABLE jobs_archive ADD COLUMN progress jsonb;
ALTER TABLE jobs_archive ADD COLUMN output jsonb;

-- stats_cache holds the latest Client.CachedStats result. Whichever process finds it
-- older than its interval (and can lock the row without waiting) recomputes it with one
-- query; every other process reads it. So N processes scraping metrics cost one stats
-- query per interval, not N.
CREATE TABLE stats_cache (
    id       integer     PRIMARY KEY CHECK (id = 1),
    taken_at timestamptz NOT NULL DEFAULT 'epoch',
    data     jsonb       NOT NULL DEFAULT '[]'
);
INSERT INTO stats_cache (id) VALUES (1);
