DROP TABLE IF EXISTS queue_key_flow;
ALTER TABLE queue_limits DROP COLUMN IF EXISTS key_rate_period_ms;
ALTER TABLE queue_limits DROP COLUMN IF EXISTS key_rate;
