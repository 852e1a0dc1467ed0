-- The tables the pgbench scripts insert into, in a database where skiplock is migrated
-- (schema skiplock). ck0: the jobs row without its CHECKs; ck8: with them; ckb: the same
-- eight conditions written more compactly (about 20 % less node text); ckc: those as one
-- constraint; ckd: the columns moved onto domains (see README: the ALTER rebuilt every
-- index that names them).
CREATE TABLE ck0 (LIKE skiplock.jobs INCLUDING DEFAULTS INCLUDING IDENTITY);
CREATE TABLE ck8 (LIKE skiplock.jobs INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING CONSTRAINTS);
CREATE TABLE ckb (LIKE skiplock.jobs INCLUDING DEFAULTS INCLUDING IDENTITY);
ALTER TABLE ckb ADD CONSTRAINT a CHECK (jsonb_typeof(concurrency_keys) = 'object'),
 ADD CONSTRAINT b CHECK (jsonb_typeof(errors) = 'array'),
 ADD CONSTRAINT c CHECK (char_length(kind) BETWEEN 1 AND 255),
 ADD CONSTRAINT d CHECK (max_attempts >= 1),
 ADD CONSTRAINT e CHECK (char_length(partition_key) BETWEEN 1 AND 255),
 ADD CONSTRAINT f CHECK (char_length(queue) BETWEEN 1 AND 64),
 ADD CONSTRAINT g CHECK (status = ANY ('{queued,running,succeeded,failed,dead,cancelled}'::text[])),
 ADD CONSTRAINT h CHECK (timeout_ms > 0);
CREATE TABLE ckc (LIKE skiplock.jobs INCLUDING DEFAULTS INCLUDING IDENTITY);
ALTER TABLE ckc ADD CONSTRAINT a CHECK (jsonb_typeof(concurrency_keys) = 'object' AND jsonb_typeof(errors) = 'array'
 AND char_length(kind) BETWEEN 1 AND 255 AND max_attempts >= 1 AND char_length(partition_key) BETWEEN 1 AND 255
 AND char_length(queue) BETWEEN 1 AND 64 AND status = ANY ('{queued,running,succeeded,failed,dead,cancelled}'::text[]) AND timeout_ms > 0);
-- Run: pgbench -n -M prepared -T 3 -f pb_<table>.sql <db>, the tables in turn, 3 rounds.
