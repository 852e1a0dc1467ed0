// Package skiplockotel traces and measures skiplock jobs with OpenTelemetry. It is a
// module of its own (github.com/skiplock/skiplock/otel), so that skiplock itself
// depends on nothing but pgx.
//
// A [Hook] goes in the client's [skiplock.Config].Hooks; it then sees every enqueue of
// the client and every job run by the client's workers:
//
//	hook, _ := skiplockotel.New(skiplockotel.Config{})    // the global providers
//	client, _ := skiplock.NewClient(pool, skiplock.Config{Hooks: []skiplock.Hook{hook}})
//	reg, _ := skiplockotel.RegisterQueueGauges(client, skiplockotel.GaugeConfig{})
//	defer reg.Unregister()
//
// # Traces
//
// Each enqueue is a span ("skiplock.enqueue <kind>", kind producer) in the caller's
// trace; its context is stored in the job's metadata ("traceparent", "tracestate" — W3C
// trace context by default). Each attempt is a span ("skiplock.run <kind>", kind
// consumer) that is a child of its enqueue span, so one trace follows a request from the
// HTTP handler that enqueued into every attempt of its jobs; each attempt span also links
// to the enqueue span. [Config].NewTraceForAttempts starts a trace per attempt instead,
// linked to the enqueue span. Attributes: skiplock.job.kind, skiplock.job.queue,
// skiplock.job.id, skiplock.job.attempt, skiplock.job.outcome.
//
// # Metrics
//
// Recorded by each process, attributes skiplock.job.kind and skiplock.job.queue:
//
//   - skiplock.jobs.enqueued (counter): jobs inserted (by EnqueueTx: maybe rolled back).
//   - skiplock.jobs.started (counter): attempts started.
//   - skiplock.jobs.completed (counter, + skiplock.job.outcome): attempts ended, by
//     outcome (succeeded, retry, snoozed, dead, failed, cancelled, timed_out, released,
//     lost).
//   - skiplock.job.duration (histogram, s): time in the handler.
//   - skiplock.job.start_lag (histogram, s): from the time the attempt was due (run_at:
//     the enqueue, the scheduled time or the retry time) to its claim, both by the
//     database clock.
//   - skiplock.worker.running (up-down counter): attempts running in this process.
//
// Read from the database by [RegisterQueueGauges], attribute skiplock.job.queue:
//
//   - skiplock.queue.jobs (gauge, + skiplock.job.status): jobs in the jobs table by
//     status, where "queued" counts the due jobs and "scheduled" the queued jobs not yet
//     due (future run_at: scheduled, backing off, snoozed, waiting for dependencies);
//     "dead" is the dead count.
//   - skiplock.queue.oldest_due_age (gauge, s): how long the oldest due job has waited.
//     The one number to alert on: it grows when workers are down, stuck or too few.
//   - skiplock.queue.finished (gauge, + skiplock.job.status): jobs finished in the last
//     minute, from the jobs table and the archive (throughput ×60).
//   - skiplock.queue.overrunning (gauge): running jobs whose handlers run past their job
//     timeout, in every process ([skiplock.QueueStats].Overrunning): their jobs stay with
//     their workers until the handlers return. Alert on it staying above zero.
//   - skiplock.worker.slots (gauge): this process's slot limit per queue, from
//     [GaugeConfig].Queues: compare with skiplock.queue.jobs{status="running"}.
//   - skiplock.worker.overrunning (gauge): this process's handlers running past their
//     job timeout now, from [GaugeConfig].Worker ([skiplock.Worker.Overrunning]): their
//     jobs stay with the worker, leases renewed, until they return. Alert on it staying
//     above zero.
package skiplockotel

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/skiplock/skiplock"
)

// instrumentationName names the tracer and the meter.
const instrumentationName = "github.com/skiplock/skiplock/otel"

