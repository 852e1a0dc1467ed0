// Package audit is what the chaos harness and its worker processes share: the job they
// run and the table in which every handler execution leaves a row.
//
// It is a package of its own so that the worker binary does not link the harness (and the
// test helpers the harness imports).
package audit

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"time"
)

// Kind is the job kind of [Args].
const Kind = "chaos"

// Args is the payload of a chaos job. Seq numbers the jobs of a run from 0, so that the
// harness can tell which enqueued jobs are missing; Batch is the enqueue call that inserted
// the job, so that the harness can tell whether an enqueue whose commit failed with a
// lost connection went through.
type Args struct {
	Seq   int64 `json:"seq"`
	Batch int   `json:"batch"`
}

// Kind implements skiplock.JobArgs.
func (Args) Kind() string { return Kind }

// LimitedQueue is the queue of the run's limited jobs (one in LimitedEvery): every worker
// declares it with a global limit of LimitedConcurrency (skiplock.QueueLimits), and the
// harness reports the most of its executions it saw running at once.
const (
	LimitedQueue       = "limited"
	LimitedConcurrency = 6
	LimitedEvery       = 10
)

// Schema holds the audit table, apart from skiplock's own schema.
const Schema = "chaos"

// CreateSQL creates the audit table. One row is one handler execution:
//
//   - exec_id is made by the worker before the row is written, so that a worker whose
//     insert failed with a lost connection (it may have committed) can still mark it.
//   - started_at is taken before the row is inserted and ended_at after the handler's
//     work, by the worker's clock (the host's, shared by every process of a run), so
//     [started_at, ended_at] covers the work.
//   - ended_at is NULL while the handler runs, and stays NULL when its worker was killed.
//   - aborted means the handler did no work: its start row could not be confirmed.
//
// There is deliberately no unique key on (job_id, attempt): two executions of one attempt
// would break skiplock's exactly-once claim, and the harness must be able to see it.
const CreateSQL = `CREATE SCHEMA IF NOT EXISTS chaos;
CREATE TABLE chaos.executions (
	exec_id    text        PRIMARY KEY,
	job_id     bigint      NOT NULL,
	seq        bigint      NOT NULL,
	attempt    integer     NOT NULL,
	worker_id  text        NOT NULL,
	pid        integer     NOT NULL,
	started_at timestamptz NOT NULL,
	ended_at   timestamptz,
	aborted    boolean     NOT NULL DEFAULT false,
	claimed_at timestamptz
);
CREATE INDEX executions_job_idx ON chaos.executions (job_id);`

// StartSQL records that an execution is about to do its work.
// Parameters: exec_id, job_id, seq, attempt, worker_id, pid, started_at, claimed_at.
// claimed_at is when the claim that began the attempt ran: the job's LockedAt as the
// claim returned it (the claim statement's now()), which every job of one claim shares
// and a heartbeat's refresh of the row does not change; NULL when unknown.
//
// An insert whose reply was lost may still reach the server later: the black-holed
// network path of a chaos run holds the bytes and forwards them when it resumes, after
// the worker has given up on the connection and marked the execution aborted through
// another one. ON CONFLICT DO NOTHING keeps that late insert from undoing the mark
// (AbortSQL inserts the row itself when it comes first). Without it, a chaos run at load
// 10 reported an overlap: the late insert left a row with no end and no abort mark, which
// the harness took for work lasting until the worker exited.
const StartSQL = `INSERT INTO chaos.executions (exec_id, job_id, seq, attempt, worker_id, pid, started_at, claimed_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (exec_id) DO NOTHING`

// EndSQL records the end of an execution's work. Parameters: exec_id, ended_at.
const EndSQL = `UPDATE chaos.executions SET ended_at = $2 WHERE exec_id = $1`

