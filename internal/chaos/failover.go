package chaos

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// Replication says whether and how a chaos run fails over; see [Options.Failover].
type Replication int

// The failover modes.
const (
	// NoFailover runs the worker kills, restart and termination faults.
	NoFailover Replication = iota
	// SyncFailover replicates synchronously (synchronous_standby_names = '*',
	// synchronous_commit = on): a commit is acknowledged once the standby has flushed it,
	// so the failover must lose nothing that was acknowledged.
	SyncFailover
	// AsyncFailover replicates asynchronously (Postgres's default): a commit is
	// acknowledged once it is on the primary's disk, so the failover loses what the standby
	// had not received yet. The run reports how much; those losses break no promise.
	AsyncFailover
)

// String names the mode as the report does.
func (m Replication) String() string {
	switch m {
	case NoFailover:
		return "none"
	case SyncFailover:
		return "synchronous"
	case AsyncFailover:
		return "asynchronous"
	}
	return fmt.Sprintf("Replication(%d)", int(m))
}

// FailoverOptions returns the full-size failover run: 4 worker processes, 50,000 jobs
// enqueued over 15 s, each working up to 50 ms (so that about a hundred are running at any
// moment), the primary killed 5 s in.
func FailoverOptions(m Replication) Options {
	return Options{Failover: m, Workers: 4, Jobs: 50_000, Warmup: 5 * time.Second, FaultInterval: 10 * time.Second,
		MaxWork: 50 * time.Millisecond}
}

// QuickFailover returns the reduced failover run: 2 worker processes, 3,000 jobs over 5 s,
// each working up to 100 ms (a few dozen running at any moment), the primary killed 2 s in.
// It takes about 20 seconds.
func QuickFailover(m Replication) Options {
	return Options{Failover: m, Workers: 2, Jobs: 3000, Warmup: 2 * time.Second, FaultInterval: 3 * time.Second,
		MaxWork: 100 * time.Millisecond, DrainTimeout: time.Minute}
}

// FailoverReport is what a failover run found beyond the figures every run has.
type FailoverReport struct {
	Replication Replication
	// KillToPromoted is the time from the kill of the primary until pg_ctl promote -w
	// returned (it polls, so the standby took writes a little earlier; the run reads the
	// standby's running jobs between the kill and the promotion, a few ms);
	// KillToFirstCompletion is the time to the first job completed on the new primary.
	KillToPromoted        time.Duration
	KillToFirstCompletion time.Duration

	// RunningAtKill counts the jobs that were running on the standby's copy when the
	// primary died. Each succeeded in the attempt it held (its worker's success, retried
	// through the outage, passed the fence on the new primary), or in a later one after
	// the sweeper took the held attempt back when its lease expired on the new primary
	// (its worker had lost track of it), or after its worker recorded a failure of the held
	// attempt (the handler's audit write failed in the outage); or it did not succeed
	// (counted in Report.NotFinal too).
	RunningAtKill       int
	RunningSameAttempt  int
	RunningLeaseExpired int
	RunningFailed       int
	RunningNotDone      int
	// RunningDone is the time from the kill until the last of them succeeded.
	RunningDone time.Duration

	// What the old primary had committed that the new one does not have, read by
	// starting the old primary's data directory on its own after the run: job rows
	// (enqueues), successes (a job archived there in an attempt the new primary did not
	// archive it in) and audit rows. With synchronous replication these can only be
	// commits still waiting for the standby's acknowledgement (their callers got an
	// error); with asynchronous replication they are, but for the instant of the kill,
	// commits that had been acknowledged. The acknowledged enqueues lost are counted
	// exactly in Report.Lost.
	OldOnlyJobs      int64
	OldOnlySuccesses int64
	OldOnlyAudit     int64
	// OldInspectErr is why the old primary could not be read, if it could not.
	OldInspectErr string

	// Listeners counts the worker processes whose LISTEN session was on the new primary
	// at the end of the run, of Workers live ones.
	Listeners, Workers int
}

// failoverState is a failover run's clusters and what the failover saw.
type failoverState struct {
	primary, standby *pgtest.Cluster // standby is the new primary after the failover
	oldPrimary       *pgtest.Cluster // set by the failover
	killed           time.Time       // when every process of the old primary was gone
	watchdogs        []func()
	running          map[int64]int // the standby's running jobs at the kill: id -> attempts
}

func (fo *failoverState) stopWatchdogs() {
	for _, stop := range fo.watchdogs {
		stop()
	}
}

