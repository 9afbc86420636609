package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/telemetry/telemetrytest"
	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/temporaltest"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
	ownerworker "github.com/toolmesh/toolmesh/workers/owner"
)

// process is `toolmesh args...` run in this test binary, its spans written
// to out by the stdout exporter.
type process struct {
	name      string
	out, logs *logtest.Buffer
	stop      func()
}

func startProcess(t *testing.T, health string, args ...string) *process {
	t.Helper()
	p := &process{name: args[0], out: &logtest.Buffer{}, logs: &logtest.Buffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, args, func(string) string { return "" }, nil, p.out, p.logs)
	}()
	var once sync.Once
	p.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: %v", p.name, err)
			}
		})
	}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s log:\n%s", p.name, p.logs)
		}
	})
	dead := make(chan struct{})
	if err := waitHealthy(ctx, health, dead, 30*time.Second); err != nil {
		t.Fatalf("%s did not become healthy: %v", args, err)
	}
	return p
}

// TestTelemetryEndToEnd runs the owner domain as `toolmesh serve owner`,
// `toolmesh worker owner` and `toolmesh edge` with spans on their stdout,
// against a real Temporal dev server, and checks what an operator would
// see: one trace from the MCP call through the service, the workflow and
// its activity back into the service; the documented series on each
// process's /metrics.
func TestTelemetryEndToEnd(t *testing.T) {
	temporal := temporaltest.Start(t)
	data := t.TempDir()
	if err := run(context.Background(), []string{"keygen", "--data", data}, func(string) string { return "" }, nil, discard{}, discard{}); err != nil {
		t.Fatal(err)
	}
	svcAddr, workerAddr, edgeAddr, metricsAddr := porttest.Addr(t), porttest.Addr(t), porttest.Addr(t), porttest.Addr(t)
	exporter := []string{"--trace-exporter", "stdout"}
	svc := startProcess(t, "http://"+svcAddr+"/healthz", append([]string{"serve", "owner", "--addr", svcAddr, "--data", data,
		"--temporal", temporal.HostPort, "--dsn", filepath.Join(data, "owner.db")}, exporter...)...)
	worker := startProcess(t, "http://"+workerAddr+"/healthz", append([]string{"worker", "owner", "--temporal", temporal.HostPort,
		"--health-addr", workerAddr, "--data", data, "--service", "owner=http://" + svcAddr}, exporter...)...)
	edgeProc := startProcess(t, "http://"+edgeAddr+"/healthz", append([]string{"edge", "--addr", edgeAddr, "--metrics-addr", metricsAddr,
		"--data", data, "--service", "owner=http://" + svcAddr, "--wait-budget", "1s"}, exporter...)...)

	workflow := workflowcontract.WorkflowOf(&ownerv1.AskWorkflowInput{}).Name
	workerMetrics := "http://" + workerAddr + "/metrics"
	// waitWorker waits until the worker's /metrics shows a sample.
	waitWorker := func(what, name string, labels map[string]string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			if v, _ := telemetrytest.Value(t, telemetrytest.Get(t, workerMetrics), name, labels); v >= 1 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no %s%v on the worker's /metrics:\n%s", what, name, labels, telemetrytest.Get(t, workerMetrics))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	var progress atomic.Int32
	s := mcpSession(t, "http://"+edgeAddr+"/mcp", &progress)
	ask := pendingAsk(t, s, map[string]any{"question": "Ship it?", "wait_seconds": 0})
	waitWorker("the owner is notified", "temporal_activity_execution_latency_seconds", map[string]string{"activity_type": ownerworker.ActivityNotifyOwner})
	if env := callTool(t, s, "owner_answer", map[string]any{"ask_id": ask.Ask.AskID, "answer": "yes"}); env.Status != "ok" {
		t.Fatalf("owner_answer = %+v", env)
	}
	if env := callTool(t, s, "owner_get_ask", map[string]any{"ask_id": "ask_00000000000000000000000000"}); env.DomainCode != "not_found" {
		t.Fatalf("owner_get_ask of an unknown ask = %+v, want not_found", env)
	}
	// The workflow completes after the answer: its span ends with it.
	waitWorker("the ask's workflow completes", "temporal_workflow_completed_total", map[string]string{"workflow_type": workflow})

	t.Run("metrics", func(t *testing.T) {
		for _, c := range []struct {
			url, name string
			labels    map[string]string
		}{
			{"http://" + metricsAddr + "/metrics", "toolmesh_tool_calls_total", map[string]string{"tool": "owner_get_ask", "status": "error", "domain_code": "not_found"}},
			{"http://" + metricsAddr + "/metrics", "toolmesh_tool_calls_total", map[string]string{"tool": "owner_ask", "status": "ok"}},
			{"http://" + metricsAddr + "/metrics", "toolmesh_tool_call_duration_seconds", map[string]string{"tool": "owner_answer"}},
			{"http://" + metricsAddr + "/metrics", "rpc_client_call_duration_seconds", map[string]string{"rpc_method": "toolmesh.owner.v1.OwnerService/Ask"}},
			{"http://" + metricsAddr + "/metrics", "process_resident_memory_bytes", nil},
			{"http://" + svcAddr + "/metrics", "rpc_server_call_duration_seconds", map[string]string{"rpc_method": "toolmesh.owner.v1.OwnerService/GetAsk", "rpc_response_status_code": "NOT_FOUND"}},
			{"http://" + svcAddr + "/metrics", "rpc_server_call_duration_seconds", map[string]string{"rpc_method": "toolmesh.owner.v1.OwnerService/Notify", "rpc_response_status_code": "OK"}},
			{"http://" + svcAddr + "/metrics", "temporal_request_total", map[string]string{"operation": "StartWorkflowExecution"}},
			{"http://" + svcAddr + "/metrics", "process_resident_memory_bytes", nil},
			{workerMetrics, "temporal_workflow_completed_total", map[string]string{"workflow_type": workflow}},
			{workerMetrics, "temporal_workflow_endtoend_latency_seconds", map[string]string{"workflow_type": workflow}},
			{workerMetrics, "temporal_activity_execution_latency_seconds", map[string]string{"activity_type": ownerworker.ActivityNotifyOwner}},
			{workerMetrics, "rpc_client_call_duration_seconds", map[string]string{"rpc_method": "toolmesh.owner.v1.OwnerService/Notify"}},
			{workerMetrics, "process_resident_memory_bytes", nil},
		} {
			if v, ok := telemetrytest.Value(t, telemetrytest.Get(t, c.url), c.name, c.labels); !ok || v < 1 {
				t.Errorf("%s: %s%v = %v (present: %v), want at least 1", c.url, c.name, c.labels, v, ok)
			}
		}
	})

	t.Run("one trace from the MCP call through the workflow and its activity", func(t *testing.T) {
		// Stopping the processes flushes their spans.
		edgeProc.stop()
		worker.stop()
		svc.stop()
		var spans []telemetrytest.Span
		for _, p := range []*process{svc, worker, edgeProc} {
			spans = append(spans, telemetrytest.ParseStdout(t, p.out.String())...)
		}
		steps := []telemetrytest.Step{
			telemetrytest.Server("tools/call owner_ask"),
			telemetrytest.Client("toolmesh.owner.v1.OwnerService/Ask"),
			telemetrytest.Server("toolmesh.owner.v1.OwnerService/Ask"),
			telemetrytest.Client("StartWorkflow:" + workflow),
			telemetrytest.Server("RunWorkflow:" + workflow),
			telemetrytest.Client("StartActivity:" + ownerworker.ActivityNotifyOwner),
			telemetrytest.Server("RunActivity:" + ownerworker.ActivityNotifyOwner),
			telemetrytest.Client("toolmesh.owner.v1.OwnerService/Notify"),
			telemetrytest.Server("toolmesh.owner.v1.OwnerService/Notify"),
		}
		if _, ok := telemetrytest.Chain(spans, steps...); !ok {
			t.Errorf("no trace %v; spans:\n%s", steps, telemetrytest.Describe(spans))
		}
		// The answer is a trace of its own, through the update into the
		// workflow.
		answer := []telemetrytest.Step{
			telemetrytest.Server("tools/call owner_answer"),
			telemetrytest.Client("toolmesh.owner.v1.OwnerService/Answer"),
			telemetrytest.Server("toolmesh.owner.v1.OwnerService/Answer"),
		}
		if _, ok := telemetrytest.Chain(spans, answer...); !ok {
			t.Errorf("no trace %v; spans:\n%s", answer, telemetrytest.Describe(spans))
		}
	})
}

// otlpReceiver collects the span names OTLP exporters send it.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	names []string
}

