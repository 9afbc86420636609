package a2adoor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"

	"connectrpc.com/connect"
	"github.com/a2aproject/a2a-go/a2a"

	"github.com/toolmesh/toolmesh/edge/httpguard"
	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	inboundv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1/inboundv1connect"
)

// Package a2adoor is the edge's A2A door: the mesh's agents served over
// the Agent2Agent protocol (0.3, JSON-RPC), on a listener of its own. Every registered, active agent
// has a card at /a2a/agents/<id>/.well-known/agent-card.json and takes
// JSON-RPC at /a2a/agents/<id>:
//
//   - message/send delivers the message into the agent's inbox (through
//     toolmesh.inbound.v1.InboundService.DeliverInbound, which the
//     remoteagents domain serves) and answers with a task, "working" until
//     the agent answers in the message's thread;
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

// Config configures the A2A door.
type Config struct {
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

	// Auth authenticates callers as the edge does, for the A2A resource
	// (Resource); nil is development mode, which serves loopback only.
	Auth *identity.Config
	// Grants are the edge's grants per token subject.
	Grants *identity.Grants
	// DevAgent is the agent of the local caller in development mode.
	DevAgent string
	// Guard is the edge's Host and Origin check; the door also answers to
	// its public URL's host.
	Guard *httpguard.Guard
	// Services maps fully-qualified service names to base URLs.
	Services map[string]string
	// Clients says how the door calls the services: the edge's HTTP
	// client, its mesh signer (whose public key the door also publishes)
	// and its call timeout, the deadline of each call.
	Clients meshclient.Config
	// Log receives the door's events.
	Log *slog.Logger
}

// a2aPathPrefix is where agents are served.
const a2aPathPrefix = "/a2a/agents/"

// a2aMaxBody caps an A2A request body.
const a2aMaxBody = 1 << 20

// Door is the A2A endpoint of the mesh's agents.
type Door struct {
	cfg      Config
	log      *slog.Logger
	guard    *httpguard.Guard
	dev      *identity.Principal // the local caller in development mode
	base     string
	hostPort httpguard.HostPort
	auth     *identity.Authenticator // nil in development mode
	inbound  inboundv1connect.InboundServiceClient
	depth    *a2alink.DepthVerifier
	keys     []byte
	loopback bool
}

// a2aSelf is the identity the endpoint asks which agents it serves with.
var a2aSelf = mesh.Caller{Subject: "toolmesh-a2a", Agent: "toolmesh-a2a", Roles: []string{mesh.RoleService}}

// New checks cfg and builds the door.
func New(cfg Config) (*Door, error) {
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("a2a: listen address %q: %w", cfg.Addr, err)
	}
	g := &Door{cfg: cfg, log: cfg.Log, guard: cfg.Guard, loopback: httpguard.IsLoopbackName(host)}
	if cfg.PublicURL == "" {
		cfg.PublicURL = "http://" + cfg.Addr
	}
	u, err := url.Parse(cfg.PublicURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("a2a: public URL %q is not an http(s) base URL", cfg.PublicURL)
	}
	g.base = strings.TrimRight(cfg.PublicURL, "/")
	g.hostPort = httpguard.ParseHostPort(u.Host)
	if cfg.Auth == nil {
		if !g.loopback {
			return nil, fmt.Errorf("a2a: development mode (no authentication) serves loopback only, but the A2A endpoint listens on %s", cfg.Addr)
		}
		g.dev = identity.Dev(cfg.DevAgent)
	} else {
		ac := *cfg.Auth
		ac.Resource = cfg.Resource
		if ac.Resource == "" {
			ac.Resource = g.base
		}
		if g.auth, err = identity.New(ac, cfg.Grants, cfg.Log); err != nil {
			return nil, fmt.Errorf("a2a: %w", err)
		}
	}
	inboundURL := cfg.Services[inboundv1connect.InboundServiceName]
	if inboundURL == "" {
		return nil, errors.New("a2a: the A2A endpoint needs the service of toolmesh.inbound.v1 (the remoteagents domain serves it)")
	}
	g.inbound = meshclient.New(cfg.Clients, inboundv1connect.NewInboundServiceClient, inboundURL)
	g.depth = a2alink.NewDepthVerifier(cfg.Egress)
	if g.keys, err = json.Marshal(a2alink.Keys(cfg.Clients.Signer.PublicKey())); err != nil {
		return nil, fmt.Errorf("a2a: publish keys: %w", err)
	}
	g.cfg = cfg
	return g, nil
}

