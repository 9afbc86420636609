package edge_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/telemetry/telemetrytest"
	"github.com/toolmesh/toolmesh/internal/temporalclient"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
	"github.com/toolmesh/toolmesh/workers/calls"
)

const echoProcedure = "toolmesh.testing.v1.TestingService/Echo"

// tracedFixture is an edge and the test service as two processes, each
// with its own telemetry.
type tracedFixture struct {
	*edgetest.Fixture
	edgeTel, svcTel *telemetrytest.Telemetry
}

func newTracedFixture(t *testing.T, configure func(*edge.Config)) *tracedFixture {
	t.Helper()
	tf := &tracedFixture{edgeTel: telemetrytest.New(t), svcTel: telemetrytest.New(t)}
	backend := testingsvc.New()
	svc := servertest.StartWith(t, servertest.Options{Telemetry: tf.svcTel.Providers}, backend.Server())
	tf.Fixture = edgetest.NewFixtureOn(t, backend, svc, func(cfg *edge.Config) {
		cfg.Telemetry = tf.edgeTel.Providers
		if configure != nil {
			configure(cfg)
		}
	})
	return tf
}

// TestToolCallTraceCrossesEdgeAndService: a tools/call is one trace from
// the edge's span through the service call, in both protocol eras.
func TestToolCallTraceCrossesEdgeAndService(t *testing.T) {
	t.Parallel()
	for _, version := range []string{edge.ModernProtocol, "2025-11-25"} {
		t.Run(version, func(t *testing.T) {
			tf := newTracedFixture(t, nil)
			cs := tf.Connect(t, version, "", nil)
			if _, env := edgetest.CallEnv(t, cs, "testing_echo", map[string]any{"message": "hi"}); env.Status != "ok" {
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
// — in the request's _meta, or as an HTTP header — gets the call inside its
// trace, whether the SDK or the edge's fast path answers it.
func TestToolCallContinuesTheClientsTrace(t *testing.T) {
	t.Parallel()
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	const traceparent = "00-" + traceID + "-" + parentID + "-01"
	raw := func(t *testing.T, url string, meta string, h http.Header) {
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"hi"},` +
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}` + meta + `}}}`
		hdr := edgetest.ModernHeaders("tools/call")
		hdr.Set("Mcp-Name", "testing_echo")
		for k, v := range h {
			hdr[k] = v
		}
		res, out := edgetest.Post(t, url, hdr, body)
		if res.StatusCode != http.StatusOK || !strings.Contains(string(out), `\"status\":\"ok\"`) {
			t.Fatalf("tools/call = %d %s", res.StatusCode, out)
		}
	}
	for _, c := range []struct {
		name     string
		fastPath bool
		call     func(t *testing.T, tf *tracedFixture)
	}{
		{"go-sdk client, _meta", true, func(t *testing.T, tf *tracedFixture) {
			cs := tf.Connect(t, "", "", nil)
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "testing_echo", Arguments: map[string]any{"message": "hi"},
				Meta: mcp.Meta{"traceparent": traceparent}})
			if err != nil || res.IsError {
				t.Fatalf("testing_echo = %v, %v", res, err)
			}
		}},
		{"raw, _meta, fast path", true, func(t *testing.T, tf *tracedFixture) {
			raw(t, tf.URL, `,"traceparent":"`+traceparent+`"`, nil)
		}},
		{"raw, _meta, SDK path", false, func(t *testing.T, tf *tracedFixture) {
			raw(t, tf.URL, `,"traceparent":"`+traceparent+`"`, nil)
		}},
		{"raw, HTTP header, fast path", true, func(t *testing.T, tf *tracedFixture) {
			raw(t, tf.URL, "", http.Header{"Traceparent": {traceparent}})
		}},
		{"raw, HTTP header, SDK path", false, func(t *testing.T, tf *tracedFixture) {
			raw(t, tf.URL, "", http.Header{"Traceparent": {traceparent}})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tf := newTracedFixture(t, func(cfg *edge.Config) { cfg.MCP.DisableFastPath = !c.fastPath })
			c.call(t, tf)
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
		})
	}
}

// TestToolCallOutcomeMetricsAndSpan: each call counts once under its tool
// and outcome, an error under its domain_code, which its span names too.
func TestToolCallOutcomeMetricsAndSpan(t *testing.T) {
	t.Parallel()
	tf := newTracedFixture(t, nil)
	cs := tf.Connect(t, "", "", nil)
	edgetest.CallEnv(t, cs, "testing_echo", map[string]any{"message": "hi"})
	edgetest.CallEnv(t, cs, "testing_echo", map[string]any{"message": "hi"})
	if _, env := edgetest.CallEnv(t, cs, "testing_echo", map[string]any{"message": "x", "fail": "FAILURE_NOT_FOUND"}); env.DomainCode != "not_found" {
		t.Fatalf("failing call = %+v, want not_found", env)
	}
	if _, env := edgetest.CallEnv(t, cs, "testing_echo", map[string]any{}); env.DomainCode != "invalid_argument" {
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

// TestElicitedCallTraceReachesItsSideEffect: an elicited call's rounds are
// counted as input_required, and its side effect — run by the calls
// worker's activity — is a span of the trace of the call's tools/call
// (edge → workflow → activity → service), with the edge, the worker and the
// service each recording their own spans.
func TestElicitedCallTraceReachesItsSideEffect(t *testing.T) {
	t.Parallel()
	edgeTel, workerTel, svcTel := telemetrytest.New(t), telemetrytest.New(t), telemetrytest.New(t)
	server := edgetest.Temporal.Server(t)
	dial := func(tel *telemetrytest.Telemetry) client.Client {
		c, err := temporalclient.Dial(context.Background(), temporalclient.Config{HostPort: server.HostPort, Namespace: server.Namespace, Telemetry: tel.Providers}, logging.Discard())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	backend := testingsvc.New()
	svc := servertest.StartWith(t, servertest.Options{Telemetry: svcTel.Providers}, backend.Server())
	m := edgetest.NewMRTRMesh(t)

	acts, err := calls.NewActivities(calls.Config{
		Contracts:  edgetest.TestingContracts(),
		Services:   map[string]string{testingv1connect.TestingServiceName: svc.URL},
		HTTPClient: svc.Client(),
		Mesh:       servertest.MeshSigner(),
		Telemetry:  workerTel.Providers,
	})
	if err != nil {
		t.Fatal(err)
	}
	w := worker.New(dial(workerTel), m.Queue, worker.Options{})
	calls.Register(w, acts)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	f := edgetest.NewFixtureOn(t, backend, svc, func(c *edge.Config) {
		c.Elicitation = &edge.Elicitation{Temporal: dial(edgeTel), States: m.Sealer, TaskQueue: m.Queue}
		c.Telemetry = edgeTel.Providers
	})

	final := rawCall(t, f.URL, "testing_purge", map[string]any{}, edgetest.NewAnswerer(edgetest.PurgeSheet))
	if final.ResultType == "input_required" || backend.Calls("Purge") != 1 {
		t.Fatalf("final round = %+v (Purge called %d times), want the purge done once", final, backend.Calls("Purge"))
	}

	page := edgeTel.Scrape(t)
	for status, want := range map[string]float64{"input_required": 2, "ok": 1} {
		if got, _ := telemetrytest.Value(t, page, "toolmesh_tool_calls_total", map[string]string{"tool": "testing_purge", "status": status}); got != want {
			t.Errorf("toolmesh_tool_calls_total{tool=testing_purge,status=%s} = %v, want %v", status, got, want)
		}
	}

	const purge = "toolmesh.testing.v1.TestingService/Purge"
	var spans []telemetrytest.Span
	deadline := time.Now().Add(time.Minute)
	for {
		spans = nil
		for _, tel := range []*telemetrytest.Telemetry{edgeTel, workerTel, svcTel} {
			spans = append(spans, tel.Spans(t)...)
		}
		if chain, ok := telemetrytest.Chain(spans, telemetrytest.Server("RunActivity:"+calls.ActivityInvoke),
			telemetrytest.Client(purge), telemetrytest.Server(purge)); ok {
			ancestry := telemetrytest.Ancestry(spans, chain[0])
			if n := len(ancestry); n > 0 && ancestry[n-1].Name == "tools/call testing_purge" && ancestry[n-1].Kind == trace.SpanKindServer {
				t.Logf("side effect's trace (leaf first):\n%s%s", telemetrytest.Describe(chain), telemetrytest.Describe(ancestry))
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no trace from tools/call testing_purge to the side effect's %s; spans:\n%s", purge, telemetrytest.Describe(spans))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
