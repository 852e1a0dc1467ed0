package skiplockotel_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	skiplockotel "github.com/skiplock/skiplock/otel"
)

type work struct {
	Fail string `json:"fail,omitempty"` // "once": fail the first attempt; "always": Permanent
}

func (work) Kind() string { return "work" }

// bundle is a migrated schema with an instrumented client, in-memory exporters and a
// ManualReader.
type bundle struct {
	pool   *pgxpool.Pool
	client *skiplock.Client
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func setup(t *testing.T) *bundle {
	t.Helper()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	require.NoError(t, skiplock.Migrate(t.Context(), pool, skiplock.MigrateConfig{Schema: schema}))
	b := &bundle{pool: pool, spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	b.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b.spans))
	b.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(b.reader))
	hook, err := skiplockotel.New(skiplockotel.Config{TracerProvider: b.tp, MeterProvider: b.mp})
	require.NoError(t, err)
	b.client, err = skiplock.NewClient(pool, skiplock.Config{Schema: schema, Hooks: []skiplock.Hook{hook}})
	require.NoError(t, err)
	return b
}

// run works the default queue until n attempts have ended.
func (b *bundle) run(t *testing.T, n int) {
	t.Helper()
	var mu sync.Mutex
	ended := 0
	done := make(chan struct{})
	w, err := skiplock.NewWorker(b.client, skiplock.WorkerConfig{
		PollInterval: 20 * time.Millisecond, SweepInterval: -1,
		RetryPolicy: fixedDelay(10 * time.Millisecond),
		Hooks: []skiplock.Hook{countHook(func() {
			mu.Lock()
			defer mu.Unlock()
			if ended++; ended == n {
				close(done)
			}
		})},
	})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[work]) error {
		switch {
		case job.Args.Fail == "once" && job.Attempts == 1:
			return errors.New("first attempt fails")
		case job.Args.Fail == "always":
			return skiplock.Permanent(errors.New("bad input"))
		}
		return nil
	}))
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Errorf("%d attempts did not end within 60s", n)
	}
	cancel()
	require.NoError(t, <-ran)
}

type fixedDelay time.Duration

func (d fixedDelay) NextRetry(*skiplock.JobRow) time.Duration { return time.Duration(d) }

// countHook calls fn after each attempt (after the otel hook, which runs first).
type countHook func()

func (countHook) JobStarted(ctx context.Context, _ *skiplock.JobRow) context.Context { return ctx }
func (f countHook) JobFinished(context.Context, *skiplock.JobRow, skiplock.JobResult) {
	f()
}

func TestHook_TraceFollowsTheRequestIntoEveryAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The request that enqueues, in a trace of its own.
	reqCtx, req := b.tp.Tracer("test").Start(context.Background(), "POST /orders")
	tx, err := b.pool.Begin(reqCtx)
	require.NoError(t, err)
	flaky, err := b.client.EnqueueTx(reqCtx, tx, work{Fail: "once"}, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(reqCtx))
	okJob, err := b.client.Enqueue(reqCtx, work{}, nil)
	require.NoError(t, err)
	req.End()
	assert.Contains(t, flaky.Metadata, "traceparent", "the enqueue span's context travels in the metadata")

	b.run(t, 3)

	var enqueues, runs []sdktrace.ReadOnlySpan
	for _, s := range b.spans.Ended() {
		switch s.Name() {
		case "skiplock.enqueue work":
			enqueues = append(enqueues, s)
		case "skiplock.run work":
			runs = append(runs, s)
		}
	}
	require.Len(t, enqueues, 2)
	require.Len(t, runs, 3)
	enqueueOf := map[int64]sdktrace.ReadOnlySpan{}
	for _, e := range enqueues {
		assert.Equal(t, req.SpanContext().TraceID(), e.SpanContext().TraceID(), "enqueue spans are in the request's trace")
		assert.Equal(t, req.SpanContext().SpanID(), e.Parent().SpanID())
		assert.Equal(t, trace.SpanKindProducer, e.SpanKind())
		enqueueOf[attr(e.Attributes(), skiplockotel.AttrID).AsInt64()] = e
	}
	outcomes := map[int64][]string{}
	for _, r := range runs {
		id := attr(r.Attributes(), skiplockotel.AttrID).AsInt64()
		e := enqueueOf[id]
		require.NotNil(t, e, "run span of job %d has an enqueue span", id)
		assert.Equal(t, req.SpanContext().TraceID(), r.SpanContext().TraceID(), "attempts are in the request's trace")
		assert.Equal(t, e.SpanContext().SpanID(), r.Parent().SpanID(), "an attempt is a child of its enqueue")
		require.Len(t, r.Links(), 1)
		assert.Equal(t, e.SpanContext().SpanID(), r.Links()[0].SpanContext.SpanID(), "and linked to it")
		assert.Equal(t, trace.SpanKindConsumer, r.SpanKind())
		outcomes[id] = append(outcomes[id], attr(r.Attributes(), skiplockotel.AttrOutcome).AsString()+"@"+attr(r.Attributes(), skiplockotel.AttrAttempt).Emit())
	}
	assert.ElementsMatch(t, []string{"retry@1", "succeeded@2"}, outcomes[flaky.ID])
	assert.Equal(t, []string{"succeeded@1"}, outcomes[okJob.ID])
}

