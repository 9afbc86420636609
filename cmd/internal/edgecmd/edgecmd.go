// Package edgecmd is the `toolmesh edge` command: the MCP edge (and its
// A2A endpoint) as a process, its options bound to flags and TOOLMESH_EDGE_…
// variables. It imports no domain service: what it knows of the mesh comes
// from cmd/internal/topology.
package edgecmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/cmd/internal/topology"
	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/auditcheckpoint"
	"github.com/toolmesh/toolmesh/internal/keyfile"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/temporalclient"
)

// Flags is the configuration of `toolmesh edge`: the doors' options
// (edge.MCP, edge.Elicitation, edge.A2A), bound to their flags directly,
// and what the process reads or builds before the edge (keys, files,
// clients).
type Flags struct {
	mcp                                    edge.MCP
	elicit                                 edge.Elicitation
	a2a                                    edge.A2A
	devAgent, dataDir, keyPath             string
	stdio, readOnly                        bool
	services                               map[string]string
	callTimeout, waitBudget                time.Duration
	issuer, resource, jwksFile, hsFile     string
	grantsFile                             string
	authServers, origins, hosts, sessPeers []string
	limits                                 *cli.LimitFlags
	shutdownGrace, shutdownTimeout         time.Duration
	rateLimit                              float64
	rateBurst                              int
	temporalAddr, stateKey, statePrevKey   string
	sessionAdvertise, metricsAddr          string
	a2aAuditKey                            string
	telemetry                              *cli.TelemetryFlags
	serviceConcurrency                     int
}

