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
	"github.com/toolmesh/toolmesh/internal/toolcall"
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

	views *views
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
	// resources are the resource kinds, sorted by tool name; prompts the
	// prompts, sorted by name; subs the resource subscriptions.
	resources []*resourceKind
	prompts   []*prompt
	subs      *subscriptions
	// undeclared are the methods of capabilities the door does not
	// declare.
	undeclared map[string]bool
	// events serves the event types; nil when none are.
	events *eventFeature
	// instr are the instructions per selection (instructions.go).
	instr instructionsCache
	// skills are the toolsets' skills, sorted by URI (skills.go).
	skills     []*skill
	skillByURI map[string]*skill
	// apps are the MCP Apps views of the tools, sorted by URI (apps.go).
	apps []*appView
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
	d := &Door{cfg: cfg, log: cfg.Log, pipeline: cfg.Pipeline, tools: map[string]*tool{}, closing: make(chan struct{}), skillByURI: map[string]*skill{}}
	var err error
	if d.sessions, err = newSessions(cfg.Sessions, cfg.Log); err != nil {
		return nil, err
	}
	for _, t := range cfg.Pipeline.Tools() {
		c := port.Catalog(t)
		dt := &tool{Tool: t, catalog: c, mcp: mcpTool(c, cfg.Pipeline.ReadOnly())}
		dt.handler = d.toolHandler(dt)
		d.tools[c.Name] = dt
		d.sorted = append(d.sorted, dt)
	}
	sort.Slice(d.sorted, func(i, j int) bool { return d.sorted[i].catalog.Name < d.sorted[j].catalog.Name })
	if d.toolsets, err = newToolsets(cfg.Pipeline.Toolsets(), d.tools, cfg.Toolsets); err != nil {
		return nil, err
	}
	d.states = &sessionStates{m: map[*mcp.ServerSession]*sessionState{}}
	d.resolve = &resolver{dev: cfg.Dev, toolsets: d.toolsets, states: d.states}
	catalog := make([]*toolcatalog.Tool, len(d.sorted))
	for i, t := range d.sorted {
		catalog[i] = t.catalog
	}
	index := toolcatalog.NewIndex(catalog)
	d.buildResources()
	d.buildPrompts()
	if err := d.loadSkills(); err != nil {
		return nil, err
	}
	if err := d.loadApps(); err != nil {
		return nil, err
	}
	d.views = &views{build: d.buildView, m: map[string]*view{}}
	d.meta = &metaFeature{tools: d.tools, index: index, views: d.views, resolve: d.resolve, pipeline: d.pipeline, tasks: cfg.Tasks, extend: extenderOf(cfg.Tasks), log: cfg.Log}
	d.subs = &subscriptions{read: d.read, kindOf: d.kindOf, interval: cfg.ResourcePollInterval, watches: map[string]*watch{}}

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
				d.resourceCacheable(c)
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
	if len(d.resources) > 0 {
		caps.Resources = &mcp.ResourceCapabilities{Subscribe: true}
		opts.SubscribeHandler, opts.UnsubscribeHandler = d.subscribe, d.subs.unsubscribe
	} else if len(d.skills) > 0 || len(d.apps) > 0 {
		caps.Resources = &mcp.ResourceCapabilities{}
	}
	if len(d.skills) > 0 {
		// Skills are resources too; the extension obliges skills/list and
		// skills/get (no resources/directory/read: directoryRead is off).
		caps.AddExtension(ExtensionSkills, nil)
	}
	if len(d.apps) > 0 {
		caps.AddExtension(ExtensionUI, map[string]any{})
	}
	if len(d.prompts) > 0 {
		caps.Prompts = &mcp.PromptCapabilities{}
	}
	if len(d.resources) > 0 || len(d.prompts) > 0 {
		caps.Completions = &mcp.CompletionCapabilities{}
		opts.CompletionHandler = d.complete
	}
	d.undeclared = undeclaredMethods(len(d.resources) > 0 || len(d.skills) > 0 || len(d.apps) > 0, len(d.prompts) > 0)
	if d.tasks, err = buildTasks(d); err != nil {
		return nil, err
	}
	if d.tasks != nil {
		d.taskf = &taskFeature{tasks: d.tasks, tools: d.tools, pipeline: d.pipeline, resolve: d.resolve, log: cfg.Log, answers: cfg.Answers, closing: d.closing}
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
	for _, k := range d.resources {
		if k.fixed != nil {
			d.server.AddResource(k.fixed, d.readHandler(k))
		} else {
			d.server.AddResourceTemplate(k.template, d.readHandler(k))
		}
	}
	for _, pr := range d.prompts {
		d.server.AddPrompt(pr.prompt, d.promptHandler(pr))
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
	if err := d.addSkills(); err != nil {
		return nil, err
	}
	d.addApps()
	d.subs.sessions, d.subs.updated = d.server.Sessions, d.server.ResourceUpdated

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

// toolHandler answers every call to t with exactly one result, whatever
// happens underneath: the pipeline's envelope, an elicitation round, or —
// for a Tasks client whose work is still running — a task.
func (d *Door) toolHandler(t *tool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		slot := taskSlotFrom(ctx)
		c := port.Call{
			Tool:        t.Tool,
			Caller:      d.resolve.principal(req),
			Arguments:   req.Params.Arguments,
			Meta:        req.Params.Meta,
			Elicitation: elicitationOf(ctx, req),
			NoWait:      slot != nil && d.tasks.starts(t.catalog.Name),
			Tasks:       slot != nil,
		}
		if x := req.GetExtra(); x != nil {
			c.Header = x.Header
		}
		if pr := d.progressOf(req); pr != nil {
			c.Progress = pr
		}
		if t.catalog.EventField != nil {
			c.Events = eventsOf(ctx, req)
		}
		out := d.pipeline.Call(ctx, &c)
		if out.Round != nil {
			return roundResult(out.Round), nil
		}
		if q := out.Visit; q != nil {
			// The user accepted to visit a page that is not visited yet: the
			// client calls again once it is (2025-11-25).
			return nil, mcp.URLElicitationRequiredError([]*mcp.ElicitParams{{Mode: "url", ElicitationID: q.ElicitationID, URL: q.URL, Message: q.Message}})
		}
		if out.Task != nil {
			// taskMiddleware answers with the task.
			slot.task = out.Task
			return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
		}
		env := out.Envelope
		if err := clientGapError(req, env); err != nil {
			return nil, err
		}
		if req.Params.RequestState != "" && req.ProtocolVersion() >= ModernProtocol && stateRefused(env) {
			// At 2026-07-28 a requestState that fails its checks is a
			// protocol error, not a tool's answer: the client must start
			// over rather than read a result (SEP-2322).
			return nil, stateError(env)
		}
		if slot != nil && d.tasks.starts(t.catalog.Name) {
			slot.task = d.taskf.started(ctx, t.catalog, env)
		}
		if env.IsError() && req.Session != nil {
			//lint:ignore SA1019 MCP logging is deprecated from 2026-07-28 on, but 2025-era clients that set a level still get a message per failed call
			_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "warning", Logger: "toolmesh.edge",
				Data: map[string]string{"tool": t.catalog.Name, "domain_code": env.DomainCode, "message": env.Message}})
		}
		return toolResult(t.catalog, env), nil
	}
}

