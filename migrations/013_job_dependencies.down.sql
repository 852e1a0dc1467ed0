DROP TRIGGER IF EXISTS jobs_settle_dependents_delete ON jobs;
DROP TRIGGER IF EXISTS jobs_settle_dependents_update ON jobs;
DROP FUNCTION IF EXISTS settle_dependents();
DROP TABLE IF EXISTS job_waits;
DROP TABLE IF EXISTS job_dependencies;
