-- Migration 1: the hot jobs table, its archive, and the indexes the claim and the
-- sweeper walk. Every object is created in the schema named by the search_path that
-- Migrate sets for the transaction, so the same file serves any schema.

CREATE TABLE jobs (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue        text        NOT NULL DEFAULT 'default',
    kind         text        NOT NULL,
    payload      jsonb       NOT NULL DEFAULT '{}',
    status       text        NOT NULL DEFAULT 'queued',
    priority     smallint    NOT NULL DEFAULT 0,
    run_at       timestamptz NOT NULL DEFAULT now(),
    attempts     integer     NOT NULL DEFAULT 0,
    max_attempts integer     NOT NULL DEFAULT 20,
    locked_at    timestamptz,
    locked_by    text,
    last_error   text,
    errors       jsonb,
    unique_key   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    CONSTRAINT jobs_status_check CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'dead', 'cancelled')),
    CONSTRAINT jobs_max_attempts_check CHECK (max_attempts >= 1),
    CONSTRAINT jobs_kind_check CHECK (char_length(kind) BETWEEN 1 AND 255),
    CONSTRAINT jobs_queue_check CHECK (char_length(queue) BETWEEN 1 AND 64),
    CONSTRAINT jobs_errors_check CHECK (errors IS NULL OR jsonb_typeof(errors) = 'array')
) WITH (
    -- Every job row is inserted, updated once or twice and then deleted: leave room on
    -- each page for the new row versions, and vacuum as soon as 1% of the table is dead
    -- so the hot table stays a few pages long.
    fillfactor = 90,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);

-- The claim walks this index: it holds only queued jobs and returns them already in
-- claim order (queue, then highest priority, then earliest run_at), so the claim needs no
-- Sort node and an entry vanishes from it the moment its job is claimed. Within one
-- priority, jobs due now come before jobs scheduled for later, so future jobs are not
-- walked over by the claim.
CREATE INDEX jobs_claim_idx ON jobs (queue, priority DESC, run_at, id) WHERE status = 'queued';

-- The sweeper looks for running jobs whose lease expired.
CREATE INDEX jobs_running_idx ON jobs (locked_at) WHERE status = 'running';

-- Dead and failed jobs are what operators list and requeue.
CREATE INDEX jobs_stuck_idx ON jobs (kind, queue) WHERE status IN ('dead', 'failed');

-- At most one active (not finished) job per unique key.
CREATE UNIQUE INDEX jobs_unique_key_idx ON jobs (unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('queued', 'running');

-- Finished jobs moved out of the hot table: append-only, deleted by retention.
CREATE TABLE jobs_archive (
    id           bigint      PRIMARY KEY,
    queue        text        NOT NULL,
    kind         text        NOT NULL,
    payload      jsonb       NOT NULL,
    status       text        NOT NULL,
    priority     smallint    NOT NULL,
    run_at       timestamptz NOT NULL,
    attempts     integer     NOT NULL,
    max_attempts integer     NOT NULL,
    locked_by    text,
    last_error   text,
    errors       jsonb,
    unique_key   text,
    created_at   timestamptz NOT NULL,
    finished_at  timestamptz NOT NULL
);

-- Rows arrive in finished_at order, so a BRIN index finds the expired ones for a few
-- pages of upkeep instead of a btree entry per archived job.
CREATE INDEX jobs_archive_finished_idx ON jobs_archive USING brin (finished_at);
