// Package chaos is skiplock's fault-injection harness: it runs real worker processes
// against a throwaway Postgres cluster, breaks things while they work, and checks
// afterwards that skiplock kept its promises (see DESIGN.md, "Promises").
//
// [Run] starts its own cluster with [pgtest.StartCluster] (so it may restart it), builds
// and starts Workers worker processes (the program in ./worker), enqueues Jobs jobs over
// the fault window, and meanwhile (one fault every FaultInterval; a fault that lasts
// longer delays the rest, and the work planned after it with them, so that every fault
// has work after it: schedule.go)
//
//   - kills a random worker process with SIGKILL, Kills times, starting a new one each time;
//   - restarts Postgres once (pg_ctl restart -m fast);
//   - terminates every client backend of the database once (pg_terminate_backend);
//   - redeploys every worker once, one at a time and gracefully (SIGTERM), with a
//     different visibility timeout: a rolling deploy;
//   - black-holes one worker's network path to the database once: each worker reaches
//     Postgres through a loopback proxy of its own (package blackhole), which stops
//     forwarding for a while, with no reset, then forwards again;
//   - starves the CPU once: StarveProcs busy processes (four per core by default) for
//     StarveFor, after the rolling deploy, so at the deploy's shorter visibility timeout;
//   - holds one healthy worker's pool full once (heldpool.go): a worker of its own whose
//     handlers each hold a transaction on its pool, more slots than connections, and
//     commit their success in it (CompleteTx); none may be cancelled or run twice.
//   - steps the server's wall clock once: back by ClockStep, for ClockStepFor, then
//     forward again (the cluster runs under libfaketime; clockstep.go).
//
// With [Options.DefaultLeases] (see [DefaultLeaseRecovery]) the workers run at the
// library's default VisibilityTimeout and SweepInterval, the kills alternate between the
// maintenance leader and a follower, and the report gives, per kill, the time until every
// job the killed worker held ran again elsewhere ([Report.KillRecovery]).
//
// Beside the jobs, Run enqueues Workflows five-task workflows and Batches batches with a
// callback over the fault window, and checks that every task ran only after its
// dependencies had succeeded, every callback was enqueued once with the right counts and
// no workflow is stuck (workflows.go, [FlowReport]).
//
// It also enqueues Durable durable jobs over the window: five steps each (skiplock.StepTx,
// each writing a business row), some sleeping between two steps, some waiting for a signal
// the harness sends before or after the job reaches its wait; it checks that every one
// succeeded with exactly one business row per step, that no step ran again after it had
// committed and that none started before the step before it had committed (durable.go,
// [DurableReport]).
//
// Each job's handler records its execution in chaos.executions (see package audit). When
// every job has reached a final state (or the drain deadline passed), Run checks the
// jobs and the executions and returns a [Report]: nothing lost, nothing stuck, no two
// executions of one job overlapping in time, no attempt run twice, no stale worker
// completing a job ([Report.Broken]). It also sorts duplicate executions by cause: a
// kill, a database fault, or nothing injected ([Report.Warnings]: at-least-once
// execution allows them, but each is a completion the library lost on its own).
//
// With [Options.Failover] set, Run fails over instead: a second cluster streams from the
// first (pg_basebackup, synchronous or asynchronous replication), every process connects
// with a multi-host URL (target_session_attrs=read-write), and mid-run every process of
// the primary is killed with SIGKILL and the standby promoted; the workers must find the
// new primary by themselves. The report adds what became of the jobs running at the kill,
// the time to the first completion on the new primary and, read from the old primary's
// data directory afterwards, what it had committed that the new one lacks
// ([Report.Failover]).
//
// Everything Run starts is stopped before it returns, even on failure: worker processes
// are in process groups of their own and die with the harness (a parent-death signal on
// Linux), and a watchdog process stops the cluster if the harness itself is killed.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/blackhole"
	"github.com/skiplock/skiplock/internal/chaos/audit"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// ErrPromiseBroken is returned (wrapped) by [Run] when the run completed but the report
// shows a broken promise; [Report.Broken] says which.
var ErrPromiseBroken = errors.New("chaos: a promise was broken")

