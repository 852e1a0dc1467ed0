// Command chaos runs skiplock's chaos harness (package internal/chaos): worker processes
// on a throwaway Postgres cluster, killed with SIGKILL while they work, the server
// restarted, every backend terminated, the fleet redeployed with another visibility
// timeout, one worker's network path black-holed, the CPU starved by busy processes, one
// worker's pool held full by its own CompleteTx handlers, with workflows, batches and
// durable jobs (five steps, durable sleeps, signals) among the jobs; then
// (full size) it kills 24 workers, leaders and followers, running at the library's default
// lease settings, and reports how long their jobs took to run elsewhere. It checks that
// no job was lost, stuck, or run by two workers at once, and prints a table of figures.
//
// Usage:
//
//	go run ./internal/chaos/cmd/chaos            # full size: 4 workers, 50,000 jobs, 20 kills,
//	                                             # then 24 kills at the default lease settings
//	go run ./internal/chaos/cmd/chaos -quick     # reduced: 3 workers, 3,000 jobs, 4 kills
//	go run ./internal/chaos/cmd/chaos -recovery  # only the 24 kills at the default lease settings
//	go run ./internal/chaos/cmd/chaos -no-recovery  # only the full-size run
//	go run ./internal/chaos/cmd/chaos -workers 8 -jobs 100000 -kills 40
//	go run ./internal/chaos/cmd/chaos -failover sync     # kill -9 the primary, promote its standby
//	go run ./internal/chaos/cmd/chaos -failover async -quick
//
// It exits with status 1 when a promise was broken and 2 when the run itself failed. It
// needs the PostgreSQL server programs (initdb, pg_ctl, postgres) and the go command.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/skiplock/skiplock/internal/chaos"
)

func main() {
	var (
		quick    = flag.Bool("quick", false, "reduced size: 3 workers, 3,000 jobs, 4 kills (flags below override it)")
		workers  = flag.Int("workers", 0, "worker processes (default 4)")
		jobs     = flag.Int("jobs", 0, "jobs to enqueue (default 50000)")
		kills    = flag.Int("kills", 0, "kill -9 faults (default 20; -1 for none)")
		durable  = flag.Int("durable", 0, "durable jobs of five steps (default 600, -quick 120; -1 for none)")
		seed     = flag.Uint64("seed", 0, "seed for the choice of workers to kill (default random)")
		keep     = flag.Bool("keep", false, "keep the run directory (cluster, logs) after a successful run")
		recov    = flag.Bool("recovery", false, "run only the recovery run: 24 kills of leaders and followers at the default lease settings")
		noRecov  = flag.Bool("no-recovery", false, "skip the recovery run that follows the full-size run")
		liveness = flag.Duration("liveness-reclaim", 0, "recovery run: the harness runs the prototype reclaim of dead workers' jobs (docs/ownership.md) this often (0: off)")
		noClock  = flag.Bool("no-clock-step", false, "skip the server-clock-step fault (which needs libfaketime: apt-get install libfaketime)")
		fail     = flag.String("failover", "", "run the failover scenario instead: sync or async replication (full size: 4 workers, 50000 jobs; -quick: 2 workers, 3000 jobs)")
	)
	flag.Parse()
	opts := chaos.Options{}
	switch *fail {
	case "":
		if *quick {
			opts = chaos.Quick()
		}
	case "sync", "async":
		m := chaos.SyncFailover
		if *fail == "async" {
			m = chaos.AsyncFailover
		}
		opts = chaos.FailoverOptions(m)
		if *quick {
			opts = chaos.QuickFailover(m)
		}
	default:
		fmt.Fprintf(os.Stderr, "-failover %q: use sync or async\n", *fail)
		os.Exit(2)
	}
	if *workers != 0 {
		opts.Workers = *workers
	}
	if *jobs != 0 {
		opts.Jobs = *jobs
	}
	if *kills != 0 {
		opts.Kills = *kills
	}
	if *durable != 0 {
		opts.Durable = *durable
	}
	opts.Seed = *seed
	opts.Keep = *keep
	if *noClock {
		opts.NoClockStep = true
	}

	// Ctrl-C cancels the run; Run still stops its workers and its cluster.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if !*recov {
		_, err = chaos.Run(ctx, opts, os.Stdout)
	}
	// The recovery run: after the full-size run (not after -quick or a failover), or alone.
	if *recov || (err == nil && !*noRecov && !*quick && *fail == "") {
		ro := chaos.DefaultLeaseRecovery()
		ro.Seed, ro.Keep, ro.LivenessReclaim = *seed, *keep, *liveness
		_, err = chaos.Run(ctx, ro, os.Stdout)
	}
	switch {
	case err == nil:
	case errors.Is(err, chaos.ErrPromiseBroken):
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	default:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
