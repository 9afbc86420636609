// Package edge is the MCP edge of the mesh: it serves the Model Context
// Protocol over Streamable HTTP at /mcp, derives its tools from the protobuf
// contracts, turns each tools/call into a service call and answers with one
// uniform envelope. It holds no state of its own.
package edge

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolmesh/toolmesh/edge/registry"
	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/proto/gen/descriptorset"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// ModernProtocol is the first MCP protocol version served statelessly.
const ModernProtocol = "2026-07-28"

// Config configures an edge.
type Config struct {
	// Services maps fully-qualified service names to their base URLs
	// ("http://127.0.0.1:7101"). A tool whose service is missing answers
	// not_supported.
	Services map[string]string
	// CallTimeout bounds each service call (default 15s).
	CallTimeout time.Duration
	// DevAgent is the agent a call acts as when the request names none
	// (development mode; replaced by verified identity).
	DevAgent string
	// Version is reported to MCP clients.
	Version string
	// Contracts overrides the services exposed (default Contracts()).
	Contracts []protoreflect.ServiceDescriptor
	// HTTPClient overrides the client used to reach services.
	HTTPClient *http.Client
	// Mesh signs the mesh token each service call carries. Required.
	Mesh *mesh.Signer
}

// Edge is a configured MCP edge.
type Edge struct {
	cfg      Config
	log      *slog.Logger
	reg      *registry.Registry
	bindings map[string]*binding
	server   *mcp.Server
	handler  http.Handler
}

// New builds the edge: the tool registry from the contracts, one bound
// client per tool, and the MCP server.
func New(cfg Config, log *slog.Logger) (*Edge, error) {
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 15 * time.Second
	}
	if cfg.DevAgent == "" {
		cfg.DevAgent = "local"
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.Mesh == nil {
		return nil, errors.New("edge: no mesh signing key configured")
	}
	if cfg.Contracts == nil {
		cfg.Contracts = Contracts()
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = newServiceClient()
	}
	docs, err := registry.LoadDocs(descriptorset.Bytes)
	if err != nil {
		return nil, err
	}
	reg, err := registry.Build(cfg.Contracts, docs, registry.Options{})
	if err != nil {
		return nil, fmt.Errorf("build tool registry: %w", err)
	}
	validator, err := boundary.NewValidator()
	if err != nil {
		return nil, err
	}
	e := &Edge{cfg: cfg, log: log, reg: reg, bindings: map[string]*binding{}}
	e.server = mcp.NewServer(&mcp.Implementation{Name: "toolmesh", Title: "toolmesh", Version: cfg.Version}, &mcp.ServerOptions{
		Logger:       log,
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
		Instructions: "toolmesh exposes agent-platform services as tools. Every result is a JSON envelope: " +
			`{"status":"ok","data":...} or {"status":"error","domain_code":...,"message":...}; ` +
			"on invalid_argument, fix the named fields and call again.",
	})
	for _, t := range reg.Tools() {
		b := newBinding(t, cfg.HTTPClient, cfg.Services[t.Service], validator, log, cfg.CallTimeout)
		e.bindings[t.Name] = b
		e.server.AddTool(mcpTool(t), e.toolHandler(b))
	}
	e.handler = e.routes()
	return e, nil
}

func newServiceClient() *http.Client {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		Protocols:           protocols,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}}
}

// mcpTool describes t for tools/list.
func mcpTool(t *registry.Tool) *mcp.Tool {
	readOnly := t.Kind == toolv1.Kind_KIND_READ
	destructive := t.Kind == toolv1.Kind_KIND_ADMIN
	return &mcp.Tool{
		Name:         t.Name,
		Title:        t.Title,
		Description:  t.Description,
		InputSchema:  t.InputSchema,
		OutputSchema: t.OutputSchema,
		Annotations: &mcp.ToolAnnotations{
			Title:           t.Title,
			ReadOnlyHint:    readOnly,
			DestructiveHint: &destructive,
			IdempotentHint:  readOnly,
			OpenWorldHint:   new(bool),
		},
	}
}

// Registry returns the edge's tools.
func (e *Edge) Registry() *registry.Registry { return e.reg }

// Handler serves /mcp and /healthz.
func (e *Edge) Handler() http.Handler { return e.handler }

func (e *Edge) routes() http.Handler {
	getServer := func(*http.Request) *mcp.Server { return e.server }
	modern := mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		Stateless:                    true,
		PropagateRequestCancellation: true,
		Logger:                       e.log,
	})
	legacy := mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		Logger:         e.log,
		SessionTimeout: 30 * time.Minute,
	})
	mux := http.NewServeMux()
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		// Both protocol eras share one path: 2026-07-28 and later are
		// stateless; older versions keep initialize and sessions.
		if r.Header.Get("Mcp-Protocol-Version") >= ModernProtocol {
			modern.ServeHTTP(w, r)
			return
		}
		legacy.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// toolHandler answers every call to b's tool with exactly one envelope,
// whatever happens underneath.
func (e *Edge) toolHandler(b *binding) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (res *mcp.CallToolResult, err error) {
		defer func() {
			if r := recover(); r != nil {
				e.log.ErrorContext(ctx, "mcp.tool_panic", "tool", b.tool.Name, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				res, err = result(Fail(b.tool.Name, CodeInternal, "internal error")), nil
			}
		}()
		return result(e.call(ctx, b, req)), nil
	}
}

func (e *Edge) call(ctx context.Context, b *binding, req *mcp.CallToolRequest) *Envelope {
	msg, vs := b.decode(ctx, req.Params.Arguments)
	if vs != nil {
		return Invalid(b.tool.Name, vs)
	}
	return b.invoke(ctx, msg, e.cfg.Mesh, mesh.Call{Caller: e.caller(), IdempotencyKey: newIdempotencyKey()})
}

// caller identifies who is calling: in this development version, DevAgent.
func (e *Edge) caller() mesh.Caller {
	return mesh.Caller{Subject: e.cfg.DevAgent, Agent: e.cfg.DevAgent, Roles: []string{mesh.RoleOwner}}
}

func newIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "mcp-" + hex.EncodeToString(b[:])
}

// result renders an envelope as a tool result: structuredContent and the
// same JSON as text.
func result(env *Envelope) *mcp.CallToolResult {
	b, err := json.Marshal(env)
	if err != nil {
		b = []byte(`{"status":"error","error_type":"InternalError","domain_code":"internal","message":"encode result"}`)
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: string(b)}},
		StructuredContent: json.RawMessage(b),
		IsError:           env.IsError(),
	}
}