// Options configures a chaos run. The zero value is the full-size run.
type Options struct {
	// Workers is the number of worker processes. Defaults to 4.
	Workers int
	// Jobs is the number of jobs enqueued. Defaults to 50,000.
	Jobs int
	// Kills is how many times a random worker process is killed with SIGKILL (and a new
	// one started). Defaults to 20; negative means none.
	Kills int
	// NoRestart skips the Postgres restart. Defaults to false: Postgres is restarted once.
	NoRestart bool
	// NoTerminate skips terminating the database's backends. Defaults to false: they are
	// terminated once.
	NoTerminate bool
	// NoDeploy skips the rolling deploy. Defaults to false: every worker is restarted
	// once, gracefully, with DeployVisibilityTimeout.
	NoDeploy bool
	// DeployVisibilityTimeout is the visibility timeout of the workers the rolling deploy
	// starts. Defaults to half of VisibilityTimeout.
	DeployVisibilityTimeout time.Duration
	// NoBlackhole skips the black-holed worker. Defaults to false: one worker's proxy stops
	// forwarding for BlackholeFor, once.
	NoBlackhole bool
	// BlackholeFor is how long the black hole lasts. Defaults to twice the visibility
	// timeout: the worker's leases end and its jobs are done elsewhere meanwhile.
	BlackholeFor time.Duration
	// NoStarve skips the CPU-starvation fault. Defaults to false: StarveProcs busy
	// processes run for StarveFor, once, after the rolling deploy.
	NoStarve bool
	// StarveProcs is how many busy processes the starvation fault runs. Defaults to four
	// per core (runtime.NumCPU).
	StarveProcs int
	// StarveFor is how long the starvation lasts. Defaults to twice the visibility timeout.
	StarveFor time.Duration
	// NoHeldPool skips the held-pool fault (heldpool.go). Defaults to false: once, a
	// worker of its own runs HeldPoolJobs jobs whose handlers hold its pool's connections.
	NoHeldPool bool
	// HeldPoolJobs is how many jobs the held-pool fault runs. Defaults to 48.
	HeldPoolJobs int
	// NoClockStep skips the server-clock-step fault, and runs the cluster without
	// libfaketime. Defaults to false: the cluster runs under libfaketime (which must be
	// installed: apt-get install libfaketime) and its wall clock steps ClockStep back for
	// ClockStepFor, then forward again, once.
	NoClockStep bool
	// ClockStep is the size of the clock step. Defaults to 75s: past the worker lease
	// (10s), the minute after which expired worker rows were pruned, and the visibility
	// timeout.
	ClockStep time.Duration
	// ClockStepFor is how long the server's clock stays stepped back. Defaults to 3s:
	// every worker renews its row meanwhile (every 1.7–3 s), so each row is written with
	// the stepped clock and reads ClockStep older when the clock comes back.
	ClockStepFor time.Duration
	// StallFor, when positive, also stops one busy worker outright (SIGSTOP) for that
	// long at the start of the starvation, then continues it: a heartbeat that cannot run
	// at all. Defaults to zero: none.
	StallFor time.Duration
	// DefaultLeases runs the workers at the library's default VisibilityTimeout and
	// SweepInterval (VisibilityTimeout and SweepInterval then only set the harness's own
	// defaults), and makes every other kill a kill of the maintenance leader. Defaults to
	// false. See [DefaultLeaseRecovery].
	DefaultLeases bool
	// LivenessReclaim, when positive, makes the harness run the prototype of ownership by
	// liveness every this long (liveness.go): it takes back the jobs of workers whose row
	// in the workers table expired. Defaults to zero: off. Not with a black hole: the
	// library does not yet cancel a cut-off worker's handlers before its row expires.
	LivenessReclaim time.Duration
	// FaultInterval is the planned time between two faults. A fault that lasts longer
	// delays the next, which also waits, at most FaultInterval, until a job has completed
	// after it. Jobs are enqueued over the whole fault window, delayed with the faults
	// (schedule.go), so they keep flowing while faults happen and after each. Defaults to
	// 1.5s.
	FaultInterval time.Duration
	// Warmup is the time from the start of the workers to the first fault. Defaults to 1s.
	Warmup time.Duration
	// VisibilityTimeout and SweepInterval are the workers' (see skiplock.WorkerConfig):
	// short, so that a killed worker's jobs are taken back quickly. They default to 3s and 1s.
	VisibilityTimeout time.Duration
	SweepInterval     time.Duration
	// Concurrency is how many handlers one worker process runs at once. Defaults to 32.
	Concurrency int
	// MaxWork bounds the work (a sleep) of one handler execution: each sleeps a random
	// time in [0, MaxWork]. Defaults to 20ms.
	MaxWork time.Duration
	// NoClaimAhead runs every worker with the library's claim-ahead threshold. By default
	// the workers of odd slots raise it (the worker's -claim-ahead-below,
	// ClaimAheadBelow), so that their default queue claims ahead of its free slots
	// whenever its last claim filled its batch: the handlers here write two audit rows
	// each, which keeps their average above the library's 1 ms. The run then reads the
	// largest claim of the default queue's jobs ([Report].ClaimMax: above Concurrency
	// only while claiming ahead) and counts, per worker, the most of their executions at
	// once ([Report].RunningMax), which must stay within Concurrency whatever it held.
	NoClaimAhead bool
	// LimitedWork bounds the work of one execution of the limited queue's jobs (one in
	// audit.LimitedEvery), longer than MaxWork so that they pile up against the queue's
	// limit while the run changes it. Defaults to 2 × MaxWork.
	LimitedWork time.Duration
	// DrainTimeout is how long Run waits, after the last enqueue and fault, for the number
	// of jobs still queued or running to fall: Run gives up when it has not fallen for
	// DrainTimeout, or after 4 × DrainTimeout in all, and the jobs left count as not
	// final. A drain that is slow (a loaded machine, a queue with a concurrency limit) but
	// still moving is waited for; a job that never ends is not. Defaults to 2m.
	DrainTimeout time.Duration
	// Seed seeds the choice of worker to kill. Defaults to a random seed, printed.
	Seed uint64
	// Dir is where the run's directory (cluster, worker binary, logs) is made.
	// Defaults to os.TempDir(). Its parents must be searchable by the user "postgres".
	Dir string
	// Keep keeps the run's directory after a successful run. It is always kept, for its
	// logs, after a run that failed or found something to warn about.
	Keep bool
	// WorkerBinary is a prebuilt worker program (go build ./internal/chaos/worker).
	// Defaults to building it with the go command, which takes a few seconds.
	WorkerBinary string
	// Failover, when not NoFailover, runs the failover scenario instead of the faults
	// above (Kills, NoRestart, NoTerminate, NoDeploy and NoBlackhole are ignored): a
	// second cluster streams from the first, everyone connects with a multi-host URL, and
	// Warmup after the start the primary is killed and the standby promoted; enqueues go
	// on for FaultInterval after that. See [FailoverOptions]. Defaults to NoFailover.
	Failover Replication
	// Workflows is the number of five-task workflows (audit.FlowTasks: a diamond with a
	// tail) enqueued over the fault window beside the jobs, Batches the number of batches
	// of BatchJobs jobs with a callback; see [FlowReport]. They default to 1,000, 20 and
	// 50; negative means none. A failover run has none.
	Workflows, Batches, BatchJobs int
	// Durable is the number of durable jobs (five steps each, a third sleeping between two
	// steps and a third waiting for a signal; durable.go, [DurableReport]) enqueued over
	// the fault window beside the jobs. Defaults to 600; negative means none. A failover
	// run has none.
	Durable int
	// DurableWork bounds the work (a sleep) inside each step of a durable job: each works a
	// random time in [0, DurableWork], so that a run keeps a few durable jobs in flight for
	// the faults to cut through. Defaults to 200ms.
	DurableWork time.Duration
	// StandbyLag is, in a failover run, how long the primary's WAL sender is paused
	// (SIGSTOP) right before the kill, so that the standby is that far behind when the
	// primary dies, as over a slow or congested network: on loopback it is otherwise well
	// under a millisecond behind and asynchronous replication has next to nothing to lose.
	// With synchronous replication the commits of that time wait for the standby instead.
	// Defaults to 500ms; negative means no pause.
	StandbyLag time.Duration
}

