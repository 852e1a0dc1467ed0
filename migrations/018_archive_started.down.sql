ALTER TABLE jobs_archive DROP COLUMN IF EXISTS started_at;
