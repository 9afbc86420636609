// Package a2adoor is the edge's A2A door: the mesh's agents served over the
// Agent2Agent protocol, A2A 1.0 over its three bindings and 0.3 over
// JSON-RPC, on a listener of its own, through the official Go SDK
// (github.com/a2aproject/a2a-go/v2). Every registered, active agent has:
//
//	GET  /a2a/agents/<id>/.well-known/agent-card.json  its card, signed
//	POST /a2a/agents/<id>[/]                            JSON-RPC: 1.0 with A2A-Version: 1.0, 0.3 without
//	     /a2a/agents/<id>/rest/...                      HTTP+JSON (REST), 1.0
//	POST /lf.a2a.v1.A2AService/<method>                 gRPC, 1.0, on the same listener (h2c);
//	                                                    the request's tenant names the agent
//
// and the mesh publishes the keys its cards, pushes and depth tokens are
// signed with at /.well-known/jwks.json, and, apart from them, the keys its
// audit checkpoints are signed with at /.well-known/toolmesh-audit-keys
// (internal/auditcheckpoint), which reputation attestations name.
//
// The door knows no domain: it is an A2A RequestHandler (handler.go) over
// the shared contract toolmesh.inbound.v1, which the remoteagents domain
// serves. A message is delivered into the agent's inbox and opens a task,
// working until the agent answers in the message's thread; the task, its
// log of events and its push configs are the contract's, so any replica of
// the door answers for any task, streams it (stream.go) and resumes a
// stream from any event. The SDK's transports parse and answer each
// binding; the door's own boundary (boundary.go) parses each request
// first, as the type its method names, so that bad input gets the
// binding's own error and one boundary.validation_failed event.
//
// Callers authenticate as on /mcp: a bearer JWT from the edge's issuer for
// the A2A resource, or, in development mode, nobody on loopback only. A
// sender is known in the mesh as "a2a-<its subject>"; it sees only its own
// tasks. The depth a message carries (a2alink) is verified against its
// sender's published keys.
package a2adoor

import (
	"context"
	"crypto/ed25519"
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
	"time"

	"connectrpc.com/connect"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/a2aproject/a2a-go/v2/a2agrpc/v1"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"google.golang.org/grpc"

	"github.com/toolmesh/toolmesh/edge/httpguard"
	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/auditcheckpoint"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	inboundv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1/inboundv1connect"
)

// Options are the A2A door's settings (edge.Config.A2A): each declared and
// documented here, and defaulted once, in New.
type Options struct {
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
	// Key is the mesh's signing key: it signs the cards, and its public
	// half is published at /.well-known/jwks.json. Required.
	Key ed25519.PrivateKey
	// AuditKeys are the audit checkpoint keys it publishes at
	// auditcheckpoint.KeysPath, the current first; none: that path
	// answers 404.
	AuditKeys []ed25519.PublicKey
}

// Config is what the door is built from: its options and what the edge
// gives it.
type Config struct {
	Options
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
	// client, its mesh signer and its call timeout, the deadline of each
	// call (a stream waits for the task's events in calls of its own).
	Clients meshclient.Config
	// Extensions gives the extensions domains declare for an agent's card
	// (the card_extension tool option), appended to the door's own; nil:
	// none.
	Extensions port.CardExtensions
	// Log receives the door's events.
	Log *slog.Logger
}

// a2aPathPrefix is where agents are served.
const a2aPathPrefix = "/a2a/agents/"

// maxBody caps an A2A request body (or gRPC message).
const maxBody = 1 << 20

