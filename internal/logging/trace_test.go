package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestLinesInsideASpanCarryItsIDs(t *testing.T) {
	var buf bytes.Buffer
	log := New(&buf, ParseLevel("info")).With("service", "tasks")
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)

	log.InfoContext(ctx, "task.created", "detail", "failed with Bearer abcdefghijklmnopqrstu")
	log.InfoContext(context.Background(), "task.listed")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2:\n%s", len(lines), buf.String())
	}
	var traced, plain map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &traced); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &plain); err != nil {
		t.Fatal(err)
	}
	if traced["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" || traced["span_id"] != "00f067aa0ba902b7" {
		t.Errorf("line inside a span = %s, want trace_id 4bf92f3577b34da6a3ce929d0e0e4736 and span_id 00f067aa0ba902b7", lines[0])
	}
	if traced["service"] != "tasks" {
		t.Errorf("line lost the logger's attributes: %s", lines[0])
	}
	if strings.Contains(lines[0], "abcdefghijklmnopqrstu") {
		t.Errorf("line inside a span leaks a secret: %s", lines[0])
	}
	if _, ok := plain["trace_id"]; ok {
		t.Errorf("line outside any span has a trace_id: %s", lines[1])
	}
}
