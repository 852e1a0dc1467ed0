package chaos

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/skiplock/skiplock/internal/chaos/audit"
)

// FaultKind names a kind of injected fault.
type FaultKind string

// The faults a run injects.
const (
	FaultKill      FaultKind = "kill -9 worker"
	FaultRestart   FaultKind = "postgres restart"
	FaultTerminate FaultKind = "terminate backends"
	FaultFailover  FaultKind = "failover"
	// FaultDeploy restarts every worker, one at a time and gracefully, with a different
	// visibility timeout: a rolling deploy.
	FaultDeploy FaultKind = "rolling deploy"
	// FaultBlackhole makes one worker's network path to the database silent (its proxy
	// stops forwarding, no reset) for a while, then restores it.
	FaultBlackhole FaultKind = "black-holed worker"
	// FaultStarve runs busy processes, several per core, for a while: heartbeats and
	// handlers wait for the CPU.
	FaultStarve FaultKind = "CPU starvation"
	// FaultClockStep steps the server's wall clock back for a while, then forward again
	// (clockstep.go).
	FaultClockStep FaultKind = "server clock step"
)

// Fault is one injected fault and how the run recovered from it.
type Fault struct {
	Kind   FaultKind
	At     time.Time // when it was injected
	End    time.Time // when it was over: the worker reaped, the server accepting again
	Detail string
	// FirstCompletion is the time from At to the first job completed (moved to the
	// archive) after End (for a failover, after At: every such completion is the new
	// primary's; for a black hole and a starvation after At too, which the workers work
	// through);
	// negative when no job completed after it.
	FirstCompletion time.Duration
	// Held is, for a kill or a black hole, the number of running jobs the worker held.
	Held int
	// HeldDone is, for a kill or a black hole, the time from At until the last of the held
	// jobs succeeded in another worker; negative when one of them did not succeed.
	HeldDone time.Duration
	// HeldRunning is, for a kill, the time from At until the last of the held jobs started
	// again in another worker; negative when one of them never did.
	HeldRunning time.Duration
	// Leader is, for a kill, whether the killed worker led the fleet's maintenance.
	Leader bool

	rerun  int     // kill: how many held jobs had to run again (see heldRunningSQL)
	worker string  // kill, black hole: the worker's id
	held   []int64 // kill, black hole: the ids of the held jobs
}

