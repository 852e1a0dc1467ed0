package main

// The durable workload (skiplock only): what a durable step costs. One run drains, one
// after the other on emptied tables, the same N units of work four ways:
//
//   - plain: N no-op jobs, the floor;
//   - steps: N jobs of five skiplock.Step calls each, every step a no-op (its record is
//     the only write);
//   - steptx: N jobs of five skiplock.StepTx calls each, every step a tiny INSERT that
//     commits with its record;
//   - chain: N workflows of five tasks in a line (a → b → c → d → e), five no-op jobs
//     each, every task released by its predecessor's success: the way to run five steps
//     durably without durable steps;
//   - floor: 5N single-row INSERTs, each its own commit, into a table shaped like
//     job_steps, from as many goroutines as the worker has slots (100): what a step record
//     costs at least on this server when each is a commit of its own (plain SQL, no queue).
//
// Each drain is timed from the worker's start until the database has no job queued or
// running and no workflow task waiting (enqueueing is not timed); the WAL is counted from
// before the enqueue to after the drain (pg_current_wal_insert_lsn). The cost of a step is
// what a five-step job costs over a plain job, divided by five: drain µs per step from the
// two rates, WAL bytes per step from the two WAL counts. The handlers also time each Step
// (and StepTx) call; its median is the latency of one step record under that load.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock"
)

// DurArgs is the job of the durable workload's five-step drains (Steps: false runs
// skiplock.Step, true skiplock.StepTx).
type DurArgs struct {
	N   int  `json:"n"`
	Txn bool `json:"txn,omitempty"`
}

func (DurArgs) Kind() string { return "dur_steps" }

// durSteps is the number of steps of a durable job, and of tasks of a chain.
const durSteps = 5

// durRowsSQL is the table of the StepTx drain's business writes, and the floor's table,
// shaped like job_steps.
const durRowsSQL = `CREATE TABLE IF NOT EXISTS public.dur_rows (job_id bigint NOT NULL, step int NOT NULL);
CREATE TABLE IF NOT EXISTS public.dur_floor (job_id bigint NOT NULL, seq int NOT NULL, name text NOT NULL,
	result jsonb, started_at timestamptz NOT NULL, finished_at timestamptz NOT NULL, PRIMARY KEY (job_id, seq))`

// durFloorSQL is one step record of the floor, in its own commit.
const durFloorSQL = `INSERT INTO public.dur_floor (job_id, seq, name, result, started_at, finished_at)
VALUES ($1, $2, $3, $4::jsonb, clock_timestamp(), clock_timestamp())`

// durFloorClients is how many goroutines write the floor's records: the worker's default
// MaxWorkers, as many handlers as write step records in the Step drain.
const durFloorClients = 100

// durMetrics are the durable workload's figures.
var durMetrics = []Metric{
	rate("plain", "plain no-op jobs"),
	rate("steps", "jobs of 5 Steps (no-op)"),
	rate("steptx", "jobs of 5 StepTx (one-row INSERT each)"),
	rate("chain", "chains of 5 jobs (workflow a→b→c→d→e), chains/s"),
	{Key: "steps_vs_chain", Label: "5-Step jobs / 5-job chains, same run", Unit: "x"},
	{Key: "step_us", Label: "drain time per Step record (5-Step job over plain job, ÷5)", Unit: "µs", LowerBetter: true},
	{Key: "floor_us", Label: "bare SQL floor: time per single-row INSERT + commit, 100 clients", Unit: "µs", LowerBetter: true},
	{Key: "steptx_us", Label: "drain time per StepTx (incl. its INSERT; over plain job, ÷5)", Unit: "µs", LowerBetter: true},
	{Key: "step_p50", Label: "Step call latency in the handler, p50", Unit: "µs", LowerBetter: true},
	{Key: "steptx_p50", Label: "StepTx call latency in the handler, p50", Unit: "µs", LowerBetter: true},
	{Key: "step_wal", Label: "WAL per Step record (5-Step job over plain job, ÷5)", Unit: "bytes", LowerBetter: true},
	{Key: "floor_wal", Label: "bare SQL floor: WAL per single-row INSERT + commit", Unit: "bytes", LowerBetter: true},
	{Key: "steptx_wal", Label: "WAL per StepTx (incl. its INSERT; over plain job, ÷5)", Unit: "bytes", LowerBetter: true},
	{Key: "plain_wal", Label: "WAL per plain job", Unit: "bytes", LowerBetter: true},
	{Key: "steps_wal", Label: "WAL per 5-Step job", Unit: "bytes", LowerBetter: true},
	{Key: "steptxjob_wal", Label: "WAL per 5-StepTx job", Unit: "bytes", LowerBetter: true},
	{Key: "chain_wal", Label: "WAL per 5-job chain", Unit: "bytes", LowerBetter: true},
}

