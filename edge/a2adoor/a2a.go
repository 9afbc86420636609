package edge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/a2aproject/a2a-go/a2a"

	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/mesh"
	agentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1/agentsv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1/remoteagentsv1connect"
)

// The A2A endpoint: the mesh's agents served over the Agent2Agent protocol
// (0.3, JSON-RPC), on a listener of its own. Every registered, active agent
// has a card at /a2a/agents/<id>/.well-known/agent-card.json and takes
// JSON-RPC at /a2a/agents/<id>:
//
//   - message/send delivers the message into the agent's inbox (through
//     RemoteAgentsService.DeliverInbound and the messages service) and
//     answers with a task, "working" until the agent answers in the
//     message's thread (messages_send with its thread_id to the sender);
//   - tasks/get shows the task, "completed" with the answer once there is
//     one; tasks/cancel cancels it while it is working;
//   - streaming, push notifications and the extended card are not served.
//
// Params are parsed at the a2a.jsonrpc boundary (a2a_rpc.go). Callers
// authenticate as on /mcp: a bearer JWT from the edge's issuer for the A2A
// resource, or, in development mode, nobody on loopback only. A sender is
// known in the mesh as "a2a-<its subject>"; it sees only its own tasks.
// The depth a message carries (a2alink) is verified against its sender's
// published keys, which this endpoint publishes too, at
// /.well-known/jwks.json.

// A2AConfig configures the A2A endpoint.
type A2AConfig struct {
	// Addr is the address it listens on; in development mode (no Auth on
	// the edge) it must be a loopback address.
	Addr string
	// PublicURL is its base URL as remote agents reach it
	// ("https://a2a.example.com"); cards name endpoints below it, and
	// depth tokens for its agents must be addressed to them. Default
	// http://<Addr>.
	PublicURL string
	// Resource is the audience the bearer tokens of A2A callers must name
	// (with authentication on); default PublicURL.
	Resource string
	// Egress guards fetching the keys of the meshes that send messages.
	Egress egress.Policy
	// Version is the agents' version on their cards.
	Version string
}

// a2aPathPrefix is where agents are served.
const a2aPathPrefix = "/a2a/agents/"

// a2aTimeout bounds one A2A request's service calls.
const a2aTimeout = 15 * time.Second

// a2aMaxBody caps an A2A request body.
const a2aMaxBody = 1 << 20

// a2aGateway is the A2A endpoint of an edge.
type a2aGateway struct {
	e        *Edge
	cfg      A2AConfig
	base     string
	hostPort hostPort
	auth     *identity.Authenticator // nil in development mode
	agents   agentsv1connect.AgentsServiceClient
	remote   remoteagentsv1connect.RemoteAgentsServiceClient
	depth    *a2alink.DepthVerifier
	keys     []byte
	loopback bool
}

// self is the identity the endpoint asks the agents directory with.
var a2aSelf = mesh.Caller{Subject: "toolmesh-a2a", Agent: "toolmesh-a2a", Roles: []string{mesh.RoleService}}

