DROP INDEX jobs_archive_unique_key_idx;
DROP INDEX jobs_unique_key_done_idx;
DROP TABLE periodic;
DROP TABLE queues;
