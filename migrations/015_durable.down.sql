DROP TRIGGER IF EXISTS jobs_archive_drop_durable_records ON jobs_archive;
DROP TRIGGER IF EXISTS jobs_drop_durable_records ON jobs;
DROP FUNCTION IF EXISTS drop_archived_durable_records();
DROP FUNCTION IF EXISTS drop_durable_records();
DROP TABLE IF EXISTS job_signals;
DROP TABLE IF EXISTS job_steps;
ALTER TABLE jobs DROP COLUMN IF EXISTS awaiting;
ALTER TABLE jobs DROP COLUMN IF EXISTS durable;
