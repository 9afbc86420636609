package edge_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
	"github.com/toolmesh/toolmesh/services/tasks/tasksstore"
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
// (the figures in docs/performance.md are at 8).
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

// BenchmarkTasksGet compares, in one run, three ways to read one task:
//
//   - direct-connect: TasksService.Get called directly over Connect;
//   - edge-mcp: the tasks_get tool through the edge (MCP 2026-07-28,
//     stateless, go-sdk client), which calls the same service;
//   - stock-sdk: a plain go-sdk server with a typed tool that reads the same
//     store in process (the edge's baseline in docs/performance.md).
//
// Client, edge and service share this process, so B/op and allocs/op count
// all three sides of a call.
func BenchmarkTasksGet(b *testing.B) {
	svc, store := edgetest.StartTasksWithStore(b)
	id := benchDirect(b, svc)
	b.Run("edge-mcp", func(b *testing.B) {
		cs := edgetest.StartEdgeB(b, edgetest.TasksOnly(svc))
		benchCallTool(b, cs, id)
	})
	b.Run("stock-sdk", func(b *testing.B) {
		cs := connectB(b, serveStockSDK(b, store))
		benchCallTool(b, cs, id)
	})
	// The same two servers driven by a plain HTTP client that posts the
	// JSON-RPC request and reads the SSE answer: the go-sdk client's own
	// cost (it shares these 2 cores) is out of the figures.
	b.Run("edge-raw-http", func(b *testing.B) {
		benchRawCall(b, edgetest.ServeEdgeB(b, edgetest.TasksOnly(svc))+"/mcp", id)
	})
	b.Run("stock-sdk-raw-http", func(b *testing.B) {
		benchRawCall(b, serveStockSDK(b, store), id)
	})
}

// benchDirect creates the task the benchmark reads, as agent "local", and
// runs the direct-connect sub-benchmark: TasksService.Get over Connect. It
// returns the task's id.
func benchDirect(b *testing.B, svc *servertest.Server) string {
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
	return id
}

// benchRawCall posts tools/call tasks_get at 2026-07-28 as a bare HTTP
// client would and checks each answer is a successful result.
func benchRawCall(b *testing.B, url, id string) {
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tasks_get","arguments":{"task_id":"` + id +
		`"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrentCallers * 2}}
	b.Cleanup(client.CloseIdleConnections)
	runParallel(b, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", "tasks_get")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		out, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || !bytes.Contains(out, []byte(`"result"`)) || bytes.Contains(out, []byte(`"isError":true`)) {
			return fmt.Errorf("tools/call answered %d: %.300s", resp.StatusCode, out)
		}
		return nil
	})
}

func benchCallTool(b *testing.B, cs *mcp.ClientSession, id string) {
	args := map[string]any{"task_id": id}
	runParallel(b, func(ctx context.Context) error {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "tasks_get", Arguments: args})
		if err == nil && res.IsError {
			b.Fatalf("tasks_get failed: %v", res.StructuredContent)
		}
		return err
	})
}

type getIn struct {
	TaskID string `json:"task_id"`
}

// serveStockSDK serves a go-sdk server, configured as the SDK documents,
// whose tasks_get reads the store directly, and returns its URL.
func serveStockSDK(b *testing.B, store *tasksstore.Store) string {
	srv := mcp.NewServer(&mcp.Implementation{Name: "stock", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "tasks_get", Description: "Get one work task by its id."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in getIn) (*mcp.CallToolResult, map[string]any, error) {
			t, err := store.Get(ctx, "local", in.TaskID)
			if err != nil {
				return nil, nil, err
			}
			js, err := protojson.Marshal(t)
			if err != nil {
				return nil, nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(js)}}}, nil, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true}))
	b.Cleanup(hs.Close)
	return hs.URL
}

// connectB opens a go-sdk client session to an MCP endpoint.
func connectB(b *testing.B, url string) *mcp.ClientSession {
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close() })
	return cs
}
