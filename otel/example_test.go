package skiplockotel_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	skiplockotel "github.com/skiplock/skiplock/otel"
)

// Put the hook in the client's Hooks: enqueues and every worker of the client are traced
// and measured. Here the providers are in-memory; in production they export (OTLP,
// Prometheus — see example/prometheus).
func ExampleNew() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	spans := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	hook, _ := skiplockotel.New(skiplockotel.Config{
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Hooks: []skiplock.Hook{hook}})

	job, _ := client.Enqueue(ctx, work{}, nil)
	fmt.Println(spans.Ended()[0].Name(), len(job.Metadata["traceparent"]))
	var rm metricdata.ResourceMetrics
	_ = reader.Collect(ctx, &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "skiplock.jobs.enqueued" {
			fmt.Println(m.Name, m.Data.(metricdata.Sum[int64]).DataPoints[0].Value)
		}
	}
	// Output:
	// skiplock.enqueue work 55
	// skiplock.jobs.enqueued 1
}

// exampleTB lets the example use the test harness to find a database.
type exampleTB struct{ testing.TB }

func (exampleTB) Helper()                   {}
func (exampleTB) Logf(string, ...any)       {}
func (exampleTB) Cleanup(func())            {}
func (exampleTB) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }

func examplePool() (*pgxpool.Pool, string, func()) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.URL(exampleTB{}))
	if err != nil {
		panic(err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	schema := "example_" + hex.EncodeToString(b[:])
	if err := skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}); err != nil {
		panic(err)
	}
	return pool, schema, func() {
		_, _ = pool.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`)
		pool.Close()
	}
}