// Bind binds the edge's options to s.
func Bind(s *config.Set, getenv func(string) string) *Flags {
	c := &Flags{}
	s.String(&c.mcp.Addr, "127.0.0.1:7100", config.Opt{Flag: "addr", Env: "TOOLMESH_EDGE_ADDR", Usage: "listen address; a non-loopback address needs --issuer"})
	s.Bool(&c.stdio, false, config.Opt{Flag: "stdio", Usage: "serve MCP over stdin/stdout (for desktop clients) instead of HTTP"})
	cli.BindServices(s, &c.services, nil)
	cli.BindCallTimeout(s, &c.callTimeout, "deadline of each service call")
	s.Duration(&c.waitBudget, edge.DefaultWaitBudget, config.Opt{Flag: "wait-budget", Env: "TOOLMESH_EDGE_WAIT_BUDGET",
		Usage: "how long a long-running tool that waits for its outcome (owner_ask) waits before it returns a handle to poll; such calls get it on top of --call-timeout"})
	s.String(&c.devAgent, "local", config.Opt{Flag: "dev-agent", Env: "TOOLMESH_DEV_AGENT", Usage: "agent id of the local caller in development mode and over stdio"})
	cli.BindData(s, &c.dataDir, "directory holding mesh.key and the request state keys")
	cli.BindMeshKey(s, &c.keyPath, "mesh private key file that signs service calls")
	s.Bool(&c.readOnly, false, config.Opt{Flag: "read-only", Env: "TOOLMESH_EDGE_READ_ONLY", Usage: "refuse WRITE and ADMIN tools (read_only) without calling services"})
	s.String(&c.mcp.Toolsets, edge.DefaultToolsets, config.Opt{Flag: "toolsets", Env: "TOOLMESH_EDGE_TOOLSETS",
		Usage: "toolset selection of a client that makes none (by /mcp/x/<toolset> or the Toolmesh-Toolsets header) and of the stdio client: all, default, toolsets, tools, -exclusions, dynamic (docs/toolsets.md)"})
	s.String(&c.issuer, "", config.Opt{Flag: "issuer", Env: "TOOLMESH_OAUTH_ISSUER", Usage: "OAuth issuer whose bearer JWTs the edge accepts; enables authentication"})
	s.String(&c.resource, "", config.Opt{Flag: "resource", Env: "TOOLMESH_EDGE_RESOURCE", Usage: "canonical URI of this edge, the audience tokens must name", Default: "http://<addr>/mcp"})
	s.String(&c.mcp.PublicURL, "", config.Opt{Flag: "public-url", Env: "TOOLMESH_EDGE_PUBLIC_URL",
		Usage: "the edge's base URL as MCP clients reach it (https://mcp.example.com): its server cards and AI catalog name the endpoints below it", Default: "with --issuer the origin of --resource, else the host each request reached"})
	s.String(&c.jwksFile, "", config.Opt{Flag: "jwks-file", Env: "TOOLMESH_OAUTH_JWKS_FILE", Usage: "JSON Web Key Set file with the issuer's RS256/ES256 public keys"})
	s.String(&c.hsFile, "", config.Opt{Flag: "dev-hs256-secret-file", Env: "TOOLMESH_OAUTH_DEV_HS256_SECRET_FILE", Usage: "file with an HS256 secret of at least 32 bytes (development only: loopback addresses)"})
	s.String(&c.grantsFile, "", config.Opt{Flag: "grants-file", Env: "TOOLMESH_EDGE_GRANTS_FILE", Usage: "YAML file granting roles, scopes and tools per token subject"})
	s.List(&c.authServers, config.Opt{Flag: "authorization-server", Env: "TOOLMESH_OAUTH_AUTHORIZATION_SERVERS", Usage: "authorization server listed in the resource metadata", Default: "the issuer"})
	s.List(&c.origins, config.Opt{Flag: "allow-origin", Env: "TOOLMESH_EDGE_ALLOWED_ORIGINS", Usage: "browser origin allowed to call the edge, scheme://host[:port]"})
	s.List(&c.hosts, config.Opt{Flag: "allow-host", Env: "TOOLMESH_EDGE_ALLOWED_HOSTS", Usage: "Host header value the edge answers to, besides loopback names on loopback"})
	c.limits = cli.BindLimits(s, "TOOLMESH_EDGE_", edge.DefaultMaxBodyBytes)
	s.Duration(&c.shutdownGrace, edge.DefaultShutdownGrace, config.Opt{Flag: "shutdown-grace", Env: "TOOLMESH_EDGE_SHUTDOWN_GRACE",
		Usage: "on shutdown, how long tool calls in flight may run on before they are cut short and answer unavailable"})
	s.Duration(&c.shutdownTimeout, defaultEdgeShutdownTimeout, config.Opt{Flag: "shutdown-timeout", Env: "TOOLMESH_EDGE_SHUTDOWN_TIMEOUT",
		Usage: "on shutdown, how long the edge may take to answer what is in flight and close its connections; longer than --shutdown-grace"})
	s.Float64(&c.rateLimit, 0, config.Opt{Flag: "rate-limit", Env: "TOOLMESH_EDGE_RATE_LIMIT", Usage: "tool calls per second per caller (0: unlimited)"})
	s.Int(&c.rateBurst, 0, config.Opt{Flag: "rate-burst", Env: "TOOLMESH_EDGE_RATE_BURST", Usage: "tool calls a caller may make at once (0: the rate)"})
	s.Int(&c.serviceConcurrency, edge.DefaultServiceConcurrency, config.Opt{Flag: "service-concurrency", Env: "TOOLMESH_EDGE_SERVICE_CONCURRENCY",
		Usage: "calls of ordinary tools the edge has in flight to one service at once; more wait their turn in order, within their deadline (long-running and streaming tools are not counted; 0: no limit)"})
	s.String(&c.temporalAddr, "", config.Opt{Flag: "temporal", Env: "TOOLMESH_TEMPORAL", Usage: "Temporal frontend address; turns on multi-round elicitation (calls that lack inputs ask the user)"})
	s.String(&c.stateKey, "", config.Opt{Flag: "state-key", Env: "TOOLMESH_STATE_KEY", Usage: "request state key file that seals and verifies elicitation rounds", Default: "<data>/" + cli.StateKeyFile})
	s.String(&c.statePrevKey, "", config.Opt{Flag: "state-previous-key", Env: "TOOLMESH_STATE_PREVIOUS_KEY", Usage: "previous request state key file, still accepted after a rotation", Default: "<data>/" + cli.StatePreviousKeyFile + " when present"})
	s.Duration(&c.elicit.StateTTL, edge.DefaultStateTTL, config.Opt{Flag: "state-ttl", Env: "TOOLMESH_EDGE_STATE_TTL", Usage: "how long a user has to answer one round of an elicited call"})
	s.Duration(&c.elicit.TaskCallTimeout, edge.DefaultTaskCallTimeout, config.Opt{Flag: "task-call-timeout", Env: "TOOLMESH_EDGE_TASK_CALL_TIMEOUT",
		Usage: "the deadline of a call that is an MCP task, carried by the calls worker (instead of --call-timeout); its agent may extend it with calls_extend_task, up to 24h"})
	s.List(&c.sessPeers, config.Opt{Flag: "session-peer", Env: "TOOLMESH_EDGE_SESSION_PEERS",
		Usage: "an edge replica as host:port, a name standing for every address it resolves to; with peers, 2025-era sessions work on every replica (docs/sessions.md); without, only on the one they began on"})
	s.String(&c.sessionAdvertise, "", config.Opt{Flag: "session-advertise", Env: "TOOLMESH_EDGE_SESSION_ADVERTISE",
		Usage: "IP address (and port, default --addr's) the other edge replicas reach this one at", Default: "--addr when it names an IP address"})
	s.String(&c.a2a.Addr, "", config.Opt{Flag: "a2a-addr", Env: "TOOLMESH_A2A_ADDR", Usage: "address of the A2A endpoint, which serves the mesh's agents over A2A (none when empty)"})
	s.String(&c.a2a.PublicURL, "", config.Opt{Flag: "a2a-url", Env: cli.A2AURLEnv, Usage: "the A2A endpoint's base URL as remote agents reach it", Default: "http://<a2a-addr>"})
	s.String(&c.a2aAuditKey, "", config.Opt{Flag: "a2a-audit-public-key", Env: "TOOLMESH_AUDIT_PUBLIC_KEY",
		Usage: "audit public key file(s), PEM: the A2A endpoint publishes them at " + auditcheckpoint.KeysPath + ", where other meshes check the audit checkpoints attestations name (none when the file is missing)", Default: "<data>/" + cli.AuditPubKeyFile})
	s.String(&c.a2a.Resource, "", config.Opt{Flag: "a2a-resource", Env: "TOOLMESH_A2A_RESOURCE", Usage: "with --issuer: the audience A2A callers' tokens must name", Default: "the A2A URL"})
	s.Duration(&c.mcp.ResourcePollInterval, edge.DefaultResourcePoll, config.Opt{Flag: "resource-poll", Env: "TOOLMESH_EDGE_RESOURCE_POLL", Usage: "how often a subscribed resource is read again to tell its subscribers it changed"})
	s.String(&c.metricsAddr, defaultEdgeMetricsAddr, config.Opt{Flag: "metrics-addr", Env: "TOOLMESH_EDGE_METRICS_ADDR", Usage: "address of the edge's Prometheus /metrics, apart from the public MCP listener (\"off\": none)"})
	c.telemetry = cli.BindTelemetry(s, getenv)
	return c
}

