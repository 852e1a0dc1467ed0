-- The WAL one success costs in each completion mode, statement by statement, with
-- nothing else running: 20,000 claimed jobs in skiplock's schema (migrations 001-009
-- applied with psql in an empty database), then a CHECKPOINT, then their successes
-- recorded 100 at a time with the completer's fenced statements (completion.go), one
-- commit per batch. Prints the WAL per job. See README "Server work per job (round 3)".
--
--   createdb bench_walcheck
--   for f in ../migrations/00?_*.up.sql; do psql -d bench_walcheck -f $f; done
--   psql -d bench_walcheck -v mode=archive -f completion_wal.sql   # or delete, keep
--
-- The WAL of the DELETE includes the full-page image of each hot page it first touches
-- after the CHECKPOINT, as a drain's does.
\set ON_ERROR_STOP 1
TRUNCATE jobs, jobs_archive;
INSERT INTO jobs (kind, payload) SELECT 'noop', '{"t":0}' FROM generate_series(1, 20000);
UPDATE jobs SET status = 'running', locked_at = now(), locked_by = 'w', attempts = attempts + 1, fence = fence + 1, lease_until = now() + interval '1 minute';
CHECKPOINT;
SELECT pg_current_wal_insert_lsn() AS l0 \gset
SET my.mode = :'mode';
DO $$
DECLARE lo bigint; ids bigint[]; fs bigint[];
BEGIN
  FOR lo IN SELECT generate_series(min(id), max(id), 100) FROM jobs LOOP
    SELECT array_agg(id ORDER BY id), array_agg(fence ORDER BY id) INTO ids, fs FROM jobs WHERE id >= lo AND id < lo + 100;
    IF current_setting('my.mode') = 'delete' THEN
      DELETE FROM jobs WHERE id = ANY (ids) AND (status || '') = 'running' AND locked_by = 'w' AND ((id, fence) IN (SELECT * FROM unnest(ids, fs)) OR false);
    ELSIF current_setting('my.mode') = 'keep' THEN
      UPDATE jobs SET status = 'succeeded', finished_at = now(), locked_at = NULL, lease_until = NULL WHERE id = ANY (ids) AND (status || '') = 'running' AND locked_by = 'w' AND ((id, fence) IN (SELECT * FROM unnest(ids, fs)) OR false);
    ELSE
      WITH done AS (DELETE FROM jobs WHERE id = ANY (ids) AND (status || '') = 'running' AND locked_by = 'w' AND ((id, fence) IN (SELECT * FROM unnest(ids, fs)) OR false) RETURNING *)
      INSERT INTO jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts, locked_by, last_error, errors, unique_key, created_at, finished_at, fence, metadata, progress, output)
      SELECT id, queue, kind, payload, 'succeeded', priority, run_at, attempts, max_attempts, locked_by, last_error, errors, unique_key, created_at, now(), fence, metadata, progress, output FROM done;
    END IF;
    COMMIT;
  END LOOP;
END $$;
SELECT :'mode' AS mode, round((pg_current_wal_insert_lsn() - :'l0'::pg_lsn) / 20000.0) AS wal_per_job;