func (r *otlpReceiver) add(req *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.names = append(r.names, s.GetName())
			}
		}
	}
}

func (r *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) received() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.names)
}

// TestOTLPExport: `--trace-exporter otlp` sends a service's spans to the
// collector the standard OTEL_EXPORTER_OTLP_* variables name, over either
// protocol.
func TestOTLPExport(t *testing.T) {
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(protocol, func(t *testing.T) {
			rec := &otlpReceiver{}
			var endpoint string
			if protocol == "grpc" {
				lis, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				gs := grpc.NewServer()
				coltracepb.RegisterTraceServiceServer(gs, rec)
				go gs.Serve(lis)
				t.Cleanup(gs.Stop)
				endpoint = "http://" + lis.Addr().String()
			} else {
				hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					body, _ := io.ReadAll(r.Body)
					var req coltracepb.ExportTraceServiceRequest
					if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
						http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
						return
					}
					rec.add(&req)
					w.Header().Set("Content-Type", "application/x-protobuf")
				}))
				t.Cleanup(hs.Close)
				endpoint = hs.URL
			}
			// The exporter reads these itself, from the process environment.
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")

			addr := porttest.Addr(t)
			p := startProcess(t, "http://"+addr+"/healthz", "serve", "tasks", "--addr", addr, "--data", t.TempDir(),
				"--mesh-public-key", testPublicKey(t), "--trace-exporter", "otlp", "--otlp-protocol", protocol)
			client := servertest.HTTPClient()
			t.Cleanup(client.CloseIdleConnections)
			tasks := tasksv1connect.NewTasksServiceClient(client, "http://"+addr, servertest.ClientOptions(nil)...)
			if _, err := tasks.List(servertest.As(context.Background(), "local"), &tasksv1.ListRequest{}); err != nil {
				t.Fatal(err)
			}
			client.CloseIdleConnections()
			p.stop() // flushes the spans
			if got := rec.received(); !slices.Contains(got, "toolmesh.tasks.v1.TasksService/List") {
				t.Errorf("the collector received spans %q, want toolmesh.tasks.v1.TasksService/List", got)
			}
		})
	}
}
