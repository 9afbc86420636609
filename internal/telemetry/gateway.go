package telemetry

import (
	"context"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// The REST gateway is two hops: an HTTP request, translated into a gRPC
// call to the service's own listener. Both continue the trace; neither
// records metrics, since the Connect handler behind them measures the call.

// GatewayHandler wraps the REST gateway: a server span per request that
// continues the caller's trace (a traceparent header), named by the route
// the gateway matched (GatewayRoute), e.g. "GET /v1/tasks/{task_id=*}".
func (p Providers) GatewayHandler(h http.Handler) http.Handler {
	traced := otelhttp.NewHandler(h, "rest",
		otelhttp.WithTracerProvider(p.Tracers()),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithPropagators(p.Propagation()),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if route, _ := r.Context().Value(routeKey{}).(*string); route != nil && *route != "" {
				return r.Method + " " + *route
			}
			return r.Method
		}),
	)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The route is known only once the gateway has matched it, inside.
		traced.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), routeKey{}, new(string))))
	})
}

type routeKey struct{}

// GatewayRoute is the gateway middleware that records the route a request
// matched, for the name of its span and its http.route attribute.
func GatewayRoute(next runtime.HandlerFunc) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, params map[string]string) {
		if pattern, ok := runtime.HTTPPattern(r.Context()); ok {
			route := pattern.String()
			if holder, _ := r.Context().Value(routeKey{}).(*string); holder != nil {
				*holder = route
			}
			trace.SpanFromContext(r.Context()).SetAttributes(semconv.HTTPRoute(route))
		}
		next(w, r, params)
	}
}

// GatewayDialOption makes the gateway's gRPC calls client spans that carry
// the trace to the handler.
func (p Providers) GatewayDialOption() grpc.DialOption {
	return grpc.WithStatsHandler(otelgrpc.NewClientHandler(
		otelgrpc.WithTracerProvider(p.Tracers()),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithPropagators(p.Propagation()),
	))
}