// Report is what a chaos run found. The counts of broken promises must be zero; see
// [Report.Broken].
type Report struct {
	Options Options       // as run, defaults applied
	Wall    time.Duration // wall time of the run, from the build of the worker to the report
	Dir     string        // the run's directory (removed after a successful run unless Keep)

	// Flows is what the workflow phase found (nil in a run that had none).
	Flows *FlowReport
	// Durable is what the durable phase found (nil in a run that had none).
	Durable *DurableReport

	// Jobs.
	Enqueued      int64 // jobs whose enqueue committed
	Succeeded     int64 // enqueued jobs in the archive as succeeded
	Lost          int64 // enqueued jobs found neither in the jobs table nor in the archive
	NotFinal      int64 // enqueued jobs still queued or running after the drain deadline
	Dead          int64 // enqueued jobs that ended dead (attempts used up)
	Failed        int64 // enqueued jobs that ended failed or cancelled
	Duplicated    int64 // seq numbers found in more than one job row
	Unexpected    int64 // job rows whose enqueue the harness saw fail and not commit
	EnqueueErrors int   // EnqueueMany calls that failed (then found committed, or retried)

	// Executions, from the audit table.
	Executions       int64 // handler executions that did their work (or were killed doing it)
	Aborted          int64 // executions that stopped before any work: their start write failed
	UnfinishedKilled int64 // executions cut off by the kill of their worker (no end recorded)
	UnfinishedOther  int64 // executions whose end could not be recorded though their worker lived
	// EndsFromFile counts executions whose end is known only from their worker's ends file:
	// the work ended, but writing its end to the table did not get through.
	EndsFromFile int64
	// Overlapping counts pairs of executions of one job whose [start, end] intervals
	// intersect. A killed worker's unfinished execution ends when the worker was known
	// dead; OverlappingKilled is how many of the pairs involve one.
	Overlapping       int64
	OverlappingKilled int64
	// OverlappingStarved is how many of the pairs overlap while a CPU-starvation fault ran.
	OverlappingStarved int64
	SameAttempt        int64 // (job, attempt) pairs executed more than once: a double claim
	NoFinalExecution   int64 // succeeded jobs with no finished execution of their final attempt
	AfterFinal         int64 // executions of an attempt later than the one that succeeded
	// RerunJobs counts succeeded jobs executed more than once, Reruns the extra executions,
	// by what ended the earlier execution's claim: the kill of its worker, a database fault
	// (restart or terminated backends) between it and the next claim, or nothing the
	// harness injected.
	RerunJobs         int64
	Reruns            int64
	RerunsKill        int64
	RerunsDBFault     int64 // after a database fault, a black-holed worker, a deploy or a CPU starvation
	RerunsUnexplained int64

	// ClaimMax is the most default-queue jobs executed from one claim of a worker of an
	// odd slot (its executions that share the claim's start, claimed_at: a floor of that
	// claim's size), ClaimMaxPlain the same for the even slots. A claim
	// takes more than Options.Concurrency only while its worker claims ahead
	// (Options.NoClaimAhead). RunningMax is the most executions of default-queue jobs that
	// ran at once in one worker (RunningMaxWorker): it must never exceed
	// Options.Concurrency, its MaxWorkers, whatever the worker held.
	ClaimMax, ClaimMaxPlain int
	RunningMax              int
	RunningMaxWorker        string

	// LimitedJobs is how many jobs went to the queue with a global concurrency limit
	// (audit.LimitedQueue), LimitedMax the most of their executions seen running at once:
	// it must never exceed audit.LimitedConcurrency.
	LimitedJobs int64
	LimitedMax  int
	// LimitChanges are the limited queue's limits the run set (SetQueueLimits, then
	// ResetQueueLimits back to the declared ones), LimitPeriods the spans of the limit in
	// force between them, each with the most executions running just after a start in it,
	// and LimitedOver the starts that left more running than the limit in force: after a
	// limit is set or lowered, no job may start until fewer than it are running.
	LimitChanges []LimitChange
	LimitPeriods []LimitPeriod
	LimitedOver  int64

	Crashes []string // worker processes that exited without being told to
	Faults  []Fault

	// Failover holds the failover figures of a failover run, nil otherwise.
	Failover *FailoverReport
	// HeldPool holds what the held-pool fault found (heldpool.go), nil without it.
	HeldPool *HeldPoolReport

	// HotTableBytes is pg_total_relation_size of skiplock.jobs (heap, indexes, TOAST)
	// after a VACUUM, once every job is done; ArchiveBytes the same for the archive.
	HotTableBytes int64
	ArchiveBytes  int64

	// ServerDeadlocks counts "deadlock detected" errors in the server log,
	// ServerLockWaits the lock waits it logged (those longer than 1s),
	// ServerSlowStatements the statements that took more than 1s, and WorkerErrors the
	// ERROR lines in the workers' logs: none breaks a promise by itself, all point at
	// where re-runs and stalls come from.
	ServerDeadlocks      int
	ServerLockWaits      int
	ServerSlowStatements int
	WorkerErrors         int

	// Examples holds a few instances of each problem found (broken promise or warning),
	// for diagnosis.
	Examples []string
}