// replicationSettings are the primary's settings for each mode. wal_level is replica and
// max_wal_senders 10 by default; the standby's settings override the synchronous ones
// (once promoted it has no standby to wait for).
func replicationSettings(m Replication) (primary, standby map[string]string) {
	primary = map[string]string{}
	standby = map[string]string{"synchronous_standby_names": ""}
	for k, v := range serverSettings {
		primary[k], standby[k] = v, v
	}
	if m == SyncFailover {
		primary["synchronous_standby_names"] = "*"
		primary["synchronous_commit"] = "on"
	}
	return primary, standby
}

// startPair starts the primary and its streaming standby and sets r.url to the multi-host
// URL that finds whichever of them takes writes.
func (r *runner) startPair(ctx context.Context) error {
	r.fo = &failoverState{}
	pset, sset := replicationSettings(r.opts.Failover)
	t := time.Now()
	primary, err := pgtest.StartCluster(ctx, filepath.Join(r.dir, "pg"), pgtest.ClusterOptions{Settings: pset})
	if err != nil {
		return err
	}
	r.fo.primary, r.cluster = primary, primary
	stop, err := startWatchdog(primary.DataDir)
	if err != nil {
		return err
	}
	r.fo.watchdogs = append(r.fo.watchdogs, stop)
	standby, err := pgtest.StartStandby(ctx, primary, filepath.Join(r.dir, "pg-standby"), pgtest.ClusterOptions{Settings: sset})
	if err != nil {
		return err
	}
	r.fo.standby = standby
	if stop, err = startWatchdog(standby.DataDir); err != nil {
		return err
	}
	r.fo.watchdogs = append(r.fo.watchdogs, stop)
	// target_session_attrs=read-write: a connection tries each host in turn and keeps the
	// first that takes writes, so after the failover new connections find the promoted
	// standby. connect_timeout bounds each try (on loopback a dead port refuses at once).
	r.url = fmt.Sprintf("postgres://postgres@/postgres?host=127.0.0.1,127.0.0.1&port=%d,%d&target_session_attrs=read-write&connect_timeout=5&sslmode=disable",
		primary.Port, standby.Port)
	r.rec.logf("started primary (pid %d, port %d) and its %s standby (pid %d, port %d) in %.1fs",
		primary.PID(), primary.Port, r.opts.Failover, standby.PID(), standby.Port, time.Since(t).Seconds())
	return nil
}

// runningSQL lists the running jobs, read on the standby between the kill and the
// promotion: exactly what the new primary starts with.
const runningSQL = `SELECT id, attempts FROM skiplock.jobs WHERE status = 'running'`

// failover pauses the primary's WAL sender for StandbyLag, kills every process of the
// primary, reads the standby's running jobs, and promotes the standby.
func (r *runner) failover(ctx context.Context, f *Fault) error {
	fo := r.fo
	pid := fo.primary.PID()
	lag := "no WAL sender pause"
	if r.opts.StandbyLag > 0 {
		var sender int
		err := retryDB(ctx, func(ctx context.Context) error {
			return r.pool.QueryRow(ctx, `SELECT pid FROM pg_stat_replication`).Scan(&sender)
		})
		if err != nil {
			return fmt.Errorf("chaos: finding the primary's WAL sender: %w", err)
		}
		if err := pauseProcess(sender); err != nil {
			return fmt.Errorf("chaos: pausing the WAL sender: %w", err)
		}
		if err := sleepUntil(ctx, time.Now().Add(r.opts.StandbyLag)); err != nil {
			return err
		}
		lag = fmt.Sprintf("WAL sender paused for %v before", r.opts.StandbyLag)
	}
	f.At = time.Now().Round(0)
	if err := fo.primary.Kill(ctx); err != nil {
		return err
	}
	fo.killed = time.Now().Round(0)
	fo.running = map[int64]int{}
	err := retryDB(ctx, func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, fo.standby.URL())
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		rows, err := conn.Query(ctx, runningSQL)
		if err != nil {
			return err
		}
		var id int64
		var attempts int
		_, err = pgx.ForEachRow(rows, []any{&id, &attempts}, func() error { fo.running[id] = attempts; return nil })
		return err
	})
	if err != nil {
		return fmt.Errorf("chaos: reading the standby's running jobs: %w", err)
	}
	if err := fo.standby.Promote(ctx); err != nil {
		return err
	}
	// pg_ctl promote -w polls the server: it took writes a little earlier than this.
	f.End = time.Now().Round(0)
	fo.oldPrimary, r.cluster = fo.primary, fo.standby
	f.Detail = fmt.Sprintf("%s kill -9 of the primary (postmaster %d and its children, all gone %s after); %d jobs running on the standby's copy; promoted the standby (port %d): pg_ctl promote -w returned %s after the kill",
		lag, pid, fmtDur(fo.killed.Sub(f.At)), len(fo.running), fo.standby.Port, fmtDur(f.End.Sub(f.At)))
	return nil
}