// AbortSQL marks an execution that did no work because its start row could not be
// confirmed (its insert failed, though it may have committed, or may still arrive).
// Parameters: those of StartSQL. It writes the aborted row whether or not the start row
// is there yet.
const AbortSQL = `INSERT INTO chaos.executions AS e
	(exec_id, job_id, seq, attempt, worker_id, pid, started_at, claimed_at, ended_at, aborted)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $7, true)
ON CONFLICT (exec_id) DO UPDATE SET aborted = true, ended_at = e.started_at`

// EndLine is the line a worker appends to its ends file for an execution whose work
// ended at end, before it writes the end to the table: exec_id, a tab, the time
// (RFC 3339, microseconds, as the table keeps it) and a newline.
func EndLine(execID string, end time.Time) string {
	return execID + "\t" + end.UTC().Truncate(time.Microsecond).Format(time.RFC3339Nano) + "\n"
}

// ReadEnds reads an ends file written with [EndLine] lines: the end of each execution
// by exec_id. A last line cut short (the worker was killed while writing it) is left
// out; any other malformed line is an error.
func ReadEnds(r io.Reader) (map[string]time.Time, error) {
	ends := map[string]time.Time{}
	br := bufio.NewReader(r)
	for n := 1; ; n++ {
		line, err := br.ReadString('\n')
		if err == io.EOF {
			return ends, nil // a partial last line, if any, has no newline: left out
		}
		if err != nil {
			return nil, err
		}
		id, ts, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
		if !ok {
			return nil, fmt.Errorf("audit: ends line %d has no tab: %q", n, line)
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			return nil, fmt.Errorf("audit: ends line %d: %w", n, err)
		}
		ends[id] = at
	}
}

// FlowKind is the job kind of [FlowArgs]: a task of one of the run's workflows, or a job
// of one of its batches.
const FlowKind = "chaos_flow"

// FlowArgs is the payload of a workflow task or a batch job. Flow numbers the run's
// workflows from 1 (0 for a batch job); Batch numbers its batches from 1 (0 for a
// workflow task); Task is the task's name within its workflow or batch. Its handler
// records each execution in chaos.executions, with seq -1, like a chaos job's.
type FlowArgs struct {
	Flow  int    `json:"flow,omitempty"`
	Batch int    `json:"batch_no,omitempty"`
	Task  string `json:"task"`
}

// Kind implements skiplock.JobArgs.
func (FlowArgs) Kind() string { return FlowKind }

// CallbackKind is the job kind of [CallbackArgs].
const CallbackKind = "chaos_callback"

// CallbackArgs is the payload of a batch's callback job. Its handler records each
// execution in chaos.executions (seq -1) and the counts it was given in chaos.callbacks.
type CallbackArgs struct {
	Batch int `json:"batch_no"`
}

// Kind implements skiplock.JobArgs.
func (CallbackArgs) Kind() string { return CallbackKind }

// FlowTasks are the five tasks of every workflow of a run, a diamond with a tail:
// b and c depend on a, d on b and c, e on d. Each key's dependencies are its value.
var FlowTasks = map[string][]string{"a": nil, "b": {"a"}, "c": {"a"}, "d": {"b", "c"}, "e": {"d"}}

// CreateFlowSQL creates the callbacks table: one row per execution of a batch callback,
// with the counts by outcome it read from its job (skiplock.BatchCountsOf).
const CreateFlowSQL = `CREATE TABLE chaos.callbacks (
	exec_id   text    PRIMARY KEY,
	job_id    bigint  NOT NULL,
	batch_no  integer NOT NULL,
	succeeded integer NOT NULL,
	failed    integer NOT NULL,
	dead      integer NOT NULL,
	cancelled integer NOT NULL
);`

// CallbackSQL records the counts a callback execution read. Parameters: exec_id, job_id,
// batch_no, succeeded, failed, dead, cancelled. Idempotent, for retries.
const CallbackSQL = `INSERT INTO chaos.callbacks (exec_id, job_id, batch_no, succeeded, failed, dead, cancelled)
VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (exec_id) DO NOTHING`
