package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/skiplock/skiplock"
)

// limitsCommand is `skiplock limits`: show, set or reset the flow-control limits set at
// run time (Client.SetQueueLimits).
func limitsCommand() *command {
	return &command{
		name:    "limits",
		args:    "[--queue Q [--concurrency N] [--key-concurrency N] [--rate N [--rate-period D]] [--key-rate N [--key-rate-period D]] [--fair] [--key-limit DIM=N ...] | --queue Q --reset]",
		summary: "show, set or reset a queue's flow-control limits on every worker",
		help: "Without flags, lists the limits set at run time, by queue. With --queue and limit flags,\n" +
			"replaces that queue's limits on every worker of every process at once (the limits its\n" +
			"workers declare in code no longer apply to it, even after a restart); a limit left out\n" +
			"is lifted, and --none lifts them all. --reset drops what was set: the workers go back\n" +
			"to the limits they declare.",
		flags: func(fs *flag.FlagSet, o *options) {
			l := &o.limits
			fs.StringVar(&l.queue, "queue", "", "the queue `Q`")
			fs.IntVar(&l.concurrency, "concurrency", 0, "at most `N` jobs of the queue running at once, across all workers")
			fs.IntVar(&l.keyConcurrency, "key-concurrency", 0, "at most `N` jobs running at once per partition key")
			fs.IntVar(&l.rate, "rate", 0, "at most `N` job starts per --rate-period")
			fs.DurationVar(&l.ratePeriod, "rate-period", 0, "the window `D` of --rate (with --rate only; 1s when left out)")
			fs.IntVar(&l.keyRate, "key-rate", 0, "at most `N` job starts per --key-rate-period per partition key")
			fs.DurationVar(&l.keyRatePeriod, "key-rate-period", 0, "the window `D` of --key-rate (with --key-rate only; 1s when left out)")
			fs.BoolVar(&l.fair, "fair", false, "hand jobs out round-robin across partition keys")
			fs.Func("key-limit", "at most `DIM=N` jobs running at once per key of dimension DIM (EnqueueOptions.ConcurrencyKeys); repeat for each dimension",
				func(v string) error { return addKeyLimit(l, v) })
			fs.BoolVar(&l.none, "none", false, "lift every limit of --queue, declared ones included")
			fs.BoolVar(&l.reset, "reset", false, "drop the limits set at run time for --queue")
		},
		check: checkLimits,
		run:   cmdLimits,
	}
}

func checkLimits(o *options) error {
	l := &o.limits
	l.set = l.concurrency != 0 || l.keyConcurrency != 0 || l.rate != 0 || l.keyRate != 0 || l.fair || len(l.keyLimits) > 0
	switch {
	// The library ignores a period without its rate: refused here rather than set
	// silently without it (--rate-period 2s beside --key-rate 5 meant the key rate's).
	case l.ratePeriod != 0 && l.rate == 0:
		return usagef("limits", "limits: --rate-period is the window of --rate: give --rate too")
	case l.keyRatePeriod != 0 && l.keyRate == 0:
		return usagef("limits", "limits: --key-rate-period is the window of --key-rate: give --key-rate too")
	case l.none && l.set:
		return usagef("limits", "limits: --none takes no limit flags")
	case l.none:
		l.set = true
	case (l.set || l.reset) && l.queue == "":
		return usagef("limits", "limits: give --queue with limits or --reset")
	case l.set && l.reset:
		return usagef("limits", "limits: --reset takes no limit flags")
	case l.queue != "" && !l.set && !l.reset:
		return usagef("limits", "limits: --queue needs limit flags (to set them), --none (to lift them all) or --reset")
	}
	return nil
}

func cmdLimits(ctx context.Context, a *app, o *options) error {
	client, pool, err := a.connect(ctx, "limits")
	if err != nil {
		return err
	}
	defer pool.Close()
	l := o.limits
	switch {
	case l.reset:
		err = client.ResetQueueLimits(ctx, l.queue)
	case l.set:
		err = client.SetQueueLimits(ctx, l.queue, skiplock.QueueLimits{
			Concurrency: l.concurrency, KeyConcurrency: l.keyConcurrency,
			Rate: l.rate, RatePeriod: l.ratePeriod, Fair: l.fair,
			KeyRate: l.keyRate, KeyRatePeriod: l.keyRatePeriod, ConcurrencyKeys: l.keyLimits,
		})
	default:
		return listLimits(ctx, a, client)
	}
	if errors.Is(err, skiplock.ErrInvalidQueue) || errors.Is(err, skiplock.ErrInvalidLimits) {
		return usagef("limits", "limits: %s", strings.TrimPrefix(err.Error(), "skiplock: "))
	}
	if err != nil {
		return a.notMigratedHint(err)
	}
	if l.reset {
		_, err = fmt.Fprintf(a.stdout, "queue %q: limits set at run time dropped; its workers' declared limits apply\n", l.queue)
		return err
	}
	_, err = fmt.Fprintf(a.stdout, "queue %q: limits set on every worker\n", l.queue)
	return err
}

func listLimits(ctx context.Context, a *app, client *skiplock.Client) error {
	set, err := client.QueueLimitsSet(ctx)
	if err != nil {
		return a.notMigratedHint(err)
	}
	if len(set) == 0 {
		_, err := fmt.Fprintln(a.stdout, "no limits set at run time: every queue has the limits its workers declare")
		return err
	}
	queues := make([]string, 0, len(set))
	for q := range set {
		queues = append(queues, q)
	}
	slices.Sort(queues)
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tCONCURRENCY\tPER KEY\tRATE\tKEY RATE\tFAIR\tPER DIMENSION")
	dash := func(n int) string {
		if n == 0 {
			return "-"
		}
		return fmt.Sprint(n)
	}
	for _, q := range queues {
		l := set[q]
		rate := "-"
		if l.Rate > 0 {
			rate = fmt.Sprintf("%d/%s", l.Rate, l.RatePeriod)
		}
		keyRate := "-"
		if l.KeyRate > 0 {
			keyRate = fmt.Sprintf("%d/%s", l.KeyRate, l.KeyRatePeriod)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\t%s\n", q, dash(l.Concurrency), dash(l.KeyConcurrency), rate, keyRate, l.Fair,
			keyLimitsText(l.ConcurrencyKeys))
	}
	return tw.Flush()
}

// addKeyLimit reads one --key-limit DIM=N into l (the limits check DIM and N).
func addKeyLimit(l *limitsOptions, v string) error {
	dim, n, ok := strings.Cut(v, "=")
	limit, err := strconv.Atoi(n)
	if !ok || err != nil {
		return fmt.Errorf("%q: write DIM=N, e.g. region=50", v)
	}
	if l.keyLimits == nil {
		l.keyLimits = map[string]int{}
	}
	l.keyLimits[dim] = limit
	return nil
}

// keyLimitsText is QueueLimits.ConcurrencyKeys as "region=50,tenant=2", "-" for none.
func keyLimitsText(dims map[string]int) string {
	if len(dims) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(dims))
	for _, d := range slices.Sorted(maps.Keys(dims)) {
		parts = append(parts, d+"="+strconv.Itoa(dims[d]))
	}
	return strings.Join(parts, ",")
}