func newA2AGateway(e *Edge, cfg A2AConfig) (*a2aGateway, error) {
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("a2a: listen address %q: %w", cfg.Addr, err)
	}
	g := &a2aGateway{e: e, cfg: cfg, loopback: isLoopbackName(host)}
	if cfg.PublicURL == "" {
		cfg.PublicURL = "http://" + cfg.Addr
	}
	u, err := url.Parse(cfg.PublicURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("a2a: public URL %q is not an http(s) base URL", cfg.PublicURL)
	}
	if cfg.Version == "" {
		cfg.Version = e.cfg.Version
	}
	g.base = strings.TrimRight(cfg.PublicURL, "/")
	g.hostPort = parseHostPort(u.Host)
	if e.cfg.Auth == nil {
		if !g.loopback {
			return nil, fmt.Errorf("a2a: development mode (no authentication) serves loopback only, but the A2A endpoint listens on %s", cfg.Addr)
		}
	} else {
		ac := *e.cfg.Auth
		ac.Resource = cfg.Resource
		if ac.Resource == "" {
			ac.Resource = g.base
		}
		if g.auth, err = identity.New(ac, e.cfg.Grants, e.log); err != nil {
			return nil, fmt.Errorf("a2a: %w", err)
		}
	}
	agentsURL := e.cfg.Services[agentsv1connect.AgentsServiceName]
	remoteURL := e.cfg.Services[remoteagentsv1connect.RemoteAgentsServiceName]
	if agentsURL == "" || remoteURL == "" {
		return nil, errors.New("a2a: the A2A endpoint needs the agents and remoteagents services")
	}
	opts := []connect.ClientOption{connect.WithInterceptors(mesh.NewClientInterceptor(e.cfg.Mesh, a2aTimeout)), e.cfg.Telemetry.ClientOption()}
	g.agents = agentsv1connect.NewAgentsServiceClient(e.cfg.HTTPClient, agentsURL, opts...)
	g.remote = remoteagentsv1connect.NewRemoteAgentsServiceClient(e.cfg.HTTPClient, remoteURL, opts...)
	g.depth = a2alink.NewDepthVerifier(cfg.Egress)
	if g.keys, err = json.Marshal(a2alink.Keys(e.cfg.Mesh.PublicKey())); err != nil {
		return nil, fmt.Errorf("a2a: publish keys: %w", err)
	}
	g.cfg = cfg
	return g, nil
}

// A2AHandler serves the A2A endpoint (nil when the edge has none).
func (e *Edge) A2AHandler() http.Handler {
	if e.a2a == nil {
		return nil
	}
	mux := http.NewServeMux()
	g := e.a2a
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET "+a2alink.KeysPath, g.serveKeys)
	mux.HandleFunc("GET "+a2aPathPrefix+"{agent}"+a2alink.CardPath, g.serveCard)
	mux.HandleFunc("GET "+a2aPathPrefix+"{agent}", g.serveCard)
	mux.HandleFunc("POST "+a2aPathPrefix+"{agent}", g.serveRPC)
	return e.recoverPanics(g.guard(mux))
}

