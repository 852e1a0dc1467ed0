-- Run on a database holding skiplock's schema (e.g. pg_dump -s of a bench database),
-- then each script with:
--   PGOPTIONS='-c synchronous_commit=off' pgbench -n -M prepared -c 1 -T 3 -f <script> <db>
-- jn: the jobs table's columns, defaults and indexes, without its 8 CHECK constraints.
CREATE TABLE jn (LIKE skiplock.jobs INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING INDEXES);
-- bare_jobs: the bench's bare floor table.
CREATE TABLE bare_jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(), started_at timestamptz, attempts int NOT NULL DEFAULT 0);
CREATE INDEX bare_jobs_queued ON bare_jobs (id) WHERE started_at IS NULL;
-- u_*: one row updated back and forth (queued <-> running), as a claim of one job does.
-- u_full: the jobs table with its checks and its two AFTER UPDATE OF status triggers;
-- u_notrg: checks, no triggers; u_nochk: triggers, no checks; u_bare: neither.
CREATE TABLE u_full (LIKE skiplock.jobs INCLUDING ALL);
CREATE TRIGGER t1 AFTER UPDATE OF status ON u_full FOR EACH ROW WHEN (new.status = 'queued' AND old.status IN ('failed','dead','cancelled') AND new.metadata ? 'skiplock_dependents') EXECUTE FUNCTION skiplock.revive_dependents();
CREATE TRIGGER t2 AFTER UPDATE OF status ON u_full FOR EACH ROW WHEN (new.status IN ('succeeded','failed','dead','cancelled') AND old.status IS DISTINCT FROM new.status AND new.metadata ? 'skiplock_dependents') EXECUTE FUNCTION skiplock.settle_dependents();
CREATE TABLE u_notrg (LIKE skiplock.jobs INCLUDING ALL);
CREATE TABLE u_nochk (LIKE skiplock.jobs INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING INDEXES);
CREATE TRIGGER t1 AFTER UPDATE OF status ON u_nochk FOR EACH ROW WHEN (new.status = 'queued' AND old.status IN ('failed','dead','cancelled') AND new.metadata ? 'skiplock_dependents') EXECUTE FUNCTION skiplock.revive_dependents();
CREATE TRIGGER t2 AFTER UPDATE OF status ON u_nochk FOR EACH ROW WHEN (new.status IN ('succeeded','failed','dead','cancelled') AND old.status IS DISTINCT FROM new.status AND new.metadata ? 'skiplock_dependents') EXECUTE FUNCTION skiplock.settle_dependents();
CREATE TABLE u_bare (LIKE skiplock.jobs INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING INDEXES);
INSERT INTO u_full (kind) VALUES ('k'); INSERT INTO u_notrg (kind) VALUES ('k');
INSERT INTO u_nochk (kind) VALUES ('k'); INSERT INTO u_bare (kind) VALUES ('k');