// Attribute keys.
const (
	AttrKind    = attribute.Key("skiplock.job.kind")
	AttrQueue   = attribute.Key("skiplock.job.queue")
	AttrID      = attribute.Key("skiplock.job.id")
	AttrAttempt = attribute.Key("skiplock.job.attempt")
	AttrOutcome = attribute.Key("skiplock.job.outcome")
	AttrStatus  = attribute.Key("skiplock.job.status")
)

// secondsBuckets are the histogram bounds, in seconds: from a millisecond (a fast
// handler, a claim right after the enqueue) to half an hour (a backlog).
var secondsBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}

// Config configures a [Hook]. The zero value is valid.
type Config struct {
	// TracerProvider makes the spans. Defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider makes the metrics. Defaults to otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Propagator carries the enqueue span's context in the job's metadata. Defaults to
	// W3C trace context (propagation.TraceContext), not the global propagator, which is
	// a no-op until set.
	Propagator propagation.TextMapPropagator
	// NewTraceForAttempts makes each attempt span the root of a trace of its own, linked
	// to the enqueue span, instead of its child. Defaults to false: one trace from the
	// request to every attempt.
	NewTraceForAttempts bool
}

// Hook traces and measures enqueues and job runs. It implements [skiplock.Hook] and
// [skiplock.EnqueueHook]; put it in [skiplock.Config].Hooks. It is safe for concurrent
// use.
type Hook struct {
	tracer  trace.Tracer
	prop    propagation.TextMapPropagator
	newRoot bool

	enqueued, started, completed metric.Int64Counter
	running                      metric.Int64UpDownCounter
	duration, startLag           metric.Float64Histogram
}

var (
	_ skiplock.Hook        = (*Hook)(nil)
	_ skiplock.EnqueueHook = (*Hook)(nil)
)