// Quick returns the reduced-size run: 3 workers, 3,000 jobs, 100 workflows, 4 batches of
// 25 jobs, 120 durable jobs (40 sleeping, 40 waiting for a signal), 4 kills, one Postgres
// restart, one backend termination, a rolling deploy, a black-holed worker, 2 s of CPU
// starvation, 16 jobs on a held pool, a 75 s step of the server's clock (back for 3 s,
// then forward) and six changes of the limited queue's limits; the limited queue's jobs
// work up to 300ms, so that its 300 jobs keep it at its limit. It takes well under two
// minutes.
func Quick() Options {
	return Options{Workers: 3, Jobs: 3000, Workflows: 100, Batches: 4, BatchJobs: 25, Durable: 120, Kills: 4, DrainTimeout: time.Minute, LimitedWork: 300 * time.Millisecond, StarveFor: 2 * time.Second,
		HeldPoolJobs: HeldPoolSlots}
}

func (o Options) withDefaults() Options {
	if o.Failover != NoFailover {
		o.Kills, o.NoRestart, o.NoTerminate, o.NoDeploy, o.NoBlackhole, o.NoStarve = -1, true, true, true, true, true
		o.NoHeldPool, o.NoClockStep = true, true
		o.Workflows, o.Batches, o.Durable = -1, -1, -1
		if o.StandbyLag == 0 {
			o.StandbyLag = 500 * time.Millisecond
		}
	}
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.Jobs <= 0 {
		o.Jobs = 50_000
	}
	switch {
	case o.Kills == 0:
		o.Kills = 20
	case o.Kills < 0:
		o.Kills = 0
	}
	if o.HeldPoolJobs <= 0 {
		o.HeldPoolJobs = 48
	}
	o.Workflows = orDefault(o.Workflows, 1000)
	o.Batches = orDefault(o.Batches, 20)
	o.BatchJobs = max(1, orDefault(o.BatchJobs, 50))
	o.Durable = orDefault(o.Durable, 600)
	if o.DurableWork <= 0 {
		o.DurableWork = 200 * time.Millisecond
	}
	if o.FaultInterval <= 0 {
		o.FaultInterval = 1500 * time.Millisecond
	}
	if o.Warmup <= 0 {
		o.Warmup = time.Second
	}
	if o.VisibilityTimeout <= 0 {
		o.VisibilityTimeout = 3 * time.Second
	}
	if o.SweepInterval <= 0 {
		o.SweepInterval = time.Second
	}
	if o.DeployVisibilityTimeout <= 0 {
		o.DeployVisibilityTimeout = o.VisibilityTimeout / 2
	}
	if o.BlackholeFor <= 0 {
		o.BlackholeFor = 2 * o.VisibilityTimeout
	}
	if o.ClockStep <= 0 {
		o.ClockStep = 75 * time.Second
	}
	if o.ClockStepFor <= 0 {
		o.ClockStepFor = 3 * time.Second
	}
	if o.StarveProcs <= 0 {
		o.StarveProcs = 4 * runtime.NumCPU()
	}
	if o.StarveFor <= 0 {
		o.StarveFor = 2 * o.VisibilityTimeout
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 32
	}
	if o.MaxWork <= 0 {
		o.MaxWork = 20 * time.Millisecond
	}
	if o.LimitedWork <= 0 {
		o.LimitedWork = 2 * o.MaxWork
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 2 * time.Minute
	}
	if o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
	if o.Dir == "" {
		o.Dir = os.TempDir()
	}
	return o
}

// orDefault is n, def when n is zero, and zero when n is negative.
func orDefault(n, def int) int {
	switch {
	case n == 0:
		return def
	case n < 0:
		return 0
	}
	return n
}

// Limits of the harness's own waiting.
const (
	// dbRetryTimeout bounds how long the harness retries one of its queries while the
	// database is unreachable.
	dbRetryTimeout = 60 * time.Second
	// progressEvery is the period of the progress lines.
	progressEvery = 2 * time.Second
	// maxBatch is the most jobs one EnqueueMany call inserts.
	maxBatch = 1000
)

