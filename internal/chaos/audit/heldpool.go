package audit

// This file holds what the held-pool fault's worker and the harness share: the job whose
// handler holds a transaction on its worker's pool and commits its success in it
// (CompleteTx), and the table where each execution says how long it waited for a
// connection and whether its context was cancelled.

// HeldKind is the job kind of [HeldArgs].
const HeldKind = "chaos_held"

// HeldQueue is the queue of the held-pool fault's jobs: only the fault's own worker
// serves it.
const HeldQueue = "held"

// HeldArgs is the payload of a held-pool job; N numbers the fault's jobs from 0.
type HeldArgs struct {
	N int `json:"n"`
}

// Kind implements skiplock.JobArgs.
func (HeldArgs) Kind() string { return HeldKind }

// CreateHeldSQL creates the held-pool table: one row per execution of a held-pool job
// (its start and end are in chaos.executions, like every execution's). waited_ms is how
// long its Begin waited for a connection of the worker's pool; ended_early is, when the
// execution did not commit, why: the cause of its context when the worker cancelled it,
// else the error (a CompleteTx that found its attempt lost); NULL when it committed.
const CreateHeldSQL = `CREATE TABLE IF NOT EXISTS chaos.held (
	exec_id   text    PRIMARY KEY,
	job_id    bigint  NOT NULL,
	attempt   integer NOT NULL,
	worker_id text    NOT NULL,
	waited_ms bigint  NOT NULL,
	ended_early text
)`

// HeldSQL records how a held-pool execution went. Parameters: exec_id, job_id, attempt,
// worker_id, waited_ms, ended_early. Idempotent, for retries.
const HeldSQL = `INSERT INTO chaos.held (exec_id, job_id, attempt, worker_id, waited_ms, ended_early)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (exec_id) DO NOTHING`
