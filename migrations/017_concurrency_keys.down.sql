CREATE OR REPLACE FUNCTION enqueue_version() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE SECURITY INVOKER
AS $version$ SELECT 1 $version$;
DROP FUNCTION IF EXISTS enqueue(text, jsonb, jsonb, text, integer, timestamptz, integer, text, jsonb, interval, text);
ALTER TABLE queue_limits DROP COLUMN IF EXISTS concurrency_keys;
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_concurrency_keys_check;
ALTER TABLE jobs DROP COLUMN IF EXISTS concurrency_keys;
