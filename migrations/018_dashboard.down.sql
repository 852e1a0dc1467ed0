ALTER TABLE periodic DROP COLUMN IF EXISTS disabled;
ALTER TABLE jobs_archive DROP COLUMN IF EXISTS started_at;
