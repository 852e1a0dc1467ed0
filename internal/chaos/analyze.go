package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/chaos/audit"
)

// maxExamples bounds the examples kept per kind of problem.
const maxExamples = 5

// jobRowsSQL lists every job row, hot or archived, with the seq the harness gave it.
// The workflow phase's jobs are read apart (workflows.go).
const jobRowsSQL = `SELECT (payload->>'seq')::bigint, id, status, attempts, coalesce(locked_by, ''), queue FROM skiplock.jobs_archive WHERE kind = 'chaos'
UNION ALL
SELECT (payload->>'seq')::bigint, id, status, attempts, coalesce(locked_by, ''), queue FROM skiplock.jobs WHERE kind = 'chaos'`

const executionsSQL = `SELECT exec_id, job_id, attempt, worker_id, started_at, ended_at, aborted, claimed_at
FROM chaos.executions ORDER BY job_id, started_at`

type jobRow struct {
	seq, id  int64
	status   string
	attempts int
	lockedBy string
	queue    string
}

type execution struct {
	id       string
	job      int64
	attempt  int
	worker   string
	start    time.Time
	ended    *time.Time
	aborted  bool
	end      time.Time  // ended, or the exit of its worker when no end was recorded
	cutByDie bool       // no end recorded and its worker was killed or crashed
	claimed  *time.Time // the start of the claim that began the attempt (claimahead.go); nil when unknown
}

// String names the execution for reports: id, attempt, worker and times.
func (e *execution) String() string {
	end := "no end recorded"
	if e.ended != nil {
		end = e.ended.Format("15:04:05.000000")
	}
	return fmt.Sprintf("%s (attempt %d, worker %s, %s - %s)", e.id, e.attempt, e.worker, e.start.Format("15:04:05.000000"), end)
}

