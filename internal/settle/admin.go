// This file holds the statements of the operator's calls that cancel a workflow or put
// jobs and workflow tasks back (the root's workflowadmin.go: CancelWorkflow,
// RetryWorkflow; admin.go: Requeue): each changes tasks the settles also change, so they
// live beside them.

package settle

// CancelWorkflowSQL cancels what has not started: waiting tasks, and the queued jobs of
// released ones (with their tasks, so that nothing settles them again). A running job
// finishes (or is cancelled by Client.Cancel); its dependents are already cancelled.
// It runs after the root's lockWorkflowSQL: no settle of the workflow commits meanwhile.
const CancelWorkflowSQL = `WITH w AS (
	UPDATE {s}.workflow_tasks SET state = 'cancelled'
	WHERE workflow_id = $1 AND state = 'waiting'
	RETURNING 1
),
j AS (
	UPDATE {s}.jobs SET status = 'cancelled', finished_at = now()
	WHERE id = ANY (ARRAY(SELECT job_id FROM {s}.workflow_tasks WHERE workflow_id = $1 AND state = 'released'))
		AND status = 'queued'
	RETURNING id
),
r AS (
	UPDATE {s}.workflow_tasks SET state = 'cancelled'
	WHERE workflow_id = $1 AND job_id IN (SELECT id FROM j)
	RETURNING 1
)
SELECT (SELECT count(*) FROM w) + (SELECT count(*) FROM r)`

// RetryLockSQL locks, in id order (the order every batched statement locks jobs in),
// the jobs RetryWorkflow puts back, and says of each whether its handler may still run:
// a job cancelled while running keeps its lease (lease_until) while its worker runs the
// handler (internal/ownership, cancelled.go), and loses it when the handler returns.
// Locked, no lease renewal or end lands between this check and the requeue.
const RetryLockSQL = `SELECT t.name, j.id, (j.status = 'cancelled' AND j.lease_until > now()) IS TRUE
FROM {s}.jobs j JOIN {s}.workflow_tasks t ON t.job_id = j.id
WHERE t.workflow_id = $1 AND t.state IN ('failed', 'dead', 'cancelled')
	AND j.status IN ('failed', 'dead', 'cancelled')
ORDER BY j.id
FOR UPDATE OF j`