// listenersSQL counts the worker processes' LISTEN sessions (see skiplock's notify.go).
const listenersSQL = `SELECT count(DISTINCT application_name) FROM pg_stat_activity WHERE application_name LIKE 'skiplock-listen %'`

// countListeners notes, before the workers stop, how many of them listen on the new primary.
func (r *runner) countListeners(ctx context.Context, fr *FailoverReport) {
	fr.Workers = len(r.fleet.slotsByID())
	// The listener retries with a backoff of up to 5s after a lost connection.
	deadline := time.Now().Add(15 * time.Second)
	for {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := r.pool.QueryRow(qctx, listenersSQL).Scan(&fr.Listeners)
		cancel()
		if err == nil && fr.Listeners >= fr.Workers || time.Now().After(deadline) || ctx.Err() != nil {
			return
		}
		_ = sleepUntil(ctx, time.Now().Add(200*time.Millisecond))
	}
}

// analyzeFailover fills rep.Failover: the fate of the jobs running at the kill, and what
// only the old primary has.
func (r *runner) analyzeFailover(ctx context.Context, rep *Report, fr *FailoverReport) error {
	fo := r.fo
	fr.Replication = r.opts.Failover
	if len(rep.Faults) == 1 {
		f := rep.Faults[0]
		fr.KillToPromoted = f.End.Sub(f.At)
		fr.KillToFirstCompletion = f.FirstCompletion
	}

	// The jobs running at the kill, as they are now.
	fr.RunningAtKill = len(fo.running)
	ids := make([]int64, 0, len(fo.running))
	attempts := make([]int32, 0, len(fo.running))
	for id, a := range fo.running {
		ids, attempts = append(ids, id), append(attempts, int32(a))
	}
	var at time.Time
	if len(rep.Faults) == 1 {
		at = rep.Faults[0].At
	}
	err := retryDB(ctx, func(ctx context.Context) error {
		fr.RunningSameAttempt, fr.RunningLeaseExpired, fr.RunningFailed, fr.RunningDone = 0, 0, 0, 0
		rows, err := r.pool.Query(ctx, runningFateSQL, ids, attempts)
		if err != nil {
			return err
		}
		var (
			held, final int
			fin         time.Time
			expired     bool
		)
		n, err := pgx.ForEachRow(rows, []any{&held, &final, &fin, &expired}, func() error {
			switch {
			case final == held:
				fr.RunningSameAttempt++
			case expired:
				fr.RunningLeaseExpired++
			default:
				fr.RunningFailed++
			}
			fr.RunningDone = max(fr.RunningDone, fin.Sub(at))
			return nil
		})
		fr.RunningNotDone = len(ids) - int(n.RowsAffected())
		return err
	})
	if err != nil {
		return fmt.Errorf("chaos: reading the jobs running at the kill: %w", err)
	}

	r.inspectOldPrimary(ctx, fr)
	return nil
}

// runningFateSQL says how each job running at the kill ($1 ids, $2 the attempts they were
// in) succeeded: its final attempt, when, and whether the sweeper took the held attempt back
// after its lease expired (the error it records then).
const runningFateSQL = `SELECT r.attempts, a.attempts, a.finished_at,
	EXISTS (SELECT FROM jsonb_array_elements(coalesce(a.errors, '[]')) e
		WHERE (e->>'attempt')::int = r.attempts AND e->>'error' LIKE 'lease expired%')
FROM unnest($1::bigint[], $2::int[]) AS r(id, attempts)
JOIN skiplock.jobs_archive a ON a.id = r.id`

// Old-primary comparison: what it holds, to be looked up on the new primary.
const (
	oldJobsSQL = `SELECT (payload->>'seq')::bigint FROM skiplock.jobs
		UNION SELECT (payload->>'seq')::bigint FROM skiplock.jobs_archive`
	oldSuccessesSQL = `SELECT id, attempts FROM skiplock.jobs_archive`
	oldAuditSQL     = `SELECT exec_id FROM chaos.executions`

	newSeqsSQL      = `SELECT count(*) FROM unnest($1::bigint[]) s WHERE NOT EXISTS (SELECT FROM skiplock.jobs j WHERE (j.payload->>'seq')::bigint = s) AND NOT EXISTS (SELECT FROM skiplock.jobs_archive a WHERE (a.payload->>'seq')::bigint = s)`
	newSuccessesSQL = `SELECT count(*) FROM unnest($1::bigint[], $2::int[]) AS o(id, attempts) WHERE NOT EXISTS (SELECT FROM skiplock.jobs_archive a WHERE a.id = o.id AND a.attempts = o.attempts)`
	newAuditSQL     = `SELECT count(*) FROM unnest($1::text[]) e WHERE NOT EXISTS (SELECT FROM chaos.executions x WHERE x.exec_id = e)`
)

