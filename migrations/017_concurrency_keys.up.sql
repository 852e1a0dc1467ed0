-- Migration 17: several concurrency keys per job (EnqueueOptions.ConcurrencyKeys,
-- QueueLimits.ConcurrencyKeys; docs/flow-control.md, "Several keys per job"). Numbered 17:
-- 15 and 16 may be taken by other changes in flight; the migrator applies any version it
-- has not applied, gaps included.
--
-- Safe on a live system: two new columns without default (catalog changes, no rewrite) and
-- a CHECK added NOT VALID (no scan). No index: the claim of a queue with per-dimension
-- limits reads the keys of the queue's running limited jobs through
-- jobs_limited_running_idx, which it reads already, and the keys of the queued jobs it
-- looks at. Queues and jobs without them run no new statement.

-- The job's keys by dimension, a JSON object of strings ({"region": "eu", "account":
-- "a-7"}). NULL: none. The claim of a queue whose limits name a dimension counts the job
-- against its key in that dimension while it runs.
ALTER TABLE jobs ADD COLUMN concurrency_keys jsonb;
ALTER TABLE jobs ADD CONSTRAINT jobs_concurrency_keys_check
    CHECK (concurrency_keys IS NULL OR jsonb_typeof(concurrency_keys) = 'object') NOT VALID;

-- The per-dimension limits set at run time (Client.SetQueueLimits), a JSON object of
-- positive integers ({"region": 50}). NULL: none.
ALTER TABLE queue_limits ADD COLUMN concurrency_keys jsonb;

-- enqueue with concurrency keys: an overload of migration 11's enqueue whose third argument,
-- concurrency_keys, has no default, so a call that does not pass it still reaches the
-- function of migration 11 alone (calls are resolved by their arguments; a positional
-- third argument given as a literal resolves to queue, text). It checks the keys as the
-- Go client does (internal/enqueue, concurrencykeys.go), enqueues through migration 11's
-- function, and writes the keys on the row it inserted, in the caller's transaction: no
-- worker can see the job before it commits, keys and all. A duplicate of a unique key
-- is returned as it is, untouched.
CREATE FUNCTION enqueue(
    kind             text,
    args             jsonb,
    concurrency_keys jsonb,
    queue            text        DEFAULT NULL,
    priority         integer     DEFAULT NULL,
    run_at           timestamptz DEFAULT NULL,
    max_attempts     integer     DEFAULT NULL,
    unique_key       text        DEFAULT NULL,
    metadata         jsonb       DEFAULT NULL,
    timeout          interval    DEFAULT NULL,
    partition_key    text        DEFAULT NULL,
    OUT id           bigint,
    OUT duplicate    boolean
) LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path FROM CURRENT
AS $enqueue_keys$
#variable_conflict use_variable
DECLARE
    -- internal/enqueue's MaxDimensions and MaxKeyBytes.
    max_dimensions CONSTANT integer := 8;
    max_key_bytes  CONSTANT integer := 255;
    v_keys jsonb := nullif(concurrency_keys, '{}');
    v_bad  text;