// Broken lists the promises the run broke; empty means all were kept.
func (r *Report) Broken() []string {
	var out []string
	check := func(n int64, what string) {
		if n > 0 {
			out = append(out, fmt.Sprintf("%d %s", n, what))
		}
	}
	// Asynchronous replication loses acknowledged commits in a failover: enqueues, claims,
	// successes and audit rows. What that breaks is reported (Print), not failed: it is
	// Postgres's documented behaviour, and docs/many-hosts.md (Failover) says how to avoid it.
	if !r.lossy() {
		check(r.Lost, "jobs lost")
		check(r.Overlapping, "overlapping executions")
		check(r.SameAttempt, "attempts executed twice")
		check(r.NoFinalExecution, "jobs succeeded without a finished execution")
		check(r.AfterFinal, "executions after the succeeding attempt")
	}
	check(r.NotFinal, "jobs not final")
	check(r.Dead, "jobs dead")
	check(r.Failed, "jobs failed or cancelled")
	check(r.Duplicated, "jobs enqueued twice")
	check(r.Unexpected, "jobs from enqueues that had failed")
	check(int64(len(r.Crashes)), "worker crashes")
	if r.Flows != nil {
		out = append(out, r.Flows.broken()...)
	}
	out = append(out, r.Durable.broken()...)
	out = append(out, r.HeldPool.broken()...)
	if r.LimitedMax > audit.LimitedConcurrency && !r.lossy() {
		out = append(out, fmt.Sprintf("%d jobs of the limited queue ran at once, above its limit of %d", r.LimitedMax, audit.LimitedConcurrency))
	}
	if r.RunningMax > r.Options.Concurrency && !r.lossy() {
		out = append(out, fmt.Sprintf("worker %s ran %d handlers of the default queue at once, above its MaxWorkers of %d",
			r.RunningMaxWorker, r.RunningMax, r.Options.Concurrency))
	}
	if r.LimitedOver > 0 && !r.lossy() {
		out = append(out, fmt.Sprintf("%d starts of the limited queue's jobs above the limit in force", r.LimitedOver))
	}
	return out
}

// Warnings lists what the run found wrong without breaking a promise: executions that ran
// again though no injected fault explains it (at-least-once execution allows them, but
// each points at a completion the library lost on its own), and executions whose end
// could not be recorded.
func (r *Report) Warnings() []string {
	var out []string
	if r.RerunsUnexplained > 0 {
		out = append(out, fmt.Sprintf("%d re-runs that no kill or database fault explains", r.RerunsUnexplained))
	}
	if r.UnfinishedOther > 0 && !r.lossy() { // asynchronous replication loses end marks
		out = append(out, fmt.Sprintf("%d executions whose end could not be recorded", r.UnfinishedOther))
	}
	out = append(out, r.Durable.warnings()...)
	return out
}