func TestHook_MetricsAfterAKnownWorkload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// 5 jobs that succeed, 1 that fails once then succeeds, 1 that fails for good: 7
	// enqueued, 8 attempts.
	params := []skiplock.EnqueueParams{{Args: work{Fail: "once"}}, {Args: work{Fail: "always"}}}
	for range 5 {
		params = append(params, skiplock.EnqueueParams{Args: work{}})
	}
	_, err := b.client.EnqueueMany(context.Background(), params)
	require.NoError(t, err)
	// Jobs the worker never sees: one due in queue "idle" for 90 s, two scheduled.
	_, err = b.client.Enqueue(context.Background(), work{}, &skiplock.EnqueueOptions{Queue: "idle", RunAt: time.Now().Add(-90 * time.Second)})
	require.NoError(t, err)
	for range 2 {
		_, err = b.client.Enqueue(context.Background(), work{}, &skiplock.EnqueueOptions{Queue: "idle", RunAt: time.Now().Add(time.Hour)})
		require.NoError(t, err)
	}
	b.run(t, 8)

	reg, err := skiplockotel.RegisterQueueGauges(b.client, skiplockotel.GaugeConfig{
		MeterProvider: b.mp, Interval: time.Minute,
		Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 7}, "idle": {}},
	})
	require.NoError(t, err)
	defer reg.Unregister() //nolint:errcheck

	var rm metricdata.ResourceMetrics
	require.NoError(t, b.reader.Collect(context.Background(), &rm))
	m := metricsByName(rm)
	def := attribute.NewSet(skiplockotel.AttrKind.String("work"), skiplockotel.AttrQueue.String("default"))
	idle := attribute.NewSet(skiplockotel.AttrKind.String("work"), skiplockotel.AttrQueue.String("idle"))
	assert.Equal(t, map[attribute.Set]int64{def: 7, idle: 3}, sums(t, m["skiplock.jobs.enqueued"]))
	assert.Equal(t, map[attribute.Set]int64{def: 8}, sums(t, m["skiplock.jobs.started"]))
	assert.Equal(t, map[attribute.Set]int64{def: 0}, sums(t, m["skiplock.worker.running"]))
	with := func(s attribute.Set, kv ...attribute.KeyValue) attribute.Set {
		return attribute.NewSet(append(s.ToSlice(), kv...)...)
	}
	assert.Equal(t, map[attribute.Set]int64{
		with(def, skiplockotel.AttrOutcome.String("succeeded")): 6,
		with(def, skiplockotel.AttrOutcome.String("retry")):     1,
		with(def, skiplockotel.AttrOutcome.String("failed")):    1,
	}, sums(t, m["skiplock.jobs.completed"]))
	for _, name := range []string{"skiplock.job.duration", "skiplock.job.start_lag"} {
		h, ok := m[name].Data.(metricdata.Histogram[float64])
		require.True(t, ok, "%s is a histogram", name)
		require.Len(t, h.DataPoints, 1)
		assert.Equal(t, uint64(8), h.DataPoints[0].Count, "%s: one per attempt", name)
		assert.Equal(t, "s", m[name].Unit)
	}

	// The gauges read from the database.
	q := func(queue string, kv ...attribute.KeyValue) attribute.Set {
		return attribute.NewSet(append([]attribute.KeyValue{skiplockotel.AttrQueue.String(queue)}, kv...)...)
	}
	status := skiplockotel.AttrStatus.String
	assert.Equal(t, map[attribute.Set]int64{
		q("default", status("failed")):    1,
		q("default", status("scheduled")): 0,
		q("idle", status("queued")):       1,
		q("idle", status("scheduled")):    2,
	}, gauges[int64](t, m["skiplock.queue.jobs"]))
	assert.Equal(t, map[attribute.Set]int64{
		q("default", status("succeeded")): 6,
		q("default", status("failed")):    1,
	}, gauges[int64](t, m["skiplock.queue.finished"]))
	age := gauges[float64](t, m["skiplock.queue.oldest_due_age"])
	assert.InDelta(t, 90, age[q("idle")], 30)
	assert.Zero(t, age[q("default")])
	assert.Equal(t, map[attribute.Set]int64{q("default"): 0, q("idle"): 0}, gauges[int64](t, m["skiplock.queue.overrunning"]))
	assert.Equal(t, map[attribute.Set]int64{q("default"): 7, q("idle"): skiplock.DefaultMaxWorkers}, gauges[int64](t, m["skiplock.worker.slots"]))

	// Within the interval, a collect reads nothing from the database: the figures stay.
	_, err = b.client.Enqueue(context.Background(), work{}, &skiplock.EnqueueOptions{Queue: "idle"})
	require.NoError(t, err)
	require.NoError(t, b.reader.Collect(context.Background(), &rm))
	assert.Equal(t, int64(1), gauges[int64](t, metricsByName(rm)["skiplock.queue.jobs"])[q("idle", status("queued"))])
}