BEGIN
    IF v_keys IS NOT NULL THEN
        IF jsonb_typeof(v_keys) <> 'object' THEN
            RAISE EXCEPTION 'skiplock: enqueue: concurrency_keys must be a JSON object of strings by dimension, not a JSON %', jsonb_typeof(v_keys)
                USING ERRCODE = 'invalid_parameter_value', COLUMN = 'concurrency_keys';
        END IF;
        IF (SELECT count(*) FROM jsonb_object_keys(v_keys)) > max_dimensions THEN
            RAISE EXCEPTION 'skiplock: enqueue: concurrency_keys has % dimensions: at most %', (SELECT count(*) FROM jsonb_object_keys(v_keys)), max_dimensions
                USING ERRCODE = 'invalid_parameter_value', COLUMN = 'concurrency_keys';
        END IF;
        SELECT k.key INTO v_bad FROM jsonb_each(v_keys) k WHERE k.key !~ '^[a-z0-9_-]{1,64}$' ORDER BY k.key LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'skiplock: enqueue: concurrency_keys dimension "%": use [a-z0-9_-], 1-64 characters', left(v_bad, 70)
                USING ERRCODE = 'invalid_parameter_value', COLUMN = 'concurrency_keys';
        END IF;
        SELECT k.key INTO v_bad FROM jsonb_each(v_keys) k
            WHERE jsonb_typeof(k.value) <> 'string' OR k.value #>> '{}' = '' OR octet_length(k.value #>> '{}') > max_key_bytes
            ORDER BY k.key LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'skiplock: enqueue: concurrency_keys["%"]: a key is a string of 1-255 bytes (leave the dimension out for none)', v_bad
                USING ERRCODE = 'invalid_parameter_value', COLUMN = 'concurrency_keys';
        END IF;
    END IF;
    SELECT e.id, e.duplicate INTO id, duplicate
    FROM enqueue(kind, args, queue => queue, priority => priority, run_at => run_at,
        max_attempts => max_attempts, unique_key => unique_key, metadata => metadata,
        timeout => timeout, partition_key => partition_key) e;
    IF v_keys IS NOT NULL AND NOT duplicate THEN
        UPDATE jobs j SET concurrency_keys = v_keys WHERE j.id = enqueue.id;
    END IF;
END
$enqueue_keys$;

