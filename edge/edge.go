// Package edge is the mesh's edge: it derives its tools from the protobuf
// contracts, runs every tool call through one pipeline, and serves that
// pipeline through a door per protocol. It holds no state of its own.
//
// The pipeline (pipeline.go) is the one path of every call, whichever door
// it came through: identity → grants → limits → guardrails → decode and
// validate → invoke → envelope → audit. The doors are sibling packages that
// reach it only through the small interfaces of edge/port:
//
//   - edge/mcpdoor serves the Model Context Protocol at /mcp (both eras,
//     sessions across replicas, the fast path, resources, prompts,
//     subscriptions, completion, MCP tasks) and over stdio;
//   - edge/elicit asks the user, over as many rounds as a call needs, for
//     what it lacks, in a Temporal workflow;
//   - edge/a2adoor serves the mesh's agents over A2A, on a listener of its
//     own that cmd/ wires.
//
// This package owns the edge's options (Config) and applies each default
// once (withDefaults), builds the pipeline and the doors once (New), and
// serves the HTTP mux: /mcp, /healthz and, with authentication, the RFC
// 9728 protected resource metadata.
package edge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/edge/elicit"
	"github.com/toolmesh/toolmesh/edge/httpguard"
	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/edge/mcpdoor"
	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	"github.com/toolmesh/toolmesh/proto/gen/assets"
)

// ModernProtocol is the first MCP protocol version served statelessly.
const ModernProtocol = port.ModernProtocol

// ProtocolVersions are the MCP protocol versions the edge serves, newest
// first: the stateless era and every version of the session era from
// 2025-03-26 on.
var ProtocolVersions = mcpdoor.ProtocolVersions

// Request _meta keys the edge reads (see port and edge/mcpdoor).
const (
	MetaIdempotencyKey = port.MetaIdempotencyKey
	MetaOnBehalfOf     = port.MetaOnBehalfOf
	MetaToolsets       = mcpdoor.MetaToolsets
)

// Where an MCP client selects toolsets (docs/toolsets.md): the header, and
// the path prefix of /mcp/x/<toolset>.
const (
	HeaderToolsets = mcpdoor.HeaderToolsets
	PathToolsets   = mcpdoor.PathToolsets
)

// ExtensionTasks is the MCP Tasks extension's identifier.
const ExtensionTasks = mcpdoor.ExtensionTasks

// ExtensionEvents is the MCP Events extension's identifier.
const ExtensionEvents = mcpdoor.ExtensionEvents

// Defaults of Config.
const (
	DefaultMaxBodyBytes     = 1 << 20
	DefaultToolsPageSize    = 100
	DefaultListTTL          = 5 * time.Minute
	DefaultProgressInterval = 2 * time.Second
	DefaultResourceTTL      = 10 * time.Second
	DefaultResourcePoll     = 5 * time.Second
	// DefaultWaitBudget is how long a waiting long_running tool waits for
	// its outcome before it returns a handle.
	DefaultWaitBudget = 25 * time.Second
	// DefaultTaskCallTimeout bounds the service call of a call that is an
	// MCP task (docs/mcp-tasks.md).
	DefaultTaskCallTimeout = time.Hour
	// DefaultShutdownGrace is how long calls in flight may run on once the
	// edge begins to stop.
	DefaultShutdownGrace = 5 * time.Second
	// DefaultStateTTL and DefaultMaxRounds are Elicitation's.
	DefaultStateTTL  = 10 * time.Minute
	DefaultMaxRounds = 8
	// DefaultVersion is what the edge reports to clients when Version is
	// empty.
	DefaultVersion = "dev"
	// DefaultDevAgent is the local caller's agent.
	DefaultDevAgent = "local"
	// DefaultToolsets is the selection of a client that makes none: every
	// tool its grants allow.
	DefaultToolsets = "all"
)

// stateGrace is how much longer than a state's lifetime the workflow of an
// elicited call waits for its round, so a state is never valid for a
// workflow that already gave up.
const stateGrace = time.Minute

// Elicitation configures multi-round elicitation (edge/elicit).
type Elicitation = elicit.Config

// Sessions lets 2025-era sessions work whichever edge replica a request
// lands on (edge/mcpdoor, docs/sessions.md).
type Sessions = mcpdoor.Sessions

