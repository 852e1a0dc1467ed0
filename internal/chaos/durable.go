// This file holds the run's durable phase: durable jobs (audit.DurableArgs) of five steps,
// each step writing one business row in its own transaction (skiplock.StepTx), some
// sleeping between two steps (skiplock.Sleep) and some waiting for a signal
// (skiplock.AwaitSignal) that the harness sends, half of them before the job reaches its
// wait and half once it is parked. They are enqueued over the fault window beside the
// plain jobs, so the kills, the Postgres restart and the other faults hit them too.
//
// Afterwards the audit tables judge (see audit.CreateDurableSQL): every job succeeded,
// every step of it has exactly one business row, no step's function ran again once its
// step had committed, and none started before the step before it had committed.

package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/chaos/audit"
)

// DurableReport is what the durable phase found.
type DurableReport struct {
	Jobs         int64 // durable jobs whose enqueue committed
	Sleeping     int64 // of which sleep between two steps
	Signalled    int64 // of which wait for a signal
	Succeeded    int64 // durable jobs that succeeded
	NotSucceeded int64 // durable jobs not succeeded at the end (still waiting, failed, dead, ...)
	LostJobs     int64 // enqueued durable jobs found nowhere
	Duplicated   int64 // durable jobs enqueued twice (two job rows for one number)

	Steps      int64 // business rows: committed steps
	Executions int64 // executions of a step's function (chaos.durable_execs)
	// Retried counts the executions that did not commit and were not a finished step run
	// again: cut off by a kill, a lost connection or a stale attempt before their commit,
	// then run again. At-least-once execution allows them; a StepTx commits nothing of them.
	Retried int64

	RanAgain       int64 // executions of a step whose business row was already committed
	CommittedTwice int64 // steps with more than one business row
	LostSteps      int64 // steps of succeeded jobs with no business row
	OutOfOrder     int64 // executions started before the previous step's business row committed
	SignalWrong    int64 // signal steps whose row does not hold the payload sent (or others that hold one)

	SignalsBefore  int64 // signals sent before the job reached its wait
	SignalsAfter   int64 // signals sent once the job was parked in its wait
	SignalsRaced   int64 // signals meant to go before the wait, sent when the job was already past the step before it
	SignalsInDoubt int64 // Signal calls that failed and were sent again (a duplicate is left unconsumed)
	SignalsRefused int64 // Signal calls refused because the job had finished (or was not found)

	// SleptShort counts sleeping jobs whose step after the sleep started less than the
	// sleep after the step before it committed; SleptShortClock how many of them slept
	// across the step of the server's clock (a wake time set on a clock 75 s behind).
	SleptShort      int64
	SleptShortClock int64

	enqueued atomic.Int64
	inDoubt  atomic.Int64 // SignalsInDoubt, counted by both senders
	refused  atomic.Int64 // SignalsRefused, counted by both senders
	mu       sync.Mutex
	ids      map[int]int64 // job id by number, for the signals
}

// RunTwice is the number of finished steps run again plus the steps committed twice.
func (d *DurableReport) RunTwice() int64 { return d.RanAgain + d.CommittedTwice }

// Lost is the number of durable jobs and steps lost.
func (d *DurableReport) Lost() int64 { return d.LostJobs + d.LostSteps }

// Summary is the report's one line: "durable: N jobs, 5N steps, 0 run twice, 0 lost, 0 out of order".
func (d *DurableReport) Summary() string {
	return fmt.Sprintf("durable: %d jobs, %d steps, %d run twice, %d lost, %d out of order",
		d.Jobs, d.Steps, d.RunTwice(), d.Lost(), d.OutOfOrder)
}

