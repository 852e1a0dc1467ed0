package main

// The workflow workloads (go run . -workflows): skiplock only, one in-process worker at
// its default MaxWorkers. Two same-run comparisons, alternated within each run:
//
//   - a drain of N five-task workflows (a diamond with a tail: b and c after a, d after
//     both, e after d; 5N jobs, released by the completions of their dependencies) against
//     a drain of 5N independent jobs;
//   - a drain of M jobs whose handler inserts one row each, with skiplock.Handle (one
//     INSERT per job) against skiplock.HandleBatch (one INSERT per batch of up to 100).
//
// Enqueueing is not timed: every job (and every workflow) is written before the worker
// starts, and the drain is timed from the worker's start to the moment the database has
// no job queued or running and no workflow task waiting.

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
)

// WfArgs is the no-op job of the workflow workloads (tasks and independent jobs alike).
type WfArgs struct {
	T int `json:"t"`
}

func (WfArgs) Kind() string { return "wf_noop" }

// RowArgs is the job of the batch-handler workloads: its handler inserts N into wf_rows.
type RowArgs struct {
	N int `json:"n"`
}

func (RowArgs) Kind() string { return "wf_row" }

// wfSizes are the workflow workloads' parameters.
type wfSizes struct {
	flows int // five-task workflows per drain; the plain drain has 5 × flows jobs
	rows  int // jobs per batch-handler drain
}

var (
	wfFull  = wfSizes{flows: 10_000, rows: 50_000}
	wfQuick = wfSizes{flows: 2_000, rows: 10_000}
)

// wfTasks is the workflow of the workload.
var wfTasks = []struct {
	name string
	deps []string
}{{"a", nil}, {"b", []string{"a"}}, {"c", []string{"a"}}, {"d", []string{"b", "c"}}, {"e", []string{"d"}}}

// wfPerTx is how many workflows one enqueue transaction writes.
const wfPerTx = 500

const wfRowsSQL = `CREATE TABLE IF NOT EXISTS public.wf_rows (n int NOT NULL)`

// wfActiveSQL is zero once a drain is done: no job queued or running, no task waiting.
const wfActiveSQL = `SELECT (SELECT count(*) FROM skiplock.jobs WHERE status IN ('queued', 'running'))
	+ (SELECT count(*) FROM skiplock.workflow_tasks WHERE state IN ('waiting', 'released'))`

type wfBench struct {
	ctx     context.Context
	pool    *pgxpool.Pool
	cl      *skiplock.Client
	handled atomic.Int64 // jobs the current drain's handlers have finished
}

func (b *wfBench) reset() error {
	_, err := b.pool.Exec(b.ctx, `TRUNCATE skiplock.jobs, skiplock.jobs_archive, skiplock.workflows,
		skiplock.workflow_tasks, skiplock.workflow_edges, public.wf_rows`)
	if err == nil {
		_, err = b.pool.Exec(b.ctx, `CHECKPOINT`)
	}
	return err
}

// enqueuePlain writes n independent jobs of args made by mk.
func (b *wfBench) enqueuePlain(n int, mk func(i int) skiplock.JobArgs) error {
	for done := 0; done < n; {
		chunk := min(n-done, 10_000)
		params := make([]skiplock.EnqueueParams, chunk)
		for i := range params {
			params[i] = skiplock.EnqueueParams{Args: mk(done + i)}
		}
		if _, err := b.cl.EnqueueMany(b.ctx, params); err != nil {
			return err
		}
		done += chunk
	}
	return nil
}