// keepAlive is how often a quiet stream gets an SSE comment, so that
// proxies and idle timeouts do not cut it.
const keepAlive = 15 * time.Second

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
	// auditKeys is the document served at auditcheckpoint.KeysPath; ""
	// when none is published.
	auditKeys string
	cards     *a2alink.CardSigner
	loopback  bool

	// The SDK's transports, over the door's RequestHandler.
	jsonrpc10, jsonrpc03, rest http.Handler
	grpc                       *grpc.Server
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
	if len(cfg.Key) != ed25519.PrivateKeySize {
		return nil, errors.New("a2a: the A2A endpoint needs the mesh key, to sign its cards")
	}
	if g.keys, err = json.Marshal(a2alink.Keys(cfg.Key.Public().(ed25519.PublicKey))); err != nil {
		return nil, fmt.Errorf("a2a: publish keys: %w", err)
	}
	g.auditKeys = auditcheckpoint.FormatKeys(cfg.AuditKeys...)
	if g.cards, err = a2alink.NewCardSigner(cfg.Key, g.base+a2alink.KeysPath); err != nil {
		return nil, fmt.Errorf("a2a: %w", err)
	}
	g.cfg = cfg
	h := &handler{g: g}
	opts := []a2asrv.TransportOption{a2asrv.WithTransportKeepAlive(keepAlive), a2asrv.WithTransportPanicHandler(g.panicked)}
	g.jsonrpc10 = a2asrv.NewJSONRPCHandler(h, opts...)
	g.jsonrpc03 = a2av0.NewJSONRPCHandler(h, opts...)
	g.rest = a2asrv.NewRESTHandler(h, opts...)
	g.grpc = grpc.NewServer(grpc.MaxRecvMsgSize(maxBody), grpc.UnaryInterceptor(g.grpcUnary), grpc.StreamInterceptor(g.grpcStream))
	a2agrpc.NewHandler(h).RegisterWith(g.grpc)
	return g, nil
}

// panicked answers a panic in a transport as an internal error; the
// cause is logged.
func (g *Door) panicked(r any) error {
	g.log.Error("a2a.panic", "panic", fmt.Sprint(r))
	return errInternal
}

// Handler serves the A2A endpoint.
func (g *Door) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", httpguard.Healthz)
	mux.HandleFunc("GET "+a2alink.KeysPath, serveKeyDoc(g.keys, "application/json", ""))
	mux.HandleFunc("GET "+auditcheckpoint.KeysPath, serveKeyDoc([]byte(g.auditKeys), auditcheckpoint.KeysContentType, "this mesh publishes no audit checkpoint key"))
	mux.HandleFunc("GET "+a2aPathPrefix+"{agent}"+a2alink.CardPath, g.serveCard)
	// The endpoint with or without a slash after the agent: the card's url
	// has none, a base URL to resolve the card's path against has one.
	mux.HandleFunc("GET "+a2aPathPrefix+"{agent}", g.serveCard)
	mux.HandleFunc("GET "+a2aPathPrefix+"{agent}/{$}", g.serveCard)
	mux.HandleFunc("POST "+a2aPathPrefix+"{agent}", g.serveJSONRPC)
	mux.HandleFunc("POST "+a2aPathPrefix+"{agent}/{$}", g.serveJSONRPC)
	mux.HandleFunc(a2aPathPrefix+"{agent}/rest/", g.serveREST)
	mux.HandleFunc("POST "+grpcPrefix, g.serveGRPC)
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

// serveKeyDoc serves a published key document of the given content type;
// an empty document answers 404 with missing.
func serveKeyDoc(doc []byte, contentType, missing string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if len(doc) == 0 {
			http.Error(w, missing, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Cache-Control", "public, max-age=300")
		_, _ = w.Write(doc)
	}
}

// endpoint is the JSON-RPC URL of an agent (both versions): the first of
// its card's interfaces, and the audience of depth tokens for it.
func (g *Door) endpoint(agent string) string { return g.base + a2aPathPrefix + agent }

// restEndpoint is the HTTP+JSON URL of an agent.
func (g *Door) restEndpoint(agent string) string { return g.endpoint(agent) + "/rest" }

// grpcTarget is the gRPC target of the door: its host and port.
func (g *Door) grpcTarget() string {
	if g.hostPort.Port != "" {
		return net.JoinHostPort(g.hostPort.Host, g.hostPort.Port)
	}
	u, _ := url.Parse(g.base)
	if u.Scheme == "https" {
		return net.JoinHostPort(u.Hostname(), "443")
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// activeAgent returns the agent, when the mesh serves it (it is registered
// and active).
func (g *Door) activeAgent(ctx context.Context, id string) (*inboundv1.Agent, error) {
	ctx = mesh.WithCall(ctx, mesh.Call{Caller: a2aSelf})
	res, err := g.inbound.GetAgent(ctx, &inboundv1.GetAgentRequest{AgentId: id})
	if err != nil {
		return nil, err
	}
	return res.GetAgent(), nil
}

// agentMissing reports whether err says the agent is not served.
func agentMissing(err error) bool {
	c := connect.CodeOf(err)
	return c == connect.CodeNotFound || c == connect.CodeInvalidArgument
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