// Run runs the edge with args (its flags) until ctx ends.
func Run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer, log *slog.Logger) error {
	s := cli.NewConfig("edge", getenv, stderr)
	c := Bind(s, getenv)
	if err := s.Parse(args); err != nil {
		return err
	}
	limits, err := c.limits.Limits()
	if err != nil {
		return err
	}
	if c.shutdownGrace <= 0 || c.shutdownTimeout <= c.shutdownGrace {
		return errors.New("--shutdown-grace must be positive and shorter than --shutdown-timeout")
	}
	if c.serviceConcurrency < 0 {
		return fmt.Errorf("--service-concurrency %d: want 0 (no limit) or more", c.serviceConcurrency)
	}
	// Over stdio, stdout is the MCP channel: stdout spans go to stderr.
	spanOut := stdout
	if c.stdio {
		spanOut = stderr
	}
	tel, err := c.telemetry.Start(ctx, "toolmesh-edge", spanOut, log.With("service", "edge"))
	if err != nil {
		return err
	}
	defer cli.StopTelemetry(tel, log)
	cfg, closeTemporal, err := c.edgeConfig(getenv, limits, tel.Providers, log)
	if err != nil {
		return err
	}
	defer closeTemporal()
	log = log.With("service", "edge")
	e, err := edge.New(cfg, log)
	if err != nil {
		return err
	}
	if c.stdio {
		log.Info("edge.started", "transport", "stdio", "tools", len(e.Registry().Tools()), "read_only", c.readOnly)
		return e.ServeStdio(ctx, io.NopCloser(stdin), nopWriteCloser{stdout})
	}
	if c.telemetry.Pprof && (c.metricsAddr == "" || c.metricsAddr == "off") {
		return errors.New("--pprof serves profiles on the metrics address: give --metrics-addr")
	}
	if e.DevelopmentMode() {
		log.Warn("edge.dev_mode", "message", "DEVELOPMENT MODE: no authentication; every caller is the local owner holding every grant; serving loopback clients only. Configure --issuer and --jwks-file before exposing this edge.", "agent", c.devAgent)
	}
	servers, err := c.listen(e, limits, tel.MetricsHandler(), log)
	if err != nil {
		return err
	}
	log.Info("edge.started", "mcp", "http://"+servers[0].Lis.Addr().String()+"/mcp", "tools", len(e.Registry().Tools()), "read_only", c.readOnly, "auth", !e.DevelopmentMode(),
		"elicitation", cfg.Elicitation != nil, "a2a", cfg.A2A != nil, "session_peers", c.sessPeers)
	return cli.RunHTTPAll(ctx, log, servers...)
}

