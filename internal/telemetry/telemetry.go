// Package telemetry is the mesh's OpenTelemetry plumbing: the providers a
// process builds once (traces to the exporter cmd chose, metrics as a
// Prometheus /metrics page) and the instrumentation every shared
// constructor takes from them — Connect clients and handlers, the REST
// gateway, Temporal clients and workers (internal/temporalclient).
//
// Nothing here is global: a component instruments itself with the
// Providers it is given, and the zero Providers instrument nothing.
package telemetry

import (
	"context"
	"net/http"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Providers are what instrumented code needs. A nil provider is a no-op
// one; a nil Propagator is W3C trace context.
type Providers struct {
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Propagator     propagation.TextMapPropagator
}

// Instrumentation scope of the mesh's own spans and metrics.
const scope = "github.com/toolmesh/toolmesh"

// DefaultPropagator carries W3C trace context. Not baggage: the mesh reads
// none, and what an MCP client sent would otherwise travel into every
// service and be stored in workflow histories.
func DefaultPropagator() propagation.TextMapPropagator { return propagation.TraceContext{} }

// Tracers returns the tracer provider (a no-op one when unset).
func (p Providers) Tracers() trace.TracerProvider {
	if p.TracerProvider == nil {
		return tracenoop.NewTracerProvider()
	}
	return p.TracerProvider
}

// Meters returns the meter provider (a no-op one when unset).
func (p Providers) Meters() metric.MeterProvider {
	if p.MeterProvider == nil {
		return metricnoop.NewMeterProvider()
	}
	return p.MeterProvider
}

// Propagation returns the propagator (W3C trace context when unset).
func (p Providers) Propagation() propagation.TextMapPropagator {
	if p.Propagator == nil {
		return DefaultPropagator()
	}
	return p.Propagator
}

// Tracer is the tracer of the mesh's own spans.
func (p Providers) Tracer() trace.Tracer { return p.Tracers().Tracer(scope) }

// Meter is the meter of the mesh's own metrics.
func (p Providers) Meter() metric.Meter { return p.Meters().Meter(scope) }

// Extract returns ctx carrying the remote span context in carrier, if it
// holds one.
func (p Providers) Extract(ctx context.Context, carrier propagation.TextMapCarrier) context.Context {
	return p.Propagation().Extract(ctx, carrier)
}

// ConnectInterceptor instruments Connect clients and handlers: a span per
// call (a handler continues its caller's trace: every caller of a mesh
// service is inside the mesh and must present a mesh token) and the
// rpc.client.call.duration / rpc.server.call.duration histograms, labelled
// by method and status code. Put it first, so it sees every refusal.
func (p Providers) ConnectInterceptor() connect.Interceptor {
	i, err := otelconnect.NewInterceptor(
		otelconnect.WithTracerProvider(p.Tracers()),
		otelconnect.WithMeterProvider(p.Meters()),
		otelconnect.WithPropagator(p.Propagation()),
		otelconnect.WithTrustRemote(),
		otelconnect.WithDurationHistogramOptions(metric.WithExplicitBucketBoundaries(RPCBuckets()...)),
	)
	if err != nil {
		// NewInterceptor fails only on a provider that cannot create the
		// duration histogram: no RPC instrumentation then, not a broken
		// process.
		return noInterceptor{}
	}
	return i
}

// ClientOption is ConnectInterceptor as a client option.
func (p Providers) ClientOption() connect.ClientOption {
	return connect.WithInterceptors(p.ConnectInterceptor())
}

// RPCBuckets are the bounds, in seconds, of the mesh's duration
// histograms: in-mesh calls take well under a millisecond to a few seconds;
// an owner ask may wait up to its budget.
func RPCBuckets() []float64 {
	return []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
}

type noInterceptor struct{}

func (noInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }
func (noInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}
func (noInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// Transport wraps base so that a request made inside a span carries it
// (a traceparent header) when nothing upstream set one. It is the safety
// net of the shared HTTP clients (a worker's, handed to every task queue):
// a Connect client built on them without ConnectInterceptor still continues
// the caller's trace, if without a client span or client metrics of its
// own. A nil base is http.DefaultTransport.
func (p Providers) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return propagatingTransport{base: base, prop: p.Propagation()}
}

type propagatingTransport struct {
	base http.RoundTripper
	prop propagation.TextMapPropagator
}

func (t propagatingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx := r.Context()
	if trace.SpanContextFromContext(ctx).IsValid() && r.Header.Get("Traceparent") == "" {
		// A RoundTripper must not change the request it is given.
		r = r.Clone(ctx)
		t.prop.Inject(ctx, propagation.HeaderCarrier(r.Header))
	}
	return t.base.RoundTrip(r)
}

// CloseIdleConnections closes the idle connections of the wrapped
// transport (http.Client.CloseIdleConnections reaches it through this).
func (t propagatingTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