-- enqueue with dependencies (Go's EnqueueOptions.DependsOn): an overload whose third
-- argument, depends_on, has no default, as the overload above. It checks the ids and the
-- policy as Go does (internal/enqueue, dependson.go: CheckDependsOn, Attach), enqueues
-- through the overload above (so concurrency_keys may be given too), then, in the same
-- statement, locks the parents' rows in id order and judges them: a parent found in
-- neither jobs nor the archive fails the call (nothing written), one that ended without
-- success cancels the new job under 'cancel' (the default) or counts as settled under
-- 'run', and the job waits for the unfinished ones (run_at 9999-12-31 and the rows of
-- migration 13, which its triggers settle).
CREATE FUNCTION enqueue(
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

-- Version 2 of the contract (docs/sql-enqueue.md): the overloads above.
CREATE OR REPLACE FUNCTION enqueue_version() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE SECURITY INVOKER
AS $version$ SELECT 2 $version$;

-- Dependencies (migration 13) settled one transaction at a time: settle_dependents takes
-- an advisory lock per schema before it touches a job_waits row, and takes the dependents
-- in id order. Only transactions that settle a parent with dependents (a row that passes
-- the triggers' WHEN clause) take it; no other statement changes.
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
    -- One settling transaction at a time per schema (first key 1936419191, settlement's;
    -- the flow's is 1936419190, the sweeper's 1936419185), until it commits: two outcome
    -- batches settling parents whose dependents cross (one locks job C's wait, then wants
    -- D's, while the other holds D's and wants C's) would otherwise deadlock.
    PERFORM pg_advisory_xact_lock(1936419191, hashtext(current_schema()));
    IF TG_OP = 'DELETE' THEN
        v_parent := OLD.id;
        v_ok := OLD.status IN ('running', 'succeeded');
    ELSE
        v_parent := NEW.id;
        v_ok := NEW.status = 'succeeded';
    END IF;
    -- The dependents in id order: one order of the job_waits locks everywhere.
    FOR v_child IN SELECT d.job_id FROM job_dependencies d WHERE d.parent_id = v_parent ORDER BY d.job_id LOOP
        DELETE FROM job_dependencies WHERE parent_id = v_parent AND job_id = v_child;
        UPDATE job_waits SET waiting = waiting - 1 WHERE job_id = v_child RETURNING * INTO v_wait;
        CONTINUE WHEN NOT FOUND;
        IF NOT v_ok AND v_wait.on_failure = 'cancel' AND v_wait.cancelled_by IS NULL THEN
            -- Cancelled, its wait kept and marked with the parent: a requeue of the
            -- parent revives it (revive_dependents).
            UPDATE jobs SET status = 'cancelled', finished_at = now(),
                last_error = 'skiplock: dependency ' || v_parent || ' did not succeed'
            WHERE id = v_child AND status = 'queued' AND run_at = '9999-12-31 00:00:00+00';
            IF FOUND THEN
                UPDATE job_waits SET cancelled_by = v_parent WHERE job_id = v_child;
            ELSE
                DELETE FROM job_waits WHERE job_id = v_child;
                DELETE FROM job_dependencies WHERE job_id = v_child;
            END IF;
        ELSIF NOT v_ok AND v_wait.on_failure = 'cancel' THEN
            -- A second parent did not succeed: the job stays cancelled for good.
            DELETE FROM job_waits WHERE job_id = v_child;
            DELETE FROM job_dependencies WHERE job_id = v_child;
        ELSIF v_wait.waiting <= 0 AND v_wait.cancelled_by IS NULL THEN
            DELETE FROM job_waits WHERE job_id = v_child;
            UPDATE jobs SET run_at = v_wait.run_at
            WHERE id = v_child AND status = 'queued' AND run_at = '9999-12-31 00:00:00+00'
            RETURNING queue INTO v_queue;
            IF FOUND THEN
                PERFORM pg_notify(current_schema() || '_jobs', v_queue);
            END IF;
        END IF;
    END LOOP;
    IF TG_OP = 'DELETE' THEN
        -- A parent deleted (by retention, or by Client.Delete) can no longer be requeued:
        -- the dependents it cancelled stay cancelled, their waits go.
        DELETE FROM job_dependencies d USING job_waits w
        WHERE w.cancelled_by = v_parent AND d.job_id = w.job_id;
        DELETE FROM job_waits WHERE cancelled_by = v_parent;
    END IF;
    RETURN NULL;
END
$settle$;

-- The parent that cancelled a waiting dependent (OnDependencyFailure CancelDependents),
-- while it may still be requeued: the wait stays, so that a requeue revives the dependent.
-- NULL: not cancelled.
ALTER TABLE job_waits ADD COLUMN cancelled_by bigint;
CREATE INDEX job_waits_cancelled_by_idx ON job_waits (cancelled_by) WHERE cancelled_by IS NOT NULL;

-- revive_dependents gives back their wait to the dependents that the parent whose row
-- fired it cancelled, when the parent goes back to queued (Client.Requeue of a dead or
-- failed job): each is queued again, waiting for that parent (and for its other parents
-- not yet settled), with its attempts reset. Reviving a dependent fires it again for the
-- dependents that one cancelled. A dependent that is no longer cancelled (deleted since)
-- loses its wait.
CREATE FUNCTION revive_dependents() RETURNS trigger
LANGUAGE plpgsql SECURITY INVOKER
SET search_path FROM CURRENT
AS $revive$
DECLARE
    v_child bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(1936419191, hashtext(current_schema()));
    FOR v_child IN SELECT w.job_id FROM job_waits w WHERE w.cancelled_by = NEW.id ORDER BY w.job_id LOOP
        UPDATE jobs SET status = 'queued', finished_at = NULL, attempts = 0, locked_at = NULL, locked_by = NULL
        WHERE id = v_child AND status = 'cancelled' AND run_at = '9999-12-31 00:00:00+00';
        IF FOUND THEN
            UPDATE job_waits SET cancelled_by = NULL, waiting = waiting + 1 WHERE job_id = v_child;
            INSERT INTO job_dependencies (parent_id, job_id) VALUES (NEW.id, v_child) ON CONFLICT DO NOTHING;
        ELSE
            DELETE FROM job_waits WHERE job_id = v_child;
            DELETE FROM job_dependencies WHERE job_id = v_child;
        END IF;
    END LOOP;
    RETURN NULL;
END
$revive$;

-- As the settle triggers', the WHEN clause is all other rows pay: a claim or a retry
-- fails its first or second comparison.
CREATE TRIGGER jobs_revive_dependents AFTER UPDATE OF status ON jobs
FOR EACH ROW
WHEN (NEW.status = 'queued' AND OLD.status IN ('failed', 'dead', 'cancelled')
    AND NEW.metadata ? 'skiplock_dependents')
EXECUTE FUNCTION revive_dependents();
