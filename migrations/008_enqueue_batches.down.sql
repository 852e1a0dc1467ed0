-- Migration 8, reverted. The coalesced enqueues of this release then fail over to one
-- statement per job; the previous release never reads the table.
DROP TABLE IF EXISTS enqueue_batches;
