package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/telemetry/telemetrytest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
)

const echoProcedure = "toolmesh.testing.v1.TestingService/Echo"

// startTraced serves the testing service with tel and returns a client
// instrumented with it too, over the given protocol.
func startTraced(t *testing.T, tel *telemetrytest.Telemetry, logs *logtest.Buffer, protocol []connect.ClientOption) (*servertest.Server, testingv1connect.TestingServiceClient) {
	t.Helper()
	srv := servertest.StartWith(t, servertest.Options{
		Log:       logging.New(logs, logging.ParseLevel("info")),
		Telemetry: tel.Providers,
		Metrics:   tel.MetricsHandler(),
	}, testingsvc.New().Server())
	opts := append([]connect.ClientOption{tel.ClientOption()}, servertest.ClientOptions(protocol)...)
	return srv, testingv1connect.NewTestingServiceClient(srv.Client(), srv.URL, opts...)
}

// TestCallsContinueTheCallersTrace: a call made inside a span is a client
// span of that trace, and the service handles it in a server span that is
// the client span's child, over Connect and gRPC.
func TestCallsContinueTheCallersTrace(t *testing.T) {
	for _, p := range servertest.Protocols() {
		t.Run(p.Name, func(t *testing.T) {
			tel := telemetrytest.New(t)
			_, client := startTraced(t, tel, &logtest.Buffer{}, p.Opts)
			ctx, root := tel.Tracer().Start(servertest.As(context.Background(), "a1"), "caller")
			if _, err := client.Echo(ctx, &testingv1.EchoRequest{Message: "hi"}); err != nil {
				t.Fatal(err)
			}
			root.End()
			chain := tel.WaitChain(t, telemetrytest.Internal("caller"), telemetrytest.Client(echoProcedure), telemetrytest.Server(echoProcedure))
			if got, want := chain[2].TraceID, root.SpanContext().TraceID().String(); got != want {
				t.Errorf("server span in trace %s, want the caller's %s", got, want)
			}
		})
	}
}

// TestRESTCallsContinueTheCallersTrace: a REST request carrying a
// traceparent is handled inside that trace, through the gateway's hop to
// the gRPC handler, in a span named by its route.
func TestRESTCallsContinueTheCallersTrace(t *testing.T) {
	tel := telemetrytest.New(t)
	srv, _ := startTraced(t, tel, &logtest.Buffer{}, nil)
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/testing/echo", strings.NewReader(`{"message":"hi"}`))
	req.Header.Set("Authorization", servertest.Bearer("a1"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Traceparent", "00-"+traceID+"-"+parentID+"-01")
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("REST echo = %d, want 200", res.StatusCode)
	}
	chain := tel.WaitChain(t, telemetrytest.Server("POST /v1/testing/echo"), telemetrytest.Client(echoProcedure), telemetrytest.Server(echoProcedure))
	if got := chain[0].TraceID; got != traceID {
		t.Errorf("REST span in trace %s, want the caller's %s", got, traceID)
	}
	if got := chain[0].ParentID; got != parentID {
		t.Errorf("REST span's parent = %s, want the caller's span %s", got, parentID)
	}
}

// TestLogLinesInsideAHandlerCarryItsTraceID: what a service logs while it
// handles a call (here the rejection at the grpc.request boundary) names the
// call's trace and span.
func TestLogLinesInsideAHandlerCarryItsTraceID(t *testing.T) {
	tel := telemetrytest.New(t)
	logs := &logtest.Buffer{}
	_, client := startTraced(t, tel, logs, nil)
	if _, err := client.Echo(servertest.As(context.Background(), "a1"), &testingv1.EchoRequest{}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("Echo without a message = %v, want invalid_argument", err)
	}
	chain := tel.WaitChain(t, telemetrytest.Client(echoProcedure), telemetrytest.Server(echoProcedure))
	server := chain[1]

	var line map[string]any
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"boundary.validation_failed"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	if line == nil {
		t.Fatalf("no boundary.validation_failed line in:\n%s", logs)
	}
	if line["trace_id"] != server.TraceID || line["span_id"] != server.SpanID {
		t.Errorf("log line = %v, want trace_id %s and span_id %s (the server span)", line, server.TraceID, server.SpanID)
	}
}

// TestServiceMetrics: /metrics on the service's port shows the RPC
// duration histograms by method and status code, and the process metrics.
func TestServiceMetrics(t *testing.T) {
	tel := telemetrytest.New(t)
	srv, client := startTraced(t, tel, &logtest.Buffer{}, nil)
	ctx := servertest.As(context.Background(), "a1")
	if _, err := client.Echo(ctx, &testingv1.EchoRequest{Message: "hi"}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Echo(ctx, &testingv1.EchoRequest{Message: "hi", Fail: testingv1.Failure_FAILURE_NOT_FOUND}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("Echo failing not found = %v", err)
	}
	page := telemetrytest.Get(t, srv.URL+"/metrics")
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"rpc_server_call_duration_seconds", map[string]string{"rpc_method": echoProcedure, "rpc_response_status_code": "OK"}},
		{"rpc_server_call_duration_seconds", map[string]string{"rpc_method": echoProcedure, "rpc_response_status_code": "NOT_FOUND"}},
		{"rpc_client_call_duration_seconds", map[string]string{"rpc_method": echoProcedure, "rpc_response_status_code": "OK"}},
	} {
		if v, ok := telemetrytest.Value(t, page, c.name, c.labels); !ok || v != 1 {
			t.Errorf("%s%v = %v (found %v), want 1", c.name, c.labels, v, ok)
		}
	}
	for _, name := range []string{"process_cpu_seconds_total", "go_goroutines"} {
		if _, ok := telemetrytest.Value(t, page, name, nil); !ok {
			t.Errorf("/metrics has no %s", name)
		}
	}
}
