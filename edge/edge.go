// Package edge is the MCP edge of the mesh: it serves the Model Context
// Protocol over Streamable HTTP at /mcp (and over stdio), derives its tools
// from the protobuf contracts, turns each tools/call into a service call and
// answers with one uniform envelope. It holds no state of its own.
//
// Both protocol eras share /mcp: requests whose MCP-Protocol-Version is
// 2026-07-28 or later go to a stateless handler; older versions get the
// initialize handshake and sessions. In front of both sit the checks every
// request passes: Host (DNS rebinding), Origin, the caller's bearer JWT (or,
// in development mode on loopback only, the fixed local owner), a body cap
// and a well-formed JSON frame. Behind them each tool call passes the same
// pipeline: permission, read-only mode, rate limit, admin guardrails,
// argument decoding, and the service call carrying a minted mesh token.
package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/audittrail"
	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	"github.com/toolmesh/toolmesh/internal/toolschema"
	"github.com/toolmesh/toolmesh/proto/gen/descriptorset"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1/auditv1connect"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// ModernProtocol is the first MCP protocol version served statelessly.
const ModernProtocol = "2026-07-28"

// ProtocolVersions are the MCP protocol versions the edge serves, newest
// first: the stateless era and every version of the session era from
// 2025-03-26 on.
var ProtocolVersions = []string{ModernProtocol, "2025-11-25", "2025-06-18", "2025-03-26"}

// Defaults of Config.
const (
	DefaultCallTimeout      = toolcall.DefaultTimeout
	DefaultMaxBodyBytes     = 1 << 20
	DefaultToolsPageSize    = 100
	DefaultListTTL          = 5 * time.Minute
	DefaultProgressInterval = 2 * time.Second
	DefaultSessionTimeout   = 30 * time.Minute
	DefaultResourceTTL      = 10 * time.Second
	DefaultResourcePoll     = 5 * time.Second
)

// Config configures an edge.
type Config struct {
	// DisableFastPath sends every request through the MCP SDK's generic
	// handler, even plain stateless tools/call requests the edge can answer
	// directly (for comparison tests and troubleshooting).
	DisableFastPath bool
	// Services maps fully-qualified service names to their base URLs
	// ("http://127.0.0.1:7101"). A tool whose service is missing answers
	// not_supported.
	Services map[string]string
	// CallTimeout bounds each service call (default 15s).
	CallTimeout time.Duration
	// DevAgent is the agent of the local caller in development mode and over
	// stdio (default "local").
	DevAgent string
	// Version is reported to MCP clients.
	Version string
	// Contracts overrides the services exposed (default toolcatalog.Contracts()).
	Contracts []protoreflect.ServiceDescriptor
	// HTTPClient overrides the client used to reach services.
	HTTPClient *http.Client
	// Mesh signs the mesh token each service call carries. Required.
	Mesh *mesh.Signer

	// Addr is the address the edge listens on. A non-loopback address needs
	// Auth. Empty: decided per request from the connection (tests).
	Addr string
	// Auth makes the edge an OAuth resource server. Nil is development mode:
	// no tokens, loopback clients only, every caller is the local owner.
	Auth *identity.Config
	// Grants adds roles, scopes and explicit tool grants per token subject.
	Grants *identity.Grants
	// ReadOnly refuses WRITE and ADMIN tools with read_only, without calling
	// the service.
	ReadOnly bool
	// AllowedOrigins are browser origins ("https://app.example.com") that may
	// call the edge, besides loopback pages on a loopback edge.
	AllowedOrigins []string
	// AllowedHosts are Host header values ("mcp.example.com", optionally with
	// a port) the edge answers to, besides loopback names on a loopback edge
	// and the host of Auth.Resource.
	AllowedHosts []string
	// MaxBodyBytes caps a request body (default 1 MiB); larger is 413.
	MaxBodyBytes int64
	// RateLimit bounds tool calls per principal (zero: unlimited).
	RateLimit RateLimit
	// ToolsPageSize is the page size of tools/list (default 100).
	ToolsPageSize int
	// ListTTL is the ttlMs clients may cache tools/list, prompts/list and
	// resources/templates/list for (default 5m).
	ListTTL time.Duration
	// ResourceTTL is the ttlMs clients may cache resources/read and
	// resources/list for (default 10s): they show live state.
	ResourceTTL time.Duration
	// ResourcePollInterval is how often the edge reads a subscribed
	// resource again to learn whether it changed (default 5s).
	ResourcePollInterval time.Duration
	// ProgressInterval is how often a call whose client asked for progress
	// hears that it is still running (default 2s).
	ProgressInterval time.Duration
	// WaitBudget is how long a long_running tool that waits for its
	// outcome (owner_ask) waits before it returns a handle to poll, in whole
	// seconds (default DefaultWaitBudget). Such calls get it on top of
	// CallTimeout. See tasks.go.
	WaitBudget time.Duration
	// Elicitation, when set, asks the user — over as many rounds as the
	// call needs — for missing admin inputs and elicitable fields instead of
	// refusing the call, when the client declares elicitation.
	Elicitation *Elicitation
	// Telemetry traces each tools/call (a span continuing the client's
	// trace, parent of the service call's) and counts calls by outcome
	// (see MetricToolCalls). None when zero.
	Telemetry telemetry.Providers
	// A2A serves the mesh's agents over A2A on a listener of its own
	// (A2AHandler; see a2a.go). None when nil.
	A2A *A2AConfig
	// ShutdownGrace is how long tool calls in flight may run on once the
	// edge stops (Shutdown) before they are cut short and answer
	// unavailable (default DefaultShutdownGrace).
	ShutdownGrace time.Duration
	// Sessions, when set, serves 2025-era sessions on every replica of a
	// multi-replica edge (see sessions.go).
	Sessions *Sessions
}

