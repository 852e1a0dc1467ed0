DROP FUNCTION enqueue(text, jsonb, text, integer, timestamptz, integer, text, jsonb, interval, text);
DROP FUNCTION enqueue_version();
DROP FUNCTION jsonb_separators(jsonb);
