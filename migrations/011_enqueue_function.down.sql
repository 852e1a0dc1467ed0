DROP FUNCTION enqueue(text, jsonb, text, integer, timestamptz, integer, text, jsonb, interval, text);
DROP FUNCTION enqueue_version();
DROP FUNCTION enqueue_json_size(jsonb, bigint);
