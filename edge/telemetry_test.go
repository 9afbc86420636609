package edge_test

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/servertest"
	"github.com/toolmesh/toolmesh/internal/telemetry/telemetrytest"
	"github.com/toolmesh/toolmesh/internal/testingsvc"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
)

const echoProcedure = "toolmesh.testing.v1.TestingService/Echo"

// tracedFixture is an edge and the test service as two processes, each
// with its own telemetry.
type tracedFixture struct {
	*fixture
	edgeTel, svcTel *telemetrytest.Telemetry
}

func newTracedFixture(t *testing.T) *tracedFixture {
	t.Helper()
	tf := &tracedFixture{edgeTel: telemetrytest.New(t), svcTel: telemetrytest.New(t)}
	backend := testingsvc.New()
	svc := servertest.StartWith(t, servertest.Options{Telemetry: tf.svcTel.Providers}, backend.Server())
	tf.fixture = newFixture(t, func(cfg *edge.Config) {
		cfg.Contracts = []protoreflect.ServiceDescriptor{testingService()}
		cfg.Services = map[string]string{testingv1connect.TestingServiceName: svc.URL}
		cfg.HTTPClient = svc.Client()
		cfg.Telemetry = tf.edgeTel.Providers
	})
	tf.backend, tf.svc = backend, svc
	return tf
}

// TestToolCallTraceCrossesEdgeAndService: a tools/call is one trace from
// the edge's span through the service call, in both protocol eras.
func TestToolCallTraceCrossesEdgeAndService(t *testing.T) {
	for _, version := range []string{edge.ModernProtocol, "2025-11-25"} {
		t.Run(version, func(t *testing.T) {
			tf := newTracedFixture(t)
			cs := tf.connect(t, version, "", nil)
			if _, env := callEnv(t, cs, "testing_echo", map[string]any{"message": "hi"}); env.Status != "ok" {
				t.Fatalf("testing_echo = %+v", env)
			}
			chain := telemetrytest.WaitChain(t, []*telemetrytest.Telemetry{tf.edgeTel, tf.svcTel},
				telemetrytest.Server("tools/call testing_echo"), telemetrytest.Client(echoProcedure), telemetrytest.Server(echoProcedure))
			if chain[0].ParentID != "" {
				t.Errorf("tools/call span has parent %s, want a new trace (the client sent none)", chain[0].ParentID)
			}
		})
	}
}

// TestToolCallContinuesTheClientsTrace: a client that sends a traceparent
// in the request's _meta gets the call inside its trace.
func TestToolCallContinuesTheClientsTrace(t *testing.T) {
	tf := newTracedFixture(t)
	cs := tf.connect(t, "", "", nil)
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "testing_echo", Arguments: map[string]any{"message": "hi"},
		Meta: mcp.Meta{"traceparent": "00-" + traceID + "-" + parentID + "-01"}})
	if err != nil || res.IsError {
		t.Fatalf("testing_echo = %v, %v", res, err)
	}
	chain := telemetrytest.WaitChain(t, []*telemetrytest.Telemetry{tf.edgeTel, tf.svcTel},
		telemetrytest.Server("tools/call testing_echo"), telemetrytest.Client(echoProcedure), telemetrytest.Server(echoProcedure))
	for _, s := range chain {
		if got := s.TraceID; got != traceID {
			t.Errorf("span %s in trace %s, want the client's %s", s.Name, got, traceID)
		}
	}
	if got := chain[0].ParentID; got != parentID {
		t.Errorf("tools/call span's parent = %s, want the client's span %s", got, parentID)
	}
}

// TestToolCallOutcomeMetricsAndSpan: each call counts once under its tool
// and outcome, an error under its domain_code, which its span names too.
func TestToolCallOutcomeMetricsAndSpan(t *testing.T) {
	tf := newTracedFixture(t)
	cs := tf.connect(t, "", "", nil)
	callEnv(t, cs, "testing_echo", map[string]any{"message": "hi"})
	callEnv(t, cs, "testing_echo", map[string]any{"message": "hi"})
	if _, env := callEnv(t, cs, "testing_echo", map[string]any{"message": "x", "fail": "FAILURE_NOT_FOUND"}); env.DomainCode != "not_found" {
		t.Fatalf("failing call = %+v, want not_found", env)
	}
	if _, env := callEnv(t, cs, "testing_echo", map[string]any{}); env.DomainCode != "invalid_argument" {
		t.Fatalf("call without a message = %+v, want invalid_argument", env)
	}

	page := tf.edgeTel.Scrape(t)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"toolmesh_tool_calls_total", map[string]string{"tool": "testing_echo", "status": "ok"}, 2},
		{"toolmesh_tool_calls_total", map[string]string{"tool": "testing_echo", "status": "error", "domain_code": "not_found"}, 1},
		{"toolmesh_tool_calls_total", map[string]string{"tool": "testing_echo", "status": "error", "domain_code": "invalid_argument"}, 1},
		{"toolmesh_tool_call_duration_seconds", map[string]string{"tool": "testing_echo", "status": "ok"}, 2},
		{"toolmesh_tool_call_duration_seconds", map[string]string{"tool": "testing_echo", "status": "error"}, 2},
		// The invalid call never left the edge.
		{"rpc_client_call_duration_seconds", map[string]string{"rpc_method": echoProcedure}, 3},
	} {
		if got, _ := telemetrytest.Value(t, page, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}

	var notFound bool
	for _, s := range tf.edgeTel.Spans(t) {
		if s.Name == "tools/call testing_echo" && s.Attrs["error.type"] == "not_found" && s.Error {
			notFound = true
		}
	}
	if !notFound {
		t.Errorf("no tools/call span with error.type not_found and status Error:\n%s", telemetrytest.Describe(tf.edgeTel.Spans(t)))
	}
}