// PeerResolver looks up the addresses of a session peer name.
type PeerResolver = mcpdoor.PeerResolver

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
	// CallTimeout bounds each service call (default toolcall.DefaultTimeout).
	CallTimeout time.Duration
	// DevAgent is the agent of the local caller in development mode and over
	// stdio (default "local").
	DevAgent string
	// Version is reported to MCP clients (default "dev").
	Version string
	// Contracts overrides the services exposed (default toolcatalog.Contracts()).
	Contracts []protoreflect.ServiceDescriptor
	// Assets overrides the contracts' assets, the skills among them
	// (default assets.FS, proto/gen/assets); a toolset's skills are served
	// when its contract is.
	Assets fs.FS
	// HTTPClient overrides the client used to reach services (default
	// meshclient.HTTP()).
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
	// outcome waits before it returns a handle to poll, in whole
	// seconds (default DefaultWaitBudget). Such calls get it on top of
	// CallTimeout. See wait.go.
	WaitBudget time.Duration
	// Elicitation, when set, asks the user — over as many rounds as the
	// call needs — for missing admin inputs and elicitable fields instead of
	// refusing the call, when the client declares elicitation; and carries
	// calls that are MCP tasks in the calls worker (docs/mcp-tasks.md).
	Elicitation *Elicitation
	// TaskCallTimeout bounds the service call of a call that is an MCP task
	// carried by the calls worker, instead of CallTimeout (default
	// DefaultTaskCallTimeout).
	TaskCallTimeout time.Duration
	// Telemetry traces each tools/call (a span continuing the client's
	// trace, parent of the service call's) and counts calls by outcome
	// (see MetricToolCalls). None when zero.
	Telemetry telemetry.Providers
	// ShutdownGrace is how long tool calls in flight may run on once the
	// edge stops (Shutdown) before they are cut short and answer
	// unavailable (default DefaultShutdownGrace).
	ShutdownGrace time.Duration
	// Sessions, when set, serves 2025-era sessions on every replica of a
	// multi-replica edge (see edge/mcpdoor/sessions.go).
	Sessions *Sessions
	// PublicURL is the edge's base URL as MCP clients reach it
	// ("https://mcp.example.com"): its server cards and AI catalog name
	// endpoints below it. Default: the origin of Auth.Resource with
	// authentication, else the scheme and Host each request reached (a
	// loopback edge).
	PublicURL string
	// Toolsets is the toolset selection of an MCP client that makes none
	// (by path or header), and of the stdio client: "all" (the default),
	// "default", toolset and tool names, "-" exclusions, "dynamic" for tool
	// search mode (docs/toolsets.md). A selection that names what the
	// contracts lack stops the edge at start.
	Toolsets string
}