// Edge is a configured MCP edge.
type Edge struct {
	cfg      Config
	log      *slog.Logger
	reg      *toolcatalog.Registry
	bindings map[string]*binding
	// audit records successful admin calls; nil without an audit service.
	audit *audittrail.Recorder
	// elicit runs elicited calls; nil without Config.Elicitation.
	elicit   *elicitor
	server   *mcp.Server
	handler  http.Handler
	modern   http.Handler
	legacy   http.Handler
	sessions *sessions
	// modernWithInfo and legacyWithInfo are modern and legacy handing the
	// verified token to the SDK (withTokenInfo), for requests that carry one.
	modernWithInfo http.Handler
	legacyWithInfo http.Handler
	// impl identifies the edge in every result's _meta; serverInfo is it
	// in JSON.
	impl       *mcp.Implementation
	serverInfo []byte
	versions   []string

	auth    *identity.Authenticator
	dev     *identity.Principal // the local owner in development mode and stdio; nil with auth
	views   *views
	limits  *limiters
	hosts   []hostPort
	origins []string

	bindKnown    bool
	bindLoopback bool

	// tasks serves MCP tasks for long-running tools; nil when none can be.
	tasks *tasks

	// a2a is the A2A endpoint; nil without Config.A2A.
	a2a *a2aGateway
	// depth finds the depth of the message a call is made on behalf of;
	// nil without a messages service.
	depth *depthLookup
	// resources are the resource kinds, sorted by tool name; prompts the
	// prompts, sorted by name; subs the resource subscriptions.
	resources []*resourceKind
	prompts   []*prompt
	subs      *subscriptions
	// undeclared are the methods of capabilities the edge does not
	// declare.
	undeclared map[string]bool

	obs *instruments

	// inflight tracks tool calls so that each gets its answer on shutdown.
	inflight *inflight
}

