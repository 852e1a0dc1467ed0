package audit

import (
	"encoding/json"
	"strconv"
	"time"
)

// DurableKind is the job kind of [DurableArgs]: a durable job of the run's durable phase.
const DurableKind = "chaos_durable"

// DurableSteps is the number of steps of every durable job: DurableSteps calls of
// skiplock.StepTx, step k named [StepName](k), each writing one business row.
const DurableSteps = 5

// The modes of a durable job.
const (
	// DurablePlain runs its five steps one after the other.
	DurablePlain = "plain"
	// DurableSleep calls skiplock.Sleep(SleepMS) before step [SleepBefore].
	DurableSleep = "sleep"
	// DurableSignal calls skiplock.AwaitSignal([SignalName]) before step [WaitBefore],
	// and step WaitBefore writes the payload it got into its business row.
	DurableSignal = "signal"
)

// Where a durable job sleeps or waits: before these steps (so after the steps before them
// committed).
const (
	SleepBefore = 3
	WaitBefore  = 4
)

// SignalName is the name of the signal a DurableSignal job waits for.
const SignalName = "go"

// SignalTimeout is how long a DurableSignal job waits for its signal: far longer than a
// run, so that a lost signal leaves the job waiting (not final) instead of timing out.
const SignalTimeout = time.Hour

// DurableArgs is the payload of a durable job. N numbers the run's durable jobs from 1, so
// that an enqueue whose commit is in doubt can be looked up; SleepMS is the sleep of a
// DurableSleep job.
type DurableArgs struct {
	N       int    `json:"n"`
	Mode    string `json:"mode"`
	SleepMS int    `json:"sleep_ms,omitempty"`
}

// Kind implements skiplock.JobArgs.
func (DurableArgs) Kind() string { return DurableKind }

// SignalPayload is the payload the harness sends to durable job n; its step WaitBefore
// writes it back (as JSON) into its business row, where the harness compares it.
type SignalPayload struct {
	N int `json:"n"`
}

// SignalJSON is the JSON of the payload sent to durable job n, as the business row keeps it.
func SignalJSON(n int) string {
	b, _ := json.Marshal(SignalPayload{N: n}) // cannot fail
	return string(b)
}

// StepName names step k (from 1) of a durable job.
func StepName(k int) string { return "step-" + strconv.Itoa(k) }

// CreateDurableSQL creates the durable phase's tables.
//
// chaos.durable_execs has one row per execution of a step's function, written by the
// worker on a connection of its own (autocommit) before the function's business write, so
// that the row stays whatever becomes of the step's transaction: an execution whose
// transaction rolled back is still counted, and so is one whose commit the library (a
// primary key on its step records) would have refused. Its statement (DurableStartSQL)
// reads, at that moment, whether this step's business row and the previous step's were
// already committed: done_before true is a finished step run again; prev_done false is a
// step started before the step before it had committed (steps out of order).
//
// chaos.durable_rows is the business table: one row per committed step, written in the
// step's own transaction (skiplock.StepTx). It deliberately has no unique key on (job_id,
// step): a step committed twice must show as two rows, not as an error that hides it.
const CreateDurableSQL = `CREATE TABLE chaos.durable_execs (
	exec_id     text        PRIMARY KEY,
	job_id      bigint      NOT NULL,
	step        integer     NOT NULL,
	attempt     integer     NOT NULL,
	worker_id   text        NOT NULL,
	started_at  timestamptz NOT NULL,
	done_before boolean     NOT NULL,
	prev_done   boolean     NOT NULL
);
CREATE INDEX durable_execs_job_idx ON chaos.durable_execs (job_id, step);
CREATE TABLE chaos.durable_rows (
	job_id  bigint      NOT NULL,
	step    integer     NOT NULL,
	exec_id text        NOT NULL,
	at      timestamptz NOT NULL,
	signal  text
);
CREATE INDEX durable_rows_job_idx ON chaos.durable_rows (job_id, step);`

// DurableStartSQL records that an execution of a step's function starts, and whether this
// step and the one before it had committed their business rows by then (step 1 has none
// before it). Parameters: exec_id, job_id, step, attempt, worker_id, started_at (the
// worker's clock).
const DurableStartSQL = `INSERT INTO chaos.durable_execs (exec_id, job_id, step, attempt, worker_id, started_at, done_before, prev_done)
SELECT $1, $2, $3::int, $4, $5, $6,
	EXISTS (SELECT 1 FROM chaos.durable_rows WHERE job_id = $2 AND step = $3::int),
	$3::int = 1 OR EXISTS (SELECT 1 FROM chaos.durable_rows WHERE job_id = $2 AND step = $3::int - 1)
ON CONFLICT (exec_id) DO NOTHING`

// DurableRowSQL is a step's business write, in the step's transaction. Parameters: job_id,
// step, exec_id, at (the worker's clock), signal (the payload a signal step got, else NULL).
const DurableRowSQL = `INSERT INTO chaos.durable_rows (job_id, step, exec_id, at, signal) VALUES ($1, $2, $3, $4, $5)`