// withDefaults returns cfg with every default applied: the one place the
// edge's defaults are.
func withDefaults(cfg Config) Config {
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = toolcall.DefaultTimeout
	}
	if cfg.DevAgent == "" {
		cfg.DevAgent = DefaultDevAgent
	}
	if cfg.Version == "" {
		cfg.Version = DefaultVersion
	}
	if cfg.Contracts == nil {
		cfg.Contracts = toolcatalog.Contracts()
	}
	if cfg.Assets == nil {
		cfg.Assets = assets.FS
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = meshclient.HTTP()
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
	if cfg.TaskCallTimeout <= 0 {
		cfg.TaskCallTimeout = DefaultTaskCallTimeout
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
	if cfg.Toolsets == "" {
		cfg.Toolsets = DefaultToolsets
	}
	if cfg.PublicURL == "" && cfg.Auth != nil {
		if u, err := url.Parse(cfg.Auth.Resource); err == nil && u.Host != "" {
			cfg.PublicURL = u.Scheme + "://" + u.Host
		}
	}
	if e := cfg.Elicitation; e != nil {
		x := *e
		if x.StateTTL <= 0 {
			x.StateTTL = DefaultStateTTL
		}
		if x.MaxRounds <= 0 {
			x.MaxRounds = DefaultMaxRounds
		}
		if x.AbandonAfter < x.StateTTL {
			x.AbandonAfter = x.StateTTL + stateGrace
		}
		cfg.Elicitation = &x
	}
	return cfg
}

// Edge is a configured edge: its pipeline, its MCP door and its HTTP mux.
type Edge struct {
	cfg      Config
	log      *slog.Logger
	pipeline *pipeline
	mcp      *mcpdoor.Door
	guard    *httpguard.Guard
	auth     *identity.Authenticator
	dev      *identity.Principal // the local owner in development mode and stdio; nil with auth
	handler  http.Handler

	// catalogs are the doors beside the MCP door whose cards the AI
	// catalog lists (AddCatalog).
	catalogMu sync.Mutex
	catalogs  []port.CardCatalog
}

// New builds the edge: the tool registry from the contracts, one bound
// client per tool, the pipeline, the MCP door and the HTTP handler.
func New(cfg Config, log *slog.Logger) (*Edge, error) {
	if cfg.Mesh == nil {
		return nil, errors.New("edge: no mesh signing key configured")
	}
	cfg = withDefaults(cfg)
	if cfg.PublicURL != "" {
		if u, err := url.Parse(cfg.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("edge: public URL %q is not an http(s) base URL", cfg.PublicURL)
		}
	}
	e := &Edge{cfg: cfg, log: log}
	if err := e.configureAccess(); err != nil {
		return nil, err
	}
	var err error
	var tasks port.Tasks // nil without the calls worker
	if e.pipeline, err = newPipeline(cfg, log); err != nil {
		return nil, err
	}
	if err := cfg.Grants.Check(func(name string) bool { _, ok := e.pipeline.reg.Lookup(name); return ok }); err != nil {
		return nil, err
	}
	if cfg.Elicitation != nil {
		x, err := elicit.New(*cfg.Elicitation, elicit.Params{Tools: e.pipeline.Tools(), CallTimeout: cfg.CallTimeout,
			TaskCallTimeout: cfg.TaskCallTimeout, Log: log})
		if err != nil {
			return nil, err
		}
		e.pipeline.elicit, tasks = x, x
	}
	var evs port.Events // nil without events
	if x := newEvents(cfg, e.pipeline.reg); x != nil {
		evs = x
	}
	e.mcp, err = mcpdoor.New(mcpdoor.Config{
		Pipeline:             e.pipeline,
		Tasks:                tasks,
		Events:               evs,
		Auth:                 e.auth,
		Dev:                  e.dev,
		Guard:                e.guard,
		Answers:              e.pipeline.inflight.answers,
		Log:                  log,
		Version:              cfg.Version,
		PublicURL:            cfg.PublicURL,
		Assets:               cfg.Assets,
		DisableFastPath:      cfg.DisableFastPath,
		MaxBodyBytes:         cfg.MaxBodyBytes,
		ToolsPageSize:        cfg.ToolsPageSize,
		ListTTL:              cfg.ListTTL,
		ResourceTTL:          cfg.ResourceTTL,
		ResourcePollInterval: cfg.ResourcePollInterval,
		ProgressInterval:     cfg.ProgressInterval,
		Sessions:             cfg.Sessions,
		Toolsets:             cfg.Toolsets,
	})
	if err != nil {
		return nil, err
	}
	e.handler = e.routes()
	return e, nil
}

// configureAccess sets up authentication, the development principal and
// the Host and Origin checks.
func (e *Edge) configureAccess() error {
	cfg := e.cfg
	bindKnown, bindLoopback := false, false
	if cfg.Addr != "" {
		host, _, err := net.SplitHostPort(cfg.Addr)
		if err != nil {
			return fmt.Errorf("edge: listen address %q: %w", cfg.Addr, err)
		}
		bindKnown, bindLoopback = true, httpguard.IsLoopbackName(host)
	}
	resource := ""
	if cfg.Auth == nil {
		if bindKnown && !bindLoopback {
			return fmt.Errorf("edge: development mode (no authentication) serves loopback only, but the edge listens on %s; configure authentication or bind to 127.0.0.1", cfg.Addr)
		}
		e.dev = identity.Dev(cfg.DevAgent)
	} else {
		if len(cfg.Auth.HS256Secret) > 0 && !(bindKnown && bindLoopback) {
			return errors.New("edge: HS256 tokens are for development only and need a loopback listen address; use RS256/ES256 keys (a JWKS) elsewhere")
		}
		a, err := identity.New(*cfg.Auth, cfg.Grants, e.log)
		if err != nil {
			return err
		}
		e.auth = a
		resource = cfg.Auth.Resource
	}
	g, err := httpguard.New(httpguard.Config{Addr: cfg.Addr, Resource: resource, AllowedHosts: cfg.AllowedHosts, AllowedOrigins: cfg.AllowedOrigins, Log: e.log})
	if err != nil {
		return err
	}
	e.guard = g
	return nil
}

// routes is the edge's HTTP surface.
func (e *Edge) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/mcp", e.mcp.Handler())
	mux.Handle(PathToolsets, e.mcp.Handler())
	cards := e.mcp.ServerCardHandler()
	mux.Handle("/mcp"+mcpdoor.ServerCardPath, cards)
	mux.Handle(PathToolsets+"{toolset}"+mcpdoor.ServerCardPath, cards)
	mux.HandleFunc(PathAICatalog, e.serveCatalog)
	mux.HandleFunc("GET /healthz", httpguard.Healthz)
	if e.auth != nil {
		meta := e.auth.Metadata()
		guarded := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !e.guard.HostAllowed(r) {
				e.guard.RejectHost(w, r)
				return
			}
			meta.ServeHTTP(w, r)
		})
		for _, p := range e.auth.MetadataPaths() {
			mux.Handle(p, guarded)
		}
	}
	return httpguard.RecoverPanics(e.log, mux)
}

// Registry returns the edge's tools.
func (e *Edge) Registry() *toolcatalog.Registry { return e.pipeline.reg }

// Handler serves /mcp, /healthz and, with authentication, the RFC 9728
// protected resource metadata.
func (e *Edge) Handler() http.Handler { return e.handler }

// Pipeline is the one path of every tool call, for a door that cmd/ wires
// beside the edge (the MCP door gets it at New).
func (e *Edge) Pipeline() port.Pipeline { return e.pipeline }

// Guard is the edge's Host and Origin check, which the A2A door shares.
func (e *Edge) Guard() *httpguard.Guard { return e.guard }

// Version is what the edge reports to clients.
func (e *Edge) Version() string { return e.cfg.Version }

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
	return e.mcp.ServeStdio(ctx, in, out, e.Shutdown, e.cfg.ShutdownGrace)
}