// RetryWorkflowSQL puts a workflow's failed, dead and cancelled tasks back:
//   - req: the jobs of such tasks still in the jobs table go back to queued, due now,
//     their attempts reset, and their tasks to released; in an on_failure = 'run'
//     workflow their children still waiting wait for them again, without their old
//     outcomes in their counts (unsettle: UnsettleSQL; old has those outcomes);
//   - gone: such tasks whose job is not put back — gone from the jobs table (deleted,
//     or purged by DeadRetention or the retention of cancelled jobs) — cannot run again:
//     they stay as they are, and no settle will ever come from them. In an on_failure =
//     'cancel' workflow their descendants (stuck, recursive over workflow_edges) would
//     wait for them for ever, so those are not reopened either; in an 'run' one they
//     count as settled, as below;
//   - cand/back: cancelled tasks whose job never existed (cancelled as dependents, or
//     while waiting), but those in stuck, wait again for their dependencies that will
//     settle again; those with none left are inserted as jobs (ins). A dependency settles
//     again if it is requeued here (rel), reopened here (cand) or still waiting or
//     released; one that stays as it was (succeeded; or ended and its job is gone) is
//     settled already, and is counted into the task's outcome counts, which a batch's
//     callback reads. In an on_failure = 'cancel' workflow only successes satisfy a
//     dependency: every other one is waited for (none is gone: stuck left those out).
//
// It returns the count of tasks put back, the queues to wake, the jobs inserted, and
// the names of the tasks gone and of those left cancelled because of them.
// It runs after the root's lockWorkflowSQL: the states it reads stay as read until it commits.
var RetryWorkflowSQL = `WITH RECURSIVE req AS (
	UPDATE {s}.jobs SET status = 'queued', run_at = now(), attempts = 0, finished_at = NULL,
		locked_by = NULL, locked_at = NULL, lease_until = NULL
	WHERE id = ANY (ARRAY(SELECT job_id FROM {s}.workflow_tasks
			WHERE workflow_id = $1 AND state IN ('failed', 'dead', 'cancelled')))
		AND status IN ('failed', 'dead', 'cancelled')
	RETURNING id, queue
),
old AS (
	SELECT workflow_id, name, state FROM {s}.workflow_tasks
	WHERE workflow_id = $1 AND job_id IN (SELECT id FROM req)
),
rel AS (
	UPDATE {s}.workflow_tasks SET state = 'released'
	WHERE workflow_id = $1 AND job_id IN (SELECT id FROM req)
	RETURNING name
),
unsettle AS (
	` + UnsettleSQL("old") + `
),
gone AS (
	SELECT name FROM {s}.workflow_tasks
	WHERE workflow_id = $1 AND state IN ('failed', 'dead', 'cancelled') AND job_id IS NOT NULL
		AND job_id NOT IN (SELECT id FROM req)
),
stuck (name) AS (
	SELECT e.child FROM {s}.workflow_edges e
	JOIN gone g ON g.name = e.parent
	JOIN {s}.workflows w ON w.id = e.workflow_id AND w.on_failure = 'cancel'
	WHERE e.workflow_id = $1
	UNION
	SELECT e.child FROM {s}.workflow_edges e
	JOIN stuck s ON s.name = e.parent
	WHERE e.workflow_id = $1
),
par AS (
	SELECT t.name, w.on_failure, p.state,
		p.name IN (SELECT name FROM rel) OR p.state IN ('waiting', 'released')
			OR (p.state = 'cancelled' AND p.job_id IS NULL AND p.name NOT IN (SELECT name FROM stuck)) AS again
	FROM {s}.workflow_tasks t
	JOIN {s}.workflows w ON w.id = t.workflow_id
	LEFT JOIN {s}.workflow_edges e ON e.workflow_id = t.workflow_id AND e.child = t.name
	LEFT JOIN {s}.workflow_tasks p ON p.workflow_id = e.workflow_id AND p.name = e.parent
	WHERE t.workflow_id = $1 AND t.state = 'cancelled' AND t.job_id IS NULL
		AND t.name NOT IN (SELECT name FROM stuck)
),
cand AS (
	SELECT name,
		count(*) FILTER (WHERE again OR on_failure = 'cancel' AND state <> 'succeeded') AS waiting,
		count(*) FILTER (WHERE NOT again AND state = 'succeeded') AS ns,
		count(*) FILTER (WHERE NOT again AND state = 'failed') AS nf,
		count(*) FILTER (WHERE NOT again AND state = 'dead') AS nd,
		count(*) FILTER (WHERE NOT again AND state = 'cancelled') AS nc
	FROM par GROUP BY name
),
back AS (
	UPDATE {s}.workflow_tasks t SET waiting = c.waiting,
		state = CASE WHEN c.waiting = 0 THEN 'released' ELSE 'waiting' END,
		n_succeeded = c.ns, n_failed = c.nf, n_dead = c.nd, n_cancelled = c.nc
	FROM cand c WHERE t.workflow_id = $1 AND t.name = c.name
	RETURNING t.*
),
ins AS (
	INSERT INTO {s}.jobs (queue, kind, payload, priority, run_at, max_attempts, timeout_ms, metadata, partition_key)
	SELECT queue, kind, payload, priority, now(), max_attempts, timeout_ms,
		CASE WHEN metadata ? '` + MetaBatch + `' THEN metadata || jsonb_build_object(
			'skiplock_succeeded', n_succeeded::text, 'skiplock_failed', n_failed::text,
			'skiplock_dead', n_dead::text, 'skiplock_cancelled', n_cancelled::text)
		ELSE metadata END,
		partition_key
	FROM back WHERE state = 'released'
	RETURNING ` + InsertedTaskColumns + `
)
SELECT (SELECT count(*) FROM rel) + (SELECT count(*) FROM back),
	ARRAY(SELECT queue FROM req),
	coalesce((SELECT array_agg(id) FROM ins), '{}'), coalesce((SELECT array_agg(workflow_id) FROM ins), '{}'),
	coalesce((SELECT array_agg(name) FROM ins), '{}'), coalesce((SELECT array_agg(DISTINCT queue) FROM ins), '{}'),
	ARRAY(SELECT name FROM gone ORDER BY name),
	ARRAY(SELECT t.name FROM {s}.workflow_tasks t
		WHERE t.workflow_id = $1 AND t.state = 'cancelled' AND t.job_id IS NULL
			AND t.name IN (SELECT name FROM stuck) ORDER BY t.name)`