// enqueueFlows writes n workflows, wfPerTx to a transaction.
func (b *wfBench) enqueueFlows(n int) error {
	for done := 0; done < n; {
		chunk := min(n-done, wfPerTx)
		err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			for i := range chunk {
				wf := skiplock.Workflow{Name: fmt.Sprint("wf-", done+i)}
				for _, t := range wfTasks {
					wf.Tasks = append(wf.Tasks, skiplock.WorkflowTask{Name: t.name, Args: WfArgs{T: done + i}, DependsOn: t.deps})
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

// drain runs a worker with the handlers register adds until they have handled n jobs
// (counted in b.handled, cheap to watch) and then the database says the drain is done (its
// completions recorded, no task waiting), and returns jobs per second over n jobs. The
// database is asked only once the handlers are through, so that the watching does not
// load the server during the drain.
func (b *wfBench) drain(n int, register func(w *skiplock.Worker) error) (float64, error) {
	b.handled.Store(0)
	w, err := skiplock.NewWorker(b.cl, skiplock.WorkerConfig{Logger: quietLogger()})
	if err != nil {
		return 0, err
	}
	if err := register(w); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- w.Run(ctx) }()
	var elapsed time.Duration
	err = pollUntil(b.ctx, maxRun, 2*time.Millisecond, func() (bool, error) {
		if b.handled.Load() < int64(n) {
			return false, nil
		}
		var active int64
		if err := b.pool.QueryRow(b.ctx, wfActiveSQL).Scan(&active); err != nil {
			return false, err
		}
		elapsed = time.Since(start)
		return active == 0, nil
	})
	cancel()
	if rerr := <-done; err == nil && rerr != nil {
		err = rerr
	}
	if err != nil {
		return 0, err
	}
	var archived int
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM skiplock.jobs_archive WHERE status = 'succeeded'`).Scan(&archived); err != nil {
		return 0, err
	}
	if archived != n {
		return 0, fmt.Errorf("drain: %d jobs succeeded, want %d", archived, n)
	}
	return float64(n) / elapsed.Seconds(), nil
}

func (b *wfBench) noopHandler(w *skiplock.Worker) error {
	return skiplock.Handle(w, func(context.Context, *skiplock.Job[WfArgs]) error { b.handled.Add(1); return nil })
}

func runWorkflows(ctx context.Context, o options) error {
	sz := wfFull
	if o.quick {
		sz = wfQuick
	}
	const db = "bench_workflows"
	pool, done, err := migratedDB(ctx, o, db, int32(o.poolSize))
	if err != nil {
		return err
	}
	defer done()
	if _, err := pool.Exec(ctx, wfRowsSQL); err != nil {
		return err
	}
	cl, err := skiplock.NewClient(pool, skiplock.Config{Logger: quietLogger()})
	if err != nil {
		return err
	}
	b := &wfBench{ctx: ctx, pool: pool, cl: cl}
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "workflows: "+format+"\n", args...) }
	var md strings.Builder
	fmt.Fprintf(&md, "# skiplock workflows (go run . -workflows%s)\n\n", map[bool]string{true: " -quick"}[o.quick])
	fmt.Fprintf(&md, "%s, load average at the start %s, one worker (default MaxWorkers), %d runs; each run alternates the two drains of a pair.\n\n",
		time.Now().UTC().Format(time.RFC3339), loadAvg(), o.runs)

	jobs := 5 * sz.flows
	var plain, flows, ratio []float64
	for r := 1; r <= o.runs; r++ {
		if err := b.reset(); err != nil {
			return err
		}
		if err := b.enqueuePlain(jobs, func(i int) skiplock.JobArgs { return WfArgs{T: i} }); err != nil {
			return err
		}
		p, err := b.drain(jobs, b.noopHandler)
		if err != nil {
			return fmt.Errorf("plain drain: %w", err)
		}
		if err := b.reset(); err != nil {
			return err
		}
		t := time.Now()
		if err := b.enqueueFlows(sz.flows); err != nil {
			return err
		}
		enq := time.Since(t)
		f, err := b.drain(jobs, b.noopHandler)
		if err != nil {
			return fmt.Errorf("workflow drain: %w", err)
		}
		plain, flows, ratio = append(plain, p), append(flows, f), append(ratio, f/p)
		logf("run %d: plain %.0f jobs/s, workflows %.0f jobs/s (%.0f%%); %d workflows enqueued in %v", r, p, f, 100*f/p, sz.flows, enq.Round(time.Millisecond))
	}
	fmt.Fprintf(&md, "## %d five-task workflows (%d jobs) against %d independent jobs\n\n", sz.flows, jobs, jobs)
	fmt.Fprintf(&md, "| drain | jobs/s, median (min–max) |\n| --- | --- |\n| %d independent jobs | %s |\n| %d workflows × 5 tasks | %s |\n| workflows / independent, same run | %s |\n\n",
		jobs, spreadF(plain, "%.0f"), sz.flows, spreadF(flows, "%.0f"), spreadF(ratio, "%.2f"))

	rowHandler := func(w *skiplock.Worker) error {
		return skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[RowArgs]) error {
			_, err := pool.Exec(ctx, `INSERT INTO public.wf_rows (n) VALUES ($1)`, job.Args.N)
			b.handled.Add(1)
			return err
		})
	}
	batchHandler := func(w *skiplock.Worker) error {
		return skiplock.HandleBatch(w, skiplock.BatchHandlerConfig{}, func(ctx context.Context, jobs []*skiplock.Job[RowArgs]) []error {
			ns := make([]int32, len(jobs))
			for i, j := range jobs {
				ns[i] = int32(j.Args.N)
			}
			_, err := pool.Exec(ctx, `INSERT INTO public.wf_rows (n) SELECT unnest($1::int[])`, ns)
			b.handled.Add(int64(len(jobs)))
			errs := make([]error, len(jobs))
			for i := range errs {
				errs[i] = err
			}
			return errs
		})
	}
	var single, batch, bratio []float64
	for r := 1; r <= o.runs; r++ {
		var got [2]float64
		for i, reg := range []func(*skiplock.Worker) error{rowHandler, batchHandler} {
			if err := b.reset(); err != nil {
				return err
			}
			if err := b.enqueuePlain(sz.rows, func(i int) skiplock.JobArgs { return RowArgs{N: i} }); err != nil {
				return err
			}
			v, err := b.drain(sz.rows, reg)
			if err != nil {
				return fmt.Errorf("row drain: %w", err)
			}
			var rows int
			if err := pool.QueryRow(ctx, `SELECT count(DISTINCT n) FROM public.wf_rows`).Scan(&rows); err != nil {
				return err
			}
			if rows != sz.rows {
				return fmt.Errorf("row drain: %d distinct rows, want %d", rows, sz.rows)
			}
			got[i] = v
		}
		single, batch, bratio = append(single, got[0]), append(batch, got[1]), append(bratio, got[1]/got[0])
		logf("run %d: Handle %.0f jobs/s, HandleBatch %.0f jobs/s (×%.2f)", r, got[0], got[1], got[1]/got[0])
	}
	fmt.Fprintf(&md, "## %d jobs that each insert a row: Handle (one INSERT per job) against HandleBatch (one per batch, up to 100 jobs, 10ms wait)\n\n", sz.rows)
	fmt.Fprintf(&md, "| handler | jobs/s, median (min–max) |\n| --- | --- |\n| Handle | %s |\n| HandleBatch | %s |\n| HandleBatch / Handle, same run | %s |\n",
		spreadF(single, "%.0f"), spreadF(batch, "%.0f"), spreadF(bratio, "%.2f"))
	fmt.Print(md.String())
	if o.out == "" {
		return nil
	}
	return writeFiles(o.out, map[string][]byte{"workflows.md": []byte(md.String())})
}