// recorder prints timestamped progress lines.
type recorder struct {
	mu  sync.Mutex
	out io.Writer
	t0  time.Time
}

func (r *recorder) logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.out, "[%7.2fs] %s\n", time.Since(r.t0).Seconds(), fmt.Sprintf(format, args...))
}

// runner holds the state of one run.
type runner struct {
	opts    Options
	rec     *recorder
	rng     *rand.Rand
	dir     string
	bin     string            // the worker program
	cluster *pgtest.Cluster   // the primary: after a failover, the promoted standby
	clock   *pgtest.FakeClock // the cluster's wall clock (clockstep.go); nil with NoClockStep
	pool    *pgxpool.Pool
	url     string // what the workers and the pool connect to
	client  *skiplock.Client
	fleet   *fleet
	proxies []*blackhole.Proxy // by worker slot
	enq     *enqueuer
	flows   *FlowReport    // the workflow phase's counts, filled by runFlows and analyze
	durable *DurableReport // the durable phase's counts, filled by runDurable, signalLate and analyze
	faults  []Fault
	held    *HeldPoolReport // the held-pool fault's findings (heldpool.go); nil without it

	stopWatchdog func()
	fo           *failoverState // failover runs only

	mu           sync.Mutex
	limitChanges []LimitChange // guarded by mu
}

// Run performs one chaos run as opts says, printing progress and, at the end, the report
// to out (nil means nowhere). It returns the report, and an error when the run could not
// be carried out or (wrapping [ErrPromiseBroken]) when the report shows a broken promise.
//
// Run needs the PostgreSQL server programs (see [pgtest.FindBin]) and, unless
// opts.WorkerBinary is set, the go command and this module's source. Each worker process
// holds up to 17 database connections (a pool of 16 and a LISTEN session), the harness 6.
func Run(ctx context.Context, opts Options, out io.Writer) (rep Report, err error) {
	opts = opts.withDefaults()
	if out == nil {
		out = io.Discard
	}
	r := &runner{
		opts: opts,
		rec:  &recorder{out: out, t0: time.Now()},
		rng:  rand.New(rand.NewPCG(opts.Seed, opts.Seed>>1|1)),
	}
	one := func(skip bool) int {
		if skip {
			return 0
		}
		return 1
	}
	if opts.Failover != NoFailover {
		r.rec.logf("chaos: failover with %s replication, %d workers, %d jobs, primary killed after %v; seed %d",
			opts.Failover, opts.Workers, opts.Jobs, opts.Warmup, opts.Seed)
	} else {
		leases := fmt.Sprintf("visibility timeout %s, sweep interval %s", opts.VisibilityTimeout, opts.SweepInterval)
		if opts.DefaultLeases {
			leases = "the library's default lease settings, kills alternating leader and follower"
		}
		r.rec.logf("chaos: %d workers, %d jobs, %d kills, %d postgres restart, %d backend termination, %d rolling deploy, %d black-holed worker, %d CPU starvation, %d server clock step; %s; seed %d",
			opts.Workers, opts.Jobs, opts.Kills, one(opts.NoRestart), one(opts.NoTerminate), one(opts.NoDeploy), one(opts.NoBlackhole),
			one(opts.NoStarve), one(opts.NoClockStep), leases, opts.Seed)
	}

	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return rep, fmt.Errorf("chaos: %w", err)
	}
	r.dir, err = os.MkdirTemp(opts.Dir, "chaos-")
	if err != nil {
		return rep, fmt.Errorf("chaos: %w", err)
	}
	// MkdirTemp makes it 0700; the postgres user must reach the cluster inside.
	if err := os.Chmod(r.dir, 0o755); err != nil {
		return rep, fmt.Errorf("chaos: %w", err)
	}
	defer func() {
		if err != nil || opts.Keep || len(rep.Warnings()) > 0 {
			r.rec.logf("run directory kept: %s (worker logs in %s, server log in %s)",
				r.dir, filepath.Join(r.dir, "logs"), filepath.Join(r.dir, "pg", "postgres.log"))
			return
		}
		if rmErr := os.RemoveAll(r.dir); rmErr != nil {
			r.rec.logf("cannot remove %s: %v", r.dir, rmErr)
		}
	}()
	defer r.cleanup()

	rep, err = r.run(ctx)
	rep.Dir = r.dir
	if err != nil {
		return rep, err
	}
	rep.Print(out)
	if broken := rep.Broken(); len(broken) > 0 {
		return rep, fmt.Errorf("%w: %v", ErrPromiseBroken, broken)
	}
	return rep, nil
}