// inspectOldPrimary starts the killed primary's data directory on its own, on a new port
// (its old one is in the workers' URL: it must not take writes from them), and counts what
// it had committed that the new primary lacks. Failures are recorded, not returned: the
// run's verdict does not depend on them.
func (r *runner) inspectOldPrimary(ctx context.Context, fr *FailoverReport) {
	fo := r.fo
	_, sset := replicationSettings(r.opts.Failover)
	old, err := pgtest.StartCluster(ctx, fo.oldPrimary.Dir, pgtest.ClusterOptions{Settings: sset})
	if err != nil {
		fr.OldInspectErr = err.Error()
		return
	}
	fo.primary = old // cleanup stops it
	conn, err := pgx.Connect(ctx, old.URL())
	if err != nil {
		fr.OldInspectErr = err.Error()
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var (
		seqs, sIDs []int64
		sAttempts  []int32
		execs      []string
	)
	collect := func(sql string, dest ...any) func(func()) error {
		return func(add func()) error {
			rows, err := conn.Query(ctx, sql)
			if err != nil {
				return err
			}
			_, err = pgx.ForEachRow(rows, dest, func() error { add(); return nil })
			return err
		}
	}
	var seq, id int64
	var attempts int32
	var exec string
	steps := []error{
		collect(oldJobsSQL, &seq)(func() { seqs = append(seqs, seq) }),
		collect(oldSuccessesSQL, &id, &attempts)(func() { sIDs, sAttempts = append(sIDs, id), append(sAttempts, attempts) }),
		collect(oldAuditSQL, &exec)(func() { execs = append(execs, exec) }),
	}
	for _, err := range steps {
		if err != nil {
			fr.OldInspectErr = err.Error()
			return
		}
	}
	err = retryDB(ctx, func(ctx context.Context) error {
		if err := r.pool.QueryRow(ctx, newSeqsSQL, seqs).Scan(&fr.OldOnlyJobs); err != nil {
			return err
		}
		if err := r.pool.QueryRow(ctx, newSuccessesSQL, sIDs, sAttempts).Scan(&fr.OldOnlySuccesses); err != nil {
			return err
		}
		return r.pool.QueryRow(ctx, newAuditSQL, execs).Scan(&fr.OldOnlyAudit)
	})
	if err != nil {
		fr.OldInspectErr = err.Error()
	}
}

// lossy reports whether the failover replicated asynchronously: the broken-promise checks
// that data lost by the replication can trip are then reported, not failed.
func (r *Report) lossy() bool { return r.Options.Failover == AsyncFailover }

// print writes the failover figures.
func (fr *FailoverReport) print(w io.Writer) {
	fmt.Fprintf(w, "\nfailover (%s replication):\n", fr.Replication)
	fmt.Fprintf(w, "  kill -9 of the primary -> pg_ctl promote -w returned: %s\n", fmtDur(fr.KillToPromoted))
	fmt.Fprintf(w, "  kill -9 of the primary -> first job completed on the new primary: %s\n", fmtDurOrNone(fr.KillToFirstCompletion))
	fmt.Fprintf(w, "  jobs running at the kill: %d; succeeded in the attempt they held (the worker's success passed the fence on the new primary): %d; after their lease expired on the new primary and the sweeper took them back: %d; after their worker recorded a failure: %d; not done: %d; the last done %s after the kill\n",
		fr.RunningAtKill, fr.RunningSameAttempt, fr.RunningLeaseExpired, fr.RunningFailed, fr.RunningNotDone, fmtDur(fr.RunningDone))
	if fr.OldInspectErr != "" {
		fmt.Fprintf(w, "  old primary could not be read: %s\n", fr.OldInspectErr)
	} else {
		fmt.Fprintf(w, "  committed on the old primary, missing on the new: %d job rows (enqueues), %d successes, %d audit rows\n",
			fr.OldOnlyJobs, fr.OldOnlySuccesses, fr.OldOnlyAudit)
	}
	fmt.Fprintf(w, "  workers listening on the new primary at the end: %d of %d\n", fr.Listeners, fr.Workers)
}