func attr(kvs []attribute.KeyValue, k attribute.Key) attribute.Value {
	for _, kv := range kvs {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func metricsByName(rm metricdata.ResourceMetrics) map[string]metricdata.Metrics {
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

func sums(t *testing.T, m metricdata.Metrics) map[attribute.Set]int64 {
	t.Helper()
	s, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is an int64 sum", m.Name)
	out := map[attribute.Set]int64{}
	for _, dp := range s.DataPoints {
		out[dp.Attributes] = dp.Value
	}
	return out
}

func gauges[N int64 | float64](t *testing.T, m metricdata.Metrics) map[attribute.Set]N {
	t.Helper()
	g, ok := m.Data.(metricdata.Gauge[N])
	require.True(t, ok, "%s is a gauge", m.Name)
	out := map[attribute.Set]N{}
	for _, dp := range g.DataPoints {
		out[dp.Attributes] = dp.Value
	}
	return out
}

// slowArgs is a job whose handler ignores its context until release is closed.
type slowArgs struct{}

func (slowArgs) Kind() string { return "slow" }

func TestGauges_OverrunningHandlersOfTheWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	w, err := skiplock.NewWorker(b.client, skiplock.WorkerConfig{
		PollInterval: 20 * time.Millisecond, SweepInterval: -1, JobTimeout: 50 * time.Millisecond,
		VisibilityTimeout: 3 * time.Second, // overrunning is reported a lease interval (1 s) past the timeout
	})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, _ *skiplock.Job[slowArgs]) error {
		<-release // ignores ctx: overruns its timeout until released
		return nil
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	defer close(release)

	reg, err := skiplockotel.RegisterQueueGauges(b.client, skiplockotel.GaugeConfig{MeterProvider: b.mp, Worker: w})
	require.NoError(t, err)
	defer reg.Unregister() //nolint:errcheck
	overrunning := func() int64 {
		var rm metricdata.ResourceMetrics
		require.NoError(t, b.reader.Collect(context.Background(), &rm))
		return gauges[int64](t, metricsByName(rm)["skiplock.worker.overrunning"])[*attribute.EmptySet()]
	}
	assert.Zero(t, overrunning())

	for range 2 {
		_, err = b.client.Enqueue(context.Background(), slowArgs{}, nil)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return overrunning() == 2 }, 30*time.Second, 20*time.Millisecond,
		"the gauge reports both handlers past their timeout")
}