// Print writes the figures table and the per-fault table to w.
func (r *Report) Print(w io.Writer) {
	o := r.Options
	faults := map[FaultKind]int{}
	for _, f := range r.Faults {
		faults[f.Kind]++
	}
	if o.Failover != NoFailover {
		fmt.Fprintf(w, "\nchaos report: failover with %s replication, %d workers, %d jobs, seed %d\n\n",
			o.Failover, o.Workers, o.Jobs, o.Seed)
	} else {
		leases := fmt.Sprintf("visibility timeout %s", o.VisibilityTimeout)
		if o.DefaultLeases {
			leases = "default lease settings"
		}
		fmt.Fprintf(w, "\nchaos report: %d workers, %d jobs, %d kills, %d postgres restart, %d backend termination, %d rolling deploy, %d black-holed worker, %d CPU starvation (%d busy processes), %d server clock step; %s; seed %d\n\n",
			o.Workers, o.Jobs, faults[FaultKill], faults[FaultRestart], faults[FaultTerminate], faults[FaultDeploy], faults[FaultBlackhole],
			faults[FaultStarve], o.StarveProcs, faults[FaultClockStep], leases, o.Seed)
	}

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name string, value any, promise string) { fmt.Fprintf(tw, "%s\t%v\t%s\n", name, value, promise) }
	must0 := func(n int64) string {
		if n == 0 {
			return "ok"
		}
		return "BROKEN"
	}
	// Figures that asynchronous replication may legitimately spoil.
	lossy0 := must0
	if r.lossy() {
		lossy0 = func(n int64) string {
			if n == 0 {
				return "ok"
			}
			return "lost to async replication"
		}
	}
	warn0 := func(n int64) string {
		if n == 0 {
			return ""
		}
		return "WARNING"
	}
	fmt.Fprintf(tw, "figure\tvalue\tpromise\n")
	fmt.Fprintf(tw, "------\t-----\t-------\n")
	row("jobs enqueued", r.Enqueued, "")
	row("jobs succeeded", r.Succeeded, "")
	row("jobs lost (enqueued, found nowhere)", r.Lost, lossy0(r.Lost))
	row("jobs not final at the deadline", r.NotFinal, must0(r.NotFinal))
	row("jobs dead / failed or cancelled", fmt.Sprintf("%d / %d", r.Dead, r.Failed), must0(r.Dead+r.Failed))
	row("jobs enqueued twice / from failed enqueues", fmt.Sprintf("%d / %d", r.Duplicated, r.Unexpected), must0(r.Duplicated+r.Unexpected))
	row("enqueue calls that failed (resolved)", r.EnqueueErrors, "")
	if f := r.Flows; f != nil {
		row("workflows (five tasks) / batches enqueued", fmt.Sprintf("%d / %d", f.Workflows, f.Batches), "")
		row("  their jobs succeeded (tasks, batch jobs, callbacks)", f.TaskJobs, "")
		row("  tasks run before a dependency succeeded", f.OutOfOrder, must0(f.OutOfOrder))
		row("  workflows or batches stuck (a task not final)", f.Stuck, must0(f.Stuck))
		row("  tasks lost / with two jobs / not succeeded", fmt.Sprintf("%d / %d / %d", f.Lost, f.Duplicated, f.NotSucceeded), must0(f.Lost+f.Duplicated+f.NotSucceeded))
		row("  callbacks not enqueued once with exact counts", f.CallbacksBad, must0(f.CallbacksBad))
		row("  callback executions (a kill may re-run one)", f.CallbackRuns, "")
	}
	r.Durable.print(row)
	row("executions (handler runs that did work)", r.Executions, "")
	row("  cut off by a kill (no end recorded)", r.UnfinishedKilled, "")
	endLost := warn0(r.UnfinishedOther)
	if r.lossy() && r.UnfinishedOther > 0 {
		endLost = "lost to async replication"
	}
	row("  end not recorded, worker alive", r.UnfinishedOther, endLost)
	row("  end only in the worker's file (table write lost)", r.EndsFromFile, "")
	row("  aborted before work (start write failed)", r.Aborted, "")
	row("overlapping executions of one job", r.Overlapping, lossy0(r.Overlapping))
	row("  of which with a killed worker's execution", r.OverlappingKilled, "")
	row("  of which during CPU starvation", r.OverlappingStarved, "")
	row("attempts executed twice (double claim)", r.SameAttempt, lossy0(r.SameAttempt))
	row("succeeded, final attempt not executed", r.NoFinalExecution, lossy0(r.NoFinalExecution))
	row("executions after the succeeding attempt", r.AfterFinal, lossy0(r.AfterFinal))
	row("jobs executed more than once", r.RerunJobs, "allowed")
	row("  re-runs after a kill", r.RerunsKill, "allowed")
	row("  re-runs after a db fault (restart, terminate, failover), black hole, deploy or starvation", r.RerunsDBFault, "allowed")
	row("  re-runs no injected fault explains", r.RerunsUnexplained, warn0(r.RerunsUnexplained))
	runningOK := "ok"
	if r.RunningMax > r.Options.Concurrency {
		runningOK = "BROKEN"
	}
	row(fmt.Sprintf("default queue: most handlers at once in one worker, MaxWorkers %d", r.Options.Concurrency), r.RunningMax, runningOK)
	ahead := "claiming ahead"
	if r.Options.NoClaimAhead {
		ahead = "claim-ahead threshold as shipped"
	}
	row(fmt.Sprintf("  most of its jobs in one claim, odd slots (%s)", ahead), r.ClaimMax, "")
	row("  the same, even slots (claim-ahead threshold as shipped)", r.ClaimMaxPlain, "")
	limitedOK := "ok"
	if r.LimitedMax > audit.LimitedConcurrency {
		limitedOK = "BROKEN"
	}
	row(fmt.Sprintf("limited queue (%d jobs): most running at once, limit %d", r.LimitedJobs, audit.LimitedConcurrency), r.LimitedMax, limitedOK)
	row("  starts above the limit in force (as it changed)", r.LimitedOver, lossy0(r.LimitedOver))
	for _, p := range r.LimitPeriods {
		ok := "ok"
		if p.MostAtStart > p.Limit {
			ok = "BROKEN"
		}
		row(fmt.Sprintf("  from %s: limit %d, %d starts, most running at a start", fmtDur(p.From), p.Limit, p.Starts), p.MostAtStart, ok)
	}
	r.HeldPool.print(row)
	row("worker processes that crashed", len(r.Crashes), must0(int64(len(r.Crashes))))
	for _, k := range []FaultKind{FaultKill, FaultRestart, FaultTerminate, FaultFailover, FaultDeploy, FaultBlackhole, FaultStarve, FaultClockStep} {
		var first, held []time.Duration
		for _, f := range r.Faults {
			if f.Kind != k {
				continue
			}
			first = append(first, f.FirstCompletion)
			if k.holds() {
				held = append(held, f.HeldDone)
			}
		}
		if len(first) == 0 {
			continue
		}
		row(fmt.Sprintf("%s -> first completion (%d)", k, len(first)), spread(first), "")
		if k.holds() {
			row(fmt.Sprintf("%s -> its jobs done elsewhere", k), spread(held), "")
		}
	}
	r.printRecovery(row)
	row("server log: deadlocks / lock waits >1s / statements >1s",
		fmt.Sprintf("%d / %d / %d", r.ServerDeadlocks, r.ServerLockWaits, r.ServerSlowStatements), "")
	row("ERROR lines in the worker logs", r.WorkerErrors, "")
	row("hot table size after VACUUM (jobs+indexes)", fmtBytes(r.HotTableBytes), "")
	row("archive size", fmtBytes(r.ArchiveBytes), "")
	row("wall time", fmtDur(r.Wall), "")
	tw.Flush()

	if len(r.Faults) > 0 {
		fmt.Fprintf(w, "\nfaults (times from the start of the fault window):\n")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "#\tat\tfault\tfirst completion\tits jobs running elsewhere\tits jobs done\tdetail\n")
		t0 := r.Faults[0].At
		for i, f := range r.Faults {
			heldDone, heldRunning := "", ""
			if f.Kind.holds() {
				heldDone = fmt.Sprintf("%s (%d jobs)", fmtDurOrNone(f.HeldDone), f.Held)
			}
			switch {
			case f.Kind == FaultKill && f.Held > 0 && f.rerun == 0:
				heldRunning = "none left" // its last success batch recorded them after the kill
			case f.Kind == FaultKill:
				heldRunning = fmtDurOrNone(f.HeldRunning)
			}
			fmt.Fprintf(tw, "%d\t+%s\t%s\t%s\t%s\t%s\t%s\n", i+1, fmtDur(f.At.Sub(t0)), f.Kind,
				fmtDurOrNone(f.FirstCompletion), heldRunning, heldDone, f.Detail)
		}
		tw.Flush()
	}
	if r.Failover != nil {
		r.Failover.print(w)
	}
	if r.Durable != nil {
		fmt.Fprintf(w, "\n%s\n", r.Durable.Summary())
	}
	broken, warnings := r.Broken(), r.Warnings()
	if len(broken) > 0 {
		fmt.Fprintf(w, "\nBROKEN: %s\n", strings.Join(broken, ", "))
		for _, c := range r.Crashes {
			fmt.Fprintf(w, "  crash: %s\n", c)
		}
	} else if r.lossy() && r.Lost+r.Overlapping+r.SameAttempt+r.NoFinalExecution+r.AfterFinal+r.UnfinishedOther > 0 {
		fmt.Fprintf(w, "\nall promises kept but for what asynchronous replication lost: commits the primary had acknowledged and the standby never received (lost enqueues, claims, successes and audit rows), marked above\n")
	} else {
		fmt.Fprintf(w, "\nall promises kept\n")
	}
	if len(warnings) > 0 {
		fmt.Fprintf(w, "WARNING: %s\n", strings.Join(warnings, ", "))
	}
	if len(r.Examples) > 0 {
		fmt.Fprintf(w, "examples:\n")
		for _, e := range r.Examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}

