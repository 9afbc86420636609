package temporalclient

import (
	"fmt"

	"go.opentelemetry.io/otel/trace"
	otelsdk "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/telemetry"
)

// tracingInterceptor carries traces through Temporal: the client's calls
// (start, signal, update, query) are spans whose context rides in the
// workflow's headers; the worker continues it in the workflow, its
// activities and what they call. It is installed even when tracing is off,
// so a trace that arrives here still reaches the next process.
func tracingInterceptor(p telemetry.Providers) (interceptor.Interceptor, error) {
	t, err := otelsdk.NewTracer(otelsdk.TracerOptions{
		Tracer:            p.Tracers().Tracer("go.temporal.io/sdk"),
		TextMapPropagator: p.Propagation(),
		DisableBaggage:    true,
	})
	if err != nil {
		return nil, fmt.Errorf("temporal tracing: %w", err)
	}
	return interceptor.NewTracingInterceptor(loggingTracer{t}), nil
}

// loggingTracer gives workflow and activity loggers the trace_id and span_id
// keys every other toolmesh log line uses.
type loggingTracer struct{ interceptor.Tracer }

func (t loggingTracer) GetLogger(logger tlog.Logger, ref interceptor.TracerSpanRef) tlog.Logger {
	span, ok := ref.(interface{ SpanContext() trace.SpanContext })
	if !ok || !span.SpanContext().IsValid() {
		return logger
	}
	sc := span.SpanContext()
	return tlog.With(logger, logging.KeyTraceID, sc.TraceID().String(), logging.KeySpanID, sc.SpanID().String())
}
