package main

import (
	"fmt"
	"strings"
)

// The schemas of -server-experiments (serverwork.go): shapes of a job table, in
// plain SQL, that differ in the server work a job costs. All but bare keep skiplock's
// columns, check constraints and storage settings (migrations 001-005), and the same
// claim order (queue, priority DESC, run_at, id), fence and lease columns, so the
// difference is the shape alone. bare is the bare floor's table and statements
// (sys_bare.go) through the same loops: the ratio of status or archive to it is what
// skiplock's shape costs before any of skiplock's own work (its priority walk, its Go
// side, its extra statements).

// swVariant is one table shape: its DDL and the four statements a job goes through.
type swVariant struct {
	name, desc string
	setup      string
	reset      string
	// insert enqueues one job: $1 its payload.
	insert string
	// claim takes up to $2 due jobs of queue $1 for worker $3 with a lease of $4, and
	// returns id, fence, gen (the partition; 0 where there is none) and payload.
	claim string
	// complete deletes the succeeded jobs: ids $1, fences $2, worker $3 (and gens $4
	// when gens is set), fenced as skiplock's completion is (lease.go fenceSQL).
	complete string
	gens     bool
	// body is the table (or the partitioned table's prefix) whose updates the claim makes.
	body string
	// like matches every relation of the variant in pg_stat_user_tables and pg_class.
	like string
	// rotate: the table is partitioned into swSlots generations and rotated (swRotator).
	rotate bool
	// direct: claim and complete name one partition, {p}: a loop works the oldest
	// generation that may hold jobs and moves to the next one once a claim finds none.
	direct bool
}

// swSlots is the number of generation partitions of the rotated variant: a ring, each
// truncated once it is empty and not the current one.
const swSlots = 8

// swColumns are skiplock's jobs columns (migrations 001, 002, 004, 005) after the id.
const swColumns = `
	queue text NOT NULL DEFAULT 'default', kind text NOT NULL, payload jsonb NOT NULL DEFAULT '{}',
	status text NOT NULL DEFAULT 'queued', priority smallint NOT NULL DEFAULT 0,
	run_at timestamptz NOT NULL DEFAULT now(), attempts integer NOT NULL DEFAULT 0,
	max_attempts integer NOT NULL DEFAULT 20, locked_at timestamptz, locked_by text,
	last_error text, errors jsonb, unique_key text, created_at timestamptz NOT NULL DEFAULT now(),
	finished_at timestamptz, lease_until timestamptz, fence bigint NOT NULL DEFAULT 0,
	timeout_ms bigint, metadata jsonb NOT NULL DEFAULT '{}', progress jsonb, output jsonb,
	partition_key text, limited boolean,
	CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'dead', 'cancelled')),
	CHECK (max_attempts >= 1), CHECK (char_length(kind) BETWEEN 1 AND 255),
	CHECK (char_length(queue) BETWEEN 1 AND 64), CHECK (errors IS NULL OR jsonb_typeof(errors) = 'array'),
	CHECK (timeout_ms IS NULL OR timeout_ms > 0),
	CHECK (partition_key IS NULL OR char_length(partition_key) BETWEEN 1 AND 255)`

// swStorage is migration 001's storage settings of the hot table.
const swStorage = `fillfactor = 90, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
	autovacuum_vacuum_insert_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.05,
	autovacuum_vacuum_cost_delay = 0`

// swArchiveTable creates the archive table t of the variants that keep succeeded jobs:
// skiplock's jobs_archive columns and its BRIN index on finished_at.
func swArchiveTable(t string) string {
	return strings.ReplaceAll(`
CREATE TABLE {t} (id bigint PRIMARY KEY, queue text NOT NULL, kind text NOT NULL,
	payload jsonb NOT NULL, status text NOT NULL, priority smallint NOT NULL, run_at timestamptz NOT NULL,
	attempts integer NOT NULL, max_attempts integer NOT NULL, locked_by text, last_error text,
	errors jsonb, unique_key text, created_at timestamptz NOT NULL, finished_at timestamptz NOT NULL,
	fence bigint NOT NULL DEFAULT 0, metadata jsonb NOT NULL DEFAULT '{}', progress jsonb, output jsonb,
	started_at timestamptz);
CREATE INDEX {t}_finished_idx ON {t} USING brin (finished_at);`, "{t}", t)
}

