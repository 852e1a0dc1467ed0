DROP TRIGGER IF EXISTS jobs_revive_dependents ON jobs;
DROP FUNCTION IF EXISTS revive_dependents();
-- The dependents still cancelled with their wait kept stay cancelled, as migration 13 left them.
DELETE FROM job_dependencies d USING job_waits w WHERE w.cancelled_by IS NOT NULL AND d.job_id = w.job_id;
DELETE FROM job_waits WHERE cancelled_by IS NOT NULL;
DROP INDEX IF EXISTS job_waits_cancelled_by_idx;
ALTER TABLE job_waits DROP COLUMN IF EXISTS cancelled_by;
-- settle_dependents as migration 13 wrote it.
CREATE OR REPLACE FUNCTION settle_dependents() RETURNS trigger
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
CREATE OR REPLACE FUNCTION enqueue_version() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE SECURITY INVOKER
AS $version$ SELECT 1 $version$;
DROP FUNCTION IF EXISTS enqueue(text, jsonb, bigint[], text, integer, timestamptz, integer, text, jsonb, interval, text, jsonb, text);
DROP FUNCTION IF EXISTS enqueue(text, jsonb, jsonb, text, integer, timestamptz, integer, text, jsonb, interval, text);
ALTER TABLE queue_limits DROP COLUMN IF EXISTS concurrency_keys;
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_concurrency_keys_check;
ALTER TABLE jobs DROP COLUMN IF EXISTS concurrency_keys;