// edgeConfig is the edge's configuration from c: the flags' values and
// what they name (the mesh key, the state keys, the grants and token key
// files), with the Temporal client elicitation needs; closeTemporal closes
// that client.
func (c *Flags) edgeConfig(getenv func(string) string, limits server.Limits, tel telemetry.Providers, log *slog.Logger) (cfg edge.Config, closeTemporal func(), err error) {
	closeTemporal = func() {}
	urls, err := topology.ServiceURLs(topology.OrLoopback(c.services))
	if err != nil {
		return cfg, closeTemporal, err
	}
	c.keyPath = cli.OrDataFile(c.keyPath, c.dataDir, cli.MeshKeyFile)
	key, err := cli.ReadMeshKey(c.keyPath)
	if err != nil {
		return cfg, closeTemporal, err
	}
	signer, err := mesh.NewSigner(key, "toolmesh-edge")
	if err != nil {
		return cfg, closeTemporal, err
	}
	c.mcp.MaxBodyBytes = limits.MaxBodyBytes
	cfg = edge.Config{
		HTTPClient:         meshclient.HTTP(),
		Contracts:          topology.Contracts(),
		Telemetry:          tel,
		Services:           urls,
		CallTimeout:        c.callTimeout,
		WaitBudget:         c.waitBudget,
		ServiceConcurrency: c.serviceConcurrency,
		DevAgent:           c.devAgent,
		Mesh:               signer,
		ReadOnly:           c.readOnly,
		AllowedOrigins:     c.origins,
		AllowedHosts:       c.hosts,
		ShutdownGrace:      c.shutdownGrace,
		RateLimit:          edge.RateLimit{PerSecond: c.rateLimit, Burst: c.rateBurst},
		MCP:                c.mcp,
	}
	c.stateKey = cli.OrDataFile(c.stateKey, c.dataDir, cli.StateKeyFile)
	c.statePrevKey = cli.OrDataFile(c.statePrevKey, c.dataDir, cli.StatePreviousKeyFile)
	if cfg.MCP.Sessions, err = c.sessions(); err != nil {
		return cfg, closeTemporal, err
	}
	if c.temporalAddr != "" {
		if cfg.Elicitation, closeTemporal, err = c.elicitation(tel, log); err != nil {
			return cfg, closeTemporal, err
		}
	}
	if cfg.Grants, err = c.grants(); err != nil {
		return cfg, closeTemporal, err
	}
	if cfg.Auth, err = c.auth(); err != nil {
		return cfg, closeTemporal, err
	}
	if c.a2a.Addr != "" && !c.stdio {
		a := c.a2a
		if a.Egress, err = cli.EgressPolicy(getenv, cli.RemoteEgressAllowEnv, log); err != nil {
			return cfg, closeTemporal, err
		}
		a.Key = key
		auditKey := cli.OrDataFile(c.a2aAuditKey, c.dataDir, cli.AuditPubKeyFile)
		switch a.AuditKeys, err = keyfile.ReadPublic(auditKey); {
		case errors.Is(err, fs.ErrNotExist):
			log.Warn("a2a.no_audit_key", "message", "the audit checkpoint key is not published: no audit public key at "+auditKey+"; other meshes cannot check the checkpoints this mesh's attestations name")
		case err != nil:
			return cfg, closeTemporal, fmt.Errorf("read audit public key: %w", err)
		}
		cfg.A2A = &a
	}
	if c.stdio {
		cfg.MCP.Addr = ""
		if c.issuer != "" {
			log.Warn("edge.stdio_without_auth", "message", "--stdio serves the local user who started the process; --issuer and the token settings do not apply")
		}
	}
	return cfg, closeTemporal, nil
}

