package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
)

// splitArgs is the job of -latency-split.
type splitArgs struct {
	T int64 `json:"t"` // the Enqueue call, UnixNano
}

func (splitArgs) Kind() string { return "latsplit" }

// sample is one job's timestamps.
type sample struct {
	called, returned  time.Time // the Enqueue call and its return
	created, locked   time.Time // the row's created_at and locked_at (server clock)
	notified, started time.Time // the listener's notification, the handler's start
}

// latSplitRate and latSplitFor are the -latency-split offer: jobs per second, and for
// how long each run offers them.
var (
	latSplitRate = 50
	latSplitFor  = 10 * time.Second
)

// runLatencySplit (-latency-split) splits skiplock's enqueue → handler-start latency at
// a low rate (the bench's latency workload: one producer, 50 jobs/s, a worker at
// defaults) into its parts, with timestamps taken on both sides of the connection (the database and this
// process share the machine's clock):
//
//	enqueue→server   the Enqueue call until its INSERT starts on the server (created_at)
//	insert+commit    created_at until the NOTIFY reaches a listening session of this
//	                 process (the INSERT, the commit and its WAL flush, the delivery)
//	wake→claim       the notification until the worker's claim statement starts
//	                 (locked_at): the worker's listener, the claim loop's wake-up
//	claim→handler    locked_at until the handler starts: the claim statement, its commit,
//	                 the reply, the scan and the hand-off to a runner
//	total            the Enqueue call until the handler starts (the bench's latency)
//	enqueue returned the Enqueue call until it returned (for reference)
//
// Every figure is a percentile over the jobs of one run; runs are repeated (-runs) and
// each percentile is reported as the median with min–max over runs.
//
//	cd bench && go run . -latency-split -runs 3
//
// It runs o.runs runs on a fresh database bench_latsplit and prints the table.
func runLatencySplit(ctx context.Context, o options) error {
	pool, done, err := migratedDB(ctx, o, "bench_latsplit", int32(o.poolSize))
	if err != nil {
		return err
	}
	defer done()
	rate, dur, runs := latSplitRate, latSplitFor, o.runs
	parts := map[string][][]time.Duration{}
	names := []string{"enqueue→server", "insert+commit→notify", "wake→claim", "claim→handler", "total", "enqueue returned"}
	for r := range runs {
		samples, err := oneRun(ctx, pool, pool.Config().ConnConfig, rate, dur)
		if err != nil {
			return fmt.Errorf("run %d: %w", r+1, err)
		}
		for _, n := range names {
			parts[n] = append(parts[n], partOf(samples, n))
		}
		fmt.Fprintf(os.Stderr, "run %d: %d jobs\n", r+1, len(samples))
	}
	fmt.Printf("| part | p50 ms | p90 ms | p99 ms |\n|---|---:|---:|---:|\n")
	for _, n := range names {
		fmt.Printf("| %s | %s | %s | %s |\n", n, over(parts[n], 0.5), over(parts[n], 0.9), over(parts[n], 0.99))
	}
	return nil
}

// partOf returns one part of every sample.
func partOf(ss []sample, name string) []time.Duration {
	out := make([]time.Duration, 0, len(ss))
	for _, s := range ss {
		var d time.Duration
		switch name {
		case "enqueue→server":
			d = s.created.Sub(s.called)
		case "insert+commit→notify":
			d = s.notified.Sub(s.created)
		case "wake→claim":
			d = s.locked.Sub(s.notified)
		case "claim→handler":
			d = s.started.Sub(s.locked)
		case "total":
			d = s.started.Sub(s.called)
		case "enqueue returned":
			d = s.returned.Sub(s.called)
		}
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// over returns the median, min and max over runs of the q-th percentile of each run.
func over(runs [][]time.Duration, q float64) string {
	var ps []float64
	for _, ds := range runs {
		if len(ds) == 0 {
			continue
		}
		i := min(int(q*float64(len(ds))), len(ds)-1)
		ps = append(ps, float64(ds[i].Microseconds())/1000)
	}
	if len(ps) == 0 {
		return "-"
	}
	slices.Sort(ps)
	return fmt.Sprintf("%.2f (%.2f–%.2f)", ps[len(ps)/2], ps[0], ps[len(ps)-1])
}

// oneRun starts a worker at defaults and a listener, offers jobs at rate for dur, and
// returns each job's timestamps.
func oneRun(ctx context.Context, pool *pgxpool.Pool, connCfg *pgx.ConnConfig, rate int, dur time.Duration) ([]sample, error) {
	if _, err := pool.Exec(ctx, "TRUNCATE skiplock.jobs, skiplock.jobs_archive"); err != nil {
		return nil, err
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	client, err := skiplock.NewClient(pool, skiplock.Config{Logger: quiet})
	if err != nil {
		return nil, err
	}
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{Logger: quiet})
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	started := map[int64]sample{}
	if err := skiplock.Handle(w, func(_ context.Context, job *skiplock.Job[splitArgs]) error {
		now := time.Now()
		mu.Lock()
		started[job.ID] = sample{started: now, locked: job.LockedAt, created: job.CreatedAt, called: time.Unix(0, job.Args.T)}
		mu.Unlock()
		return nil
	}); err != nil {
		return nil, err
	}
	// The listener: its own session on the worker's channel, every arrival kept.
	lconn, err := pgx.ConnectConfig(ctx, connCfg)
	if err != nil {
		return nil, err
	}
	defer lconn.Close(context.Background())
	if _, err := lconn.Exec(ctx, "LISTEN skiplock_jobs"); err != nil {
		return nil, err
	}
	lctx, lcancel := context.WithCancel(ctx)
	var arrivals []time.Time
	listened := make(chan error, 1)
	go func() {
		for {
			n, err := lconn.WaitForNotification(lctx)
			if err != nil {
				listened <- err
				return
			}
			_ = n
			mu.Lock()
			arrivals = append(arrivals, time.Now())
			mu.Unlock()
		}
	}()
	wctx, wcancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	stop := func() error {
		wcancel()
		lcancel()
		err := <-ran
		<-listened
		if errors.Is(err, context.Canceled) {
			err = nil
		}
		return err
	}
	time.Sleep(time.Second) // warm-up: the worker's listener and claim loops start
	returned := map[int64]time.Time{}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	end := time.Now().Add(dur)
	for time.Now().Before(end) {
		<-tick.C
		called := time.Now()
		job, err := client.Enqueue(ctx, splitArgs{T: called.UnixNano()}, nil)
		if err != nil {
			tick.Stop()
			return nil, errors.Join(err, stop())
		}
		returned[job.ID] = time.Now()
	}
	tick.Stop()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(started)
		mu.Unlock()
		if n >= len(returned) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := stop(); err != nil {
		return nil, err
	}
	var out []sample
	for id, s := range started {
		s.returned = returned[id]
		// The first notification that arrived after the row's INSERT began.
		i, _ := slices.BinarySearchFunc(arrivals, s.created, func(a, t time.Time) int { return a.Compare(t) })
		if i == len(arrivals) {
			continue
		}
		s.notified = arrivals[i]
		out = append(out, s)
	}
	return out, nil
}
