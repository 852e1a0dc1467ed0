-- Migration 11: enqueue from SQL. enqueue(kind, args, ...) inserts a job with the checks,
-- the unique-key handling and the wake-up of the Go client's EnqueueTx, so that triggers,
-- psql and services in other languages write into the same table with the same rules;
-- enqueue_version() says which version of that contract the schema has
-- (docs/sql-enqueue.md). Two new functions and nothing else: safe on a live system.
--
-- Both are SECURITY INVOKER (the default, written out): the caller needs INSERT on jobs
-- and SELECT on jobs (the lookup of a held unique key), as the Go client does, and
-- EXECUTE, which Postgres grants to PUBLIC on a new function (README.md's grants also
-- give it to the app role by name). A caller without the table privileges gets
-- "permission denied", never more than its own rights.
--
-- SET search_path FROM CURRENT pins the function's search_path to the one Migrate sets
-- for the migration: the schema, then pg_temp, so the body's jobs is this schema's table
-- whatever the caller's search_path, and a session's temporary table named jobs cannot
-- stand in for it (pg_catalog comes first, as always when it is not listed). `skiplock
-- migrate sql` writes the same path in, with the schema's name.

-- enqueue_json_size is the size of value as Go's encoding/json writes it, the size the Go
-- client limits: compact (jsonb's text has a space after each ':' and ','), with <, > and
-- & written \u003c, \u003e, \u0026 and U+2028, U+2029 as \u2028, \u2029. Strings and
-- numbers are as Postgres writes them (a payload of Go values: as Go does). When that
-- size cannot exceed bound it returns an upper bound of it, no more than bound, without
-- the walk of the value that counts the separators.
CREATE FUNCTION enqueue_json_size(value jsonb, bound bigint) RETURNS bigint
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE SECURITY INVOKER
SET search_path FROM CURRENT
AS $json_size$
DECLARE
    t    text := value::text;
    size bigint := octet_length(t);
    separators bigint;
BEGIN
    -- Outside strings JSON has none of these characters: count them in the whole text.
    size := size + 5 * (size - octet_length(translate(t, '<>&', '')));
    IF getdatabaseencoding() = 'UTF8' THEN
        size := size + 3 * (char_length(t) - char_length(translate(t, chr(8232) || chr(8233), '')));
    END IF;
    IF size <= bound THEN
        RETURN size;
    END IF;
    -- For each object of n keys, n ': ' and n-1 ', '; for each array of n elements, n-1.
    WITH RECURSIVE v(j) AS (
        SELECT value
        UNION ALL
        SELECT c.value FROM v CROSS JOIN LATERAL (
            SELECT e.value FROM jsonb_each(CASE WHEN jsonb_typeof(v.j) = 'object' THEN v.j END) e
            UNION ALL
            SELECT a.value FROM jsonb_array_elements(CASE WHEN jsonb_typeof(v.j) = 'array' THEN v.j END) a(value)
        ) c
    )
    SELECT coalesce(sum(CASE jsonb_typeof(j)
        WHEN 'object' THEN greatest(2 * (SELECT count(*) FROM jsonb_object_keys(j)) - 1, 0)
        WHEN 'array' THEN greatest(jsonb_array_length(j) - 1, 0)
        ELSE 0 END), 0)
    INTO separators FROM v;
    RETURN size - separators;
END
$json_size$;

CREATE FUNCTION enqueue(
    kind          text,
    args          jsonb,
    queue         text        DEFAULT NULL,
    priority      integer     DEFAULT NULL,
    run_at        timestamptz DEFAULT NULL,
    max_attempts  integer     DEFAULT NULL,
    unique_key    text        DEFAULT NULL,
    metadata      jsonb       DEFAULT NULL,
    timeout       interval    DEFAULT NULL,
    partition_key text        DEFAULT NULL,
    OUT id        bigint,
    OUT duplicate boolean
) LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path FROM CURRENT
AS $enqueue$
#variable_conflict use_column
DECLARE
    -- The limits of internal/enqueue (errors.go, job.go) and of the root package's
    -- DefaultMaxPayloadBytes; TestSQLEnqueue_RefusesWhatGoRefuses holds them equal.
    max_kind_bytes      CONSTANT integer := 255;
    max_key_bytes       CONSTANT integer := 255;
    max_payload_bytes   CONSTANT integer := 1048576;
    max_metadata_bytes  CONSTANT integer := 16384;
    max_attempts_limit  CONSTANT integer := 1000000;
    default_attempts    CONSTANT integer := 20;
    reserved_prefix     CONSTANT text    := 'skiplock_';

    v_queue    text := coalesce(nullif(queue, ''), 'default');
    v_priority integer := coalesce(priority, 0);
    v_attempts integer := coalesce(nullif(max_attempts, 0), default_attempts);
    v_key      text := nullif(unique_key, '');
    v_meta     jsonb := coalesce(metadata, '{}');
    v_part     text := nullif(partition_key, '');
    v_timeout  bigint;
    v_size     bigint;
    v_bad      text;
    v_id       bigint;
BEGIN
    -- The checks, in the order of the Go client's (ArgsKind, checkOptions, the reserved
    -- metadata keys, the payload, Timeout, the metadata's encoding). Each error names its
    -- argument in the message and in the error's COLUMN field, and comes before any write.
    IF kind IS NULL THEN
        RAISE EXCEPTION 'skiplock: enqueue: kind is null: a kind must be 1-255 bytes'
            USING ERRCODE = 'null_value_not_allowed', COLUMN = 'kind';
    END IF;
    IF kind = '' OR octet_length(kind) > max_kind_bytes THEN
        RAISE EXCEPTION 'skiplock: enqueue: kind "%" is invalid: a kind must be 1-255 bytes', left(kind, 40)
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'kind';
    END IF;
    IF v_queue !~ '^[a-z0-9_-]{1,64}$' THEN
        RAISE EXCEPTION 'skiplock: enqueue: queue "%" is invalid: use [a-z0-9_-], 1-64 characters', left(v_queue, 70)
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'queue';
    END IF;
    IF v_attempts < 1 OR v_attempts > max_attempts_limit THEN
        RAISE EXCEPTION 'skiplock: enqueue: max_attempts % is out of range: use 1-1000000 (null or 0: 20)', v_attempts
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'max_attempts';
    END IF;
    IF v_priority < -32768 OR v_priority > 32767 THEN
        RAISE EXCEPTION 'skiplock: enqueue: priority % is out of range: use -32768 to 32767 (higher runs first)', v_priority
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'priority';
    END IF;
    IF octet_length(v_key) > max_key_bytes THEN
        RAISE EXCEPTION 'skiplock: enqueue: unique_key "%..." is too long: at most 255 bytes', left(v_key, 40)
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'unique_key';
    END IF;
    IF octet_length(v_part) > max_key_bytes THEN
        RAISE EXCEPTION 'skiplock: enqueue: partition_key "%..." is too long: at most 255 bytes', left(v_part, 40)
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'partition_key';
    END IF;
    IF run_at IS NOT NULL AND (NOT isfinite(run_at)
            OR extract(year FROM run_at AT TIME ZONE 'UTC') NOT BETWEEN 1 AND 9999) THEN
        RAISE EXCEPTION 'skiplock: enqueue: run_at % is out of range: the year must be in [1, 9999] (null: now)', run_at
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'run_at';
    END IF;
    IF jsonb_typeof(v_meta) <> 'object' THEN
        RAISE EXCEPTION 'skiplock: enqueue: metadata must be a JSON object of strings, not a JSON %', jsonb_typeof(v_meta)
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'metadata';
    END IF;
    SELECT m.key INTO v_bad FROM jsonb_each(v_meta) m WHERE m.key LIKE reserved_prefix || '%' LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'skiplock: enqueue: metadata key "%" is reserved: keys starting with "skiplock_" are skiplock''s own marks (workflow tasks, batches, sequences)', left(v_bad, 40)
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'metadata';
    END IF;
    IF args IS NULL THEN
        RAISE EXCEPTION 'skiplock: enqueue: args is null: pass a JSON value (an object for a Go struct)'
            USING ERRCODE = 'null_value_not_allowed', COLUMN = 'args';
    END IF;
    -- The limits apply to the JSON as Go's json.Marshal writes it (enqueue_json_size).
    v_size := enqueue_json_size(args, max_payload_bytes);
    IF v_size > max_payload_bytes THEN
        RAISE EXCEPTION 'skiplock: enqueue: args is % bytes as JSON, the limit is %', v_size, max_payload_bytes
            USING ERRCODE = 'program_limit_exceeded', COLUMN = 'args';
    END IF;
    IF timeout IS NOT NULL THEN
        IF timeout < interval '0' OR (timeout > interval '0' AND timeout < interval '1 millisecond') THEN
            RAISE EXCEPTION 'skiplock: enqueue: timeout % is invalid: null or 0 (the kind''s or the worker''s timeout), or at least 1 millisecond', timeout
                USING ERRCODE = 'invalid_parameter_value', COLUMN = 'timeout';
        END IF;
        v_timeout := nullif(trunc(extract(epoch FROM timeout) * 1000), 0);
    END IF;
    SELECT m.key INTO v_bad FROM jsonb_each(v_meta) m
        WHERE m.key = '' OR jsonb_typeof(m.value) <> 'string' LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'skiplock: enqueue: metadata key "%": keys must be non-empty and values strings', left(v_bad, 40)
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'metadata';
    END IF;
    v_size := enqueue_json_size(v_meta, max_metadata_bytes);
    IF v_size > max_metadata_bytes THEN
        RAISE EXCEPTION 'skiplock: enqueue: metadata is % bytes as JSON, at most %', v_size, max_metadata_bytes
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'metadata';
    END IF;

    duplicate := false;
    IF v_key IS NULL THEN
        INSERT INTO jobs (queue, kind, payload, priority, run_at, max_attempts, timeout_ms, metadata, partition_key)
        VALUES (v_queue, kind, args, v_priority, coalesce(run_at, now()), v_attempts, v_timeout, v_meta, v_part)
        RETURNING id INTO v_id;
    ELSE
        -- The unique insert of internal/enqueue/unique.go for a caller's key: ON CONFLICT on
        -- the active-key index, so a held key is not an error and the caller's transaction
        -- stays usable. A holder that finishes between the insert and the lookup frees the
        -- key: try again, three times as Go does.
        FOR attempt IN 1..3 LOOP
            IF current_setting('transaction_isolation') = 'read committed' THEN
                INSERT INTO jobs (queue, kind, payload, priority, run_at, max_attempts, unique_key, timeout_ms, metadata, partition_key)
                VALUES (v_queue, kind, args, v_priority, coalesce(run_at, now()), v_attempts, v_key, v_timeout, v_meta, v_part)
                ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('queued', 'running') DO NOTHING
                RETURNING id INTO v_id;
            ELSE
                -- Under REPEATABLE READ or SERIALIZABLE, a key held by a job committed
                -- after the snapshot makes ON CONFLICT raise a serialization failure.
                -- The block is a savepoint: the failure is rolled back to it and reported
                -- as a duplicate whose holder this transaction cannot see (id null).
                BEGIN
                    INSERT INTO jobs (queue, kind, payload, priority, run_at, max_attempts, unique_key, timeout_ms, metadata, partition_key)
                    VALUES (v_queue, kind, args, v_priority, coalesce(run_at, now()), v_attempts, v_key, v_timeout, v_meta, v_part)
                    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('queued', 'running') DO NOTHING
                    RETURNING id INTO v_id;
                EXCEPTION WHEN serialization_failure THEN
                    id := NULL;
                    duplicate := true;
                    RETURN;
                END;
            END IF;
            EXIT WHEN v_id IS NOT NULL;
            SELECT j.id INTO v_id FROM jobs j
                WHERE j.unique_key = v_key AND j.status IN ('queued', 'running')
                ORDER BY j.id DESC LIMIT 1;
            IF v_id IS NOT NULL THEN
                id := v_id;
                duplicate := true;
                RETURN;
            END IF;
        END LOOP;
        IF v_id IS NULL THEN
            -- The holder kept changing state: Go's ErrDuplicateJob without a job.
            id := NULL;
            duplicate := true;
            RETURN;
        END IF;
    END IF;

    -- The wake-up, as the Go client sends it: the queue's name on "<schema>_jobs" (the
    -- schema is the first of the pinned search_path), for a job due now. Postgres delivers
    -- it at commit, and only once per transaction for the same queue.
    IF run_at IS NULL OR run_at <= clock_timestamp() THEN
        PERFORM pg_notify(current_schema() || '_jobs', v_queue);
    END IF;
    id := v_id;
END
$enqueue$;

-- enqueue_version is the version of the contract of enqueue (docs/sql-enqueue.md): it goes
-- up when an argument is added or what enqueue does or returns changes, so that a caller
-- can check for what it relies on (SELECT skiplock.enqueue_version() >= 1).
CREATE FUNCTION enqueue_version() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE SECURITY INVOKER
AS $version$ SELECT 1 $version$;

COMMENT ON FUNCTION enqueue(text, jsonb, text, integer, timestamptz, integer, text, jsonb, interval, text)
    IS 'skiplock: enqueue a job (contract version 1, see enqueue_version() and docs/sql-enqueue.md)';
