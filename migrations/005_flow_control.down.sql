DROP TABLE IF EXISTS queue_slots;
DROP TABLE IF EXISTS queue_flow;
DROP TABLE IF EXISTS queue_limits;
DROP INDEX IF EXISTS jobs_partition_idx;
DROP INDEX IF EXISTS jobs_limited_running_idx;
ALTER TABLE jobs DROP COLUMN IF EXISTS limited;
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_partition_key_check;
ALTER TABLE jobs DROP COLUMN IF EXISTS partition_key;
