package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Config is what a process decides about its telemetry (cmd reads it from
// flags and the environment).
type Config struct {
	// ServiceName names the process in traces and in target_info, e.g.
	// "toolmesh-tasks".
	ServiceName string
	// Version is the service.version resource attribute.
	Version string
	// Exporter receives finished spans; nil turns tracing off (spans are
	// not recorded, but trace context still passes through the process).
	Exporter sdktrace.SpanExporter
	// SampleRatio is the fraction of new traces recorded (0 or 1: all);
	// a call that arrives inside a trace follows its caller's decision.
	SampleRatio float64
}

// Telemetry is a process's providers: a tracer provider exporting to
// Config.Exporter and a meter provider read by the Prometheus /metrics
// page, which also shows the Go runtime and process metrics.
type Telemetry struct {
	Providers
	metrics  http.Handler
	shutdown []func(context.Context) error
}

// New builds the process's providers.
func New(cfg Config) (*Telemetry, error) {
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName(cfg.ServiceName),
		semconv.ServiceVersion(cfg.Version),
	))
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	t := &Telemetry{Providers: Providers{Propagator: DefaultPropagator()}}

	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("register Go metrics: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("register process metrics: %w", err)
	}
	exp, err := promexporter.New(
		promexporter.WithRegisterer(reg),
		promexporter.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		promexporter.WithoutScopeInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	mp := metric.NewMeterProvider(metric.WithResource(res), metric.WithReader(exp), metric.WithView(temporalTimers))
	t.MeterProvider = mp
	t.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	t.shutdown = append(t.shutdown, mp.Shutdown)

	if cfg.Exporter != nil {
		ratio := cfg.SampleRatio
		if ratio <= 0 || ratio > 1 {
			ratio = 1
		}
		tp := sdktrace.NewTracerProvider(
			sdktrace.WithResource(res),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
			sdktrace.WithBatcher(cfg.Exporter),
		)
		t.TracerProvider = tp
		// Spans first: flushing them may still record metrics.
		t.shutdown = append([]func(context.Context) error{tp.Shutdown}, t.shutdown...)
	}
	return t, nil
}

// temporalTimers gives the Temporal SDK's latency histograms (recorded in
// seconds) bounds in seconds; the SDK's default bounds suit milliseconds.
func temporalTimers(i metric.Instrument) (metric.Stream, bool) {
	if i.Kind != metric.InstrumentKindHistogram || i.Scope.Name != TemporalScope {
		return metric.Stream{}, false
	}
	return metric.Stream{
		Name: i.Name, Description: i.Description, Unit: i.Unit,
		Aggregation: metric.AggregationExplicitBucketHistogram{Boundaries: RPCBuckets()},
	}, true
}

// TemporalScope is the instrumentation scope of the Temporal SDK's metrics.
const TemporalScope = "temporal-sdk-go"

// MetricsHandler serves the Prometheus exposition of every metric of the
// process.
func (t *Telemetry) MetricsHandler() http.Handler { return t.metrics }

// Shutdown flushes spans not yet exported and stops the providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}
