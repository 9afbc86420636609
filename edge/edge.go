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
//     own (optional).
//
// This package owns the pipeline's options (Config; each door declares,
// documents and defaults its own, in Config.MCP, Config.Elicitation and
// Config.A2A), builds the pipeline and every door once (New), and hands
// out one HTTP handler per listener: Handler (/mcp, /healthz and, with
// authentication, the RFC 9728 protected resource metadata) and
// A2AHandler.
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
	"sync"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/edge/a2adoor"
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
	// DefaultWaitBudget is how long a waiting long_running tool waits for
	// its outcome before it returns a handle.
	DefaultWaitBudget = 25 * time.Second
	// DefaultShutdownGrace is how long calls in flight may run on once the
	// edge begins to stop.
	DefaultShutdownGrace = 5 * time.Second
	// DefaultVersion is what the edge reports to clients when Version is
	// empty.
	DefaultVersion = "dev"
	// DefaultDevAgent is the local caller's agent.
	DefaultDevAgent = "local"
)

// Defaults of the doors' options, which each door applies (re-exported for
// the flags that set them).
const (
	DefaultMaxBodyBytes    = mcpdoor.DefaultMaxBodyBytes
	DefaultResourceTTL     = mcpdoor.DefaultResourceTTL
	DefaultResourcePoll    = mcpdoor.DefaultResourcePoll
	DefaultToolsets        = mcpdoor.DefaultToolsets
	DefaultStateTTL        = toolcall.DefaultStateTTL
	DefaultTaskCallTimeout = toolcall.DefaultTaskCallTimeout
)

// MCP are the options of the MCP door (edge/mcpdoor).
type MCP = mcpdoor.Options

// A2A are the options of the A2A door (edge/a2adoor).
type A2A = a2adoor.Options

// Elicitation are the options of multi-round elicitation and of the MCP
// tasks the calls worker carries (edge/elicit).
type Elicitation = elicit.Options

// Sessions lets 2025-era sessions work whichever edge replica a request
// lands on (edge/mcpdoor, docs/sessions.md).
type Sessions = mcpdoor.Sessions

// PeerResolver looks up the addresses of a session peer name.
type PeerResolver = mcpdoor.PeerResolver

// Config configures an edge.
type Config struct {
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
	// RateLimit bounds tool calls per principal (zero: unlimited).
	RateLimit RateLimit
	// ServiceConcurrency bounds the calls of ordinary tools in flight to
	// one service at once (the toolmesh command's default is
	// DefaultServiceConcurrency); further calls wait their turn, in the
	// order they came, within their own deadline. Long-running and
	// streaming tools, which hold their call for a wait, are not bounded.
	// 0: no bound.
	ServiceConcurrency int
	// WaitBudget is how long a long_running tool that waits for its
	// outcome waits before it returns a handle to poll, in whole
	// seconds (default DefaultWaitBudget). Such calls get it on top of
	// CallTimeout. See wait.go.
	WaitBudget time.Duration
	// Telemetry traces each tools/call (a span continuing the client's
	// trace, parent of the service call's) and counts calls by outcome
	// (see MetricToolCalls). None when zero.
	Telemetry telemetry.Providers
	// ShutdownGrace is how long tool calls in flight may run on once the
	// edge stops (Shutdown) before they are cut short and answer
	// unavailable (default DefaultShutdownGrace).
	ShutdownGrace time.Duration

	// MCP configures the MCP door (edge/mcpdoor), at /mcp and over stdio.
	MCP MCP
	// Elicitation, when set, asks the user — over as many rounds as the
	// call needs — for missing admin inputs and elicitable fields instead of
	// refusing the call, when the client declares elicitation; and carries
	// calls that are MCP tasks in the calls worker (edge/elicit,
	// docs/tasks.md).
	Elicitation *Elicitation
	// A2A, when set, serves the mesh's agents over A2A on a listener of
	// their own (edge/a2adoor, A2AHandler): authenticated as /mcp is, with
	// the same Host and Origin checks, reaching the same services.
	A2A *A2A
}

// withDefaults returns cfg with the pipeline's defaults applied; each door
// applies its own options' defaults in its constructor.
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
	if cfg.WaitBudget <= 0 {
		cfg.WaitBudget = DefaultWaitBudget
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = DefaultShutdownGrace
	}
	return cfg
}

