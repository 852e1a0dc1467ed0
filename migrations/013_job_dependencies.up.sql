-- Migration 13: jobs that wait for jobs that already exist (EnqueueOptions.DependsOn,
-- docs/workflows.md, "Depending on existing jobs"). Two new tables, a function and two
-- triggers on jobs whose WHEN clauses pass only rows that have dependents: safe on a live
-- system (CREATE TRIGGER takes a SHARE ROW EXCLUSIVE lock on jobs for an instant).
--
-- A dependent is an ordinary queued job whose run_at is 9999-12-31 (UTC) while it waits, so no
-- claim reads it (claims ask for run_at <= now()). Its parents carry the metadata key
-- skiplock_dependents, written by the enqueue that attached the dependent while it held
-- the parent's row FOR UPDATE. The triggers fire on the parent's row as the database
-- has it, in the transaction that writes its final outcome, so the release does not
-- depend on what the worker that claimed the parent knew: a parent claimed before the
-- dependent attached is settled all the same, and a worker killed before its commit
-- releases nothing.

-- One row per (parent, dependent) still to be judged; the trigger deletes a parent's rows
-- as it judges them, so a row is judged once.
CREATE TABLE job_dependencies (
    parent_id bigint NOT NULL,
    job_id    bigint NOT NULL,
    PRIMARY KEY (parent_id, job_id)
);
CREATE INDEX job_dependencies_job_idx ON job_dependencies (job_id);

-- One row per waiting dependent: how many parents it still waits for, what a parent that
-- does not succeed does to it (on_failure), and the run_at it gets when released.
-- Two parents finishing at once serialize on this row: under READ COMMITTED the second
-- decrement reads the first's result, so exactly one takes waiting to 0.
CREATE TABLE job_waits (
    job_id     bigint      PRIMARY KEY,
    waiting    integer     NOT NULL,
    on_failure text        NOT NULL,
    run_at     timestamptz NOT NULL,
    CONSTRAINT job_waits_on_failure_check CHECK (on_failure IN ('cancel', 'run'))
);

-- settle_dependents judges the dependents of the parent whose row fired it: a success (a
-- status of succeeded, or a row deleted while running: the success of the archive and
-- delete completion modes) decrements them and releases those that reach 0 (run_at back
-- to their own, and the wake-up of their queue at commit); any other end (failed, dead,
-- cancelled, or deleted while not running) cancels them under on_failure = 'cancel', or
-- counts as settled under 'run'. Cancelling a dependent fires it again for that
-- dependent's own dependents. SECURITY INVOKER: the app role's table rights suffice.
CREATE FUNCTION settle_dependents() RETURNS trigger
LANGUAGE plpgsql SECURITY INVOKER
SET search_path FROM CURRENT
AS $settle$
DECLARE
    v_parent bigint;
    v_ok     boolean;
    v_child  bigint;
    v_wait   job_waits%ROWTYPE;
    v_queue  text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        v_parent := OLD.id;
        v_ok := OLD.status IN ('running', 'succeeded');
    ELSE
        v_parent := NEW.id;
        v_ok := NEW.status = 'succeeded';
    END IF;
    FOR v_child IN DELETE FROM job_dependencies WHERE parent_id = v_parent RETURNING job_id LOOP
        UPDATE job_waits SET waiting = waiting - 1 WHERE job_id = v_child RETURNING * INTO v_wait;
        CONTINUE WHEN NOT FOUND;
        IF NOT v_ok AND v_wait.on_failure = 'cancel' THEN
            DELETE FROM job_waits WHERE job_id = v_child;
            DELETE FROM job_dependencies WHERE job_id = v_child;
            UPDATE jobs SET status = 'cancelled', finished_at = now(),
                last_error = 'skiplock: dependency ' || v_parent || ' did not succeed'
            WHERE id = v_child AND status = 'queued' AND run_at = '9999-12-31 00:00:00+00';
        ELSIF v_wait.waiting <= 0 THEN
            DELETE FROM job_waits WHERE job_id = v_child;
            UPDATE jobs SET run_at = v_wait.run_at
            WHERE id = v_child AND status = 'queued' AND run_at = '9999-12-31 00:00:00+00'
            RETURNING queue INTO v_queue;
            IF FOUND THEN
                PERFORM pg_notify(current_schema() || '_jobs', v_queue);
            END IF;
        END IF;
    END LOOP;
    RETURN NULL;
END
$settle$;

-- The WHEN clauses are the only cost on rows without dependents: a status comparison and
-- a jsonb key test, evaluated per row written, with no function call.
CREATE TRIGGER jobs_settle_dependents_update AFTER UPDATE OF status ON jobs
FOR EACH ROW
WHEN (NEW.status IN ('succeeded', 'failed', 'dead', 'cancelled')
    AND OLD.status IS DISTINCT FROM NEW.status AND NEW.metadata ? 'skiplock_dependents')
EXECUTE FUNCTION settle_dependents();

CREATE TRIGGER jobs_settle_dependents_delete AFTER DELETE ON jobs
FOR EACH ROW
WHEN (OLD.metadata ? 'skiplock_dependents')
EXECUTE FUNCTION settle_dependents();