// analyze fills rep from the database, the fleet, the enqueuer and the faults. Every
// worker has stopped: nothing changes under it.
func (r *runner) analyze(ctx context.Context, rep *Report) error {
	examples := map[string]int{}
	example := func(kind, format string, args ...any) {
		if examples[kind] < maxExamples {
			rep.Examples = append(rep.Examples, kind+": "+fmt.Sprintf(format, args...))
		}
		examples[kind]++
	}
	procs := map[string]*proc{}
	for _, p := range r.fleet.procs() {
		procs[p.id] = p
	}
	rep.Crashes = r.fleet.crashList()
	rep.EnqueueErrors = len(r.enq.failures)
	rep.Enqueued = r.enq.enqueued.Load()
	rep.Faults = r.faults
	if rep.HeldPool = r.held; r.held != nil {
		for _, e := range r.held.Examples {
			example("held-pool handler ended early", "%s", e)
		}
	}

	// Jobs: every committed seq in exactly one row, in a final state.
	var jobs []jobRow
	err := retryDB(ctx, func(ctx context.Context) error {
		rows, err := r.pool.Query(ctx, jobRowsSQL)
		if err != nil {
			return err
		}
		jobs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (jobRow, error) {
			var j jobRow
			err := row.Scan(&j.seq, &j.id, &j.status, &j.attempts, &j.lockedBy, &j.queue)
			return j, err
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("chaos: reading the jobs: %w", err)
	}
	bySeq := make([][]int, rep.Enqueued)
	succeeded := map[int64]*jobRow{}
	for i := range jobs {
		j := &jobs[i]
		if j.seq < 0 || j.seq >= rep.Enqueued {
			rep.Unexpected++
			example("unexpected job", "job %d has seq %d, not from a committed enqueue", j.id, j.seq)
			continue
		}
		bySeq[j.seq] = append(bySeq[j.seq], i)
	}
	for seq, idx := range bySeq {
		switch len(idx) {
		case 0:
			rep.Lost++
			example("lost", "seq %d (batch %d) is in neither jobs nor jobs_archive", seq, seq/r.enq.size)
			continue
		case 1:
		default:
			rep.Duplicated++
			example("enqueued twice", "seq %d is in %d job rows", seq, len(idx))
		}
		for _, i := range idx {
			j := &jobs[i]
			switch j.status {
			case "succeeded":
				rep.Succeeded++
				succeeded[j.id] = j
			case "queued", "running":
				rep.NotFinal++
				example("not final", "job %d (seq %d) is %s after %d attempts", j.id, j.seq, j.status, j.attempts)
			case "dead":
				rep.Dead++
				example("dead", "job %d (seq %d) is dead after %d attempts", j.id, j.seq, j.attempts)
			default:
				rep.Failed++
				example("failed", "job %d (seq %d) is %s", j.id, j.seq, j.status)
			}
		}
	}

	flowJobs, err := r.readFlowJobs(ctx)
	if err != nil {
		return err
	}
	for i := range flowJobs {
		if flowJobs[i].status == "succeeded" {
			succeeded[flowJobs[i].id] = &flowJobs[i].jobRow
		}
	}

	// Executions.
	var execs []*execution
	err = retryDB(ctx, func(ctx context.Context) error {
		rows, err := r.pool.Query(ctx, executionsSQL)
		if err != nil {
			return err
		}
		execs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (*execution, error) {
			var e execution
			err := row.Scan(&e.id, &e.job, &e.attempt, &e.worker, &e.start, &e.ended, &e.aborted, &e.claimed)
			return &e, err
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("chaos: reading the executions: %w", err)
	}
	// The ends each worker appended to its file before writing them to the table: they
	// tell when the work of an execution ended whose end write never got through.
	fileEnds := map[string]map[string]time.Time{}
	for id, p := range procs {
		if p.ends == "" {
			continue
		}
		f, err := os.Open(p.ends)
		if errors.Is(err, os.ErrNotExist) {
			continue // it never ended an execution
		}
		if err != nil {
			return fmt.Errorf("chaos: reading the ends of worker %s: %w", id, err)
		}
		ends, err := audit.ReadEnds(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("chaos: reading the ends of worker %s: %w", id, err)
		}
		fileEnds[id] = ends
	}
	far := time.Now().Add(24 * time.Hour)
	for _, e := range execs {
		fileEnd, inFile := fileEnds[e.worker][e.id]
		switch {
		case e.aborted:
			rep.Aborted++
			e.end = e.start
			continue
		case e.ended != nil:
			e.end = *e.ended
		case inFile:
			// Its work ended; writing the end to the table did not get through before
			// the worker exited (a database out of reach, a deploy's kill).
			e.ended = &fileEnd
			e.end = fileEnd
			rep.EndsFromFile++
			if p := procs[e.worker]; p == nil || !p.killed {
				// A kill between the work and its write is expected; this is not.
				example("end only in the worker's file", "%v: its end write did not reach the table", e)
			}
		default:
			// No end recorded: its work ended, at the latest, when its process did.
			p := procs[e.worker]
			switch {
			case p == nil || p.exitAt.IsZero():
				e.end = far
				rep.UnfinishedOther++
				example("unknown end", "%v: its worker is unknown or still running", e)
			case p.killed || !p.expected:
				e.end = p.exitAt
				e.cutByDie = true
				rep.UnfinishedKilled++
			default:
				e.end = p.exitAt
				rep.UnfinishedOther++
			}
		}
		rep.Executions++
	}

	// Per job: overlaps, double claims, the succeeding execution, re-runs.
	for lo := 0; lo < len(execs); {
		hi := lo + 1
		for hi < len(execs) && execs[hi].job == execs[lo].job {
			hi++
		}
		r.checkJob(rep, execs[lo:hi], succeeded[execs[lo].job], procs, example)
		lo = hi
	}
	if r.flows != nil {
		if err := r.checkFlows(ctx, r.flows, flowJobs, execs, example); err != nil {
			return err
		}
		rep.Flows = r.flows
	}
	if r.opts.Durable > 0 {
		if err := r.analyzeDurable(ctx, rep, example); err != nil {
			return err
		}
	}
	limited, plain := map[int64]bool{}, map[int64]bool{} // the limited queue's jobs, the default queue's
	for i := range jobs {
		if jobs[i].queue == audit.LimitedQueue {
			limited[jobs[i].id] = true
			rep.LimitedJobs++
		} else {
			plain[jobs[i].id] = true
		}
	}
	limitedEnd := func(e *execution) time.Time {
		// A killed worker's handlers stopped at the kill; its exit is only seen later.
		if p := procs[e.worker]; e.cutByDie && p != nil && p.killed && !p.killAt.IsZero() && p.killAt.Before(e.end) {
			return p.killAt
		}
		return e.end
	}
	rep.LimitedMax = maxConcurrent(execs, limited, limitedEnd)
	r.claimAheadFigures(rep, execs, plain, procs, limitedEnd)
	rep.LimitChanges = r.limitChanges
	rep.LimitPeriods = limitPeriods(r.limitChanges)
	rep.LimitedOver = checkLimitPeriods(rep.LimitPeriods, concurrencyEvents(execs, limited, limitedEnd), r.rec.t0, example)
	for id, j := range succeeded {
		if !hasExecutions(execs, id) {
			rep.NoFinalExecution++
			example("no final execution", "job %d (seq %d) succeeded in attempt %d by %s with no execution recorded",
				id, j.seq, j.attempts, j.lockedBy)
		}
	}

	// Recovery from each fault.
	for i := range rep.Faults {
		f := &rep.Faults[i]
		var first *time.Time
		err := retryDB(ctx, func(ctx context.Context) error {
			return r.pool.QueryRow(ctx, `SELECT min(finished_at) FROM skiplock.jobs_archive WHERE finished_at > $1`, r.recoveryFrom(f)).Scan(&first)
		})
		if err != nil {
			return fmt.Errorf("chaos: timing fault recovery: %w", err)
		}
		f.FirstCompletion = -1
		if first != nil {
			f.FirstCompletion = first.Sub(f.At)
		}
		if !f.Kind.holds() {
			continue
		}
		f.Held = len(f.held)
		if f.Kind == FaultKill {
			if err := r.timeHeldRunning(ctx, f); err != nil {
				return err
			}
		}
		var (
			n    int
			last *time.Time
		)
		err = retryDB(ctx, func(ctx context.Context) error {
			return r.pool.QueryRow(ctx, `SELECT count(*), max(finished_at) FROM skiplock.jobs_archive WHERE id = ANY($1)`, f.held).Scan(&n, &last)
		})
		if err != nil {
			return fmt.Errorf("chaos: timing fault recovery: %w", err)
		}
		switch {
		case n < len(f.held):
			f.HeldDone = -1
		case last != nil:
			// A completion the killed worker sent just before it died may commit after the
			// kill yet carry an earlier now(): that job was done at once.
			f.HeldDone = max(0, last.Sub(f.At))
		}
	}

	// What the logs say went wrong, for diagnosis.
	for _, c := range r.clusters() {
		rep.ServerDeadlocks += countLines(c.LogFile, "ERROR:  deadlock detected")
		rep.ServerLockWaits += countLines(c.LogFile, "still waiting for")
		rep.ServerSlowStatements += countLines(c.LogFile, "LOG:  duration: ")
	}
	for _, p := range procs {
		rep.WorkerErrors += countLines(p.log, "level=ERROR")
	}

	// Sizes once everything is done.
	return retryDB(ctx, func(ctx context.Context) error {
		if _, err := r.pool.Exec(ctx, `VACUUM skiplock.jobs`); err != nil {
			return err
		}
		return r.pool.QueryRow(ctx, `SELECT pg_total_relation_size('skiplock.jobs'), pg_total_relation_size('skiplock.jobs_archive')`).
			Scan(&rep.HotTableBytes, &rep.ArchiveBytes)
	})
}

// maxConcurrent is the most executions of the jobs in which that ran at one instant.
// execs is sorted by job, then start. An execution counts from its start to its end (a
// killed worker's, to its kill), or to the start of the job's next attempt if that came
// first: the sweeper took the job back from a worker that lost its lease, and the limit
// counts claims, not a stale handler that has yet to notice its context was cancelled.
func maxConcurrent(execs []*execution, which map[int64]bool, endOf func(*execution) time.Time) int {
	n, most := 0, 0
	for _, ev := range concurrencyEvents(execs, which, endOf) {
		n += ev.d
		most = max(most, n)
	}
	return most
}

// concurrencyEvent is the start (d = 1) or the end (d = -1) of an execution.
type concurrencyEvent struct {
	at time.Time
	d  int
}

// concurrencyEvents returns the starts and ends of the executions of the jobs in which,
// in time order (an end before a start at the same instant), as maxConcurrent counts them.
func concurrencyEvents(execs []*execution, which map[int64]bool, endOf func(*execution) time.Time) []concurrencyEvent {
	type event = concurrencyEvent
	var evs []event
	for i, e := range execs {
		if !which[e.job] || e.aborted {
			continue
		}
		end := endOf(e)
		for _, n := range execs[i+1:] {
			if n.job != e.job {
				break
			}
			if n.attempt > e.attempt && n.start.Before(end) {
				end = n.start
				break
			}
		}
		evs = append(evs, event{e.start, 1}, event{end, -1})
	}
	// In time order, an end before a start at the same instant.
	slices.SortFunc(evs, func(a, b event) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d
	})
	return evs
}

// hasExecutions reports whether execs, sorted by job, holds one of job id.
func hasExecutions(execs []*execution, id int64) bool {
	_, found := slices.BinarySearchFunc(execs, id, func(e *execution, id int64) int { return cmp.Compare(e.job, id) })
	return found
}

// checkJob checks the executions of one job, sorted by start. final is the job's archive
// row when it succeeded, else nil.
func (r *runner) checkJob(rep *Report, execs []*execution, final *jobRow, procs map[string]*proc,
	example func(kind, format string, args ...any),
) {
	// Two executions of one attempt: the claim handed the same attempt out twice.
	perAttempt := map[int]int{}
	for _, e := range execs {
		perAttempt[e.attempt]++
	}
	for a, n := range perAttempt {
		if n > 1 {
			rep.SameAttempt++
			example("attempt executed twice", "job %d attempt %d has %d executions", execs[0].job, a, n)
		}
	}

	// Overlaps, among executions that did work.
	var work []*execution
	for _, e := range execs {
		if !e.aborted {
			work = append(work, e)
		}
	}
	for i, a := range work {
		for _, b := range work[i+1:] {
			if b.start.Before(a.end) { // b starts no earlier than a (sorted)
				rep.Overlapping++
				if a.cutByDie || b.cutByDie {
					rep.OverlappingKilled++
				}
				if r.starvedDuring(b.start, a.end) {
					rep.OverlappingStarved++
				}
				example("overlap", "job %d: %v and %v", a.job, a, b)
			}
		}
	}

	if final == nil {
		return
	}
	// The succeeding execution: the archive's attempt, by the archive's worker, finished.
	var fin *execution
	for _, e := range work {
		if e.attempt == final.attempts && e.worker == final.lockedBy && e.ended != nil {
			fin = e
		}
		if e.attempt > final.attempts {
			rep.AfterFinal++
			example("after final", "job %d succeeded in attempt %d (worker %s) but %v ran later",
				final.id, final.attempts, final.lockedBy, e)
		}
	}
	if fin == nil {
		rep.NoFinalExecution++
		example("no final execution", "job %d succeeded in attempt %d by %s, which has no finished execution",
			final.id, final.attempts, final.lockedBy)
	}

	// Re-runs: every other execution that did work, and why its claim ended.
	extra := 0
	for _, e := range work {
		if e == fin {
			continue
		}
		extra++
		// The next claim of the job is the next attempt that has a row.
		var next *execution
		for _, c := range execs {
			if c.attempt > e.attempt && (next == nil || c.attempt < next.attempt) {
				next = c
			}
		}
		switch {
		case next == nil:
			rep.RerunsUnexplained++
			example("unexplained re-run", "job %d: %v is not the succeeding execution and no later attempt ran", e.job, e)
		case r.diedBetween(procs[e.worker], e.start, next.start):
			rep.RerunsKill++
		case r.dbFaultBetween(e.start, next.start):
			rep.RerunsDBFault++
		default:
			rep.RerunsUnexplained++
			example("unexplained re-run", "job %d: %v, then %v, with no kill or database fault between", e.job, e, next)
		}
	}
	if extra > 0 {
		rep.RerunJobs++
		rep.Reruns += int64(extra)
	}
}

// diedBetween reports whether p was killed (or crashed) after from and no later than to.
func (r *runner) diedBetween(p *proc, from, to time.Time) bool {
	if p == nil || p.expected && !p.killed {
		return false
	}
	died := p.killAt
	if !p.killed {
		died = p.exitAt
	}
	return !p.exitAt.Before(from) && !died.After(to)
}

// dbFaultBetween reports whether a Postgres restart, a backend termination, a black-holed
// worker, a rolling deploy or a CPU starvation happened (at least in part) between from
// and to (not the held-pool fault: its worker is not one of the slots', and its database
// is fine). A step of the server's clock explains no re-run: it must cause none.
func (r *runner) dbFaultBetween(from, to time.Time) bool {
	for _, f := range r.faults {
		if f.Kind != FaultKill && f.Kind != FaultHeldPool && f.Kind != FaultClockStep && !f.At.After(to) && !f.End.Before(from) {
			return true
		}
	}
	return false
}

// countLines counts the lines of file that contain substr; an unreadable file counts 0.
func countLines(file, substr string) int {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	n := 0
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}
