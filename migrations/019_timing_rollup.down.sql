DROP INDEX IF EXISTS jobs_ended_idx;
DROP TABLE IF EXISTS ui_timing_rollup_mark;
DROP TABLE IF EXISTS ui_timing_rollup;