// Handler serves the A2A endpoint.
func (g *Door) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", httpguard.Healthz)
	mux.HandleFunc("GET "+a2alink.KeysPath, g.serveKeys)
	mux.HandleFunc("GET "+a2aPathPrefix+"{agent}"+a2alink.CardPath, g.serveCard)
	mux.HandleFunc("GET "+a2aPathPrefix+"{agent}", g.serveCard)
	mux.HandleFunc("POST "+a2aPathPrefix+"{agent}", g.serveRPC)
	return httpguard.RecoverPanics(g.log, g.check(mux))
}

// check is the Host check (DNS rebinding) and, in development mode, the
// loopback check, before anything is served.
func (g *Door) check(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.hostAllowed(r) {
			g.guard.RejectHost(w, r)
			return
		}
		if g.auth == nil && !httpguard.ConnLoopback(r) {
			httpguard.WriteRPCError(w, http.StatusForbidden, nil, httpguard.CodeUnauthorized, "Forbidden: this A2A endpoint runs without authentication and serves loopback clients only", nil)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && r.Method != http.MethodGet && !g.guard.OriginAllowed(o, r) {
			httpguard.WriteRPCError(w, http.StatusForbidden, nil, httpguard.CodeInvalidRequest, "Forbidden: origin "+httpguard.Truncate(o, 200)+" is not allowed", nil)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (g *Door) hostAllowed(r *http.Request) bool {
	hp := httpguard.ParseHostPort(r.Host)
	if hp.Host == "" {
		return false
	}
	if g.loopback && httpguard.ConnLoopback(r) && httpguard.IsLoopbackName(hp.Host) {
		return true
	}
	return g.hostPort.Matches(hp) || g.guard.Listed(hp)
}

func (g *Door) serveKeys(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(g.keys)
}

// PublicURL is the door's base URL as remote agents reach it.
func (g *Door) PublicURL() string { return g.base }

// endpoint is the A2A URL of an agent: its card's url, and the audience
// of depth tokens for it.
func (g *Door) endpoint(agent string) string { return g.base + a2aPathPrefix + agent }

// activeAgent returns the agent id, when the mesh serves it (it is
// registered and active).
func (g *Door) activeAgent(ctx context.Context, id string) (*inboundv1.Agent, error) {
	ctx = mesh.WithCall(ctx, mesh.Call{Caller: a2aSelf})
	res, err := g.inbound.GetAgent(ctx, &inboundv1.GetAgentRequest{AgentId: id})
	if err != nil {
		return nil, err
	}
	return res.GetAgent(), nil
}

// serveCard answers an agent's card: public, for discovery.
func (g *Door) serveCard(w http.ResponseWriter, r *http.Request) {
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
func (g *Door) agentError(w http.ResponseWriter, r *http.Request, rpcID json.RawMessage, id string, err error) {
	switch connect.CodeOf(err) {
	case connect.CodeNotFound, connect.CodeInvalidArgument:
		httpguard.WriteRPCError(w, http.StatusNotFound, rpcID, httpguard.CodeInvalidRequest, fmt.Sprintf("no agent %q is served here", httpguard.Truncate(id, 64)), nil)
		return
	}
	g.log.ErrorContext(r.Context(), "a2a.directory_failed", "agent", httpguard.Truncate(id, 64), "error", err)
	httpguard.WriteRPCError(w, http.StatusServiceUnavailable, rpcID, httpguard.CodeInternalError, "the agents directory is unavailable; try again", nil)
}

// card is an agent's A2A card.
func (g *Door) card(ag *inboundv1.Agent) *a2a.AgentCard {
	name := ag.GetDisplayName()
	if name == "" {
		name = ag.GetAgentId()
	}
	desc := ag.GetDescription()
	if desc == "" {
		desc = "Agent " + ag.GetAgentId() + " of a toolmesh mesh."
	}
	c := &a2a.AgentCard{
		ProtocolVersion:    "0.3.0",
		Name:               name,
		Description:        desc,
		URL:                g.endpoint(ag.GetAgentId()),
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
			Name: "Message " + ag.GetAgentId(),
			Description: "Delivers your message to " + ag.GetAgentId() + "'s inbox. The task stays working until " + ag.GetAgentId() +
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