// Edge is a configured edge: its pipeline, its doors and their HTTP
// handlers.
type Edge struct {
	cfg      Config
	log      *slog.Logger
	pipeline *pipeline
	mcp      *mcpdoor.Door
	a2a      *a2adoor.Door // nil without Config.A2A
	guard    *httpguard.Guard
	auth     *identity.Authenticator
	dev      *identity.Principal // the local owner in development mode and stdio; nil with auth
	owner    *ownerForms
	handler  http.Handler

	// catalogs are the doors beside the MCP door whose cards the AI
	// catalog lists (AddCatalog).
	catalogMu sync.Mutex
	catalogs  []port.CardCatalog
}

// New builds the edge: the tool registry from the contracts, one bound
// client per tool, the pipeline, every door configured and their HTTP
// handlers.
func New(cfg Config, log *slog.Logger) (*Edge, error) {
	if cfg.Mesh == nil {
		return nil, errors.New("edge: no mesh signing key configured")
	}
	cfg = withDefaults(cfg)
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
		x, err := elicit.New(*cfg.Elicitation, elicit.Params{Tools: e.pipeline.Tools(), CallTimeout: cfg.CallTimeout, Log: log})
		if err != nil {
			return nil, err
		}
		e.pipeline.elicit, tasks = x, x.Tasks()
	}
	var evs port.Events // nil without events
	if x := newEvents(cfg, e.pipeline.reg); x != nil {
		evs = x
	}
	e.mcp, err = mcpdoor.New(mcpdoor.Config{
		Options:  cfg.MCP,
		Pipeline: e.pipeline,
		Tasks:    tasks,
		Events:   evs,
		Auth:     e.auth,
		Dev:      e.dev,
		Guard:    e.guard,
		Answers:  e.pipeline.inflight.answers,
		Log:      log,
		Version:  cfg.Version,
		Resource: resource(cfg.Auth),
		Assets:   cfg.Assets,
	})
	if err != nil {
		return nil, err
	}
	if cfg.A2A != nil {
		e.a2a, err = a2adoor.New(a2adoor.Config{
			Options:  *cfg.A2A,
			Version:  cfg.Version,
			Auth:     cfg.Auth,
			Grants:   cfg.Grants,
			DevAgent: cfg.DevAgent,
			Guard:    e.guard,
			Services: cfg.Services,
			Clients:  meshclient.Config{HTTP: cfg.HTTPClient, Signer: cfg.Mesh, Timeout: cfg.CallTimeout, Telemetry: cfg.Telemetry},
			// A card extension is read through the pipeline, as a client
			// would read its tool.
			Extensions: e.pipeline,
			Log:        log,
		})
		if err != nil {
			return nil, err
		}
		// The AI catalog lists the card of every agent the door serves.
		e.AddCatalog(e.a2a)
	}
	if e.owner, err = newOwnerForms(e); err != nil {
		return nil, err
	}
	e.handler = e.routes()
	return e, nil
}

// resource is the audience the edge's tokens name; "" in development mode.
func resource(a *identity.Config) string {
	if a == nil {
		return ""
	}
	return a.Resource
}

// configureAccess sets up authentication, the development principal and
// the Host and Origin checks.
func (e *Edge) configureAccess() error {
	cfg := e.cfg
	addr := cfg.MCP.Addr
	bindKnown, bindLoopback := false, false
	if addr != "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("edge: listen address %q: %w", addr, err)
		}
		bindKnown, bindLoopback = true, httpguard.IsLoopbackName(host)
	}
	resource := ""
	if cfg.Auth == nil {
		if bindKnown && !bindLoopback {
			return fmt.Errorf("edge: development mode (no authentication) serves loopback only, but the edge listens on %s; configure authentication or bind to 127.0.0.1", addr)
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
	g, err := httpguard.New(httpguard.Config{Addr: addr, Resource: resource, AllowedHosts: cfg.AllowedHosts, AllowedOrigins: cfg.AllowedOrigins, Log: e.log})
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
	mux.Handle(PathOwnerForms+"/", e.owner)
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

// Handler serves the MCP listener: /mcp, /healthz, the owner's forms
// (/owner/) and, with authentication, the RFC 9728 protected resource
// metadata.
func (e *Edge) Handler() http.Handler { return e.handler }

// A2AHandler serves the A2A listener (Config.A2A.Addr); nil without
// Config.A2A.
func (e *Edge) A2AHandler() http.Handler {
	if e.a2a == nil {
		return nil
	}
	return e.a2a.Handler()
}

// Pipeline is the one path of every tool call, as the doors reach it
// (port.Pipeline).
func (e *Edge) Pipeline() port.Pipeline { return e.pipeline }

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
