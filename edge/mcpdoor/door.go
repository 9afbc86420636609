// Package mcpdoor is the edge's door for the Model Context Protocol: MCP
// over Streamable HTTP at /mcp (and over stdio), both protocol eras —
// requests whose MCP-Protocol-Version is 2026-07-28 or later go to a
// stateless handler, older ones get the initialize handshake and sessions
// (across replicas: sessions.go) — the fast path of plain stateless tool
// calls, tools/list by the caller's grants, resources, prompts,
// subscriptions, completion and MCP tasks.
//
// Every tool call, and every resource read, prompt and completion that
// reads through a tool, goes through the edge's one pipeline (port.Pipeline);
// this package turns MCP requests into pipeline calls and their outcomes
// into MCP results. In front of every request sit the checks of the HTTP
// layer: Host, Origin, the caller's bearer JWT (or, in development mode on
// loopback only, the fixed local owner), a body cap and a well-formed JSON
// frame.
package mcpdoor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge/httpguard"
	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
)

// ProtocolVersions are the MCP protocol versions the door serves, newest
// first: the stateless era and every version of the session era from
// 2025-03-26 on.
var ProtocolVersions = []string{port.ModernProtocol, "2025-11-25", "2025-06-18", "2025-03-26"}

// SessionTimeout closes a 2025-era session idle this long.
const SessionTimeout = 30 * time.Minute

// Options are the door's settings (edge.Config.MCP): each declared and
// documented here, and defaulted once, in New.
type Options struct {
	// Addr is the address the door's listener listens on, which the edge's
	// access checks read: a non-loopback address needs authentication.
	// Empty: decided per request from the connection (tests).
	Addr string
	// DisableFastPath sends every request through the MCP SDK's generic
	// handler, even plain stateless tools/call requests the door can answer
	// directly (for comparison tests and troubleshooting).
	DisableFastPath bool
	// MaxBodyBytes caps a request body (default DefaultMaxBodyBytes);
	// larger is 413.
	MaxBodyBytes int64
	// ToolsPageSize is the page size of tools/list and the other lists
	// (default DefaultToolsPageSize).
	ToolsPageSize int
	// ListTTL is the ttlMs clients may cache tools/list, prompts/list and
	// resources/templates/list for (default DefaultListTTL).
	ListTTL time.Duration
	// ResourceTTL is the ttlMs clients may cache resources/read and
	// resources/list for (default DefaultResourceTTL): they show live
	// state.
	ResourceTTL time.Duration
	// ResourcePollInterval is how often the door reads a subscribed
	// resource again to learn whether it changed (default
	// DefaultResourcePoll).
	ResourcePollInterval time.Duration
	// ProgressInterval is how often a call whose client asked for progress
	// hears that it is still running (default DefaultProgressInterval).
	ProgressInterval time.Duration
	// Sessions, when set, serves 2025-era sessions on every replica of a
	// multi-replica edge (sessions.go); nil: on the one they began on.
	Sessions *Sessions
	// PublicURL is the edge's base URL as MCP clients reach it
	// ("https://mcp.example.com"): its server cards and the AI catalog
	// name endpoints below it. Default: the origin of Config.Resource with
	// authentication, else the scheme and Host each request reached (a
	// loopback edge).
	PublicURL string
	// Toolsets is the toolset selection of a client that makes none (by
	// path or header), and of the stdio client: "all" (the default),
	// "default", toolset and tool names, "-" exclusions, "dynamic" for tool
	// search mode (docs/toolsets.md; toolsets.go). A selection that names
	// what the contracts lack stops the door at start.
	Toolsets string
}

// Defaults of Options.
const (
	DefaultMaxBodyBytes     = 1 << 20
	DefaultToolsPageSize    = 100
	DefaultListTTL          = 5 * time.Minute
	DefaultResourceTTL      = 10 * time.Second
	DefaultResourcePoll     = 5 * time.Second
	DefaultProgressInterval = 2 * time.Second
	DefaultToolsets         = "all"
)

