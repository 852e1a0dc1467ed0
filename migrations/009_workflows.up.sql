-- Migration 9: workflows (DAGs of jobs) and batches with a callback (docs/workflows.md).
--
-- Safe on a live table: three new tables, nothing on jobs changes. A task that waits for
-- its dependencies lives only in workflow_tasks, so workers of earlier releases never see
-- it; a released task is an ordinary job row.

-- One row per workflow (or batch). on_failure says what a dependency that ends failed,
-- dead or cancelled does to the tasks that depend on it: cancel them, or run them anyway.
CREATE TABLE workflows (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text        NOT NULL,
    on_failure text        NOT NULL DEFAULT 'cancel',
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT workflows_on_failure_check CHECK (on_failure IN ('cancel', 'run')),
    CONSTRAINT workflows_name_check CHECK (char_length(name) BETWEEN 1 AND 255)
);

-- One row per task. job_id is the id of its job, written by the transaction that inserts
-- the job when the task is released (waiting reaches 0); NULL until then. (Reserving ids
-- at enqueue would need a grant on the jobs identity sequence, which the app role does
-- not have; see README, "Least privilege".) state: waiting,
-- released (its job is in jobs), then its outcome: succeeded, failed, dead, cancelled.
-- The n_* columns count the outcomes of the dependencies settled so far (a batch's
-- callback gets them). The other columns are the job as it will be inserted.
CREATE TABLE workflow_tasks (
    workflow_id   bigint      NOT NULL,
    name          text        NOT NULL,
    job_id        bigint,
    state         text        NOT NULL,
    waiting       integer     NOT NULL,
    n_succeeded   integer     NOT NULL DEFAULT 0,
    n_failed      integer     NOT NULL DEFAULT 0,
    n_dead        integer     NOT NULL DEFAULT 0,
    n_cancelled   integer     NOT NULL DEFAULT 0,
    queue         text        NOT NULL,
    kind          text        NOT NULL,
    payload       jsonb       NOT NULL,
    priority      smallint    NOT NULL,
    run_at        timestamptz,
    max_attempts  integer     NOT NULL,
    timeout_ms    bigint,
    metadata      jsonb       NOT NULL,
    partition_key text,
    PRIMARY KEY (workflow_id, name),
    CONSTRAINT workflow_tasks_state_check
        CHECK (state IN ('waiting', 'released', 'succeeded', 'failed', 'dead', 'cancelled')),
    CONSTRAINT workflow_tasks_name_check CHECK (char_length(name) BETWEEN 1 AND 255)
);

-- The settler finds the tasks of finished jobs by their job ids.
CREATE UNIQUE INDEX workflow_tasks_job_idx ON workflow_tasks (job_id);

-- One row per dependency: child runs after parent. The settler walks it from the parent.
CREATE TABLE workflow_edges (
    workflow_id bigint NOT NULL,
    parent      text   NOT NULL,
    child       text   NOT NULL,
    PRIMARY KEY (workflow_id, parent, child)
);
-- No foreign keys in these tables: one statement writes a workflow's rows together after
-- the enqueue checked every name (a check per edge would cost a batch of 1,000 jobs 2,000
-- lookups), and the rows of a workflow are deleted together by workflow_id.

-- One row per sequence key (Client.EnqueueSequence): the workflow that holds the key's
-- jobs as a chain, and its last task. Enqueues of a key lock this row, and so does the
-- settling of the key's tasks before it reads the chain, so a job enqueued behind a
-- task that is finishing is either seen by the settle or sees the settled task.
CREATE TABLE sequences (
    key         text   PRIMARY KEY,
    workflow_id bigint,
    tail        text,
    CONSTRAINT sequences_key_check CHECK (char_length(key) BETWEEN 1 AND 255)
);
CREATE INDEX sequences_workflow_idx ON sequences (workflow_id);