// New builds the edge: the tool registry from the contracts, one bound
// client per tool, the MCP server and the HTTP handler.
func New(cfg Config, log *slog.Logger) (*Edge, error) {
	if cfg.Mesh == nil {
		return nil, errors.New("edge: no mesh signing key configured")
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.DevAgent == "" {
		cfg.DevAgent = "local"
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.Contracts == nil {
		cfg.Contracts = toolcatalog.Contracts()
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = newServiceClient()
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.ToolsPageSize <= 0 {
		cfg.ToolsPageSize = DefaultToolsPageSize
	}
	if cfg.ListTTL <= 0 {
		cfg.ListTTL = DefaultListTTL
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = DefaultProgressInterval
	}
	if cfg.WaitBudget <= 0 {
		cfg.WaitBudget = DefaultWaitBudget
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = DefaultShutdownGrace
	}
	if cfg.ResourceTTL <= 0 {
		cfg.ResourceTTL = DefaultResourceTTL
	}
	if cfg.ResourcePollInterval <= 0 {
		cfg.ResourcePollInterval = DefaultResourcePoll
	}
	e := &Edge{cfg: cfg, log: log, bindings: map[string]*binding{}, versions: ProtocolVersions, inflight: newInflight()}
	if err := e.configureAccess(); err != nil {
		return nil, err
	}
	var err error
	if e.sessions, err = newSessions(cfg.Sessions, log); err != nil {
		return nil, err
	}

	docs, err := toolcatalog.LoadDocs(descriptorset.Bytes)
	if err != nil {
		return nil, err
	}
	e.reg, err = toolcatalog.Build(cfg.Contracts, docs, toolcatalog.Options{ExtraInput: adminInputs, ErrorOutput: toolcall.ErrorSchema()})
	if err != nil {
		return nil, fmt.Errorf("build tool registry: %w", err)
	}
	if err := cfg.Grants.Check(func(name string) bool { _, ok := e.reg.Lookup(name); return ok }); err != nil {
		return nil, err
	}
	validator, err := boundary.NewValidator()
	if err != nil {
		return nil, err
	}
	if e.obs, err = newInstruments(cfg.Telemetry); err != nil {
		return nil, err
	}
	clientTelemetry := cfg.Telemetry.ClientOption()
	e.views = &views{e: e, m: map[string]*view{}}
	e.limits = newLimiters(cfg.RateLimit)

	for _, t := range e.reg.Tools() {
		timeout, wait := cfg.CallTimeout, waitField(t)
		if wait != nil {
			timeout += cfg.WaitBudget
		}
		e.bindings[t.Name] = &binding{
			Binding:   toolcall.NewBinding(t, cfg.HTTPClient, cfg.Services[t.Service], validator, log, timeout, clientTelemetry),
			tool:      t,
			mcpTool:   mcpTool(t, cfg.ReadOnly),
			wait:      wait,
			telemetry: newCallTelemetry(t.Name),
		}
	}
	e.buildResources()
	e.buildPrompts()
	e.subs = &subscriptions{e: e, watches: map[string]*watch{}}

	// Exactly what is served: tools (the list never changes after start);
	// logging (logging/setLevel, and a message per failed call); resources,
	// with subscriptions, and prompts, when the contracts have any, and
	// completion of their arguments; the Tasks extension when a
	// long-running tool can become a task.
	//lint:ignore SA1019 MCP logging is deprecated from 2026-07-28 on; 2025-era clients still use logging/setLevel and its messages
	caps := &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}, Logging: &mcp.LoggingCapabilities{}}
	opts := &mcp.ServerOptions{
		Logger:                    log,
		SupportedProtocolVersions: ProtocolVersions,
		PageSize:                  cfg.ToolsPageSize,
		GetSessionID:              e.sessions.idFunc(),
		SetCacheable: func(_ context.Context, req mcp.Request, c *mcp.Cacheable) {
			if _, ok := req.(*mcp.ReadResourceRequest); ok {
				e.resourceCacheable(c)
				return
			}
			// server/discover depends only on the edge's configuration.
			c.TTLMs = int(cfg.ListTTL.Milliseconds())
			c.CacheScope = "public"
		},
		Instructions: "toolmesh exposes agent-platform services as tools. Every result is a JSON envelope: " +
			`{"status":"ok","data":...} or {"status":"error","domain_code":...,"message":...}; ` +
			"on invalid_argument, fix the named fields and call again; admin tools need confirm: true and a reason.",
	}
	if len(e.resources) > 0 {
		caps.Resources = &mcp.ResourceCapabilities{Subscribe: true}
		opts.SubscribeHandler, opts.UnsubscribeHandler = e.subs.subscribe, e.subs.unsubscribe
	}
	if len(e.prompts) > 0 {
		caps.Prompts = &mcp.PromptCapabilities{}
	}
	if len(e.resources) > 0 || len(e.prompts) > 0 {
		caps.Completions = &mcp.CompletionCapabilities{}
		opts.CompletionHandler = e.complete
	}
	e.undeclared = undeclaredMethods(len(e.resources) > 0, len(e.prompts) > 0)
	if e.tasks = buildTasks(e.reg, cfg.Services); e.tasks != nil {
		caps.AddExtension(ExtensionTasks, nil)
	}
	opts.Capabilities = caps
	e.impl = &mcp.Implementation{Name: "toolmesh", Title: "toolmesh", Version: cfg.Version}
	if e.serverInfo, err = json.Marshal(e.impl); err != nil {
		return nil, err
	}
	e.server = mcp.NewServer(e.impl, opts)
	e.server.AddReceivingMiddleware(e.middleware)
	for _, t := range e.reg.Tools() {
		b := e.bindings[t.Name]
		e.server.AddTool(b.mcpTool, e.toolHandler(b))
	}
	for _, k := range e.resources {
		if k.fixed != nil {
			e.server.AddResource(k.fixed, e.readHandler(k))
		} else {
			e.server.AddResourceTemplate(k.template, e.readHandler(k))
		}
	}
	for _, pr := range e.prompts {
		e.server.AddPrompt(pr.prompt, e.promptHandler(pr))
	}
	if err := e.addTaskMethods(); err != nil {
		return nil, err
	}

	if cfg.Elicitation != nil {
		if e.elicit, err = newElicitor(e, cfg.Elicitation); err != nil {
			return nil, err
		}
	}
	if url := cfg.Services[auditv1connect.AuditServiceName]; url != "" {
		e.audit = audittrail.NewRecorder(auditv1connect.NewAuditServiceClient(cfg.HTTPClient, url,
			clientTelemetry, connect.WithInterceptors(mesh.NewClientInterceptor(cfg.Mesh, auditTimeout))), audittrail.RecorderOptions{})
	}

	if cfg.A2A != nil {
		if e.a2a, err = newA2AGateway(e, *cfg.A2A); err != nil {
			return nil, err
		}
	}
	e.depth = newDepthLookup(cfg, clientTelemetry)

	getServer := func(*http.Request) *mcp.Server { return e.server }
	e.modern = mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		Stateless:                    true,
		PropagateRequestCancellation: true,
		Logger:                       log,
		MaxRequestBodyBytes:          cfg.MaxBodyBytes,
		// The edge's own Host check is stricter and configurable.
		DisableLocalhostProtection: true,
	})
	e.legacy = e.sessions.route(mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		Logger:                     log,
		SessionTimeout:             DefaultSessionTimeout,
		MaxRequestBodyBytes:        cfg.MaxBodyBytes,
		DisableLocalhostProtection: true,
	}))
	e.modernWithInfo = withTokenInfo(e.modern)
	e.legacyWithInfo = withTokenInfo(e.legacy)
	e.handler = e.routes()
	return e, nil
}