// withDefaults is o with every default applied, for an edge whose tokens
// name resource: the one place the door's defaults are.
func (o Options) withDefaults(resource string) Options {
	if o.PublicURL == "" && resource != "" {
		if u, err := url.Parse(resource); err == nil && u.Host != "" {
			o.PublicURL = u.Scheme + "://" + u.Host
		}
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.ToolsPageSize <= 0 {
		o.ToolsPageSize = DefaultToolsPageSize
	}
	if o.ListTTL <= 0 {
		o.ListTTL = DefaultListTTL
	}
	if o.ResourceTTL <= 0 {
		o.ResourceTTL = DefaultResourceTTL
	}
	if o.ResourcePollInterval <= 0 {
		o.ResourcePollInterval = DefaultResourcePoll
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = DefaultProgressInterval
	}
	if o.Toolsets == "" {
		o.Toolsets = DefaultToolsets
	}
	return o
}

// Config is what the door is built from: its options and what the edge
// gives it.
type Config struct {
	Options
	// Pipeline runs the tool calls.
	Pipeline port.Pipeline
	// Tasks follows the calls that are MCP tasks carried by the calls
	// worker; nil without it.
	Tasks port.Tasks
	// Events serves MCP events; nil without them (see events.go).
	Events port.Events
	// Auth authenticates callers; nil is development mode, where Dev is
	// every caller.
	Auth *identity.Authenticator
	// Dev is the local owner in development mode and over stdio.
	Dev *identity.Principal
	// Guard checks Host and Origin.
	Guard *httpguard.Guard
	// Answers counts the requests whose answer is not written yet (the
	// edge's shutdown waits for them).
	Answers port.Counter
	// Log receives the door's events.
	Log *slog.Logger

	// Version is reported to clients.
	Version string
	// Resource is the audience the callers' tokens name (the edge's
	// canonical URI, with authentication; "" in development mode).
	Resource string
	// Assets are the contracts' assets (proto/gen/assets): the door serves
	// the skills of the toolsets it serves (skills.go). Nil: none.
	Assets fs.FS
}

// Door serves MCP.
type Door struct {
	cfg      Config
	log      *slog.Logger
	pipeline port.Pipeline
	tools    map[string]*tool
	sorted   []*tool
	// calls serves the tools.
	calls *toolFeature

	server   *mcp.Server
	modern   http.Handler
	legacy   http.Handler
	sessions *sessions
	// modernWithInfo and legacyWithInfo are modern and legacy handing the
	// verified token to the SDK (withTokenInfo), for requests that carry
	// one.
	modernWithInfo http.Handler
	legacyWithInfo http.Handler
	// impl identifies the edge in every result's _meta; serverInfo is it
	// in JSON.
	impl       *mcp.Implementation
	serverInfo []byte

	// resolve finds each request's caller and reach.
	resolve *resolver
	// closing is closed when the edge stops: task listens end.
	closing   chan struct{}
	closeOnce sync.Once
	// toolsets are the toolsets and the selections parsed; states the
	// selections of the sessions of this process.
	toolsets *toolsets
	states   *sessionStates
	// meta serves the edge's own tools (tool search mode's, extending a
	// task).
	meta *metaFeature
	// tasks serves MCP tasks for long-running tools; nil when none can be.
	tasks *tasks
	// taskf serves the task methods; nil with tasks.
	taskf *taskFeature
	// lists serves the lists of the caller's view.
	lists *listFeature
	// res serves the resource kinds, sorted by tool name; prompts the
	// prompts, sorted by name; compl completes their arguments.
	res     *resourceFeature
	prompts *promptFeature
	compl   *completer
	// undeclared are the methods of capabilities the door does not
	// declare.
	undeclared map[string]bool
	// events serves the event types; nil when none are.
	events *eventFeature
	// instr are the instructions per selection (instructions.go).
	instr *instructionsFeature
	// skills are the toolsets' skills (skills.go).
	skills *skillFeature
	// apps are the MCP Apps views of the tools (apps.go).
	apps *appFeature
}

// tool is a tool as the door serves it: the pipeline's tool and its MCP
// description.
type tool struct {
	port.Tool
	catalog *toolcatalog.Tool
	mcp     *mcp.Tool
	// app is mcp pointing at the tool's view, for clients that declare MCP
	// Apps (apps.go); nil for a tool without a view.
	app     *mcp.Tool
	handler mcp.ToolHandler
}

// New builds the MCP server, its tools, resources, prompts and task
// methods, and the HTTP handlers of both eras.
func New(cfg Config) (*Door, error) {
	cfg.Options = cfg.Options.withDefaults(cfg.Resource)
	if cfg.PublicURL != "" {
		if u, err := url.Parse(cfg.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("edge: public URL %q is not an http(s) base URL", cfg.PublicURL)
		}
	}
	d := &Door{cfg: cfg, log: cfg.Log, pipeline: cfg.Pipeline, tools: map[string]*tool{}, closing: make(chan struct{})}
	d.calls = &toolFeature{tools: d.tools, pipeline: cfg.Pipeline, progressInterval: cfg.ProgressInterval}
	var err error
	if d.sessions, err = newSessions(cfg.Sessions, cfg.Log); err != nil {
		return nil, err
	}
	for _, t := range cfg.Pipeline.Tools() {
		c := port.Catalog(t)
		dt := &tool{Tool: t, catalog: c, mcp: mcpTool(c, cfg.Pipeline.ReadOnly())}
		dt.handler = d.calls.toolHandler(dt)
		d.tools[c.Name] = dt
		d.sorted = append(d.sorted, dt)
	}
	sort.Slice(d.sorted, func(i, j int) bool { return d.sorted[i].catalog.Name < d.sorted[j].catalog.Name })
	if d.toolsets, err = newToolsets(cfg.Pipeline.Toolsets(), d.tools, cfg.Toolsets); err != nil {
		return nil, err
	}
	d.states = &sessionStates{m: map[*mcp.ServerSession]*sessionState{}, byID: map[string]*sessionState{}}
	d.resolve = &resolver{dev: cfg.Dev, toolsets: d.toolsets, states: d.states, now: time.Now}
	d.calls.resolve = d.resolve
	catalog := make([]*toolcatalog.Tool, len(d.sorted))
	for i, t := range d.sorted {
		catalog[i] = t.catalog
	}
	index := toolcatalog.NewIndex(catalog)
	d.apps = &appFeature{}
	d.res = &resourceFeature{kinds: buildResources(d.sorted, d.tools), calls: d.calls, resolve: d.resolve, apps: d.apps, ttl: cfg.ResourceTTL}
	d.prompts = &promptFeature{prompts: buildPrompts(d.sorted, d.res), res: d.res, calls: d.calls, resolve: d.resolve}
	d.compl = &completer{resources: d.res.kinds, prompts: d.prompts.prompts, res: d.res, resolve: d.resolve}
	d.skills = &skillFeature{byURI: map[string]*skill{}, assets: cfg.Assets, listTTL: cfg.ListTTL, toolsets: d.toolsets}
	if err := d.skills.loadSkills(d.sorted); err != nil {
		return nil, err
	}
	if d.apps.apps, err = loadApps(d.sorted, cfg.Assets); err != nil {
		return nil, err
	}
	d.instr = &instructionsFeature{toolsets: d.toolsets, sorted: d.sorted}
	vb := &viewBuilder{sorted: d.sorted, toolsets: d.toolsets, kinds: d.res.kinds, prompts: d.prompts.prompts, extendable: extenderOf(cfg.Tasks) != nil}
	views := &views{build: vb.build, m: map[string]*view{}}
	d.lists = &listFeature{views: views, resolve: d.resolve, pageSize: cfg.ToolsPageSize, ttl: cfg.ListTTL, public: cfg.Auth == nil}
	d.meta = &metaFeature{tools: d.tools, index: index, views: views, resolve: d.resolve, pipeline: d.pipeline, tasks: cfg.Tasks, extend: extenderOf(cfg.Tasks), log: cfg.Log}
	subs := &subscriptions{read: d.res.read, kindOf: d.res.kindOf, interval: cfg.ResourcePollInterval, watches: map[string]*watch{}}
	d.res.subs = subs

	// Exactly what is served: tools (whose list changes for a session
	// that enables a toolset in tool search mode); logging (logging/setLevel, and a message per failed call); resources,
	// with subscriptions, and prompts, when the contracts have any, and
	// completion of their arguments; the Tasks extension when a
	// long-running tool can become a task.
	//lint:ignore SA1019 MCP logging is deprecated from 2026-07-28 on; 2025-era clients still use logging/setLevel and its messages
	caps := &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}, Logging: &mcp.LoggingCapabilities{}}
	opts := &mcp.ServerOptions{
		Logger:                    cfg.Log,
		SupportedProtocolVersions: ProtocolVersions,
		PageSize:                  cfg.ToolsPageSize,
		GetSessionID:              d.sessions.idFunc(),
		SetCacheable: func(_ context.Context, req mcp.Request, c *mcp.Cacheable) {
			if _, ok := req.(*mcp.ReadResourceRequest); ok {
				d.res.resourceCacheable(c)
				return
			}
			// server/discover depends only on the edge's configuration.
			c.TTLMs = int(cfg.ListTTL.Milliseconds())
			c.CacheScope = "public"
		},
		// The instructions of the request's selection replace these
		// (instructions.go); a session the SDK opens itself gets these.
		Instructions: "toolmesh serves agent-platform services as MCP tools.",
	}
	resources, prompts, skills, apps := len(d.res.kinds) > 0, len(d.prompts.prompts) > 0, len(d.skills.skills) > 0, len(d.apps.apps) > 0
	if resources {
		caps.Resources = &mcp.ResourceCapabilities{Subscribe: true}
		opts.SubscribeHandler, opts.UnsubscribeHandler = d.res.subscribe, subs.unsubscribe
	} else if skills || apps {
		caps.Resources = &mcp.ResourceCapabilities{}
	}
	if skills {
		// Skills are resources too; the extension obliges skills/list and
		// skills/get (no resources/directory/read: directoryRead is off).
		caps.AddExtension(ExtensionSkills, nil)
	}
	if apps {
		caps.AddExtension(ExtensionUI, map[string]any{})
	}
	if prompts {
		caps.Prompts = &mcp.PromptCapabilities{}
	}
	if resources || prompts {
		caps.Completions = &mcp.CompletionCapabilities{}
		opts.CompletionHandler = d.compl.complete
	}
	d.undeclared = undeclaredMethods(resources || skills || apps, prompts)
	if d.tasks, err = buildTasks(d.sorted, d.tools, cfg.Tasks); err != nil {
		return nil, err
	}
	vb.tasks = d.tasks
	if d.tasks != nil {
		d.taskf = &taskFeature{tasks: d.tasks, tools: d.tools, pipeline: d.pipeline, resolve: d.resolve, log: cfg.Log, answers: cfg.Answers, closing: d.closing}
		d.calls.tasks, d.calls.taskf = d.tasks, d.taskf
		caps.AddExtension(ExtensionTasks, nil)
	}
	if ev := buildEvents(cfg.Events); ev != nil {
		d.events = &eventFeature{types: ev, source: cfg.Events, pageSize: cfg.ToolsPageSize, log: cfg.Log, resolve: d.resolve}
		caps.AddExtension(ExtensionEvents, nil)
	}
	opts.Capabilities = caps
	d.impl = &mcp.Implementation{Name: "toolmesh", Title: "toolmesh", Version: cfg.Version}
	if d.serverInfo, err = json.Marshal(d.impl); err != nil {
		return nil, err
	}
	d.server = mcp.NewServer(d.impl, opts)
	d.server.AddReceivingMiddleware(d.middleware)
	d.server.AddSendingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		d.meta.send = next
		return next
	})
	for _, t := range d.sorted {
		d.server.AddTool(t.mcp, t.handler)
	}
	if err := d.meta.addMetaTools(d.server); err != nil {
		return nil, err
	}
	for _, k := range d.res.kinds {
		if k.fixed != nil {
			d.server.AddResource(k.fixed, d.res.readHandler(k))
		} else {
			d.server.AddResourceTemplate(k.template, d.res.readHandler(k))
		}
	}
	for _, pr := range d.prompts.prompts {
		d.server.AddPrompt(pr.prompt, d.prompts.promptHandler(pr))
	}
	if d.taskf != nil {
		if err := d.taskf.addTaskMethods(d.server); err != nil {
			return nil, err
		}
	}
	if d.events != nil {
		if err := d.events.addEventMethods(d.server); err != nil {
			return nil, err
		}
	}
	if err := d.skills.addSkills(d.server); err != nil {
		return nil, err
	}
	d.apps.addApps(d.server)
	subs.sessions, subs.updated = d.server.Sessions, d.server.ResourceUpdated

	getServer := func(*http.Request) *mcp.Server { return d.server }
	d.modern = mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		Stateless:                    true,
		PropagateRequestCancellation: true,
		Logger:                       cfg.Log,
		MaxRequestBodyBytes:          cfg.MaxBodyBytes,
		// The edge's own Host check is stricter and configurable.
		DisableLocalhostProtection: true,
	})
	d.legacy = d.sessions.route(mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		Logger:                     cfg.Log,
		SessionTimeout:             SessionTimeout,
		MaxRequestBodyBytes:        cfg.MaxBodyBytes,
		DisableLocalhostProtection: true,
	}))
	d.modernWithInfo = withTokenInfo(d.modern)
	d.legacyWithInfo = withTokenInfo(d.legacy)
	return d, nil
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

// ServeStdio serves MCP over in and out (newline-delimited JSON-RPC, the
// stdio transport desktop clients start) until the client disconnects or
// ctx ends; when ctx ends, stop (the edge's shutdown) answers the calls in
// flight first, within stopWithin.
func (d *Door) ServeStdio(ctx context.Context, in io.ReadCloser, out io.WriteCloser, stop func(context.Context) error, stopWithin time.Duration) error {
	return d.serveStdio(ctx, in, out, stop, stopWithin)
}

// CloseSessions closes every MCP session. A session closes once the
// requests it is handling have their answers written; this also ends
// 2025-era standalone streams and task listens.
func (d *Door) CloseSessions(ctx context.Context) error {
	d.closeOnce.Do(func() { close(d.closing) })
	var wg sync.WaitGroup
	for ss := range d.server.Sessions() {
		wg.Go(func() { _ = ss.Close() })
	}
	closed := make(chan struct{})
	go func() {
		wg.Wait()
		close(closed)
	}()
	select {
	case <-closed:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("edge shutdown: close sessions: %w", ctx.Err())
	}
}