// guard is the Host check (DNS rebinding) and, in development mode, the
// loopback check, before anything is served.
func (g *a2aGateway) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.hostAllowed(r) {
			g.e.rejectHost(w, r)
			return
		}
		if g.auth == nil && !connLoopback(r) {
			writeRPCError(w, http.StatusForbidden, nil, codeUnauthorized, "Forbidden: this A2A endpoint runs without authentication and serves loopback clients only", nil)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && r.Method != http.MethodGet && !g.e.originAllowed(o, r) {
			writeRPCError(w, http.StatusForbidden, nil, codeInvalidRequest, "Forbidden: origin "+truncate(o, 200)+" is not allowed", nil)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (g *a2aGateway) hostAllowed(r *http.Request) bool {
	hp := parseHostPort(r.Host)
	if hp.host == "" {
		return false
	}
	if g.loopback && connLoopback(r) && isLoopbackName(hp.host) {
		return true
	}
	if hp.host == g.hostPort.host && (g.hostPort.port == "" || g.hostPort.port == hp.port) {
		return true
	}
	for _, a := range g.e.hosts {
		if a.host == hp.host && (a.port == "" || a.port == hp.port) {
			return true
		}
	}
	return false
}

// connLoopback reports whether r came in on a loopback address.
func connLoopback(r *http.Request) bool {
	addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || addr == nil {
		return false
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (g *a2aGateway) serveKeys(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(g.keys)
}

// endpoint is the A2A URL of an agent: its card's url, and the audience
// of depth tokens for it.
func (g *a2aGateway) endpoint(agent string) string { return g.base + a2aPathPrefix + agent }

// activeAgent returns the registered agent id, when it is active.
func (g *a2aGateway) activeAgent(ctx context.Context, id string) (*agentsv1.Agent, error) {
	ctx, cancel := context.WithTimeout(mesh.WithCall(ctx, mesh.Call{Caller: a2aSelf}), a2aTimeout)
	defer cancel()
	res, err := g.agents.Get(ctx, &agentsv1.GetRequest{AgentId: id})
	if err != nil {
		return nil, err
	}
	if res.GetAgent().GetStatus() != agentsv1.AgentStatus_AGENT_STATUS_ACTIVE {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("agent %s is not active", id))
	}
	return res.GetAgent(), nil
}

// serveCard answers an agent's card: public, for discovery.
func (g *a2aGateway) serveCard(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("agent")
	ag, err := g.activeAgent(r.Context(), id)
	if err != nil {
		g.agentError(w, r, nil, id, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_ = json.NewEncoder(w).Encode(g.card(ag))
}

// agentError answers a request for an agent that is not served.
func (g *a2aGateway) agentError(w http.ResponseWriter, r *http.Request, rpcID json.RawMessage, id string, err error) {
	switch connect.CodeOf(err) {
	case connect.CodeNotFound, connect.CodeInvalidArgument:
		writeRPCError(w, http.StatusNotFound, rpcID, codeInvalidRequest, fmt.Sprintf("no agent %q is served here", truncate(id, 64)), nil)
		return
	}
	g.e.log.ErrorContext(r.Context(), "a2a.directory_failed", "agent", truncate(id, 64), "error", err)
	writeRPCError(w, http.StatusServiceUnavailable, rpcID, codeInternalError, "the agents directory is unavailable; try again", nil)
}

// card is an agent's A2A card.
func (g *a2aGateway) card(ag *agentsv1.Agent) *a2a.AgentCard {
	name := ag.GetDisplayName()
	if name == "" {
		name = ag.GetId()
	}
	desc := ag.GetDescription()
	if desc == "" {
		desc = "Agent " + ag.GetId() + " of a toolmesh mesh."
	}
	c := &a2a.AgentCard{
		ProtocolVersion:    a2alink.ProtocolVersion,
		Name:               name,
		Description:        desc,
		URL:                g.endpoint(ag.GetId()),
		PreferredTransport: a2a.TransportProtocolJSONRPC,
		Version:            g.cfg.Version,
		DefaultInputModes:  []string{"text/plain"},
		DefaultOutputModes: []string{"text/plain"},
		Capabilities: a2a.AgentCapabilities{Extensions: []a2a.AgentExtension{{
			URI:         a2alink.DepthExtension,
			Description: "The invocation depth of the work a message asks for, signed by the sending mesh (metadata " + a2alink.MetadataDepthToken + "); messages without it start a new chain.",
			Params:      map[string]any{"keys": g.base + a2alink.KeysPath, "max_depth": 3},
		}}},
		Skills: []a2a.AgentSkill{{
			ID:   "inbox",
			Name: "Message " + ag.GetId(),
			Description: "Delivers your message to " + ag.GetId() + "'s inbox. The task stays working until " + ag.GetId() +
				" answers; its answer completes the task (tasks/get).",
			Tags:        []string{"messaging", "inbox"},
			InputModes:  []string{"text/plain"},
			OutputModes: []string{"text/plain"},
		}},
	}
	if g.auth != nil {
		c.SecuritySchemes = a2a.NamedSecuritySchemes{"bearer": a2a.HTTPAuthSecurityScheme{Scheme: "Bearer", BearerFormat: "JWT",
			Description: "An OAuth 2.1 access token from " + g.auth.Issuer() + " for " + g.auth.Resource()}}
		c.Security = []a2a.SecurityRequirements{{"bearer": a2a.SecuritySchemeScopes{}}}
	}
	return c
}

// sender is the mesh identity of an A2A caller: "a2a-" and its subject,
// made an agent id (lower case, [a-z0-9_-], at most 63 characters; a hash
// keeps apart subjects that had to be changed to fit).
func sender(p *identity.Principal) string {
	sub := p.Subject
	if sub == "" {
		sub = p.Agent
	}
	var b strings.Builder
	for _, r := range strings.ToLower(sub) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	id := "a2a-" + b.String()
	if id == "a2a-"+sub && len(id) <= 63 {
		return id
	}
	sum := sha256.Sum256([]byte(sub))
	if len(id) > 54 {
		id = id[:54]
	}
	return id + "-" + hex.EncodeToString(sum[:4])
}