// swArchiveMove inserts into archive t the rows of from (SQL after FROM: the deleted
// jobs, with every one of skiplock's columns by its own name) as succeeded, as
// skiplock's archive move does (internal/record, completion.go).
func swArchiveMove(t, from string) string {
	return `INSERT INTO ` + t + ` (id, queue, kind, payload, status, priority, run_at, attempts,
	max_attempts, locked_by, last_error, errors, unique_key, created_at, finished_at, fence,
	metadata, progress, output, started_at)
SELECT id, queue, kind, payload, 'succeeded', priority, run_at, attempts,
	max_attempts, locked_by, last_error, errors, unique_key, created_at, now(), fence,
	metadata, progress, output, locked_at
FROM ` + from
}

// swStatusIndexes are skiplock's indexes on jobs (migrations 001, 003, 005) apart from the
// primary key, for table t. unique: jobs_unique_key_idx is unique (a partitioned table
// cannot have it so: its key lacks the partition column).
func swStatusIndexes(t string, unique bool) string {
	u := "UNIQUE "
	if !unique {
		u = ""
	}
	return strings.ReplaceAll(`
CREATE INDEX {t}_claim_idx ON {t} (queue, priority DESC, run_at, id) WHERE status = 'queued';
CREATE INDEX {t}_running_idx ON {t} (locked_at) WHERE status = 'running';
CREATE INDEX {t}_stuck_idx ON {t} (kind, queue) WHERE status IN ('dead', 'failed');
CREATE `+u+`INDEX {t}_unique_key_idx ON {t} (unique_key) WHERE unique_key IS NOT NULL AND status IN ('queued', 'running');
CREATE INDEX {t}_unique_key_done_idx ON {t} (unique_key) WHERE unique_key IS NOT NULL AND status NOT IN ('queued', 'running');
CREATE INDEX {t}_limited_running_idx ON {t} (queue, partition_key) WHERE status = 'running' AND limited;
CREATE INDEX {t}_partition_idx ON {t} (queue, partition_key, priority DESC, run_at, id) WHERE status = 'queued' AND partition_key IS NOT NULL;`, "{t}", t)
}

// swFence is skiplock's fenceSQL: the rows of the claimed attempts ($1 ids, $2 fences) of
// worker $3 still running.
const swFence = `id = ANY ($1::bigint[]) AND (status || '') = 'running' AND locked_by = $3
	AND ((id, fence) IN (SELECT * FROM unnest($1::bigint[], $2::bigint[])) OR false)`

// swClaimSet is what skiplock's claim writes on the claimed row.
const swClaimSet = `status = 'running', locked_at = now(), locked_by = $3, attempts = attempts + 1,
	fence = fence + 1, lease_until = now() + $4::interval`

