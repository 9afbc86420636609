package edge_test

import (
	"context"
	"path/filepath"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	"github.com/toolmesh/toolmesh/services/tasks"
	"github.com/toolmesh/toolmesh/services/tasks/tasksstore"
)

// BenchmarkTasksGetTelemetry measures what telemetry costs a read: the
// direct Connect call and the edge's tools/call (raw HTTP client), with
// the service and the edge instrumented three ways:
//
//   - none: no providers (no spans, no metrics);
//   - metrics: what every process runs by default — Prometheus metrics,
//     tracing off (trace context still passes through);
//   - traced: metrics and every call traced, spans batched to an exporter
//     that drops them (the cost of recording, not of a collector).
func BenchmarkTasksGetTelemetry(b *testing.B) {
	for _, mode := range []string{"none", "metrics", "traced"} {
		b.Run(mode, func(b *testing.B) {
			var p telemetry.Providers
			if mode != "none" {
				cfg := telemetry.Config{ServiceName: "bench"}
				if mode == "traced" {
					cfg.Exporter = tracetest.NewNoopExporter()
				}
				tel, err := telemetry.New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
				p = tel.Providers
			}
			svc := startTasksTelemetry(b, p)
			id := benchDirect(b, svc)
			b.Run("edge-raw-http", func(b *testing.B) {
				cfg := edgetest.TasksOnly(svc)
				cfg.Telemetry = p
				benchRawCall(b, edgetest.ServeEdgeB(b, cfg)+"/mcp", id)
			})
		})
	}
}

func startTasksTelemetry(b *testing.B, p telemetry.Providers) *servertest.Server {
	ctx := context.Background()
	db := sqldbtest.Open(b, filepath.Join(b.TempDir(), "tasks.db"))
	st, err := tasksstore.Open(ctx, db)
	if err != nil {
		b.Fatal(err)
	}
	return servertest.StartWith(b, servertest.Options{Telemetry: p}, tasks.New(st, tasks.Config{}).Registration())
}