// cleanup stops whatever the run started, in reverse order. It is safe after a partial start.
func (r *runner) cleanup() {
	if r.fleet != nil {
		r.fleet.stop(stopGrace)
	}
	for _, p := range r.proxies {
		p.Close()
	}
	if r.pool != nil {
		r.pool.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, c := range r.clusters() {
		if err := c.Stop(ctx); err != nil {
			r.rec.logf("stopping the cluster failed: %v", err)
		}
	}
	if r.stopWatchdog != nil {
		r.stopWatchdog()
	}
	if r.fo != nil {
		r.fo.stopWatchdogs()
	}
}

// clusters returns every cluster of the run.
func (r *runner) clusters() []*pgtest.Cluster {
	var out []*pgtest.Cluster
	if r.fo != nil {
		for _, c := range []*pgtest.Cluster{r.fo.primary, r.fo.standby} {
			if c != nil {
				out = append(out, c)
			}
		}
		return out
	}
	if r.cluster != nil {
		out = append(out, r.cluster)
	}
	return out
}

func (r *runner) run(ctx context.Context) (Report, error) {
	began := time.Now()
	rep := Report{Options: r.opts}

	// The worker binary and the cluster.
	bin := r.opts.WorkerBinary
	if bin == "" {
		var err error
		t := time.Now()
		if bin, err = buildWorker(ctx, r.dir); err != nil {
			return rep, err
		}
		r.rec.logf("built the worker program in %.1fs", time.Since(t).Seconds())
	}
	r.bin = bin
	if r.opts.Failover != NoFailover {
		if err := r.startPair(ctx); err != nil {
			return rep, err
		}
	} else {
		t := time.Now()
		copts := pgtest.ClusterOptions{Settings: serverSettings}
		if !r.opts.NoClockStep {
			var err error
			if r.clock, err = pgtest.NewFakeClock(r.dir); err != nil {
				return rep, fmt.Errorf("chaos: the server-clock-step fault (NoClockStep, -no-clock-step, skips it): %w", err)
			}
			// Each server process re-reads the clock's offset once a second rather than on
			// every call: the run's 50,000 jobs pay less for libfaketime, and a step
			// reaches every process within two (clockStep waits for that).
			r.clock.Cache = time.Second
			copts.Env = r.clock.Env()
		}
		cluster, err := pgtest.StartCluster(ctx, filepath.Join(r.dir, "pg"), copts)
		if err != nil {
			return rep, err
		}
		r.cluster, r.url = cluster, cluster.URL()
		if r.stopWatchdog, err = startWatchdog(cluster.DataDir); err != nil {
			return rep, err
		}
		r.rec.logf("started postgres (pid %d) on port %d in %.1fs", cluster.PID(), cluster.Port, time.Since(t).Seconds())
	}

	poolCfg, err := pgxpool.ParseConfig(r.url)
	if err != nil {
		return rep, err
	}
	poolCfg.MaxConns = 6
	poolCfg.ConnConfig.RuntimeParams["application_name"] = "chaos-harness"
	if r.pool, err = pgxpool.NewWithConfig(ctx, poolCfg); err != nil {
		return rep, err
	}
	if err := skiplock.Migrate(ctx, r.pool); err != nil {
		return rep, err
	}
	if _, err := r.pool.Exec(ctx, audit.CreateSQL+audit.CreateFlowSQL+audit.CreateDurableSQL); err != nil {
		return rep, fmt.Errorf("chaos: creating the audit tables: %w", err)
	}
	if r.client, err = skiplock.NewClient(r.pool, skiplock.Config{}); err != nil {
		return rep, err
	}

	// The workers.
	logDir := filepath.Join(r.dir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return rep, err
	}
	// Each worker slot reaches the server through a proxy of its own, which the black-hole
	// fault silences. A failover run connects straight, with its multi-host URL.
	urls := make([]string, r.opts.Workers)
	for slot := range urls {
		if r.opts.Failover != NoFailover {
			urls[slot] = r.url
			continue
		}
		u, err := url.Parse(r.url)
		if err != nil {
			return rep, err
		}
		p, err := blackhole.Start(u.Host)
		if err != nil {
			return rep, fmt.Errorf("chaos: proxy: %w", err)
		}
		r.proxies = append(r.proxies, p)
		u.Host = p.Addr()
		q := u.Query()
		q.Set("connect_timeout", "2")
		u.RawQuery = q.Encode()
		urls[slot] = u.String()
	}
	vt, sweep := r.opts.VisibilityTimeout, r.opts.SweepInterval
	if r.opts.DefaultLeases {
		vt, sweep = 0, 0 // the worker passes zero on: WorkerConfig's defaults
	}
	r.fleet = newFleet(bin, logDir, urls, vt, []string{
		"-sweep-interval", sweep.String(),
		"-concurrency", strconv.Itoa(r.opts.Concurrency),
		"-max-work", r.opts.MaxWork.String(),
		"-limited-work", r.opts.LimitedWork.String(),
		"-durable-work", r.opts.DurableWork.String(),
	}, r.rec)
	if !r.opts.NoClaimAhead {
		r.fleet.oddArgs = []string{"-claim-ahead-below", claimAheadBelow.String()}
	}
	for slot := range r.opts.Workers {
		p, err := r.fleet.start(slot)
		if err != nil {
			return rep, err
		}
		r.rec.logf("started worker %s (pid %d)", p.id, p.pid)
	}

	// Enqueue over the fault window while the faults happen, on a schedule tied to the
	// faults as they happen (schedule.go).
	plan := r.faultPlan()
	sched := newSchedule(time.Now(), r.opts.Warmup, r.opts.FaultInterval, len(plan))
	r.enq = newEnqueuer(r.client, r.pool, r.rec, r.opts.Jobs, sched.window())
	runCtx, stopRun := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var drained atomic.Bool
	enqErr, limErr, flowErr := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	durErr, lateErr := make(chan error, 1), make(chan error, 1)
	r.flows = &FlowReport{}
	r.durable = &DurableReport{ids: map[int]int64{}}
	late := make(chan int)
	wg.Add(6)
	go func() { defer wg.Done(); enqErr <- r.enq.run(runCtx, sched) }()
	go func() { defer wg.Done(); flowErr <- r.runFlows(runCtx, sched, r.flows) }()
	go func() { defer wg.Done(); durErr <- r.runDurable(runCtx, sched, r.durable, late) }()
	go func() { defer wg.Done(); lateErr <- r.signalLate(runCtx, r.durable, late) }()
	go func() { defer wg.Done(); r.progress(runCtx, &drained) }()
	go func() { defer wg.Done(); limErr <- r.changeLimits(runCtx, sched, r.limitTimes(len(plan))) }()
	if r.opts.LivenessReclaim > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); r.livenessReclaim(runCtx) }()
	}
	defer func() { stopRun(); wg.Wait() }()

	if err := r.inject(runCtx, plan, sched); err != nil {
		return rep, err
	}
	if err := <-enqErr; err != nil {
		return rep, err
	}
	if err := <-limErr; err != nil {
		return rep, err
	}
	if err := <-flowErr; err != nil {
		return rep, err
	}
	if err := <-durErr; err != nil {
		return rep, err
	}
	r.rec.logf("all %d jobs enqueued and %d faults injected; waiting for every job to finish (while their number falls: at most %v without progress, %v in all)",
		r.enq.enqueued.Load(), len(r.faults), r.opts.DrainTimeout, 4*r.opts.DrainTimeout)
	if err := r.drain(runCtx); err != nil {
		if ctx.Err() != nil {
			return rep, err
		}
		r.rec.logf("%v", err) // the analysis counts the jobs that are not final
	}
	drained.Store(true)
	stopRun()
	wg.Wait()
	// The late signals went while the jobs drained; a signal still unsent at the end left
	// its job waiting, which the analysis counts.
	if err := <-lateErr; err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
		return rep, err
	}

	var fr *FailoverReport
	if r.fo != nil {
		fr = &FailoverReport{}
		r.countListeners(ctx, fr)
	}
	r.rec.logf("stopping the workers")
	r.fleet.stop(stopGrace)

	actx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := r.analyze(actx, &rep); err != nil {
		return rep, err
	}
	if fr != nil {
		if err := r.analyzeFailover(actx, &rep, fr); err != nil {
			return rep, err
		}
		rep.Failover = fr
	}
	rep.Wall = time.Since(began)
	return rep, nil
}