// New returns a Hook that reports to cfg's providers.
func New(cfg Config) (*Hook, error) {
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	if cfg.Propagator == nil {
		cfg.Propagator = propagation.TraceContext{}
	}
	m := cfg.MeterProvider.Meter(instrumentationName)
	h := &Hook{
		tracer:  cfg.TracerProvider.Tracer(instrumentationName),
		prop:    cfg.Propagator,
		newRoot: cfg.NewTraceForAttempts,
	}
	var err, e error
	h.enqueued, e = m.Int64Counter("skiplock.jobs.enqueued", metric.WithUnit("{job}"),
		metric.WithDescription("Jobs inserted."))
	err = errors.Join(err, e)
	h.started, e = m.Int64Counter("skiplock.jobs.started", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts started."))
	err = errors.Join(err, e)
	h.completed, e = m.Int64Counter("skiplock.jobs.completed", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts ended, by outcome."))
	err = errors.Join(err, e)
	h.running, e = m.Int64UpDownCounter("skiplock.worker.running", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts running in this process."))
	err = errors.Join(err, e)
	h.duration, e = m.Float64Histogram("skiplock.job.duration", metric.WithUnit("s"),
		metric.WithDescription("Time spent in the handler."), metric.WithExplicitBucketBoundaries(secondsBuckets...))
	err = errors.Join(err, e)
	h.startLag, e = m.Float64Histogram("skiplock.job.start_lag", metric.WithUnit("s"),
		metric.WithDescription("From the time an attempt was due (run_at) to its claim, by the database clock."),
		metric.WithExplicitBucketBoundaries(secondsBuckets...))
	err = errors.Join(err, e)
	if err != nil {
		return nil, err
	}
	return h, nil
}

// JobEnqueuing implements [skiplock.EnqueueHook]: it starts the enqueue span and puts
// its context in the job's metadata.
func (h *Hook) JobEnqueuing(ctx context.Context, e *skiplock.EnqueueEvent) func(*skiplock.JobRow, error) {
	attrs := []attribute.KeyValue{AttrKind.String(e.Kind), AttrQueue.String(e.Queue)}
	ctx, span := h.tracer.Start(ctx, "skiplock.enqueue "+e.Kind,
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	h.prop.Inject(ctx, propagation.MapCarrier(e.Metadata))
	return func(row *skiplock.JobRow, err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else {
			h.enqueued.Add(ctx, 1, metric.WithAttributes(attrs...))
		}
		if row != nil {
			span.SetAttributes(AttrID.Int64(row.ID))
		}
		span.End()
	}
}

// runState is what JobFinished needs from JobStarted, carried in the handler's context.
type runState struct{ attrs metric.MeasurementOption }

type runStateKey struct{}

// JobStarted implements [skiplock.Hook]: it starts the attempt span, as a child of (and
// linked to) the enqueue span found in the job's metadata.
func (h *Hook) JobStarted(ctx context.Context, job *skiplock.JobRow) context.Context {
	attrs := metric.WithAttributes(AttrKind.String(job.Kind), AttrQueue.String(job.Queue))
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(AttrKind.String(job.Kind), AttrQueue.String(job.Queue),
			AttrID.Int64(job.ID), AttrAttempt.Int(job.Attempts)),
	}
	parent := ctx
	if len(job.Metadata) > 0 {
		enq := h.prop.Extract(ctx, propagation.MapCarrier(job.Metadata))
		if sc := trace.SpanContextFromContext(enq); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
			if h.newRoot {
				opts = append(opts, trace.WithNewRoot())
			} else {
				parent = enq
			}
		}
	}
	ctx, _ = h.tracer.Start(parent, "skiplock.run "+job.Kind, opts...)
	h.started.Add(ctx, 1, attrs)
	h.running.Add(ctx, 1, attrs)
	if !job.LockedAt.IsZero() && !job.RunAt.IsZero() {
		h.startLag.Record(ctx, max(job.LockedAt.Sub(job.RunAt), 0).Seconds(), attrs)
	}
	return context.WithValue(ctx, runStateKey{}, &runState{attrs: attrs})
}

// JobFinished implements [skiplock.Hook]: it ends the attempt span with the outcome and
// records the attempt's metrics.
func (h *Hook) JobFinished(ctx context.Context, job *skiplock.JobRow, res skiplock.JobResult) {
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(AttrOutcome.String(string(res.Outcome)))
	switch res.Outcome {
	case skiplock.OutcomeSucceeded, skiplock.OutcomeSnoozed:
	default:
		if res.Err != nil {
			span.RecordError(res.Err, trace.WithAttributes(attribute.Bool("skiplock.job.panicked", res.Panicked)))
			span.SetStatus(codes.Error, res.Err.Error())
		}
	}
	span.End()
	st, _ := ctx.Value(runStateKey{}).(*runState)
	attrs := metric.WithAttributes(AttrKind.String(job.Kind), AttrQueue.String(job.Queue))
	if st != nil {
		attrs = st.attrs
		h.running.Add(ctx, -1, attrs)
	}
	h.completed.Add(ctx, 1, attrs, metric.WithAttributes(AttrOutcome.String(string(res.Outcome))))
	h.duration.Record(ctx, res.Duration.Seconds(), attrs)
}

// GaugeConfig configures [RegisterQueueGauges]. The zero value is valid.
type GaugeConfig struct {
	// MeterProvider makes the gauges. Defaults to otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Interval is how often the figures are computed. Every process shares one
	// computation per interval through [skiplock.Client.CachedStats], and each process
	// reads the shared result at most once per interval, however often it is scraped, so
	// a figure exported may be up to twice the interval old (a shared result read near
	// the end of its interval, then kept one more). Defaults to
	// [DefaultGaugeInterval] (15s); zero or negative means the default.
	Interval time.Duration
	// Queues are the queues this process works, as in [skiplock.WorkerConfig].Queues, to
	// export skiplock.worker.slots. Nil exports none.
	Queues map[string]skiplock.QueueConfig
	// Timeout bounds one read of the figures. Defaults to 5s; zero or negative means the
	// default.
	Timeout time.Duration
	// Worker is this process's worker, to export skiplock.worker.overrunning (read from
	// the worker itself, not the database). Nil exports none.
	Worker *skiplock.Worker
}

// DefaultGaugeInterval is the default of [GaugeConfig].Interval.
const DefaultGaugeInterval = 15 * time.Second

// RegisterQueueGauges registers the gauges read from the database (see the package
// documentation) for client's schema. They are observed when the meter provider's
// reader collects: no goroutine of its own. A failed read keeps the previous figures and
// is returned to the reader. Call Unregister on the result to stop.
func RegisterQueueGauges(client *skiplock.Client, cfg GaugeConfig) (metric.Registration, error) {
	if client == nil {
		return nil, errors.New("skiplockotel: RegisterQueueGauges: client is nil")
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultGaugeInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	m := cfg.MeterProvider.Meter(instrumentationName)
	jobs, err1 := m.Int64ObservableGauge("skiplock.queue.jobs", metric.WithUnit("{job}"),
		metric.WithDescription(`Jobs in the jobs table by status; "queued" are due, "scheduled" queued for later.`))
	oldest, err2 := m.Float64ObservableGauge("skiplock.queue.oldest_due_age", metric.WithUnit("s"),
		metric.WithDescription("How long the oldest due job of the queue has waited."))
	finished, err3 := m.Int64ObservableGauge("skiplock.queue.finished", metric.WithUnit("{job}"),
		metric.WithDescription("Jobs finished in the last minute, by status."))
	slots, err4 := m.Int64ObservableGauge("skiplock.worker.slots", metric.WithUnit("{attempt}"),
		metric.WithDescription("This process's limit of attempts running at once, per queue."))
	overrunning, err5 := m.Int64ObservableGauge("skiplock.worker.overrunning", metric.WithUnit("{attempt}"),
		metric.WithDescription("This process's handlers running past their job timeout now; their jobs stay with it until they return."))
	queueOverrunning, err6 := m.Int64ObservableGauge("skiplock.queue.overrunning", metric.WithUnit("{job}"),
		metric.WithDescription("Running jobs whose handlers run past their job timeout, in every process."))
	if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
		return nil, err
	}
	c := &gaugeCache{client: client, interval: cfg.Interval, timeout: cfg.Timeout}
	return m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		for q, qc := range cfg.Queues {
			n := qc.MaxWorkers
			if n == 0 {
				n = skiplock.DefaultMaxWorkers
			}
			o.ObserveInt64(slots, int64(n), metric.WithAttributes(AttrQueue.String(q)))
		}
		if cfg.Worker != nil {
			o.ObserveInt64(overrunning, int64(cfg.Worker.Overrunning()))
		}
		stats, err := c.get(ctx)
		for _, s := range stats {
			q := AttrQueue.String(s.Queue)
			for st, n := range s.Counts {
				if st == skiplock.StatusQueued {
					n -= s.Scheduled
				}
				o.ObserveInt64(jobs, n, metric.WithAttributes(q, AttrStatus.String(string(st))))
			}
			o.ObserveInt64(jobs, s.Scheduled, metric.WithAttributes(q, AttrStatus.String("scheduled")))
			o.ObserveFloat64(oldest, s.OldestDue.Seconds(), metric.WithAttributes(q))
			o.ObserveInt64(queueOverrunning, s.Overrunning, metric.WithAttributes(q))
			for st, n := range s.FinishedLastMinute {
				o.ObserveInt64(finished, n, metric.WithAttributes(q, AttrStatus.String(string(st))))
			}
		}
		return err
	}, jobs, oldest, finished, slots, overrunning, queueOverrunning)
}

// gaugeCache keeps the shared stats in this process for one interval.
type gaugeCache struct {
	client   *skiplock.Client
	interval time.Duration
	timeout  time.Duration

	mu     sync.Mutex // a provider with several readers may call the callback concurrently
	readAt time.Time
	stats  []skiplock.QueueStats
}

func (c *gaugeCache) get(ctx context.Context) ([]skiplock.QueueStats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.readAt.IsZero() && time.Since(c.readAt) < c.interval {
		return c.stats, nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	stats, _, err := c.client.CachedStats(ctx, c.interval)
	if err != nil {
		return c.stats, err // the previous figures; the reader logs the error
	}
	c.stats, c.readAt = stats, time.Now()
	return stats, nil
}