// durBench is one run of the durable workload.
type durBench struct {
	*wfBench
	e *env

	mu    sync.Mutex
	stepT []time.Duration // the current drain's Step or StepTx call durations
}

func runDurable(e *env) (map[string]float64, error) {
	s, ok := e.sys.(*skiplockSystem)
	if !ok {
		return nil, errUnsupported
	}
	if _, err := e.pool.Exec(e.ctx, durRowsSQL); err != nil {
		return nil, err
	}
	b := &durBench{wfBench: &wfBench{ctx: e.ctx, pool: e.pool, cl: s.client}, e: e}
	n := e.sizes.Durable
	res := map[string]float64{}
	type drain struct {
		name  string
		jobs  int // jobs the drain runs
		enq   func() error
		reg   func(w *skiplock.Worker) error
		wal   string
		rate  string
		timed string // key of the median step latency, if any
	}
	plain := func() error { return b.enqueuePlain(n, func(i int) skiplock.JobArgs { return WfArgs{T: i} }) }
	durable := func(txn bool) func() error {
		return func() error {
			return b.enqueuePlain(n, func(i int) skiplock.JobArgs { return DurArgs{N: i, Txn: txn} })
		}
	}
	for _, d := range []drain{
		{"plain", n, plain, b.noopHandler, "plain_wal", "plain", ""},
		{"steps", n, durable(false), b.stepHandler, "steps_wal", "steps", "step_p50"},
		{"steptx", n, durable(true), b.stepHandler, "steptxjob_wal", "steptx", "steptx_p50"},
		{"chain", durSteps * n, func() error { return b.enqueueChains(n) }, b.noopHandler, "chain_wal", "chain", ""},
	} {
		if err := b.resetDurable(); err != nil {
			return nil, err
		}
		lsn0, err := e.walLSN()
		if err != nil {
			return nil, err
		}
		if err := d.enq(); err != nil {
			return nil, fmt.Errorf("%s: enqueue: %w", d.name, err)
		}
		b.stepT = b.stepT[:0]
		r, err := b.drain(d.jobs, d.reg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.name, err)
		}
		lsn1, err := e.walLSN()
		if err != nil {
			return nil, err
		}
		res[d.rate] = r * float64(n) / float64(d.jobs) // per unit of work: a chain counts once
		res[d.wal] = float64(lsn1-lsn0) / float64(n)
		if d.timed != "" {
			res[d.timed] = b.medianStep()
		}
		if d.name == "steptx" {
			if err := b.checkRows(n); err != nil {
				return nil, err
			}
		}
	}
	if err := b.resetDurable(); err != nil {
		return nil, err
	}
	us, wal, err := b.floor(durSteps * n)
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	res["floor_us"], res["floor_wal"] = us, wal
	perStep := func(jobs float64) float64 { return (1/jobs - 1/res["plain"]) * 1e6 / durSteps }
	res["step_us"], res["steptx_us"] = perStep(res["steps"]), perStep(res["steptx"])
	res["step_wal"] = (res["steps_wal"] - res["plain_wal"]) / durSteps
	res["steptx_wal"] = (res["steptxjob_wal"] - res["plain_wal"]) / durSteps
	res["steps_vs_chain"] = res["steps"] / res["chain"]
	return res, nil
}