// faultPlan orders the faults: kills spread over the window, the held pool at about 25%,
// the clock step at about 30%, the restart at about 40% of it, the rolling deploy at about 55%, the termination at about 70%, the CPU starvation
// at about 85% (after the deploy: at its shorter visibility timeout) and the black hole
// last (it lasts BlackholeFor, and the faults after it would wait for it).
func (r *runner) faultPlan() []FaultKind {
	if r.opts.Failover != NoFailover {
		return []FaultKind{FaultFailover}
	}
	type placed struct {
		kind FaultKind
		at   int // per cent of the window
	}
	var others []placed
	add := func(skip bool, kind FaultKind, at int) {
		if !skip {
			others = append(others, placed{kind, at})
		}
	}
	add(r.opts.NoHeldPool, FaultHeldPool, 25)
	add(r.opts.NoClockStep, FaultClockStep, 30)
	add(r.opts.NoRestart, FaultRestart, 40)
	add(r.opts.NoDeploy, FaultDeploy, 55)
	add(r.opts.NoTerminate, FaultTerminate, 70)
	add(r.opts.NoStarve, FaultStarve, 85)
	add(r.opts.NoBlackhole, FaultBlackhole, 100)
	n := r.opts.Kills + len(others)
	plan := make([]FaultKind, n)
	for i := range plan {
		plan[i] = FaultKill
	}
	for _, o := range others {
		i := min(n*o.at/100, n-1)
		for plan[i] != FaultKill { // taken: the next free place, wrapping around
			i = (i + 1) % n
		}
		plan[i] = o.kind
	}
	return plan
}

// inject runs the fault plan on the schedule (schedule.go): slot i starts at its planned
// time, start + Warmup + i*FaultInterval, or once fault i-1 is over if that is later (the
// work planned in the slot goes from then on), and fault i goes once a job has completed
// after fault i-1, or FaultInterval after the slot's start if none has. When the last
// fault is over the schedule says so, and the last batch of jobs goes.
func (r *runner) inject(ctx context.Context, plan []FaultKind, sched *schedule) error {
	kills := 0
	for i, kind := range plan {
		if err := sleepUntil(ctx, sched.start.Add(sched.planned(i))); err != nil {
			return err
		}
		sched.begin(i, time.Now())
		if i > 0 {
			if err := r.awaitRecovery(ctx, &r.faults[i-1], i, len(plan)); err != nil {
				return err
			}
		}
		f := Fault{Kind: kind}
		var err error
		switch kind {
		case FaultKill:
			err = r.kill(ctx, &f, kills)
			kills++
		case FaultStarve:
			err = r.starve(ctx, &f)
		case FaultRestart:
			err = r.restart(ctx, &f)
		case FaultTerminate:
			err = r.terminate(ctx, &f)
		case FaultFailover:
			err = r.failover(ctx, &f)
		case FaultDeploy:
			err = r.deploy(ctx, &f)
		case FaultBlackhole:
			err = r.blackhole(ctx, &f)
		case FaultHeldPool:
			err = r.heldPool(ctx, &f)
		case FaultClockStep:
			err = r.clockStep(ctx, &f)
		}
		if err != nil {
			return err
		}
		r.faults = append(r.faults, f)
		r.rec.logf("fault %d/%d: %s: %s", i+1, len(plan), f.Kind, f.Detail)
	}
	sched.finish()
	return nil
}

// serverSettings make the server log what explains stalls: lock waits longer than
// deadlock_timeout (1s) and statements slower than a second.
var serverSettings = map[string]string{
	"log_lock_waits":             "on",
	"log_min_duration_statement": "1000",
}