// configureAccess sets up authentication, the development principal and
// the Host and Origin allowlists.
func (e *Edge) configureAccess() error {
	cfg := e.cfg
	if cfg.Addr != "" {
		host, _, err := net.SplitHostPort(cfg.Addr)
		if err != nil {
			return fmt.Errorf("edge: listen address %q: %w", cfg.Addr, err)
		}
		e.bindKnown = true
		e.bindLoopback = isLoopbackName(host)
	}
	if cfg.Auth == nil {
		if e.bindKnown && !e.bindLoopback {
			return fmt.Errorf("edge: development mode (no authentication) serves loopback only, but the edge listens on %s; configure authentication or bind to 127.0.0.1", cfg.Addr)
		}
		e.dev = identity.Dev(cfg.DevAgent)
	} else {
		if len(cfg.Auth.HS256Secret) > 0 && !(e.bindKnown && e.bindLoopback) {
			return errors.New("edge: HS256 tokens are for development only and need a loopback listen address; use RS256/ES256 keys (a JWKS) elsewhere")
		}
		a, err := identity.New(*cfg.Auth, cfg.Grants, e.log)
		if err != nil {
			return err
		}
		e.auth = a
		res, _ := url.Parse(cfg.Auth.Resource)
		e.hosts = append(e.hosts, parseHostPort(res.Host))
		e.origins = append(e.origins, res.Scheme+"://"+strings.ToLower(res.Host))
	}
	for _, h := range cfg.AllowedHosts {
		hp := parseHostPort(h)
		if hp.host == "" {
			return fmt.Errorf("edge: allowed host %q is empty", h)
		}
		e.hosts = append(e.hosts, hp)
	}
	for _, o := range cfg.AllowedOrigins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return fmt.Errorf("edge: allowed origin %q is not scheme://host[:port]", o)
		}
		e.origins = append(e.origins, u.Scheme+"://"+strings.ToLower(u.Host))
	}
	if e.bindKnown && !e.bindLoopback && len(e.hosts) == 0 {
		return errors.New("edge: a non-loopback edge needs the hosts it answers to (AllowedHosts, or the Auth resource URI)")
	}
	return nil
}

// withTokenInfo hands the verified TokenInfo to the SDK, which gives it to
// every handler of the request as req.Extra.TokenInfo and binds legacy
// sessions to its UserID. The SDK's bearer middleware is the one way to set
// it; the token was verified already, so its verifier returns the result.
func withTokenInfo(next http.Handler) http.Handler {
	return auth.RequireBearerToken(func(_ context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		info, ok := r.Context().Value(tokenInfoKey{}).(*auth.TokenInfo)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return info, nil
	}, nil)(next)
}