// progress tells a client that asked for progress that a call is still
// running, every ProgressInterval, so it can keep waiting. A long-running
// tool also reports its start.
type progress struct {
	req      *mcp.CallToolRequest
	token    any
	interval time.Duration
}

// progressOf is the progress of req's call; nil when its client did not
// ask for it.
func (d *Door) progressOf(req *mcp.CallToolRequest) *progress {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return nil
	}
	return &progress{req: req, token: token, interval: d.cfg.ProgressInterval}
}

func (pr *progress) Start(ctx context.Context, t *toolcatalog.Tool) func() {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		n := 0
		notify := func(msg string) {
			n++
			_ = pr.req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: pr.token, Progress: float64(n), Message: msg})
		}
		if t.LongRunning {
			notify(t.Title + ": started")
		}
		tick := time.NewTicker(pr.interval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				notify(t.Title + ": still running")
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// callAs calls t as p with args, through the pipeline every tools/call
// takes, and returns its envelope. extra carries the request's HTTP headers
// and token, as a tools/call's would (nil for the edge's own background
// reads).
func (d *Door) callAs(ctx context.Context, t *tool, p *identity.Principal, extra *mcp.RequestExtra, args map[string]any) *toolcall.Envelope {
	raw, err := json.Marshal(args)
	if err != nil {
		return toolcall.Fail(t.catalog.Name, toolcall.CodeInternal, "encode arguments")
	}
	c := port.Call{Tool: t.Tool, Caller: p, Arguments: raw, Unmetered: ctx.Value(unmeteredKey{}) != nil}
	if extra != nil {
		c.Header = extra.Header
	}
	out := d.pipeline.Call(ctx, &c)
	if out.Round != nil {
		// Only calls that ask the user something go on; the READ tools
		// behind resources, prompts and completion do not.
		return toolcall.Fail(t.catalog.Name, toolcall.CodeInternal, "the call did not finish")
	}
	return out.Envelope
}

// unmeteredKey marks the context of the edge's own background reads.
type unmeteredKey struct{}

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