// busyWait bounds how long a kill waits for a worker that holds running jobs.
const busyWait = time.Second

// pickVictim returns the slot of a random worker among those holding running jobs, so
// that the kill cuts off work in flight; when none holds any for busyWait, any worker.
func (r *runner) pickVictim(ctx context.Context) int {
	deadline := time.Now().Add(busyWait)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		slots := r.fleet.slotsByID()
		ids := make([]string, 0, len(slots))
		for id := range slots {
			ids = append(ids, id)
		}
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		rows, err := r.pool.Query(qctx, `SELECT DISTINCT locked_by FROM skiplock.jobs WHERE status = 'running' AND locked_by = ANY($1)`, ids)
		var busy []string
		if err == nil {
			busy, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		cancel()
		if err == nil && len(busy) > 0 {
			slices.Sort(busy) // map order must not decide, the seed does
			return slots[busy[r.rng.IntN(len(busy))]]
		}
		_ = sleepUntil(ctx, time.Now().Add(5*time.Millisecond))
	}
	return r.rng.IntN(r.opts.Workers)
}

// kill kills a worker (kill number i of the run) and starts a new one in its slot.
func (r *runner) kill(ctx context.Context, f *Fault, i int) error {
	slot := r.pickVictim(ctx)
	if r.opts.DefaultLeases {
		slot = r.pickRecoveryVictim(ctx, i)
	}
	leader := r.currentLeader(ctx)
	f.At = time.Now().Round(0)
	p, dead, err := r.fleet.kill(ctx, slot)
	if err != nil {
		return err
	}
	f.End = dead
	f.worker = p.id
	f.Leader = p.id == leader
	// Its lease on these is not over before VisibilityTimeout: nobody else can have them yet.
	f.held, err = r.heldBy(ctx, p.id)
	if err != nil {
		return fmt.Errorf("chaos: listing the jobs of killed worker %s: %w", p.id, err)
	}
	np, err := r.fleet.start(slot)
	if err != nil {
		return err
	}
	role := "follower"
	if f.Leader {
		role = "leader"
	}
	f.Detail = fmt.Sprintf("worker %s (pid %d, %s) killed holding %d running jobs; started %s (pid %d)",
		p.id, p.pid, role, len(f.held), np.id, np.pid)
	return nil
}

func (r *runner) restart(ctx context.Context, f *Fault) error {
	old := r.cluster.PID()
	f.At = time.Now().Round(0)
	if err := r.cluster.Restart(ctx); err != nil {
		return err
	}
	f.End = time.Now().Round(0)
	f.Detail = fmt.Sprintf("pg_ctl restart -m fast: postmaster %d -> %d, accepting again after %s",
		old, r.cluster.PID(), fmtDur(f.End.Sub(f.At)))
	return nil
}

// heldBy lists the running jobs worker id holds.
func (r *runner) heldBy(ctx context.Context, id string) ([]int64, error) {
	var held []int64
	err := retryDB(ctx, func(ctx context.Context) error {
		rows, err := r.pool.Query(ctx, `SELECT id FROM skiplock.jobs WHERE status = 'running' AND locked_by = $1`, id)
		if err != nil {
			return err
		}
		held, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	})
	return held, err
}

// deploy restarts every worker slot in turn, gracefully, with the deploy's visibility
// timeout: for a while old and new workers, with different timeouts, share the jobs.
func (r *runner) deploy(ctx context.Context, f *Fault) error {
	f.At = time.Now().Round(0)
	r.fleet.setVisibilityTimeout(r.opts.DeployVisibilityTimeout)
	for slot := range r.opts.Workers {
		old, np, err := r.fleet.redeploy(ctx, slot, stopGrace)
		if err != nil {
			return err
		}
		r.rec.logf("deploy: worker %s (pid %d) stopped, %s (pid %d) started with visibility timeout %s",
			old.id, old.pid, np.id, np.pid, r.opts.DeployVisibilityTimeout)
	}
	f.End = time.Now().Round(0)
	f.Detail = fmt.Sprintf("%d workers restarted one by one (SIGTERM), visibility timeout %s -> %s, in %s",
		r.opts.Workers, r.opts.VisibilityTimeout, r.opts.DeployVisibilityTimeout, fmtDur(f.End.Sub(f.At)))
	return nil
}

// blackhole silences the network path of a worker holding running jobs for BlackholeFor,
// then restores it. The worker must cancel its own handlers before its leases end; its
// jobs are done elsewhere meanwhile.
func (r *runner) blackhole(ctx context.Context, f *Fault) error {
	slot := r.pickVictim(ctx)
	id := ""
	for wid, s := range r.fleet.slotsByID() {
		if s == slot {
			id = wid
		}
	}
	f.At = time.Now().Round(0)
	r.proxies[slot].Blackhole()
	f.worker = id
	held, err := r.heldBy(ctx, id)
	if err != nil {
		r.proxies[slot].Restore()
		return fmt.Errorf("chaos: listing the jobs of black-holed worker %s: %w", id, err)
	}
	f.held = held
	err = sleepUntil(ctx, f.At.Add(r.opts.BlackholeFor))
	r.proxies[slot].Restore()
	f.End = time.Now().Round(0)
	if err != nil {
		return err
	}
	f.Detail = fmt.Sprintf("worker %s cut off for %s holding %d running jobs, then reconnected",
		id, fmtDur(f.End.Sub(f.At)), len(held))
	return nil
}

// terminateSQL ends every client session of the database but its own: the workers' pools,
// their LISTEN connections and the harness's other connections.
const terminateSQL = `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`

