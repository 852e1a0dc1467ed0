-- Migration 18: when the archived attempt started. The archive keeps run_at (when the
-- last attempt was due) and finished_at; started_at is the jobs row's locked_at at the
-- success (when that attempt was claimed), so the dashboard can tell the wait
-- (started_at - run_at) from the run time (finished_at - started_at) of every archived
-- job, per queue and kind, over the archive's BRIN index on finished_at.
--
-- A nullable column without a default: adding it changes only the catalog (no rewrite,
-- a lock held for an instant). Rows archived before it stay NULL (no start is known).
-- Workers of this version write it: run Migrate before deploying them.
ALTER TABLE jobs_archive ADD COLUMN started_at timestamptz;
