package edge

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/toolcall"
)

// Metrics of the edge (Prometheus names in brackets). Labels are bounded:
// tool is a registered tool's name (unknown tools never reach a handler),
// domain_code one of the envelope's codes, status ok, error or
// input_required (a round of an elicited call that asks the user).
const (
	// MetricToolCalls counts tool calls by tool, status and, for errors,
	// domain_code [toolmesh_tool_calls_total].
	MetricToolCalls = "toolmesh.tool.calls"
	// MetricToolCallDuration is the time from a tools/call reaching its
	// handler to its envelope, by tool and status
	// [toolmesh_tool_call_duration_seconds].
	MetricToolCallDuration = "toolmesh.tool.call.duration"
)

// Attribute keys of the edge's spans and metrics.
const (
	attrTool       = attribute.Key("tool")
	attrStatus     = attribute.Key("status")
	attrDomainCode = attribute.Key("domain_code")
)

// instruments are the edge's metrics and tracer.
type instruments struct {
	tracer   trace.Tracer
	prop     telemetry.Providers
	calls    metric.Int64Counter
	duration metric.Float64Histogram
}

func newInstruments(p telemetry.Providers) (*instruments, error) {
	m := p.Meter()
	calls, err := m.Int64Counter(MetricToolCalls, metric.WithUnit("{call}"),
		metric.WithDescription("MCP tool calls by tool and outcome (status, and domain_code for errors)."))
	if err != nil {
		return nil, fmt.Errorf("edge metrics: %w", err)
	}
	duration, err := m.Float64Histogram(MetricToolCallDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of MCP tool calls at the edge, by tool and status."),
		metric.WithExplicitBucketBoundaries(telemetry.RPCBuckets()...))
	if err != nil {
		return nil, fmt.Errorf("edge metrics: %w", err)
	}
	return &instruments{tracer: p.Tracer(), prop: p, calls: calls, duration: duration}, nil
}

// callTelemetry is what a binding reuses on every call.
type callTelemetry struct {
	spanName  string
	spanStart []trace.SpanStartOption
	ok        metric.MeasurementOption
	interim   metric.MeasurementOption
	task      metric.MeasurementOption
}

func newCallTelemetry(tool string) callTelemetry {
	return callTelemetry{
		spanName: "tools/call " + tool,
		spanStart: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			attribute.String("mcp.method.name", "tools/call"),
			attribute.String("gen_ai.operation.name", "execute_tool"),
			attribute.String("gen_ai.tool.name", tool),
		)},
		ok:      metric.WithAttributeSet(attribute.NewSet(attrTool.String(tool), attrStatus.String("ok"))),
		interim: metric.WithAttributeSet(attribute.NewSet(attrTool.String(tool), attrStatus.String("input_required"))),
		task:    metric.WithAttributeSet(attribute.NewSet(attrTool.String(tool), attrStatus.String("task"))),
	}
}

// startCall starts the span of one tools/call. It continues the client's
// trace: the traceparent in the request's _meta (MCP's own carrier), else
// in the HTTP request's headers.
func (in *instruments) startCall(ctx context.Context, b *binding, meta map[string]any, header http.Header) (context.Context, trace.Span) {
	if v, ok := meta["traceparent"].(string); ok && v != "" {
		ctx = in.prop.Extract(ctx, metaCarrier(meta))
	} else if header != nil {
		ctx = in.prop.Extract(ctx, propagation.HeaderCarrier(header))
	}
	return in.tracer.Start(ctx, b.telemetry.spanName, b.telemetry.spanStart...)
}

// endCall records the outcome of a call in its span and the metrics.
func (in *instruments) endCall(ctx context.Context, b *binding, env *toolcall.Envelope, took time.Duration) {
	secs := took.Seconds()
	if !env.IsError() {
		in.calls.Add(ctx, 1, b.telemetry.ok)
		in.duration.Record(ctx, secs, b.telemetry.ok)
		return
	}
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("error.type", env.DomainCode))
		span.SetStatus(codes.Error, env.DomainCode)
	}
	tool := attrTool.String(b.tool.Name)
	in.calls.Add(ctx, 1, metric.WithAttributes(tool, attrStatus.String("error"), attrDomainCode.String(env.DomainCode)))
	in.duration.Record(ctx, secs, metric.WithAttributes(tool, attrStatus.String("error")))
}

// interimCall records a call that has no outcome yet: a round of an
// elicited call that asks the user for input, or a call that became an MCP
// task.
func (in *instruments) interimCall(ctx context.Context, b *binding, task bool, took time.Duration) {
	resultType, opt := "input_required", b.telemetry.interim
	if task {
		resultType, opt = "task", b.telemetry.task
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("mcp.result_type", resultType))
	in.calls.Add(ctx, 1, opt)
	in.duration.Record(ctx, took.Seconds(), opt)
}

// metaCarrier reads trace context from a request's _meta.
type metaCarrier map[string]any

func (m metaCarrier) Get(key string) string {
	s, _ := m[key].(string)
	return s
}

func (m metaCarrier) Set(key, value string) { m[key] = value }

func (m metaCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}