// sessions are the edge's session replicas (nil without --session-peer,
// and over stdio): every replica holds the request state keys, from which
// session ids are signed.
func (c *Flags) sessions() (*edge.Sessions, error) {
	if len(c.sessPeers) == 0 || c.stdio {
		return nil, nil
	}
	self, err := sessionSelf(c.sessionAdvertise, c.mcp.Addr)
	if err != nil {
		return nil, err
	}
	keys, err := cli.ReadStateKeys(c.stateKey, c.statePrevKey)
	if err != nil {
		return nil, err
	}
	return &edge.Sessions{Self: self, Peers: c.sessPeers, Keys: keys}, nil
}

// elicitation is multi-round elicitation through the Temporal at
// --temporal, whose client closeTemporal closes.
func (c *Flags) elicitation(tel telemetry.Providers, log *slog.Logger) (x *edge.Elicitation, closeTemporal func(), err error) {
	closeTemporal = func() {}
	sealer, err := cli.ReadStateSealer(c.stateKey, c.statePrevKey)
	if err != nil {
		return nil, closeTemporal, err
	}
	if c.elicit.StateTTL <= 0 {
		return nil, closeTemporal, errors.New("--state-ttl must be positive")
	}
	// Lazy: the edge serves every other call while Temporal is down.
	tc, err := temporalclient.NewLazy(temporalclient.Config{HostPort: c.temporalAddr, Identity: "toolmesh-edge", Telemetry: tel}, log)
	if err != nil {
		return nil, closeTemporal, err
	}
	e := c.elicit
	e.Temporal, e.States = tc, sealer
	return &e, tc.Close, nil
}

// grants are those of --grants-file; nil without it.
func (c *Flags) grants() (*identity.Grants, error) {
	if c.grantsFile == "" {
		return nil, nil
	}
	b, err := os.ReadFile(c.grantsFile)
	if err != nil {
		return nil, fmt.Errorf("read grants file: %w", err)
	}
	return identity.ParseGrants(b)
}

// auth is the edge's authentication: nil (development mode) without
// --issuer and its key files, and over stdio.
func (c *Flags) auth() (*identity.Config, error) {
	if c.stdio || (c.issuer == "" && c.jwksFile == "" && c.hsFile == "") {
		return nil, nil
	}
	if c.issuer == "" {
		return nil, errors.New("--jwks-file and --dev-hs256-secret-file need --issuer")
	}
	a := &identity.Config{Issuer: c.issuer, Resource: c.resource, AuthorizationServers: c.authServers}
	if a.Resource == "" {
		a.Resource = "http://" + c.mcp.Addr + "/mcp"
	}
	var err error
	if c.jwksFile != "" {
		if a.JWKS, err = os.ReadFile(c.jwksFile); err != nil {
			return nil, fmt.Errorf("read JWKS file: %w", err)
		}
	}
	if c.hsFile != "" {
		secret, err := os.ReadFile(c.hsFile)
		if err != nil {
			return nil, fmt.Errorf("read HS256 secret file: %w", err)
		}
		a.HS256Secret = []byte(strings.TrimSpace(string(secret)))
	}
	return a, nil
}

