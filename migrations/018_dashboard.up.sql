-- Migration 18: what the dashboard needs of the tables.
--
-- jobs_archive.started_at: when the archived attempt started. The archive keeps run_at
-- (when the last attempt was due) and finished_at; started_at is the jobs row's
-- locked_at at the success (when that attempt was claimed), so the dashboard can tell
-- the wait (started_at - run_at) from the run time (finished_at - started_at) of every
-- archived job, per queue and kind, over the archive's BRIN index on finished_at. Rows
-- archived before it stay NULL (no start is known).
--
-- periodic.disabled: an operator turned the schedule off (Client.SetPeriodicEnabled, the
-- dashboard's Periodic page). Workers enqueue no occurrence of a disabled schedule; once
-- enabled again, the occurrences it missed are handled by its Misfire policy. Workers'
-- declarations never change it (unlike active, which says some running worker declares
-- the schedule).
--
-- Both: a nullable column, or one with a constant default, changes only the catalog (no
-- rewrite, a lock held for an instant). Workers of this version write started_at and read
-- disabled: run Migrate before deploying them.
ALTER TABLE jobs_archive ADD COLUMN started_at timestamptz;
ALTER TABLE periodic ADD COLUMN disabled boolean NOT NULL DEFAULT false;