// newServiceClient is the edge's client of the services: HTTP/1.1 over
// kept-alive connections, one per call in flight. Services also speak h2c,
// but a Go HTTP/2 server hands every request between goroutines several
// times; measured under make bench-mesh, a point read cost the tasks
// service 162 µs of CPU over h2c and 103 µs over HTTP/1.1, and the edge 221
// and 182 µs.
func newServiceClient() *http.Client {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	// Connections are not capped (a long-running call holds one for its
	// wait), and up to 256 per service are kept: closing those beyond the
	// idle limit after every call, under many callers, costs both sides a
	// connection per call.
	//
	// Each connection holds a read and a write buffer for its lifetime, and
	// under many callers there is one connection per call in flight. A
	// service call's request and answer are a few hundred bytes, and
	// larger bodies are read and written past the buffers, so 1 KiB each
	// does instead of net/http's 4 KiB: 6 KiB less per call in flight.
	return &http.Client{Transport: &http.Transport{
		Protocols:           protocols,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		ReadBufferSize:      serviceConnBuffer,
		WriteBufferSize:     serviceConnBuffer,
	}}
}

// serviceConnBuffer is the size of the read and the write buffer of each
// connection to a service.
const serviceConnBuffer = 1 << 10

// readOnlyNote prefixes the description of tools that read-only mode
// refuses, so a model does not plan around them.
const readOnlyNote = "Unavailable: this edge runs in read-only mode. "

// binding is a tool as the edge serves it: the bound service call and the
// tool's MCP description.
type binding struct {
	*toolcall.Binding
	tool    *toolcatalog.Tool
	mcpTool *mcp.Tool
	// wait is the request's wait_seconds field of a long_running tool that
	// waits for its outcome (see tasks.go); nil otherwise.
	wait protoreflect.FieldDescriptor
	// telemetry is the call's span name and metric labels, built once.
	telemetry callTelemetry
}

// mcpTool describes t for tools/list.
func mcpTool(t *toolcatalog.Tool, readOnlyMode bool) *mcp.Tool {
	readOnly := t.Kind == toolv1.Kind_KIND_READ
	destructive := t.Kind == toolv1.Kind_KIND_ADMIN
	desc := t.Description
	if readOnlyMode && !readOnly {
		desc = readOnlyNote + desc
	}
	return &mcp.Tool{
		Name:         t.Name,
		Title:        t.Title,
		Description:  desc,
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

// Admin inputs the edge adds to every ADMIN tool's schema.
const (
	argConfirm = toolcall.AdminConfirm
	argReason  = toolcall.AdminReason
)

// adminInputs adds confirm and reason to the input schema of ADMIN tools. A
// request field already named so keeps its own schema and becomes required.
func adminInputs(t *toolcatalog.Tool) (toolschema.Schema, []string) {
	if t.Kind != toolv1.Kind_KIND_ADMIN {
		return nil, nil
	}
	props := toolschema.Schema{}
	fields := t.Method.Input().Fields()
	if fields.ByName(argConfirm) == nil {
		props[argConfirm] = toolschema.Schema{"type": "boolean", "const": true,
			"description": "Must be true: confirms this administrative action."}
	}
	if fields.ByName(argReason) == nil {
		props[argReason] = toolschema.Schema{"type": "string", "minLength": 1, "maxLength": 500, "pattern": `\S`,
			"description": "Why this administrative action is taken (recorded)."}
	}
	return props, []string{argConfirm, argReason}
}

// Registry returns the edge's tools.
func (e *Edge) Registry() *toolcatalog.Registry { return e.reg }

// Handler serves /mcp, /healthz and, with authentication, the RFC 9728
// protected resource metadata.
func (e *Edge) Handler() http.Handler { return e.handler }

// DevelopmentMode reports whether the edge runs without authentication.
func (e *Edge) DevelopmentMode() bool { return e.dev != nil }

// ServeStdio serves MCP over in and out (newline-delimited JSON-RPC, the
// stdio transport desktop clients start) until the client disconnects or ctx
// ends; when ctx ends, the calls in flight get their answers first (see
// Shutdown). The caller is the local owner, as in development mode: whoever
// started the process is the user.
func (e *Edge) ServeStdio(ctx context.Context, in io.ReadCloser, out io.WriteCloser) error {
	if e.dev == nil {
		return errors.New("edge: stdio serves the local user and needs development mode (no Auth)")
	}
	return e.serveStdio(ctx, in, out)
}

// principal is the caller of an MCP request: the verified token's principal
// over HTTP, or the local owner in development mode and over stdio.
func (e *Edge) principal(req mcp.Request) *identity.Principal { return e.principalOf(req.GetExtra()) }

// principalOf is the caller a request's extra names.
func (e *Edge) principalOf(x *mcp.RequestExtra) *identity.Principal {
	if x != nil && x.TokenInfo != nil {
		return identity.FromTokenInfo(x.TokenInfo)
	}
	return e.dev
}
