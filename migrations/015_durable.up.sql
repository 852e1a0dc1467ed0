-- Migration 15: durable execution (docs/durable.md): the steps a job's handler recorded
-- (Step, StepTx, Sleep, AwaitSignal) and the signals sent to a job (Client.Signal).
-- Numbered 15; the migrator applies any version it has not applied, gaps included.
--
-- Safe on a live system: two nullable columns on jobs without a default (catalog changes
-- only), two new empty tables, two trigger functions and two triggers. The trigger on
-- jobs has a WHEN clause that passes only rows with durable records: every other job
-- pays one boolean test per deleted row, and no function call.

-- durable: true once the job has rows in job_steps or job_signals (set by the first step
-- or signal, under the job's row lock), NULL otherwise (as limited is: the dashboard
-- shows no NULL column). Only rows with true fire the clean-up trigger below.
ALTER TABLE jobs ADD COLUMN durable boolean;
-- awaiting: the name of the signal a parked job waits for (AwaitSignal), NULL otherwise.
-- A parked job is an ordinary queued job whose run_at is its wait's timeout (9999-12-31
-- for none, as a dependent's), so no claim reads it before; Client.Signal, holding the
-- job's row lock, sets run_at to now() when the name matches.
ALTER TABLE jobs ADD COLUMN awaiting text;

-- One row per step a job's handler reached, by its place in the handler (seq, from 0).
-- kind 'step' (Step, StepTx) is written once its function returned without error, with
-- its result; 'sleep' and 'signal' are written when the wait begins (wake_at: the end of
-- the sleep, the wait's timeout) and finished when it ends (finished_at; a signal's
-- payload in result, or error 'timeout'). attempt is the job's attempt that wrote it.
CREATE TABLE job_steps (
    job_id      bigint      NOT NULL,
    seq         integer     NOT NULL,
    name        text        NOT NULL,
    kind        text        NOT NULL,
    result      jsonb,
    error       text,
    attempt     integer     NOT NULL,
    started_at  timestamptz NOT NULL,
    wake_at     timestamptz,
    finished_at timestamptz,
    PRIMARY KEY (job_id, seq),
    CONSTRAINT job_steps_kind_check CHECK (kind IN ('step', 'sleep', 'signal')),
    CONSTRAINT job_steps_name_check CHECK (char_length(name) BETWEEN 1 AND 255)
);

-- Signals sent to a job, kept until it consumes them (consumed_seq: the AwaitSignal step
-- that took it) and then as its history, until the job goes away. A wait takes the oldest
-- unconsumed signal of its name: the index serves that lookup and the job's listing.
CREATE TABLE job_signals (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id       bigint      NOT NULL,
    name         text        NOT NULL,
    payload      jsonb       NOT NULL,
    sent_at      timestamptz NOT NULL DEFAULT now(),
    consumed_seq integer,
    CONSTRAINT job_signals_name_check CHECK (char_length(name) BETWEEN 1 AND 255)
);
CREATE INDEX job_signals_job_idx ON job_signals (job_id, name, id);

-- A job's steps and signals go away with it: deleted from jobs (Client.Delete, the
-- delete completion mode, the retention purges), unless it moved to the archive in the
-- same statement (the archive completion mode), where they stay readable until the
-- archive row is purged. AFTER row triggers run at the end of the statement, when the
-- archive row the statement inserted is visible.
CREATE FUNCTION drop_durable_records() RETURNS trigger
LANGUAGE plpgsql SECURITY INVOKER
SET search_path FROM CURRENT
AS $drop$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM jobs_archive WHERE id = OLD.id) THEN
        DELETE FROM job_steps WHERE job_id = OLD.id;
        DELETE FROM job_signals WHERE job_id = OLD.id;
    END IF;
    RETURN NULL;
END
$drop$;

CREATE TRIGGER jobs_drop_durable_records AFTER DELETE ON jobs
FOR EACH ROW
WHEN (OLD.durable)
EXECUTE FUNCTION drop_durable_records();

-- Archive rows go in batches (the retention purge, Client.DeleteMany): one statement-level
-- trigger per batch, joining its deleted ids (the archive keeps no durable flag).
CREATE FUNCTION drop_archived_durable_records() RETURNS trigger
LANGUAGE plpgsql SECURITY INVOKER
SET search_path FROM CURRENT
AS $drop$
BEGIN
    DELETE FROM job_steps WHERE job_id IN (SELECT id FROM gone);
    DELETE FROM job_signals WHERE job_id IN (SELECT id FROM gone);
    RETURN NULL;
END
$drop$;

CREATE TRIGGER jobs_archive_drop_durable_records AFTER DELETE ON jobs_archive
REFERENCING OLD TABLE AS gone
FOR EACH STATEMENT
EXECUTE FUNCTION drop_archived_durable_records();
