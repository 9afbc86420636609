package edge_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolmesh/toolmesh/internal/servertest"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
)

// latencies collects per-call durations from parallel benchmark goroutines
// and reports calls/s, p50 and p99 beside Go's ns/op and allocs/op.
type latencies struct {
	mu  sync.Mutex
	all []time.Duration
}

func (l *latencies) add(d []time.Duration) {
	l.mu.Lock()
	l.all = append(l.all, d...)
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B, elapsed time.Duration) {
	if len(l.all) == 0 {
		return
	}
	slices.Sort(l.all)
	pct := func(p float64) float64 {
		return float64(l.all[int(float64(len(l.all)-1)*p)].Microseconds())
	}
	b.ReportMetric(float64(len(l.all))/elapsed.Seconds(), "calls/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}

// concurrentCallers is the number of concurrent callers of the benchmarks
// (the DESIGN §7 figures are at 8).
const concurrentCallers = 8

func runParallel(b *testing.B, fn func(ctx context.Context) error) {
	var l latencies
	b.SetParallelism((concurrentCallers + 1) / 2)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		local := make([]time.Duration, 0, 1024)
		for pb.Next() {
			t0 := time.Now()
			if err := fn(ctx); err != nil {
				b.Error(err)
				return
			}
			local = append(local, time.Since(t0))
		}
		l.add(local)
	})
	l.report(b, time.Since(start))
}

// BenchmarkTasksGet compares tasks_get through the edge (MCP 2026-07-28,
// stateless, go-sdk client) with the same Get called directly over Connect,
// against one real tasks service on SQLite.
func BenchmarkTasksGet(b *testing.B) {
	svc := startTasksB(b)
	direct := tasksv1connect.NewTasksServiceClient(svc.Client(), svc.URL, servertest.ClientOptions(nil)...)
	ctx := servertest.As(context.Background(), "local")
	created, err := direct.Create(ctx, &tasksv1.CreateRequest{Description: "benchmark"})
	if err != nil {
		b.Fatal(err)
	}
	id := created.GetTask().GetId()

	b.Run("direct-connect", func(b *testing.B) {
		runParallel(b, func(context.Context) error {
			_, err := direct.Get(ctx, &tasksv1.GetRequest{TaskId: id})
			return err
		})
	})
	b.Run("edge-mcp", func(b *testing.B) {
		cs := startEdgeB(b, tasksOnly(svc))
		args := map[string]any{"task_id": id}
		runParallel(b, func(ctx context.Context) error {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "tasks_get", Arguments: args})
			if err == nil && res.IsError {
				b.Fatalf("tasks_get failed: %v", res.StructuredContent)
			}
			return err
		})
	})
}
