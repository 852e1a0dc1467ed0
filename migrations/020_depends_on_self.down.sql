-- The depends_on overload as migration 17 wrote it.
CREATE OR REPLACE FUNCTION enqueue(
    kind                  text,
    args                  jsonb,
    depends_on            bigint[],
    queue                 text        DEFAULT NULL,
    priority              integer     DEFAULT NULL,
    run_at                timestamptz DEFAULT NULL,
    max_attempts          integer     DEFAULT NULL,
    unique_key            text        DEFAULT NULL,
    metadata              jsonb       DEFAULT NULL,
    timeout               interval    DEFAULT NULL,
    partition_key         text        DEFAULT NULL,
    concurrency_keys      jsonb       DEFAULT NULL,
    on_dependency_failure text        DEFAULT NULL,
    OUT id                bigint,
    OUT duplicate         boolean
) LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path FROM CURRENT
AS $enqueue_deps$
#variable_conflict use_variable
DECLARE
    max_depends_on CONSTANT integer := 1000; -- internal/enqueue's MaxDependsOn
    v_policy  text := coalesce(nullif(on_dependency_failure, ''), 'cancel');
    v_ids     bigint[];
    v_found   bigint[] := '{}';
    v_pending bigint[] := '{}';
    v_failed  bigint;
    v_missing bigint[];
    r         record;
BEGIN
    IF v_policy NOT IN ('cancel', 'run') THEN
        RAISE EXCEPTION 'skiplock: enqueue: on_dependency_failure "%" is invalid: use cancel (the default) or run', left(v_policy, 40)
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'on_dependency_failure';
    END IF;
    IF array_position(depends_on, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'skiplock: enqueue: depends_on holds a null: job ids are positive'
            USING ERRCODE = 'null_value_not_allowed', COLUMN = 'depends_on';
    END IF;
    SELECT array_agg(DISTINCT x ORDER BY x) INTO v_ids FROM unnest(depends_on) x;
    IF cardinality(v_ids) > max_depends_on THEN
        RAISE EXCEPTION 'skiplock: enqueue: depends_on has % ids: at most %', cardinality(v_ids), max_depends_on
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'depends_on';
    END IF;
    IF v_ids[1] <= 0 THEN
        RAISE EXCEPTION 'skiplock: enqueue: depends_on id %: job ids are positive', v_ids[1]
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'depends_on';
    END IF;
    IF v_ids IS NOT NULL AND nullif(unique_key, '') IS NOT NULL THEN
        RAISE EXCEPTION 'skiplock: enqueue: depends_on cannot be used with unique_key'
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'depends_on';
    END IF;
    SELECT e.id, e.duplicate INTO id, duplicate
    FROM enqueue(kind, args, concurrency_keys => concurrency_keys, queue => queue, priority => priority,
        run_at => run_at, max_attempts => max_attempts, unique_key => unique_key, metadata => metadata,
        timeout => timeout, partition_key => partition_key) e;
    IF v_ids IS NULL OR duplicate THEN
        RETURN;
    END IF;
    -- The parents' rows, in id order, held until the transaction ends (depLockSQL).
    FOR r IN SELECT j.id, j.status FROM jobs j WHERE j.id = ANY (v_ids) ORDER BY j.id FOR UPDATE LOOP
        v_found := v_found || r.id;
        IF r.status IN ('queued', 'running') THEN
            v_pending := v_pending || r.id;
        ELSIF r.status <> 'succeeded' AND v_failed IS NULL THEN
            v_failed := r.id;
        END IF;
    END LOOP;
    -- The others may be archived: read in a statement of its own, after the locks' waits.
    SELECT array_agg(x ORDER BY x) INTO v_missing FROM unnest(v_ids) x WHERE x <> ALL (v_found);
    IF v_missing IS NOT NULL THEN
        FOR r IN SELECT a.id, a.status FROM jobs_archive a WHERE a.id = ANY (v_missing) ORDER BY a.id LOOP
            v_missing := array_remove(v_missing, r.id);
            IF r.status <> 'succeeded' AND v_failed IS NULL THEN
                v_failed := r.id;
            END IF;
        END LOOP;
        IF cardinality(v_missing) > 0 THEN
            RAISE EXCEPTION 'skiplock: enqueue: depends_on: job ids % are in neither the jobs table nor the archive', v_missing
                USING ERRCODE = 'foreign_key_violation', COLUMN = 'depends_on';
        END IF;
    END IF;
    IF v_failed IS NOT NULL AND v_policy = 'cancel' THEN
        UPDATE jobs j SET status = 'cancelled', finished_at = now(),
            last_error = 'skiplock: dependency ' || v_failed || ' did not succeed'
        WHERE j.id = enqueue.id;
        RETURN;
    END IF;
    IF cardinality(v_pending) = 0 THEN
        RETURN;
    END IF;
    -- depWaitSQL's rows.
    INSERT INTO job_waits (job_id, waiting, on_failure, run_at)
    SELECT j.id, cardinality(v_pending), v_policy, j.run_at FROM jobs j WHERE j.id = enqueue.id;
    INSERT INTO job_dependencies (parent_id, job_id) SELECT p, enqueue.id FROM unnest(v_pending) p;
    UPDATE jobs j SET metadata = j.metadata || jsonb_build_object('skiplock_dependents', '1')
    WHERE j.id = ANY (v_pending) AND NOT j.metadata ? 'skiplock_dependents';
    UPDATE jobs j SET run_at = '9999-12-31 00:00:00+00' WHERE j.id = enqueue.id;
END
$enqueue_deps$;
