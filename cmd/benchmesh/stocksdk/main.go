// Command stocksdk is the baseline of `make bench-mesh`: an MCP server
// written the way the go-sdk documents it — mcp.NewServer with default
// options, a typed tool added with mcp.AddTool, the stateless Streamable
// HTTP handler — whose tasks_get tool does the lookup the mesh's edge does:
// TasksService.Get over Connect (the generated client with its defaults,
// on an HTTP client like the edge's: HTTP/1.1 keep-alive connections), as
// the agent the given mesh token names. It holds nothing of the mesh's own
// code.
//
//	stocksdk --addr 127.0.0.1:7300 --tasks-url http://127.0.0.1:7101 --token-file token
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/benchmesh"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "stocksdk:", err)
		os.Exit(1)
	}
}

type getIn struct {
	TaskID string `json:"task_id" jsonschema:"the task's id"`
}

type task struct {
	ID           string `json:"id"`
	AgentID      string `json:"agent_id"`
	Description  string `json:"description"`
	Status       string `json:"status"`
	Priority     string `json:"priority"`
	Result       string `json:"result,omitempty"`
	CancelReason string `json:"cancel_reason,omitempty"`
	CreateTime   string `json:"create_time"`
	UpdateTime   string `json:"update_time"`
}

type getOut struct {
	Task task `json:"task"`
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("stocksdk", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:7300", "listen address")
	tasksURL := fs.String("tasks-url", "http://127.0.0.1:7101", "the tasks service")
	tokenFile := fs.String("token-file", "", "file holding the mesh token the lookups carry")
	debugAddr := fs.String("debug-addr", "", "serve /debug/pprof on this address (off when empty)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	tok, err := os.ReadFile(*tokenFile)
	if err != nil {
		return fmt.Errorf("read token: %w", err)
	}
	auth := "Bearer " + strings.TrimSpace(string(tok))

	withToken := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", auth)
			return next(ctx, req)
		}
	})
	// Idle connections are kept as the edge keeps them (up to 256 per
	// service, 90 s): with fewer, 200 callers open a connection for most
	// calls. The stock server calls from a loopback address of its own, so
	// that its connections and the edge's do not add up against the one
	// per-address cap of the tasks service, as on separate machines.
	tasks := tasksv1connect.NewTasksServiceClient(&http.Client{Transport: &http.Transport{DialContext: benchmesh.DialFrom(benchmesh.StockAddr), MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}}, *tasksURL,
		connect.WithInterceptors(withToken))

	server := mcp.NewServer(&mcp.Implementation{Name: "stocksdk", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "tasks_get", Description: "Get one work task by its id."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in getIn) (*mcp.CallToolResult, getOut, error) {
			res, err := tasks.Get(ctx, &tasksv1.GetRequest{TaskId: in.TaskID})
			if err != nil {
				return nil, getOut{}, err
			}
			t := res.GetTask()
			return nil, getOut{Task: task{
				ID: t.GetId(), AgentID: t.GetAgentId(), Description: t.GetDescription(),
				Status: t.GetStatus().String(), Priority: t.GetPriority().String(),
				Result: t.GetResult(), CancelReason: t.GetCancelReason(),
				CreateTime: t.GetCreateTime().AsTime().Format(time.RFC3339Nano),
				UpdateTime: t.GetUpdateTime().AsTime().Format(time.RFC3339Nano),
			}}, nil
		})
	hs := &http.Server{
		Addr:              *addr,
		Handler:           mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{Stateless: true}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	errc := make(chan error, 2)
	go func() { errc <- hs.ListenAndServe() }()
	if *debugAddr != "" {
		// net/http/pprof registers its handlers on the default mux.
		go func() { errc <- http.ListenAndServe(*debugAddr, nil) }()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