// listen opens the edge's listeners: MCP first, then metrics (unless
// "off") and A2A (when configured), each serving its handler.
func (c *Flags) listen(e *edge.Edge, limits server.Limits, metrics http.Handler, log *slog.Logger) ([]cli.HTTPListener, error) {
	lis, err := server.Listen(c.mcp.Addr)
	if err != nil {
		return nil, err
	}
	// The edge answers oversized bodies itself, in JSON-RPC.
	mcpLimits := limits
	mcpLimits.MaxBodyBytes = -1
	servers := []cli.HTTPListener{{Srv: server.NewHTTPServer(e.Handler(), log, mcpLimits), Lis: lis, Opts: server.HTTPOptions{
		ShutdownTimeout: c.shutdownTimeout,
		// Every call in flight gets its answer before the listener closes.
		AnswerInFlight: func(ctx context.Context) {
			if err := e.Shutdown(ctx); err != nil {
				log.Warn("edge.shutdown_incomplete", "error", err)
			}
		},
	}}}
	closeAll := func() {
		for _, s := range servers {
			s.Lis.Close()
		}
	}
	if c.metricsAddr != "" && c.metricsAddr != "off" {
		metricsLis, err := server.Listen(c.metricsAddr)
		if err != nil {
			closeAll()
			return nil, err
		}
		log.Info("edge.metrics", "url", "http://"+metricsLis.Addr().String()+"/metrics")
		servers = append(servers, cli.HTTPListener{Srv: server.NewHTTPServer(cli.MetricsMux(metrics, c.telemetry.Pprof), log, server.Limits{}), Lis: metricsLis, Opts: server.HTTPOptions{}})
	}
	if h := e.A2AHandler(); h != nil {
		a2aLis, err := server.Listen(c.a2a.Addr)
		if err != nil {
			closeAll()
			return nil, err
		}
		log.Info("edge.a2a", "url", "http://"+a2aLis.Addr().String()+"/a2a/agents/<agent id>")
		// The A2A endpoint caps bodies itself too (1 MiB).
		servers = append(servers, cli.HTTPListener{Srv: server.NewHTTPServer(h, log, mcpLimits), Lis: a2aLis, Opts: server.HTTPOptions{ShutdownTimeout: c.shutdownTimeout}})
	}
	return servers, nil
}

// defaultEdgeShutdownTimeout bounds the edge's shutdown.
const defaultEdgeShutdownTimeout = 10 * time.Second

// sessionSelf is the address the other edge replicas reach this one at:
// advertise (an IP address, with or without a port; the port of addr when
// without), or addr itself when it names an IP address that is not
// 0.0.0.0 or ::.
func sessionSelf(advertise, addr string) (string, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--addr %q: %w", addr, err)
	}
	given := advertise
	if advertise == "" {
		advertise = addr
	} else if ip, err := netip.ParseAddr(strings.Trim(advertise, "[]")); err == nil {
		advertise = net.JoinHostPort(ip.String(), port) // no port: --addr's
	}
	ap, err := netip.ParseAddrPort(advertise)
	if err == nil && !ap.Addr().IsUnspecified() && ap.Port() != 0 {
		return ap.String(), nil
	}
	if given == "" {
		return "", fmt.Errorf("--session-peer needs --session-advertise: --addr %q names no IP address the other edge replicas can reach (in Kubernetes, give the pod IP)", addr)
	}
	return "", fmt.Errorf("--session-advertise %q: want the IP address (and port) the other edge replicas reach this one at", given)
}

// defaultEdgeMetricsAddr is where the edge serves /metrics by default: a
// port of its own on loopback. The MCP listener faces clients (often the
// internet, behind an ingress), and what the metrics tell — which tools are
// called, how often, how they fail — is for operators; a scraper should
// also not need an MCP bearer token or pass the Host and Origin checks.
const defaultEdgeMetricsAddr = "127.0.0.1:7190"

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