var swVariants = []swVariant{
	{
		name: "status",
		desc: "today's shape: one jobs table with skiplock's partial indexes on status; the claim UPDATEs status (never HOT), the success DELETEs the row",
		setup: `CREATE TABLE sw_status (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, ` + swColumns + `) WITH (` + swStorage + `);` +
			swStatusIndexes("sw_status", true),
		reset:  `TRUNCATE sw_status`,
		insert: `INSERT INTO sw_status (kind, payload) VALUES ('noop', $1)`,
		claim: `UPDATE sw_status SET ` + swClaimSet + `
WHERE ctid = ANY (ARRAY(SELECT ctid FROM sw_status
	WHERE status = 'queued' AND queue = $1 AND run_at <= now()
	ORDER BY priority DESC, run_at, id LIMIT $2 FOR UPDATE SKIP LOCKED))
RETURNING id, fence, 0, payload`,
		complete: `DELETE FROM sw_status WHERE ` + swFence,
		body:     "sw_status", like: "sw\\_status%",
	},
	{
		name: "archive",
		desc: "today's shape with skiplock's default success: the success DELETEs the row and INSERTs it into an archive table (skiplock's jobs_archive columns, a BRIN index on finished_at) in one statement",
		setup: `CREATE TABLE sw_arch (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, ` + swColumns + `) WITH (` + swStorage + `);` +
			swStatusIndexes("sw_arch", true) + swArchiveTable("sw_arch_archive"),
		reset:  `TRUNCATE sw_arch, sw_arch_archive`,
		insert: `INSERT INTO sw_arch (kind, payload) VALUES ('noop', $1)`,
		claim: `UPDATE sw_arch SET ` + swClaimSet + `
WHERE ctid = ANY (ARRAY(SELECT ctid FROM sw_arch
	WHERE status = 'queued' AND queue = $1 AND run_at <= now()
	ORDER BY priority DESC, run_at, id LIMIT $2 FOR UPDATE SKIP LOCKED))
RETURNING id, fence, 0, payload`,
		complete: `WITH done AS (DELETE FROM sw_arch WHERE ` + swFence + ` RETURNING *)
` + swArchiveMove("sw_arch_archive", "done"),
		body: "sw_arch", like: "sw\\_arch%",
	},
	{
		name: "bare",
		desc: "the bare floor's shape (bench/sys_bare.go): id, payload, created_at and started_at, one partial index on id WHERE started_at IS NULL; the claim sets started_at, the success DELETEs by id (no fence, lease, checks or priorities)",
		setup: `CREATE TABLE sw_bare (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload jsonb NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(), started_at timestamptz);
CREATE INDEX sw_bare_queued_idx ON sw_bare (id) WHERE started_at IS NULL;`,
		reset:  `TRUNCATE sw_bare`,
		insert: `INSERT INTO sw_bare (payload) VALUES ($1)`,
		// $1, $3 and $4 are the other variants' queue, worker and lease; the floor has none.
		claim: `UPDATE sw_bare SET started_at = now()
WHERE id = ANY (ARRAY(SELECT id FROM sw_bare WHERE started_at IS NULL AND $1::text IS NOT NULL
	AND $3::text IS NOT NULL AND $4::interval IS NOT NULL ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED))
RETURNING id, 0::bigint, 0, payload`,
		// $2 and $3 are the fences and worker of the other variants' fenced completion.
		complete: `DELETE FROM sw_bare WHERE id = ANY ($1::bigint[]) AND $2::bigint[] IS NOT NULL AND $3::text IS NOT NULL`,
		body:     "sw_bare", like: "sw\\_bare%",
	},
	swSplit("split", true),
	swSplit("splitdel", false),
	swReady("ready", "90"),
	swReady("ready50", "50"),
	{
		name: "rotated",
		desc: fmt.Sprintf("today's shape partitioned by generation (LIST on gen, a ring of %d partitions); enqueues go to the current generation, which moves on every 200 ms to a partition found empty, and partitions found empty are TRUNCATEd instead of vacuumed; claim and completion as in status, the rows found by (id, gen)", swSlots),
		setup: `CREATE TABLE sw_gen (g smallint NOT NULL) WITH (fillfactor = 10);
INSERT INTO sw_gen VALUES (0);
CREATE TABLE sw_rot (id bigint GENERATED ALWAYS AS IDENTITY, gen smallint NOT NULL, ` + swColumns + `,
	PRIMARY KEY (id, gen)) PARTITION BY LIST (gen);` + swPartitions() + swStatusIndexes("sw_rot", false),
		reset:  `TRUNCATE sw_rot; UPDATE sw_gen SET g = 0`,
		insert: `INSERT INTO sw_rot (gen, kind, payload) VALUES ((SELECT g FROM sw_gen), 'noop', $1)`,
		claim: `WITH picked AS (SELECT id, gen FROM sw_rot
	WHERE status = 'queued' AND queue = $1 AND run_at <= now()
	ORDER BY priority DESC, run_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)
UPDATE sw_rot SET ` + swClaimSet + `
WHERE id = ANY (ARRAY(SELECT id FROM picked)) AND gen = ANY (ARRAY(SELECT DISTINCT gen FROM picked))
RETURNING id, fence, gen, payload`,
		complete: `DELETE FROM sw_rot WHERE gen = ANY ($4::smallint[]) AND ` + swFence,
		gens:     true, rotate: true,
		body: "sw_rot", like: "sw\\_rot%",
	},
	{
		name:   "rotdirect",
		desc:   fmt.Sprintf("rotated, but each claim and completion names one partition (sw_rot_<gen>): a claim loop works the oldest generation that may hold jobs and moves on once a claim finds it empty; the same tables as rotated, which it shares (%d partitions)", swSlots),
		reset:  `TRUNCATE sw_rot; UPDATE sw_gen SET g = 0`,
		insert: `INSERT INTO sw_rot (gen, kind, payload) VALUES ((SELECT g FROM sw_gen), 'noop', $1)`,
		claim: `UPDATE {p} SET ` + swClaimSet + `
WHERE ctid = ANY (ARRAY(SELECT ctid FROM {p}
	WHERE status = 'queued' AND queue = $1 AND run_at <= now()
	ORDER BY priority DESC, run_at, id LIMIT $2 FOR UPDATE SKIP LOCKED))
RETURNING id, fence, gen, payload`,
		complete: `DELETE FROM {p} WHERE ` + swFence,
		rotate:   true, direct: true,
		body: "sw_rot", like: "sw\\_rot%",
	},
}

