-- Migration 12: the dashboard's audit log (package ui, skiplock ui). Every action taken
-- through the dashboard (retry, cancel, delete, requeue, bulk, pause, resume, sign in and
-- out) and every forged or cross-origin action it refused (and every failed sign-in) is
-- a row here, so the /audit
-- page outlives a restart and shows what every instance behind a load balancer did.
-- Bounded: each insert deletes, in the same statement, what lies beyond the newest 10,000
-- actions and, apart, beyond the newest 1,000 refusals (a flood of forgeries cannot push
-- the actions out). Workers never read or write it. A new, small table: nothing on the
-- jobs tables changes, so it is safe on a live system.
CREATE TABLE ui_audit (
    id      bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at      timestamptz NOT NULL DEFAULT now(),
    refused boolean     NOT NULL,            -- a refused forgery or failed sign-in
    who     text        NOT NULL,            -- the user or credential
    client  text        NOT NULL,            -- the client address
    action  text        NOT NULL,
    target  text        NOT NULL,            -- what it acted on; names in it are quoted
    result  text        NOT NULL,            -- the outcome or the refusal
    CONSTRAINT ui_audit_length_check CHECK (char_length(who) <= 1000 AND char_length(client) <= 1000
        AND char_length(action) <= 1000 AND char_length(target) <= 1000 AND char_length(result) <= 1000)
);

-- The page lists each kind newest first, and the insert finds where to cut each kind.
CREATE INDEX ui_audit_kind_idx ON ui_audit (refused, id);