// RequeueSQL is the operator's "try again": dead or failed jobs back to queued, due now,
// with their attempts reset. Their error history stays.
//
//   - cand locks the matching rows, so a concurrent Requeue waits instead of counting them
//     twice.
//   - pick keeps, of the candidates sharing a unique key, only the newest, and none whose
//     key an active job holds: requeueing those would break the key's promise (and fail on
//     jobs_unique_key_idx). They are counted as skipped.
//   - r reaches the picked rows through the primary key (id = ANY (ARRAY(...)), whatever
//     the table's statistics say; see heartbeatSQL).
//   - A job made active with the same key after this statement's snapshot still makes the
//     UPDATE fail with unique_violation; Requeue then runs the statement again, and the
//     new snapshot sees it.
//   - t puts the task of a requeued workflow task's job back to released (through
//     workflow_tasks_job_idx; nothing for plain jobs), as RetryWorkflow does: the task
//     settles again when its job ends (settleSQL settles released tasks only), and
//     WaitWorkflow waits for it. Without it the task kept its old outcome while its job
//     ran, and its new one was never recorded. The task's row is locked after its job's,
//     as a settle does; RetryWorkflow locks the jobs it puts back before any task row,
//     so the two wait for each other's job locks, never in a cycle.
//   - o/u: in a RunDependents workflow the task's failure had satisfied its children;
//     those still waiting wait for it again and drop its old outcome from their counts
//     (UnsettleSQL), so that its next outcome is counted once.
var RequeueSQL = `WITH cand AS (
	SELECT id, unique_key FROM {s}.jobs
	WHERE status IN ('dead', 'failed')
		AND ($1::bigint[] IS NULL OR id = ANY($1))
		AND ($2::text IS NULL OR kind = $2)
		AND ($3::text IS NULL OR queue = $3)
	FOR UPDATE
), pick AS (
	SELECT DISTINCT ON (c.unique_key, CASE WHEN c.unique_key IS NULL THEN c.id END) c.id
	FROM cand c
	WHERE c.unique_key IS NULL OR NOT EXISTS (
		SELECT 1 FROM {s}.jobs a WHERE a.unique_key = c.unique_key AND a.status IN ('queued', 'running'))
	ORDER BY c.unique_key, CASE WHEN c.unique_key IS NULL THEN c.id END, c.id DESC
), r AS (
	UPDATE {s}.jobs j SET status = 'queued', attempts = 0, run_at = now(), finished_at = NULL,
		locked_at = NULL, locked_by = NULL
	WHERE j.id = ANY (ARRAY(SELECT id FROM pick))
	RETURNING j.id, j.queue
), o AS (
	SELECT workflow_id, name, state FROM {s}.workflow_tasks
	WHERE job_id = ANY (ARRAY(SELECT id FROM r)) AND state IN ('failed', 'dead')
), t AS (
	UPDATE {s}.workflow_tasks SET state = 'released'
	WHERE job_id = ANY (ARRAY(SELECT id FROM r)) AND state IN ('failed', 'dead')
), u AS (
	` + UnsettleSQL("o") + `
)
SELECT (SELECT count(*) FROM cand), (SELECT count(*) FROM r),
	coalesce((SELECT array_agg(DISTINCT queue) FROM r), '{}')`