// stepHandler registers the five-step job's handler: five Step calls (or StepTx calls,
// each inserting one row), each timed.
func (b *durBench) stepHandler(w *skiplock.Worker) error {
	return skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[DurArgs]) error {
		local := make([]time.Duration, 0, durSteps)
		for k := 1; k <= durSteps; k++ {
			name := stepNames[k-1]
			t := time.Now()
			var err error
			if job.Args.Txn {
				_, err = skiplock.StepTx(ctx, name, func(ctx context.Context, tx pgx.Tx) (int, error) {
					_, err := tx.Exec(ctx, `INSERT INTO public.dur_rows (job_id, step) VALUES ($1, $2)`, job.ID, k)
					return k, err
				})
			} else {
				_, err = skiplock.Step(ctx, name, func(context.Context) (int, error) { return k, nil })
			}
			if err != nil {
				return err
			}
			local = append(local, time.Since(t))
		}
		b.mu.Lock()
		b.stepT = append(b.stepT, local...)
		b.mu.Unlock()
		b.handled.Add(1)
		return nil
	})
}

var stepNames = [durSteps]string{"one", "two", "three", "four", "five"}

// medianStep is the median of the last drain's step call durations, in µs.
func (b *durBench) medianStep() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.stepT) == 0 {
		return 0
	}
	s := slices.Clone(b.stepT)
	slices.Sort(s)
	return float64(s[len(s)/2]) / float64(time.Microsecond)
}

// enqueueChains writes n workflows of five tasks in a line, wfPerTx to a transaction.
func (b *durBench) enqueueChains(n int) error {
	for done := 0; done < n; {
		chunk := min(n-done, wfPerTx)
		err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			for i := range chunk {
				wf := skiplock.Workflow{Name: fmt.Sprint("chain-", done+i)}
				for k, name := range stepNames {
					t := skiplock.WorkflowTask{Name: name, Args: WfArgs{T: done + i}}
					if k > 0 {
						t.DependsOn = []string{stepNames[k-1]}
					}
					wf.Tasks = append(wf.Tasks, t)
				}
				if _, err := b.cl.EnqueueWorkflowTx(b.ctx, tx, wf); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		done += chunk
	}
	return nil
}

// resetDurable empties the job, workflow and step tables and the business rows, then
// checkpoints, so that no drain starts with another's dirty pages or dead rows.
func (b *durBench) resetDurable() error {
	_, err := b.pool.Exec(b.ctx, `TRUNCATE skiplock.jobs, skiplock.jobs_archive, skiplock.workflows,
		skiplock.workflow_tasks, skiplock.workflow_edges, skiplock.job_steps, skiplock.job_signals, public.dur_rows,
		public.dur_floor`)
	if err == nil {
		_, err = b.pool.Exec(b.ctx, `CHECKPOINT`)
	}
	return err
}

// checkRows checks that the StepTx drain left exactly one business row per step.
func (b *durBench) checkRows(n int) error {
	var rows, distinct int
	err := b.pool.QueryRow(b.ctx, `SELECT count(*), count(DISTINCT (job_id, step)) FROM public.dur_rows`).Scan(&rows, &distinct)
	if err != nil {
		return err
	}
	if rows != durSteps*n || distinct != rows {
		return fmt.Errorf("steptx: %d business rows (%d distinct), want %d", rows, distinct, durSteps*n)
	}
	return nil
}

// floor writes n step records in plain SQL, each its own commit, from durFloorClients
// goroutines, and returns the wall time per record in µs and the WAL per record in bytes.
func (b *durBench) floor(n int) (us, wal float64, err error) {
	lsn0, err := b.e.walLSN()
	if err != nil {
		return 0, 0, err
	}
	var next atomic.Int64
	t0 := time.Now()
	err = producers(b.ctx, durFloorClients, func(ctx context.Context) (bool, error) {
		i := next.Add(1) - 1
		if i >= int64(n) {
			return false, nil
		}
		_, err := b.pool.Exec(ctx, durFloorSQL, i/durSteps, i%durSteps, stepNames[i%durSteps], `{"n":1}`)
		return true, err
	})
	el := time.Since(t0)
	if err != nil {
		return 0, 0, err
	}
	lsn1, err := b.e.walLSN()
	if err != nil {
		return 0, 0, err
	}
	return float64(el.Microseconds()) / float64(n), float64(lsn1-lsn0) / float64(n), nil
}