func (r *runner) terminate(ctx context.Context, f *Fault) error {
	f.At = time.Now().Round(0)
	var n int
	err := retryDB(ctx, func(ctx context.Context) error { return r.pool.QueryRow(ctx, terminateSQL).Scan(&n) })
	if err != nil {
		return fmt.Errorf("chaos: terminating backends: %w", err)
	}
	f.End = time.Now().Round(0)
	f.Detail = fmt.Sprintf("pg_terminate_backend on %d client backends", n)
	return nil
}

// progress prints a progress line every progressEvery until ctx ends.
func (r *runner) progress(ctx context.Context, drained *atomic.Bool) {
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if drained.Load() {
			return
		}
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		var done, queued, running, other int64
		err := r.pool.QueryRow(qctx, progressSQL).Scan(&done, &queued, &running, &other)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				r.rec.logf("progress: enqueued %d/%d; database unavailable: %v", r.enq.enqueued.Load(), r.opts.Jobs, err)
			}
			continue
		}
		r.rec.logf("progress: enqueued %d/%d, succeeded %d, queued %d, running %d, other final %d",
			r.enq.enqueued.Load(), r.opts.Jobs, done, queued, running, other)
	}
}

const progressSQL = `SELECT (SELECT count(*) FROM skiplock.jobs_archive),
	count(*) FILTER (WHERE status = 'queued'),
	count(*) FILTER (WHERE status = 'running'),
	count(*) FILTER (WHERE status NOT IN ('queued', 'running'))
FROM skiplock.jobs`

// drain waits until no job is queued or running. It gives up when their number has not
// fallen for DrainTimeout, or when 4 × DrainTimeout have passed.
func (r *runner) drain(ctx context.Context) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 4*r.opts.DrainTimeout)
	defer cancel()
	lowest, lastFall := int64(-1), start
	for {
		var active int64
		qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
		err := r.pool.QueryRow(qctx, `SELECT count(*) FROM skiplock.jobs WHERE status IN ('queued', 'running')`).Scan(&active)
		qcancel()
		if err == nil && active == 0 {
			r.rec.logf("every job is in a final state (%v after the last enqueue and fault)", time.Since(start).Round(time.Second))
			return nil
		}
		if err == nil && (lowest < 0 || active < lowest) {
			lowest, lastFall = active, time.Now()
		}
		left := fmt.Sprint(lowest)
		if lowest < 0 {
			left = "an unknown number of" // every count so far failed
		}
		if time.Since(lastFall) > r.opts.DrainTimeout {
			if err != nil {
				return fmt.Errorf("chaos: %s jobs still queued or running; none became final in the last %v, and the last count failed: %w", left, r.opts.DrainTimeout, err)
			}
			return fmt.Errorf("chaos: %s jobs still queued or running; none became final in the last %v", left, r.opts.DrainTimeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: %s jobs still queued or running after %v (4 × DrainTimeout), still falling", left, time.Since(start).Round(time.Second))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// retryDB runs fn until it succeeds, retrying through lost connections and restarts for
// at most dbRetryTimeout.
func retryDB(ctx context.Context, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, dbRetryTimeout)
	defer cancel()
	for {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// workerPackage is the import path of the worker program.
const workerPackage = "github.com/skiplock/skiplock/internal/chaos/worker"

// buildWorker builds the worker program into dir, without the race detector (the harness
// checks the library's behaviour across processes; -race would only slow the workers).
func buildWorker(ctx context.Context, dir string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, serr := os.Stat(goBin); serr != nil {
			return "", fmt.Errorf("chaos: the go command is needed to build the worker program (or set Options.WorkerBinary): %w", err)
		}
	}
	out := filepath.Join(dir, "worker")
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", out, workerPackage)
	// Build inside this module, wherever the caller runs from.
	if _, file, _, ok := runtime.Caller(0); ok {
		if fi, err := os.Stat(filepath.Dir(file)); err == nil && fi.IsDir() {
			cmd.Dir = filepath.Dir(file)
		}
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("chaos: go build %s: %w\n%s", workerPackage, err, b)
	}
	return out, nil
}

// watchdogScript runs as root, waiting for EOF on stdin (the harness exited, however it
// exited), then asks the postmaster of $1 for a fast shutdown if it still runs. After a
// normal run the cluster is already stopped and postmaster.pid is gone: it does nothing.
const watchdogScript = `cat >/dev/null; pid=$(head -n 1 "$1/postmaster.pid" 2>/dev/null) && kill -INT "$pid" 2>/dev/null; exit 0`

// startWatchdog starts a process that stops the cluster in dataDir once this process has
// exited, however it exits (the kernel closes the pipe it reads). The returned func ends the
// watchdog after a normal cleanup, when the cluster is already stopped.
func startWatchdog(dataDir string) (stop func(), err error) {
	rd, wr, err := os.Pipe() // close-on-exec: only the watchdog inherits rd, as its stdin
	if err != nil {
		return nil, fmt.Errorf("chaos: watchdog: %w", err)
	}
	defer rd.Close()
	cmd := exec.Command("/bin/sh", "-c", watchdogScript, "chaos-watchdog", dataDir)
	cmd.Stdin = rd
	cmd.Dir = "/"
	setDetachedAttr(cmd) // it must outlive us
	if err := cmd.Start(); err != nil {
		wr.Close()
		return nil, fmt.Errorf("chaos: watchdog: %w", err)
	}
	return func() {
		wr.Close()
		_ = cmd.Wait()
	}, nil
}