// swPartitions creates the generation partitions of sw_rot with the hot table's storage.
func swPartitions() string {
	var b strings.Builder
	for i := range swSlots {
		fmt.Fprintf(&b, "\nCREATE TABLE sw_rot_%d PARTITION OF sw_rot FOR VALUES IN (%d) WITH (%s);", i, i, swStorage)
	}
	return b.String()
}

// swReady is the ready-table variant with the job body at fillfactor ff: a claim updates
// the rows of a batch side by side, so it is HOT only where the page has room for the new
// versions of its rows (at 90 a page has room for about a tenth of them).
func swReady(name, ff string) swVariant {
	body := "sw_" + name + "_jobs"
	ready := "sw_" + name + "_q"
	storage := strings.Replace(swStorage, "fillfactor = 90", "fillfactor = "+ff, 1)
	r := strings.NewReplacer("{b}", body, "{r}", ready)
	return swVariant{
		name: name,
		desc: "a narrow ready table (id, queue, priority, run_at) holds the claim index; the claim DELETEs its rows and UPDATEs the job body (fillfactor " + ff + "), which has no index on anything the claim writes (HOT where the page has room), the success DELETEs the body",
		setup: r.Replace(`CREATE TABLE {b} (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, ` + swColumns + `) WITH (` + storage + `);
CREATE UNIQUE INDEX {b}_unique_key_idx ON {b} (unique_key) WHERE unique_key IS NOT NULL;
CREATE TABLE {r} (id bigint NOT NULL, queue text NOT NULL, priority smallint NOT NULL,
	run_at timestamptz NOT NULL) WITH (` + swStorage + `);
CREATE INDEX {r}_claim_idx ON {r} (queue, priority DESC, run_at, id);`),
		reset: r.Replace(`TRUNCATE {b}, {r}`),
		insert: r.Replace(`WITH j AS (INSERT INTO {b} (kind, payload) VALUES ('noop', $1)
	RETURNING id, queue, priority, run_at)
INSERT INTO {r} (id, queue, priority, run_at) SELECT * FROM j`),
		claim: r.Replace(`WITH picked AS (
	DELETE FROM {r} WHERE ctid = ANY (ARRAY(SELECT ctid FROM {r}
		WHERE queue = $1 AND run_at <= now()
		ORDER BY priority DESC, run_at, id LIMIT $2 FOR UPDATE SKIP LOCKED))
	RETURNING id)
UPDATE {b} SET ` + swClaimSet + `
WHERE id = ANY (ARRAY(SELECT id FROM picked))
RETURNING id, fence, 0, payload`),
		complete: r.Replace(`DELETE FROM {b} WHERE ` + swFence),
		body:     body, like: strings.ReplaceAll("sw_"+name+"_", "_", "\\_") + "%",
	}
}

