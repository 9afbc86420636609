package temporalclient

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	otelsdk "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/telemetry"
)

// TestWorkflowAndActivityLogsCarryTheSpan: the logger Temporal hands a
// workflow or an activity names its span with the keys every other log line
// uses.
func TestWorkflowAndActivityLogsCarryTheSpan(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	inner, err := otelsdk.NewTracer(otelsdk.TracerOptions{Tracer: tp.Tracer("test"), TextMapPropagator: telemetry.DefaultPropagator()})
	if err != nil {
		t.Fatal(err)
	}
	tr := loggingTracer{inner}
	span, err := tr.StartSpan(&interceptor.TracerStartSpanOptions{Operation: "RunActivity", Name: "NotifyOwner", Time: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	defer span.Finish(&interceptor.TracerFinishSpanOptions{})

	var buf bytes.Buffer
	log := tr.GetLogger(tlog.NewStructuredLogger(logging.New(&buf, logging.ParseLevel("info"))), span)
	log.Info("activity.ran")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	sc := span.(interface{ SpanContext() trace.SpanContext }).SpanContext()
	if line[logging.KeyTraceID] != sc.TraceID().String() || line[logging.KeySpanID] != sc.SpanID().String() {
		t.Errorf("log line %s, want %s %s and %s %s", buf.String(), logging.KeyTraceID, sc.TraceID(), logging.KeySpanID, sc.SpanID())
	}
}
