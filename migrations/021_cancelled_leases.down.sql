DROP INDEX IF EXISTS jobs_cancelled_lease_idx;