// swSplit is the narrow-hot-row variant: the job's row split in two tables, the columns a
// claim or a lease reads or writes, with skiplock's indexes on status, in a hot table, and
// the job's body (kind, payload, metadata, errors, output, times) in a cold one beside it
// that no claim updates. The claim updates the hot row and reads the payload from the
// cold one; the success deletes both, and with archive moves the joined row to an archive
// table (today's jobs_archive shape, as the archive variant), without it deletes them only.
func swSplit(name string, archive bool) swVariant {
	hot, cold, arch := "sw_"+name+"_hot", "sw_"+name+"_cold", "sw_"+name+"_archive"
	r := strings.NewReplacer("{h}", hot, "{c}", cold, "{a}", arch)
	setup := r.Replace(`CREATE TABLE {h} (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	queue text NOT NULL DEFAULT 'default', status text NOT NULL DEFAULT 'queued',
	priority smallint NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now(),
	attempts integer NOT NULL DEFAULT 0, max_attempts integer NOT NULL DEFAULT 20,
	locked_at timestamptz, locked_by text, unique_key text, lease_until timestamptz,
	fence bigint NOT NULL DEFAULT 0, timeout_ms bigint, partition_key text, limited boolean,
	CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'dead', 'cancelled')),
	CHECK (max_attempts >= 1), CHECK (char_length(queue) BETWEEN 1 AND 64),
	CHECK (timeout_ms IS NULL OR timeout_ms > 0),
	CHECK (partition_key IS NULL OR char_length(partition_key) BETWEEN 1 AND 255)) WITH (` + swStorage + `);` +
		strings.Replace(swStatusIndexes(hot, true), "(kind, queue)", "(queue)", 1) + `
CREATE TABLE {c} (id bigint PRIMARY KEY, kind text NOT NULL, payload jsonb NOT NULL DEFAULT '{}',
	last_error text, errors jsonb, created_at timestamptz NOT NULL DEFAULT now(), finished_at timestamptz,
	metadata jsonb NOT NULL DEFAULT '{}', progress jsonb, output jsonb,
	CHECK (char_length(kind) BETWEEN 1 AND 255), CHECK (errors IS NULL OR jsonb_typeof(errors) = 'array'));`)
	reset := r.Replace(`TRUNCATE {h}, {c}`)
	complete := r.Replace(`WITH done AS (DELETE FROM {h} WHERE ` + swFence + ` RETURNING id)
DELETE FROM {c} WHERE id = ANY (ARRAY(SELECT id FROM done))`)
	desc := "the job's row split in two: a narrow hot table (the claim's and the lease's columns, skiplock's indexes on status) and a cold one (kind, payload, metadata, errors, output, times) that no claim updates; the claim updates the hot row and reads the payload beside it, the success deletes both"
	if archive {
		setup += swArchiveTable(arch)
		reset = r.Replace(`TRUNCATE {h}, {c}, {a}`)
		complete = r.Replace(`WITH done AS (DELETE FROM {h} WHERE ` + swFence + ` RETURNING *),
body AS (DELETE FROM {c} WHERE id = ANY (ARRAY(SELECT id FROM done)) RETURNING *)
` + swArchiveMove(arch, "done JOIN body USING (id)"))
		desc += ", and moves the joined row to an archive table (the archive variant's)"
	}
	return swVariant{
		name: name, desc: desc, setup: setup, reset: reset,
		insert: r.Replace(`WITH h AS (INSERT INTO {h} DEFAULT VALUES RETURNING id)
INSERT INTO {c} (id, kind, payload) SELECT id, 'noop', $1 FROM h`),
		claim: r.Replace(`UPDATE {h} SET ` + swClaimSet + `
WHERE ctid = ANY (ARRAY(SELECT ctid FROM {h}
	WHERE status = 'queued' AND queue = $1 AND run_at <= now()
	ORDER BY priority DESC, run_at, id LIMIT $2 FOR UPDATE SKIP LOCKED))
RETURNING id, fence, 0, (SELECT c.payload FROM {c} c WHERE c.id = {h}.id)`),
		complete: complete,
		body:     hot, like: strings.ReplaceAll("sw_"+name+"_", "_", "\\_") + "%",
	}
}
