package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/temporalclient"
)

// serviceFlag collects repeated --service domain=url flags.
type serviceFlag map[string]string

func (s serviceFlag) String() string { return fmt.Sprint(map[string]string(s)) }

func (s serviceFlag) Set(v string) error {
	name, url, ok := strings.Cut(v, "=")
	if !ok || name == "" || url == "" {
		return fmt.Errorf("want domain=url, got %q", v)
	}
	s[name] = url
	return nil
}

// servicesEnv holds the default of the repeatable --service flag of the edge
// and the workers: domain=url pairs, comma-separated. The Kubernetes
// manifests set it for all of them from one ConfigMap.
const servicesEnv = "TOOLMESH_SERVICES"

// envServices returns the services listed in servicesEnv; --service flags
// add to them or replace a domain's URL.
func envServices(getenv func(string) string) (serviceFlag, error) {
	s := serviceFlag{}
	for _, v := range splitList(getenv(servicesEnv)) {
		if err := s.Set(v); err != nil {
			return nil, fmt.Errorf("%s: %w", servicesEnv, err)
		}
	}
	return s, nil
}

// listFlag collects a repeatable string flag; its default comes from a
// comma-separated environment variable.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	if v == "" {
		return errors.New("empty value")
	}
	*l = append(*l, v)
	return nil
}

