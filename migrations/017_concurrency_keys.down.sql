ALTER TABLE queue_limits DROP COLUMN IF EXISTS concurrency_keys;
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_concurrency_keys_check;
ALTER TABLE jobs DROP COLUMN IF EXISTS concurrency_keys;