// broken lists what the phase found broken, for [Report.Broken].
func (d *DurableReport) broken() []string {
	if d == nil {
		return nil
	}
	var out []string
	for _, c := range []struct {
		n    int64
		what string
	}{
		{d.NotSucceeded, "durable jobs that did not succeed"},
		{d.LostJobs, "durable jobs lost"},
		{d.Duplicated, "durable jobs enqueued twice"},
		{d.RanAgain, "durable steps run again after they had committed"},
		{d.CommittedTwice, "durable steps committed twice"},
		{d.LostSteps, "durable steps lost"},
		{d.OutOfOrder, "durable steps started before the step before them committed"},
		{d.SignalWrong, "durable signal steps without the payload sent"},
	} {
		if c.n > 0 {
			out = append(out, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	return out
}

// warnings lists what the phase found wrong without breaking a promise.
func (d *DurableReport) warnings() []string {
	if d == nil || d.SleptShort == d.SleptShortClock {
		return nil
	}
	return []string{fmt.Sprintf("%d durable sleeps shorter than asked that the clock step does not explain", d.SleptShort-d.SleptShortClock)}
}

// print adds the phase's rows to the figures table.
func (d *DurableReport) print(row func(name string, v any, verdict string)) {
	if d == nil {
		return
	}
	must0 := func(n int64) string {
		if n == 0 {
			return "ok"
		}
		return "BROKEN"
	}
	row(fmt.Sprintf("durable jobs (%d steps each): sleeping / waiting for a signal", audit.DurableSteps),
		fmt.Sprintf("%d: %d / %d", d.Jobs, d.Sleeping, d.Signalled), "")
	row("  succeeded / not succeeded / lost / enqueued twice", fmt.Sprintf("%d / %d / %d / %d", d.Succeeded, d.NotSucceeded, d.LostJobs, d.Duplicated),
		must0(d.NotSucceeded+d.LostJobs+d.Duplicated))
	row("  steps committed (business rows)", d.Steps, "")
	row("  step executions / retried before their commit", fmt.Sprintf("%d / %d", d.Executions, d.Retried), "allowed")
	row("  finished steps run again / steps committed twice", fmt.Sprintf("%d / %d", d.RanAgain, d.CommittedTwice), must0(d.RunTwice()))
	row("  steps lost (succeeded job, no row)", d.LostSteps, must0(d.LostSteps))
	row("  steps started before the previous one committed", d.OutOfOrder, must0(d.OutOfOrder))
	row("  signals sent before the wait / after it / racing it / sent again / refused", fmt.Sprintf("%d / %d / %d / %d / %d",
		d.SignalsBefore, d.SignalsAfter, d.SignalsRaced, d.SignalsInDoubt, d.SignalsRefused), "")
	row("  signal steps without the payload sent", d.SignalWrong, must0(d.SignalWrong))
	short := ""
	if d.SleptShort > d.SleptShortClock {
		short = "WARNING"
	}
	row("  sleeps shorter than asked (of which across the clock step)", fmt.Sprintf("%d (%d)", d.SleptShort, d.SleptShortClock), short)
}

// durableMode returns the mode and sleep of durable job n: a third sleep (200ms to 1s), a
// third wait for a signal, a third run straight through.
func durableMode(n int) audit.DurableArgs {
	switch n % 3 {
	case 1:
		return audit.DurableArgs{N: n, Mode: audit.DurableSleep, SleepMS: 200 + n*37%800}
	case 2:
		return audit.DurableArgs{N: n, Mode: audit.DurableSignal}
	}
	return audit.DurableArgs{N: n, Mode: audit.DurablePlain}
}

// earlySignal reports whether durable job n (a signal job) gets its signal right after its
// enqueue, before it reaches its wait; the others get it once they are parked.
func earlySignal(n int) bool { return n/3%2 == 0 }

// durableJobIDSQL finds the job of durable job number $1, hot or archived.
const durableJobIDSQL = `SELECT id FROM skiplock.jobs WHERE kind = 'chaos_durable' AND (payload->>'n')::int = $1
UNION ALL SELECT id FROM skiplock.jobs_archive WHERE kind = 'chaos_durable' AND (payload->>'n')::int = $1`

// runDurable enqueues the durable jobs spread evenly over the window on the run's
// schedule (schedule.go), each exactly once (an enqueue whose commit is in doubt is looked
// up by number first), and sends the early signals right after their job's enqueue. late
// receives the numbers of the jobs whose signal goes once they are parked; it is closed at
// the end.
func (r *runner) runDurable(ctx context.Context, sched *schedule, dr *DurableReport, late chan<- int) error {
	defer close(late)
	n := r.opts.Durable
	window := sched.window()
	for i := 1; i <= n; i++ {
		if err := sched.wait(ctx, window*time.Duration(i-1)/time.Duration(n)); err != nil {
			return err
		}
		args := durableMode(i)
		id, err := r.enqueueDurable(ctx, args)
		if err != nil {
			return err
		}
		dr.mu.Lock()
		dr.ids[i] = id
		dr.mu.Unlock()
		dr.enqueued.Add(1)
		if args.Mode != audit.DurableSignal {
			continue
		}
		if !earlySignal(i) {
			select {
			case late <- i:
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		var past bool // the job already committed the step before its wait
		err = retryDB(ctx, func(ctx context.Context) error {
			return r.pool.QueryRow(ctx, stepDoneSQL, id, audit.WaitBefore-1).Scan(&past)
		})
		if err != nil {
			return fmt.Errorf("chaos: reading the progress of durable job %d: %w", id, err)
		}
		if err := r.signal(ctx, dr, i, id); err != nil {
			return err
		}
		if past {
			dr.SignalsRaced++
		} else {
			dr.SignalsBefore++
		}
	}
	return nil
}

// stepDoneSQL says whether job $1 committed its step $2.
const stepDoneSQL = `SELECT EXISTS (SELECT 1 FROM chaos.durable_rows WHERE job_id = $1 AND step = $2)`

// enqueueDurable enqueues durable job args.N until it is known to have committed once, and
// returns its id.
func (r *runner) enqueueDurable(ctx context.Context, args audit.DurableArgs) (int64, error) {
	for {
		row, err := r.client.Enqueue(ctx, args, nil)
		if err == nil {
			return row.ID, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		var ids []int64
		qerr := retryDB(ctx, func(ctx context.Context) error {
			rows, err := r.pool.Query(ctx, durableJobIDSQL, args.N)
			if err != nil {
				return err
			}
			ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
			return err
		})
		if qerr != nil {
			return 0, fmt.Errorf("chaos: enqueue of durable job %d failed (%v), and checking whether it committed failed: %w", args.N, err, qerr)
		}
		switch len(ids) {
		case 1:
			r.enq.note("durable job %d: enqueue failed (%v) but had committed", args.N, err)
			return ids[0], nil
		case 0:
			r.enq.note("durable job %d: enqueue failed (%v) and had not committed; retried", args.N, err)
		default:
			return 0, fmt.Errorf("chaos: durable job %d is in %d job rows", args.N, len(ids))
		}
	}
}

// signal sends durable job n (id) its signal, again after a failure until it went through
// (a failed call may have committed: the job then has two, and consumes one).
func (r *runner) signal(ctx context.Context, dr *DurableReport, n int, id int64) error {
	for {
		err := r.client.Signal(ctx, id, audit.SignalName, audit.SignalPayload{N: n})
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, skiplock.ErrJobFinished) || errors.Is(err, skiplock.ErrJobNotFound) {
			// The job ended before its signal: it passed its wait without one, which the
			// analysis finds (SignalWrong) or it was lost (LostJobs).
			dr.refused.Add(1)
			r.enq.note("durable job %d: Signal refused: %v", n, err)
			return nil
		}
		dr.inDoubt.Add(1)
		r.enq.note("durable job %d: Signal failed (%v); sent again", n, err)
		if err := sleepUntil(ctx, time.Now().Add(100*time.Millisecond)); err != nil {
			return err
		}
	}
}

// parkedSQL lists, of the jobs $1, those parked in their wait for signal $2: queued, with
// the name of the signal they wait for in awaiting (migration 015), which Signal clears.
const parkedSQL = `SELECT id FROM skiplock.jobs WHERE id = ANY ($1) AND status = 'queued' AND awaiting = $2`

// signalLate sends the late signals: each job number received on late gets its signal once
// its job is parked in its wait. It returns when late is closed and every signal went, or
// when ctx ends.
func (r *runner) signalLate(ctx context.Context, dr *DurableReport, late <-chan int) error {
	waiting := map[int64]int{} // job id -> number
	open := true
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for open || len(waiting) > 0 {
		select {
		case n, ok := <-late:
			if !ok {
				open, late = false, nil
				continue
			}
			dr.mu.Lock()
			waiting[dr.ids[n]] = n
			dr.mu.Unlock()
			continue
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if len(waiting) == 0 {
			continue
		}
		ids := make([]int64, 0, len(waiting))
		for id := range waiting {
			ids = append(ids, id)
		}
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		rows, err := r.pool.Query(qctx, parkedSQL, ids, audit.SignalName)
		var parked []int64
		if err == nil {
			parked, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		}
		cancel()
		if err != nil {
			continue // the database is away: the next tick asks again
		}
		for _, id := range parked {
			if err := r.signal(ctx, dr, waiting[id], id); err != nil {
				return err
			}
			dr.SignalsAfter++
			delete(waiting, id)
		}
	}
	return nil
}

// durableJobsSQL lists the durable jobs, hot or archived.
const durableJobsSQL = `SELECT id, status, attempts, (payload->>'n')::int, payload->>'mode', coalesce((payload->>'sleep_ms')::int, 0)
FROM skiplock.jobs_archive WHERE kind = 'chaos_durable'
UNION ALL
SELECT id, status, attempts, (payload->>'n')::int, payload->>'mode', coalesce((payload->>'sleep_ms')::int, 0)
FROM skiplock.jobs WHERE kind = 'chaos_durable'`

const durableRowsSQL = `SELECT job_id, step, exec_id, at, signal FROM chaos.durable_rows`

const durableExecsSQL = `SELECT exec_id, job_id, step, attempt, worker_id, started_at, done_before, prev_done
FROM chaos.durable_execs ORDER BY job_id, started_at`

// durableJob is a durable job row.
type durableJob struct {
	id       int64
	status   string
	attempts int
	args     audit.DurableArgs
}

// durableRow is a business row: one committed step.
type durableRow struct {
	job    int64
	step   int
	exec   string
	at     time.Time
	signal *string
}

// durableExec is one execution of a step's function.
type durableExec struct {
	id         string
	job        int64
	step       int
	attempt    int
	worker     string
	start      time.Time
	doneBefore bool
	prevDone   bool
}

// durableData is what the analysis reads.
type durableData struct {
	jobs  []durableJob
	rows  []durableRow
	execs []durableExec
}

// readDurable reads the durable jobs and the audit tables.
func (r *runner) readDurable(ctx context.Context) (durableData, error) {
	var d durableData
	err := retryDB(ctx, func(ctx context.Context) error {
		rows, err := r.pool.Query(ctx, durableJobsSQL)
		if err != nil {
			return err
		}
		d.jobs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (durableJob, error) {
			var j durableJob
			err := row.Scan(&j.id, &j.status, &j.attempts, &j.args.N, &j.args.Mode, &j.args.SleepMS)
			return j, err
		})
		if err != nil {
			return err
		}
		rows, err = r.pool.Query(ctx, durableRowsSQL)
		if err != nil {
			return err
		}
		d.rows, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (durableRow, error) {
			var b durableRow
			err := row.Scan(&b.job, &b.step, &b.exec, &b.at, &b.signal)
			return b, err
		})
		if err != nil {
			return err
		}
		rows, err = r.pool.Query(ctx, durableExecsSQL)
		if err != nil {
			return err
		}
		d.execs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (durableExec, error) {
			var e durableExec
			err := row.Scan(&e.id, &e.job, &e.step, &e.attempt, &e.worker, &e.start, &e.doneBefore, &e.prevDone)
			return e, err
		})
		return err
	})
	if err != nil {
		return d, fmt.Errorf("chaos: reading the durable phase's jobs and audit: %w", err)
	}
	return d, nil
}

// analyzeDurable judges the durable phase from the database and puts its report in rep.
func (r *runner) analyzeDurable(ctx context.Context, rep *Report, example func(kind, format string, args ...any)) error {
	d, err := r.readDurable(ctx)
	if err != nil {
		return err
	}
	dr := r.durable
	dr.Jobs, dr.SignalsInDoubt, dr.SignalsRefused = dr.enqueued.Load(), dr.inDoubt.Load(), dr.refused.Load()
	judgeDurable(dr, d, r.clockStepWindows(), example)
	rep.Durable = dr
	return nil
}

// clockStepWindows returns the spans of the run's server-clock steps.
func (r *runner) clockStepWindows() [][2]time.Time {
	var out [][2]time.Time
	for _, f := range r.faults {
		if f.Kind == FaultClockStep {
			out = append(out, [2]time.Time{f.At, f.End})
		}
	}
	return out
}

// stepKey names one step of one job.
type stepKey struct {
	job  int64
	step int
}

// judgeDurable fills dr (whose Jobs says how many durable jobs were enqueued, numbered from
// 1) from d. clockSteps are the spans of the server-clock steps, which explain a short sleep.
func judgeDurable(dr *DurableReport, d durableData, clockSteps [][2]time.Time, example func(kind, format string, args ...any)) {
	byN := map[int][]*durableJob{}
	for i := range d.jobs {
		j := &d.jobs[i]
		byN[j.args.N] = append(byN[j.args.N], j)
	}
	rows := map[stepKey][]*durableRow{}
	committing := map[string]bool{}
	for i := range d.rows {
		b := &d.rows[i]
		rows[stepKey{b.job, b.step}] = append(rows[stepKey{b.job, b.step}], b)
		committing[b.exec] = true
	}
	dr.Steps = int64(len(d.rows))
	firstStart := judgeDurableExecs(dr, d.execs, committing, example)
	for n := 1; n <= int(dr.Jobs); n++ {
		js := byN[n]
		switch len(js) {
		case 0:
			dr.LostJobs++
			example("durable job lost", "durable job %d is in neither jobs nor jobs_archive", n)
			continue
		case 1:
		default:
			dr.Duplicated++
			example("durable job enqueued twice", "durable job %d is in %d job rows", n, len(js))
		}
		for _, j := range js {
			judgeDurableJob(dr, j, rows, firstStart, clockSteps, example)
		}
	}
}

// judgeDurableExecs counts the executions of steps: those of a step already committed, those
// retried before their commit, those started before the step before them committed. It
// returns the first start of each step.
func judgeDurableExecs(dr *DurableReport, execs []durableExec, committing map[string]bool,
	example func(kind, format string, args ...any),
) map[stepKey]time.Time {
	firstStart := map[stepKey]time.Time{}
	for _, e := range execs {
		dr.Executions++
		k := stepKey{e.job, e.step}
		if t, ok := firstStart[k]; !ok || e.start.Before(t) {
			firstStart[k] = e.start
		}
		switch {
		case e.doneBefore:
			dr.RanAgain++
			example("durable step run again", "job %d step %d: execution %s (attempt %d, worker %s, %s) started after the step had committed",
				e.job, e.step, e.id, e.attempt, e.worker, e.start.Format("15:04:05.000000"))
		case !committing[e.id]:
			dr.Retried++
		}
		if !e.prevDone {
			dr.OutOfOrder++
			example("durable step out of order", "job %d step %d: execution %s (attempt %d, worker %s) started before step %d had committed",
				e.job, e.step, e.id, e.attempt, e.worker, e.step-1)
		}
	}
	return firstStart
}

// judgeDurableJob checks one durable job: succeeded, one row per step holding what it
// should, and for a sleeping job a sleep no shorter than asked.
func judgeDurableJob(dr *DurableReport, j *durableJob, rows map[stepKey][]*durableRow, firstStart map[stepKey]time.Time,
	clockSteps [][2]time.Time, example func(kind, format string, args ...any),
) {
	n := j.args.N
	switch j.args.Mode {
	case audit.DurableSleep:
		dr.Sleeping++
	case audit.DurableSignal:
		dr.Signalled++
	}
	if j.status != "succeeded" {
		dr.NotSucceeded++
		example("durable job not succeeded", "durable job %d (job %d, %s) is %s after %d attempts", n, j.id, j.args.Mode, j.status, j.attempts)
		return
	}
	dr.Succeeded++
	for k := 1; k <= audit.DurableSteps; k++ {
		bs := rows[stepKey{j.id, k}]
		switch {
		case len(bs) == 0:
			dr.LostSteps++
			example("durable step lost", "durable job %d (job %d) succeeded without a row for step %d", n, j.id, k)
		case len(bs) > 1:
			dr.CommittedTwice++
			example("durable step committed twice", "durable job %d (job %d) step %d has %d rows", n, j.id, k, len(bs))
		}
		for _, b := range bs {
			if !signalOK(j.args, k, b.signal) {
				dr.SignalWrong++
				example("durable signal", "durable job %d (job %d, %s) step %d holds signal %v", n, j.id, j.args.Mode, k, derefOr(b.signal, "NULL"))
			}
		}
	}
	if j.args.Mode != audit.DurableSleep {
		return
	}
	// The sleep starts after step SleepBefore-1 committed (its row's time is taken before
	// that commit) and ends no earlier than the first start of step SleepBefore.
	before := rows[stepKey{j.id, audit.SleepBefore - 1}]
	after, ok := firstStart[stepKey{j.id, audit.SleepBefore}]
	if len(before) == 0 || !ok {
		return
	}
	committed := before[0].at // the first commit, should the step have committed twice
	for _, b := range before[1:] {
		if b.at.Before(committed) {
			committed = b.at
		}
	}
	asked := time.Duration(j.args.SleepMS) * time.Millisecond
	if slept := after.Sub(committed); slept < asked {
		dr.SleptShort++
		if overlaps(clockSteps, committed, after) {
			dr.SleptShortClock++
		} else {
			example("durable sleep short", "durable job %d (job %d) slept %v of %v", n, j.id, slept, asked)
		}
	}
}

// signalOK reports whether the business row of step k of a job with args holds what it
// should: the payload sent, for the step after a signal job's wait; nothing otherwise.
func signalOK(args audit.DurableArgs, k int, got *string) bool {
	if args.Mode != audit.DurableSignal || k != audit.WaitBefore {
		return got == nil
	}
	if got == nil {
		return false
	}
	var a, b any
	if json.Unmarshal([]byte(*got), &a) != nil || json.Unmarshal([]byte(audit.SignalJSON(args.N)), &b) != nil {
		return false
	}
	return reflect.DeepEqual(a, b)
}

// overlaps reports whether [from, to] meets one of spans.
func overlaps(spans [][2]time.Time, from, to time.Time) bool {
	for _, s := range spans {
		if !s[0].After(to) && !s[1].Before(from) {
			return true
		}
	}
	return false
}

func derefOr(s *string, def string) string {
	if s == nil {
		return def
	}
	return *s
}