// spread formats min / median / max of ds; a negative duration means "never" and sorts last.
func spread(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.SortFunc(s, func(a, b time.Duration) int {
		switch {
		case a < 0 && b < 0:
			return 0
		case a < 0:
			return 1
		case b < 0:
			return -1
		}
		return int(a - b)
	})
	if len(s) == 1 {
		return fmtDurOrNone(s[0])
	}
	return fmt.Sprintf("min %s, median %s, max %s", fmtDurOrNone(s[0]), fmtDurOrNone(s[len(s)/2]), fmtDurOrNone(s[len(s)-1]))
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	default:
		return d.Round(100 * time.Microsecond).String()
	}
}

func fmtDurOrNone(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmtDur(d)
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB (%d bytes)", float64(n)/(1<<10), n)
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}

// holds reports whether a fault of kind k cuts one worker off from the running jobs it
// holds, which must then be done elsewhere.
func (k FaultKind) holds() bool { return k == FaultKill || k == FaultBlackhole }

// printRecovery adds the rows of the kills' recovery: the time until a killed worker's
// jobs ran elsewhere, for leaders and followers, and in a run at the default lease
// settings against the targets (RecoveryMedianTarget, RecoveryMaxTarget). Missing them
// is reported, not counted as a broken promise.
func (r *Report) printRecovery(row func(name string, v any, verdict string)) {
	var leaders, followers []time.Duration
	for _, f := range r.Faults {
		if f.Kind != FaultKill || f.rerun == 0 {
			continue
		}
		if f.Leader {
			leaders = append(leaders, f.HeldRunning)
		} else {
			followers = append(followers, f.HeldRunning)
		}
	}
	if len(leaders)+len(followers) == 0 {
		return
	}
	if len(leaders) > 0 {
		row(fmt.Sprintf("kill of the leader -> its jobs running elsewhere (%d)", len(leaders)), spread(leaders), "")
	}
	if len(followers) > 0 {
		row(fmt.Sprintf("kill of a follower -> its jobs running elsewhere (%d)", len(followers)), spread(followers), "")
	}
	if !r.Options.DefaultLeases {
		return
	}
	rec, err := r.KillRecovery()
	if err != nil {
		row("recovery at default leases", err.Error(), "MISSED")
		return
	}
	verdict := "ok"
	if rec.Median > RecoveryMedianTarget || rec.Max > RecoveryMaxTarget || rec.Kills < 20 {
		verdict = "MISSED"
	}
	row(fmt.Sprintf("recovery at default leases, %d kills (%d leaders): median / max, target %s / %s and 20 kills",
		rec.Kills, rec.Leaders, fmtDur(RecoveryMedianTarget), fmtDur(RecoveryMaxTarget)),
		fmt.Sprintf("%s / %s", fmtDur(rec.Median), fmtDur(rec.Max)), verdict)
}
