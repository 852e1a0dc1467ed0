// Command prometheus serves skiplock's metrics for Prometheus at /metrics while a worker
// runs jobs: the OpenTelemetry hook records the counters and histograms, the queue gauges
// are read from the database (one shared query per interval), and the OpenTelemetry
// Prometheus exporter serves them all.
//
//	cd otel && DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go run ./example/prometheus
//	curl -s localhost:9464/metrics | grep ^skiplock_
//
// With -once it runs a few jobs, prints the skiplock lines of /metrics and exits. It
// works in its own schema, skiplock_otel_demo, which it resets on every run.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/skiplock/skiplock"
	skiplockotel "github.com/skiplock/skiplock/otel"
)

const schema = "skiplock_otel_demo"

// Resize is the demo's job: it takes a few milliseconds and fails one time in ten.
type Resize struct {
	ImageID int `json:"image_id"`
}

// Kind implements skiplock.JobArgs.
func (Resize) Kind() string { return "resize" }

func main() {
	addr := flag.String("addr", "127.0.0.1:9464", "address to serve /metrics on")
	once := flag.Bool("once", false, "run 200 jobs, print the skiplock metrics and exit")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *addr, *once); err != nil {
		fmt.Fprintln(os.Stderr, "prometheus example:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr string, once bool) error {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`); err != nil {
		return err
	}
	if err := skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}); err != nil {
		return err
	}

	// The OpenTelemetry Prometheus exporter is a metric reader; promhttp serves what it
	// registered in Prometheus's default registry.
	exporter, err := otelprom.New()
	if err != nil {
		return err
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer provider.Shutdown(context.WithoutCancel(ctx)) //nolint:errcheck // exiting anyway

	hook, err := skiplockotel.New(skiplockotel.Config{MeterProvider: provider})
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Hooks: []skiplock.Hook{hook}, Logger: logger})
	if err != nil {
		return err
	}
	queues := map[string]skiplock.QueueConfig{"default": {MaxWorkers: 10}}
	reg, err := skiplockotel.RegisterQueueGauges(client, skiplockotel.GaugeConfig{
		MeterProvider: provider, Interval: 5 * time.Second, Queues: queues,
	})
	if err != nil {
		return err
	}
	defer reg.Unregister() //nolint:errcheck // exiting anyway

	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{Queues: queues, Logger: logger,
		RetryPolicy: skiplock.BackoffPolicy{Base: 100 * time.Millisecond}})
	if err != nil {
		return err
	}
	if err := skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[Resize]) error {
		time.Sleep(time.Duration(2+rand.IntN(8)) * time.Millisecond)
		if rand.IntN(10) == 0 {
			return errors.New("image store: timeout")
		}
		return nil
	}); err != nil {
		return err
	}

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: promhttp.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ErrServerClosed at shutdown
	defer srv.Close()

	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { cancel(); <-done }()

	enqueue := func(n int) error {
		params := make([]skiplock.EnqueueParams, n)
		for i := range params {
			params[i] = skiplock.EnqueueParams{Args: Resize{ImageID: i}}
		}
		_, err := client.EnqueueMany(ctx, params)
		return err
	}
	if once {
		if err := enqueue(200); err != nil {
			return err
		}
		if err := waitDrained(ctx, client); err != nil {
			return err
		}
		return printMetrics(ctx, "http://"+ln.Addr().String()+"/metrics", os.Stdout)
	}
	fmt.Printf("serving http://%s/metrics; enqueueing 50 jobs a second until interrupted\n", ln.Addr())
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if err := enqueue(50); err != nil {
				return err
			}
		}
	}
}

// waitDrained waits until no job is queued or running.
func waitDrained(ctx context.Context, client *skiplock.Client) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		stats, err := client.Stats(ctx)
		if err != nil {
			return err
		}
		pending := int64(0)
		for _, s := range stats {
			pending += s.Counts[skiplock.StatusQueued] + s.Counts[skiplock.StatusRunning]
		}
		if pending == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.New("jobs still pending after a minute")
}

// printMetrics prints the skiplock_ lines of a /metrics page, histogram buckets left out.
func printMetrics(ctx context.Context, url string, out io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "skiplock_") && !strings.Contains(line, "_bucket{") {
			fmt.Fprintln(out, line)
		}
	}
	return sc.Err()
}