func envList(getenv func(string) string, key string) listFlag {
	var out listFlag
	for _, v := range strings.Split(getenv(key), ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func runEdge(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet("edge", flag.ContinueOnError)
	addr := fs.String("addr", envOr(getenv, "TOOLMESH_EDGE_ADDR", "127.0.0.1:7100"), "listen address")
	stdio := fs.Bool("stdio", false, "serve MCP over stdin/stdout (for desktop clients) instead of HTTP")
	services, err := envServices(getenv)
	if err != nil {
		return err
	}
	fs.Var(services, "service", "a domain service as domain=url (repeatable; default $"+servicesEnv+", else every domain on loopback), e.g. tasks=http://127.0.0.1:7101")
	timeout := fs.Duration("call-timeout", 15*time.Second, "deadline of each service call")
	waitBudget := fs.Duration("wait-budget", edge.DefaultWaitBudget, "how long a long-running tool that waits for its outcome (owner_ask) waits before it returns a handle to poll; such calls get it on top of --call-timeout")
	agent := fs.String("dev-agent", envOr(getenv, "TOOLMESH_DEV_AGENT", "local"), "agent id of the local caller in development mode and over stdio")
	dataDir := fs.String("data", envOr(getenv, "TOOLMESH_DATA", ".toolmesh"), "directory holding mesh.key")
	keyPath := fs.String("mesh-key", getenv("TOOLMESH_MESH_KEY"), "mesh private key file that signs service calls (default <data>/mesh.key)")
	readOnly := fs.Bool("read-only", getenv("TOOLMESH_EDGE_READ_ONLY") == "true", "refuse WRITE and ADMIN tools (read_only) without calling services")
	issuer := fs.String("issuer", getenv("TOOLMESH_OAUTH_ISSUER"), "OAuth issuer whose bearer JWTs the edge accepts; enables authentication")
	resource := fs.String("resource", getenv("TOOLMESH_EDGE_RESOURCE"), "canonical URI of this edge, the audience tokens must name (default http://<addr>/mcp)")
	jwksFile := fs.String("jwks-file", getenv("TOOLMESH_OAUTH_JWKS_FILE"), "JSON Web Key Set file with the issuer's RS256/ES256 public keys")
	hsFile := fs.String("dev-hs256-secret-file", getenv("TOOLMESH_OAUTH_DEV_HS256_SECRET_FILE"), "file with an HS256 secret (development only: loopback addresses)")
	grantsFile := fs.String("grants-file", getenv("TOOLMESH_EDGE_GRANTS_FILE"), "YAML file granting roles, scopes and tools per token subject")
	authServers := envList(getenv, "TOOLMESH_OAUTH_AUTHORIZATION_SERVERS")
	fs.Var(&authServers, "authorization-server", "authorization server listed in the resource metadata (repeatable; default the issuer)")
	origins := envList(getenv, "TOOLMESH_EDGE_ALLOWED_ORIGINS")
	fs.Var(&origins, "allow-origin", "browser origin allowed to call the edge, scheme://host[:port] (repeatable)")
	hosts := envList(getenv, "TOOLMESH_EDGE_ALLOWED_HOSTS")
	fs.Var(&hosts, "allow-host", "Host header value the edge answers to, besides loopback names on loopback (repeatable)")
	limitFlags := addLimitFlags(fs, getenv, "TOOLMESH_EDGE_", edge.DefaultMaxBodyBytes)
	shutdownGrace, err := envDuration(getenv, "TOOLMESH_EDGE_SHUTDOWN_GRACE", edge.DefaultShutdownGrace)
	if err != nil {
		return err
	}
	fs.DurationVar(&shutdownGrace, "shutdown-grace", shutdownGrace, "on shutdown, how long tool calls in flight may run on before they are cut short and answer unavailable ($TOOLMESH_EDGE_SHUTDOWN_GRACE)")
	shutdownTimeout, err := envDuration(getenv, "TOOLMESH_EDGE_SHUTDOWN_TIMEOUT", defaultEdgeShutdownTimeout)
	if err != nil {
		return err
	}
	fs.DurationVar(&shutdownTimeout, "shutdown-timeout", shutdownTimeout, "on shutdown, how long the edge may take to answer what is in flight and close its connections; longer than --shutdown-grace ($TOOLMESH_EDGE_SHUTDOWN_TIMEOUT)")
	rateLimit := fs.Float64("rate-limit", 0, "tool calls per second per caller (0: unlimited)")
	rateBurst := fs.Int("rate-burst", 0, "tool calls a caller may make at once (default: the rate)")
	temporalAddr := fs.String("temporal", getenv("TOOLMESH_TEMPORAL"), "Temporal frontend address; turns on multi-round elicitation (calls that lack inputs ask the user)")
	stateKey := fs.String("state-key", getenv("TOOLMESH_STATE_KEY"), "request state key file that seals and verifies elicitation rounds (default <data>/state.key)")
	statePrevKey := fs.String("state-previous-key", getenv("TOOLMESH_STATE_PREVIOUS_KEY"), "previous request state key file, still accepted after a rotation (default <data>/state.previous.key when present)")
	stateTTL := fs.Duration("state-ttl", edge.DefaultStateTTL, "how long a user has to answer one round of an elicited call")
	sessionPeers := envList(getenv, "TOOLMESH_EDGE_SESSION_PEERS")
	fs.Var(&sessionPeers, "session-peer", "an edge replica as host:port, a name standing for every address it resolves to (repeatable); with peers, 2025-era sessions work on every replica (docs/sessions.md); without, only on the one they began on")
	sessionAdvertise := fs.String("session-advertise", getenv("TOOLMESH_EDGE_SESSION_ADVERTISE"), "IP address (and port, default --addr's) the other edge replicas reach this one at (default --addr when it names an IP address)")
	a2aAddr := fs.String("a2a-addr", getenv("TOOLMESH_A2A_ADDR"), "address of the A2A endpoint, which serves the mesh's agents over A2A (none when empty)")
	a2aURL := fs.String("a2a-url", getenv(a2aURLEnv), "the A2A endpoint's base URL as remote agents reach it (default http://<a2a-addr>)")
	a2aResource := fs.String("a2a-resource", getenv("TOOLMESH_A2A_RESOURCE"), "with --issuer: the audience A2A callers' tokens must name (default the A2A URL)")
	resourcePoll := fs.Duration("resource-poll", edge.DefaultResourcePoll, "how often a subscribed resource is read again to tell its subscribers it changed")
	metricsAddr := fs.String("metrics-addr", envOr(getenv, "TOOLMESH_EDGE_METRICS_ADDR", defaultEdgeMetricsAddr),
		"address of the edge's Prometheus /metrics, apart from the public MCP listener (\"off\": none)")
	telFlags := addTelemetryFlags(fs, getenv)
	if err := fs.Parse(args); err != nil {
		return err
	}
	limits, err := limitFlags.limits()
	if err != nil {
		return err
	}
	if shutdownGrace <= 0 || shutdownTimeout <= shutdownGrace {
		return errors.New("--shutdown-grace must be positive and shorter than --shutdown-timeout")
	}
	if len(services) == 0 {
		for name, d := range domains {
			services[name] = fmt.Sprintf("http://127.0.0.1:%d", d.port)
		}
	}
	urls, err := serviceURLs(services)
	if err != nil {
		return err
	}
	if *keyPath == "" {
		*keyPath = filepath.Join(*dataDir, meshKeyFile)
	}
	key, err := readMeshKey(*keyPath)
	if err != nil {
		return err
	}
	signer, err := mesh.NewSigner(key, "toolmesh-edge")
	if err != nil {
		return err
	}
	// Over stdio, stdout is the MCP channel: stdout spans go to stderr.
	spanOut := stdout
	if *stdio {
		spanOut = stderr
	}
	tel, err := telFlags.start(ctx, "toolmesh-edge", spanOut, log.With("service", "edge"))
	if err != nil {
		return err
	}
	defer stopTelemetry(tel, log)
	cfg := edge.Config{
		Contracts:      contracts(),
		Telemetry:      tel.Providers,
		Services:       urls,
		CallTimeout:    *timeout,
		WaitBudget:     *waitBudget,
		DevAgent:       *agent,
		Mesh:           signer,
		Addr:           *addr,
		ReadOnly:       *readOnly,
		AllowedOrigins: origins,
		AllowedHosts:   hosts,
		MaxBodyBytes:   limits.MaxBodyBytes,
		ShutdownGrace:  shutdownGrace,
		RateLimit:      edge.RateLimit{PerSecond: *rateLimit, Burst: *rateBurst},

		ResourcePollInterval: *resourcePoll,
	}
	if *stateKey == "" {
		*stateKey = filepath.Join(*dataDir, stateKeyFile)
	}
	if *statePrevKey == "" {
		*statePrevKey = filepath.Join(*dataDir, statePreviousKeyFile)
	}
	if len(sessionPeers) > 0 && !*stdio {
		self, err := sessionSelf(*sessionAdvertise, *addr)
		if err != nil {
			return err
		}
		// Every replica holds the request state keys: session ids are
		// signed with a secret derived from them.
		keys, err := readStateKeys(*stateKey, *statePrevKey)
		if err != nil {
			return err
		}
		cfg.Sessions = &edge.Sessions{Self: self, Peers: sessionPeers, Keys: keys}
	}
	if *temporalAddr != "" {
		sealer, err := readStateSealer(*stateKey, *statePrevKey)
		if err != nil {
			return err
		}
		if *stateTTL <= 0 {
			return errors.New("--state-ttl must be positive")
		}
		// Lazy: the edge serves every other call while Temporal is down.
		tc, err := temporalclient.NewLazy(temporalclient.Config{HostPort: *temporalAddr, Identity: "toolmesh-edge", Telemetry: tel.Providers}, log)
		if err != nil {
			return err
		}
		defer tc.Close()
		cfg.Elicitation = &edge.Elicitation{Temporal: tc, States: sealer, StateTTL: *stateTTL}
	}
	if *grantsFile != "" {
		b, err := os.ReadFile(*grantsFile)
		if err != nil {
			return fmt.Errorf("read grants file: %w", err)
		}
		if cfg.Grants, err = identity.ParseGrants(b); err != nil {
			return err
		}
	}
	if !*stdio && (*issuer != "" || *jwksFile != "" || *hsFile != "") {
		if *issuer == "" {
			return errors.New("--jwks-file and --dev-hs256-secret-file need --issuer")
		}
		a := &identity.Config{Issuer: *issuer, Resource: *resource, AuthorizationServers: authServers}
		if a.Resource == "" {
			a.Resource = "http://" + *addr + "/mcp"
		}
		if *jwksFile != "" {
			if a.JWKS, err = os.ReadFile(*jwksFile); err != nil {
				return fmt.Errorf("read JWKS file: %w", err)
			}
		}
		if *hsFile != "" {
			secret, err := os.ReadFile(*hsFile)
			if err != nil {
				return fmt.Errorf("read HS256 secret file: %w", err)
			}
			a.HS256Secret = []byte(strings.TrimSpace(string(secret)))
		}
		cfg.Auth = a
	}
	if *a2aAddr != "" && !*stdio {
		policy, err := egressPolicy(getenv, remoteEgressAllowEnv, log)
		if err != nil {
			return err
		}
		cfg.A2A = &edge.A2AConfig{Addr: *a2aAddr, PublicURL: *a2aURL, Resource: *a2aResource, Egress: policy, Version: cfg.Version}
	}
	if *stdio {
		cfg.Addr = ""
		if *issuer != "" {
			log.Warn("edge.stdio_without_auth", "message", "--stdio serves the local user who started the process; --issuer and the token settings do not apply")
		}
	}
	log = log.With("service", "edge")
	e, err := edge.New(cfg, log)
	if err != nil {
		return err
	}
	if *stdio {
		log.Info("edge.started", "transport", "stdio", "tools", len(e.Registry().Tools()), "read_only", *readOnly)
		return e.ServeStdio(ctx, io.NopCloser(stdin), nopWriteCloser{stdout})
	}
	lis, err := server.Listen(*addr)
	if err != nil {
		return err
	}
	if e.DevelopmentMode() {
		log.Warn("edge.dev_mode", "message", "DEVELOPMENT MODE: no authentication; every caller is the local owner holding every grant; serving loopback clients only. Configure --issuer and --jwks-file before exposing this edge.", "agent", *agent)
	}
	if *telFlags.pprof && (*metricsAddr == "" || *metricsAddr == "off") {
		lis.Close()
		return errors.New("--pprof serves profiles on the metrics address: give --metrics-addr")
	}
	// The edge answers oversized bodies itself, in JSON-RPC.
	mcpLimits := limits
	mcpLimits.MaxBodyBytes = -1
	servers := []httpListener{{server.NewHTTPServer(e.Handler(), log, mcpLimits), lis, server.HTTPOptions{
		ShutdownTimeout: shutdownTimeout,
		// Every call in flight gets its answer before the listener closes.
		AnswerInFlight: func(ctx context.Context) {
			if err := e.Shutdown(ctx); err != nil {
				log.Warn("edge.shutdown_incomplete", "error", err)
			}
		},
	}}}
	closeAll := func() {
		for _, s := range servers {
			s.lis.Close()
		}
	}
	if *metricsAddr != "" && *metricsAddr != "off" {
		metricsLis, err := server.Listen(*metricsAddr)
		if err != nil {
			closeAll()
			return err
		}
		log.Info("edge.metrics", "url", "http://"+metricsLis.Addr().String()+"/metrics")
		servers = append(servers, httpListener{server.NewHTTPServer(metricsMux(tel.MetricsHandler(), *telFlags.pprof), log, server.Limits{}), metricsLis, server.HTTPOptions{}})
	}
	if cfg.A2A != nil {
		a2aLis, err := server.Listen(*a2aAddr)
		if err != nil {
			closeAll()
			return err
		}
		log.Info("edge.a2a", "url", "http://"+a2aLis.Addr().String()+"/a2a/agents/<agent id>", "public_url", cfg.A2A.PublicURL)
		// The A2A endpoint caps bodies itself too (1 MiB).
		servers = append(servers, httpListener{server.NewHTTPServer(e.A2AHandler(), log, mcpLimits), a2aLis, server.HTTPOptions{ShutdownTimeout: shutdownTimeout}})
	}
	log.Info("edge.started", "mcp", "http://"+lis.Addr().String()+"/mcp", "tools", len(e.Registry().Tools()), "read_only", *readOnly, "auth", !e.DevelopmentMode(),
		"elicitation", cfg.Elicitation != nil, "a2a", cfg.A2A != nil, "session_peers", []string(sessionPeers))
	return runHTTPAll(ctx, log, servers...)
}

// defaultEdgeShutdownTimeout bounds the edge's shutdown.
const defaultEdgeShutdownTimeout = 10 * time.Second

// envDuration returns the duration in the environment variable key, or def
// when it is unset.
func envDuration(getenv func(string) string, key string, def time.Duration) (time.Duration, error) {
	v := getenv(key)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", key, err)
	}
	return d, nil
}

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

// metricsMux serves a process's /metrics and /healthz, and /debug/pprof
// when pprof is set.
func metricsMux(metrics http.Handler, pprof bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	if pprof {
		server.HandlePprof(mux)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

type httpListener struct {
	srv  *http.Server
	lis  net.Listener
	opts server.HTTPOptions
}

// runHTTPAll serves every listener until ctx ends or one fails, then
// stops them all.
func runHTTPAll(ctx context.Context, log *slog.Logger, servers ...httpListener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(servers))
	for _, h := range servers {
		go func() {
			err := server.RunHTTP(ctx, h.srv, h.lis, log, h.opts)
			cancel()
			errs <- err
		}()
	}
	var all []error
	for range servers {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// serviceURLs maps domain names to the fully-qualified names of their
// services in the edge's contracts.
func serviceURLs(byDomain map[string]string) (map[string]string, error) {
	out := map[string]string{}
	for domain, url := range byDomain {
		found := false
		for _, sd := range contracts() {
			if string(sd.ParentFile().Package()) == "toolmesh."+domain+".v1" {
				out[string(sd.FullName())] = url
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("no contract for domain %q", domain)
		}
	}
	return out, nil
}
