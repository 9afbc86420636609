package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"go.temporal.io/sdk/client"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/cmd/internal/topology"
	"github.com/toolmesh/toolmesh/internal/agentcheck"
	"github.com/toolmesh/toolmesh/internal/auditcheckpoint"
	"github.com/toolmesh/toolmesh/internal/audittrail"
	"github.com/toolmesh/toolmesh/internal/keyfile"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/temporalclient"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1/connectionsv1connect"
	"github.com/toolmesh/toolmesh/services/agents"
	"github.com/toolmesh/toolmesh/services/agents/agentsstore"
	"github.com/toolmesh/toolmesh/services/audit"
	"github.com/toolmesh/toolmesh/services/audit/auditstore"
	"github.com/toolmesh/toolmesh/services/credits"
	"github.com/toolmesh/toolmesh/services/credits/creditsstore"
	"github.com/toolmesh/toolmesh/services/memory"
	"github.com/toolmesh/toolmesh/services/memory/memorystore"
	"github.com/toolmesh/toolmesh/services/messages"
	"github.com/toolmesh/toolmesh/services/messages/messagesstore"
	"github.com/toolmesh/toolmesh/services/tasks"
	"github.com/toolmesh/toolmesh/services/tasks/tasksstore"
)

// buildFunc opens a domain's store on db and returns its service.
type buildFunc func(ctx context.Context, db *sqldb.DB, deps serveDeps) ([]server.Service, error)

// domain is one service the binary can run.
type domain struct {
	// port is the default port under `toolmesh up`, and serves the
	// services of shared contracts the domain serves besides its own:
	// both from cmd/internal/topology (withTopology).
	port   int
	serves []string
	// build opens the domain's store on db and returns its service (db is
	// nil for a stateless domain).
	build buildFunc
	// options, when set instead of build, binds options of the domain's
	// own and returns its build, which reads them after parsing.
	options func(s *config.Set) buildFunc
	// stateless marks a domain that keeps no data of its own: serve opens
	// no database for it and takes no --dsn.
	stateless bool
	// calls lists the domains whose services this one calls (besides the
	// agents directory): serve then takes --service for them.
	calls []string
	// mayCall lists the domains whose services this one calls when it is
	// given them (--service), as some of its settings need: the audit
	// trail, the connections service of search's per-agent keys.
	mayCall []string
	// noREST marks a domain whose service has no REST routes (its
	// contract maps no HTTP paths): `toolmesh up` does not offer them.
	noREST bool
	// temporal marks a domain that starts or updates workflows: `serve`
	// then takes --temporal and dials it before build.
	temporal bool
	// directory marks the agents service: it is what the registration
	// check asks, so it does not check its own callers (an operator must be
	// able to register the first agent).
	directory bool
}

var domains = withTopology(withConformanceDomains(withFaultsDomains(map[string]domain{
	"tasks":    {options: tasksOptions},
	"agents":   {options: agentsOptions, directory: true},
	"messages": {build: buildMessages},
	"memory":   {build: buildMemory},
	"credits":  {build: buildCredits},
	"owner":    {options: ownerOptions, temporal: true},
	"audit":    {options: auditOptions},

	"schedules":  {options: schedulesOptions, temporal: true},
	"projects":   {options: projectsOptions, temporal: true},
	"workflows":  {options: workflowsOptions, temporal: true},
	"reputation": {options: reputationOptions, calls: []string{"audit"}},
	// The event log: it pulls the outboxes of the domains that declare
	// events, serves them to the edge (docs/events.md) and keeps webhook
	// subscriptions, whose deliveries run on the eventlog task queue.
	"eventlog": {options: eventlogOptions, temporal: true, noREST: true, calls: []string{"owner", "tasks"}},

	// The integrations: reaching beyond the mesh (docs/integrations.md).
	"remoteagents": {build: buildRemoteAgents, temporal: true, calls: []string{"messages", "agents"}},
	"github":       {options: githubOptions, stateless: true, calls: []string{"connections"}, mayCall: []string{"audit"}},
	// Each agent's links to upstream accounts (docs/connections.md).
	"connections": {options: connectionsOptions},
	"search":      {options: searchOptions, stateless: true, mayCall: []string{"connections", "audit"}},
})))

// withTopology gives each domain its place in the mesh from
// cmd/internal/topology, which every command shares; a domain this binary
// serves must be there, and a domain there must be served.
func withTopology(d map[string]domain) map[string]domain {
	for name, x := range d {
		t, ok := topology.Domains[name]
		if !ok {
			panic("domain " + name + " is missing from cmd/internal/topology")
		}
		x.port, x.serves = t.Port, t.Serves
		d[name] = x
	}
	for name := range topology.Domains {
		if _, ok := d[name]; !ok {
			panic("cmd/internal/topology lists domain " + name + ", which this binary does not serve")
		}
	}
	return d
}

// serveDeps is what a domain's build gets besides its database.
type serveDeps struct {
	// Getenv reads the environment (only cmd/ does).
	Getenv func(string) string
	// Log is the service's logger.
	Log *slog.Logger
	// Temporal is a connected client for domains marked temporal, else nil.
	Temporal client.Client
	// Services maps the fully-qualified names of the services a domain
	// calls (domain.calls) to their base URLs.
	Services map[string]string
	// DataDir is the --data directory.
	DataDir string
	// AfterStop registers fn to run once the server has stopped serving,
	// before the database closes (last words such as a final checkpoint).
	AfterStop func(fn func())
}

// runBeside runs loop beside the server, from now until the server has
// stopped serving (the database is still open when it returns). A domain
// built without a server to stop (AfterStop nil: a test's) runs it until
// ctx ends.
func (d serveDeps) runBeside(ctx context.Context, loop func(context.Context)) {
	if d.AfterStop == nil {
		go loop(ctx)
		return
	}
	loopCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); loop(loopCtx) }()
	d.AfterStop(func() { stop(); <-done })
}

// agentsSeedEnv lists agents (comma-separated) that `serve agents` registers
// at start when they are missing; `toolmesh up` puts the edge's development
// agent in it.
const agentsSeedEnv = "TOOLMESH_AGENTS_SEED"

func domainNames() string { return strings.Join(slices.Sorted(maps.Keys(domains)), ", ") }

// tasksOptions binds the daily limit of work tasks, whose variable keeps
// its documented name WORK_TASK_MAX_PER_DAY.
func tasksOptions(s *config.Set) buildFunc {
	var maxPerDay int
	s.Int(&maxPerDay, tasks.DefaultMaxPerDay, config.Opt{Flag: "max-tasks-per-day", Env: "WORK_TASK_MAX_PER_DAY",
		Usage: "work tasks one agent may create per UTC calendar day"})
	return func(ctx context.Context, db *sqldb.DB, _ serveDeps) ([]server.Service, error) {
		cfg := tasks.Config{MaxPerDay: maxPerDay}
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
		st, err := tasksstore.Open(ctx, db)
		if err != nil {
			return nil, err
		}
		return []server.Service{tasks.New(st, cfg).Registration(), outboxService(db)}, nil
	}
}

// agentsOptions binds the agents registered at start.
func agentsOptions(s *config.Set) buildFunc {
	var seed []string
	var connectionsURL, keyPath string
	s.List(&seed, config.Opt{Flag: "seed", Env: agentsSeedEnv,
		Usage: "an agent id registered at start when missing; toolmesh up adds its --dev-agent"})
	s.String(&connectionsURL, "", config.Opt{Flag: "connections-url", Env: "TOOLMESH_AGENTS_CONNECTIONS_URL",
		Usage: "connections service URL: retiring an agent first unlinks its upstream connections (revoked at each provider), as the mesh's service with --mesh-key; off when empty"})
	cli.BindMeshKey(s, &keyPath, "mesh private key file the agents service asks the connections service to unlink a retired agent's connections with (--connections-url)")
	return func(ctx context.Context, db *sqldb.DB, deps serveDeps) ([]server.Service, error) {
		st, err := agentsstore.Open(ctx, db)
		if err != nil {
			return nil, err
		}
		cfg := agents.Config{}
		if connectionsURL != "" {
			key, err := cli.ReadMeshKey(cli.OrDataFile(keyPath, deps.DataDir, cli.MeshKeyFile))
			if err != nil {
				return nil, fmt.Errorf("--connections-url needs the mesh key: %w", err)
			}
			signer, err := mesh.NewSigner(key, "toolmesh-agents")
			if err != nil {
				return nil, err
			}
			cfg.Connections = &agents.Connections{
				Client: meshclient.New(meshclient.Config{Signer: signer, Timeout: 30 * time.Second}, connectionsv1connect.NewConnectionsServiceClient, connectionsURL),
				Self:   mesh.Caller{Subject: "toolmesh-agents", Agent: "toolmesh-agents", Roles: []string{mesh.RoleService}},
			}
		}
		svc := agents.New(st, cfg)
		if err := svc.Seed(ctx, seed...); err != nil {
			return nil, fmt.Errorf("%s: %w", agentsSeedEnv, err)
		}
		return []server.Service{svc.Registration()}, nil
	}
}

func buildMessages(ctx context.Context, db *sqldb.DB, deps serveDeps) ([]server.Service, error) {
	st, err := messagesstore.Open(ctx, db)
	if err != nil {
		return nil, err
	}
	return []server.Service{messages.New(st, messages.Config{}).Registration()}, nil
}

// auditOptions binds the audit service's checkpoint options: the key that
// signs checkpoints (created by `toolmesh keygen`), the log file they are
// appended to, and how often one is signed without appends.
func auditOptions(s *config.Set) buildFunc {
	var keyPath, logPath string
	var interval time.Duration
	s.String(&keyPath, "", config.Opt{Flag: "checkpoint-key", Env: "TOOLMESH_AUDIT_KEY",
		Usage: "Ed25519 private key (PKCS #8 PEM) that signs audit checkpoints; toolmesh keygen creates it", Default: "<data>/" + cli.AuditKeyFile})
	s.String(&logPath, "", config.Opt{Flag: "checkpoint-log", Env: "TOOLMESH_AUDIT_CHECKPOINT_LOG",
		Usage: "file every signed audit checkpoint is appended to; ship it elsewhere", Default: "<data>/" + cli.AuditCheckpointLogFile})
	s.Duration(&interval, audit.DefaultCheckpointInterval, config.Opt{Flag: "checkpoint-interval", Env: "TOOLMESH_AUDIT_CHECKPOINT_INTERVAL",
		Usage: "how often a checkpoint is signed besides the one after appends (at least 1s)"})
	var appenders []string
	s.List(&appenders, config.Opt{Flag: "appender", Env: "TOOLMESH_AUDIT_APPENDERS",
		Usage: "a mesh subject allowed to append audit records", Default: audittrail.EdgeSubject})
	return func(ctx context.Context, db *sqldb.DB, deps serveDeps) ([]server.Service, error) {
		if err := (audit.Config{CheckpointInterval: interval}).Validate(); err != nil {
			return nil, err
		}
		keyPath = cli.OrDataFile(keyPath, deps.DataDir, cli.AuditKeyFile)
		logPath = cli.OrDataFile(logPath, deps.DataDir, cli.AuditCheckpointLogFile)
		key, err := keyfile.ReadPrivate(keyPath)
		if err != nil {
			return nil, fmt.Errorf("read audit checkpoint key (create one with `toolmesh keygen`): %w", err)
		}
		return buildAudit(ctx, db, deps, audit.Config{
			Signer: auditcheckpoint.NewSigner(key), CheckpointLog: logPath, CheckpointInterval: interval, Appenders: appenders,
		})
	}
}

func buildAudit(ctx context.Context, db *sqldb.DB, deps serveDeps, cfg audit.Config) ([]server.Service, error) {
	st, err := auditstore.Open(ctx, db)
	if err != nil {
		return nil, err
	}
	cfg.Log = deps.Log
	svc := audit.New(st, cfg)
	// Checkpoints are signed until the server has stopped serving, so the
	// last appends get theirs.
	deps.runBeside(ctx, svc.RunCheckpoints)
	deps.Log.Info("audit.checkpoints", "origin", cfg.Signer.Origin(), "log", cfg.CheckpointLog, "interval", cfg.CheckpointInterval.String())
	return []server.Service{svc.Registration()}, nil
}

// buildMemory encrypts memory content at rest when TOOLMESH_MEMORY_KEY holds
// a key: 32 random bytes in base64 (`openssl rand -base64 32`).
func buildMemory(ctx context.Context, db *sqldb.DB, deps serveDeps) ([]server.Service, error) {
	getenv := deps.Getenv
	log := deps.Log
	st, err := memorystore.Open(ctx, db)
	if err != nil {
		return nil, err
	}
	cfg := memory.Config{Log: log}
	if v := getenv("TOOLMESH_MEMORY_KEY"); v != "" {
		if cfg.Key, err = memory.ParseKey(v); err != nil {
			return nil, fmt.Errorf("TOOLMESH_MEMORY_KEY: %w", err)
		}
	}
	svc, err := memory.New(ctx, st, cfg)
	if errors.Is(err, memory.ErrKeyRequired) || errors.Is(err, memory.ErrWrongKey) || errors.Is(err, memory.ErrPlaintextDatabase) {
		return nil, fmt.Errorf("TOOLMESH_MEMORY_KEY: %w", err)
	}
	if err != nil {
		return nil, err
	}
	if id := svc.KeyID(); id != "" {
		log.Info("memory.encryption", "enabled", true, "key_id", id)
	} else {
		log.Warn("memory.encryption", "enabled", false, "message", "memory content is stored unencrypted; set TOOLMESH_MEMORY_KEY to encrypt it")
	}
	return []server.Service{svc.Registration()}, nil
}

func buildCredits(ctx context.Context, db *sqldb.DB, deps serveDeps) ([]server.Service, error) {
	st, err := creditsstore.Open(ctx, db)
	if err != nil {
		return nil, err
	}
	return []server.Service{credits.New(st, credits.Config{}).Registration()}, nil
}

// serveConfig is the configuration of `toolmesh serve <domain>`.
type serveConfig struct {
	addr, dataDir, dsn, agentsURL, temporalAddr, pubKey string
	drain                                               time.Duration
	calls                                               map[string]string
	limits                                              *cli.LimitFlags
	telemetry                                           *cli.TelemetryFlags
	// build builds the domain's service once the options are parsed.
	build buildFunc
}

// bindServe binds the options of `toolmesh serve <name>`; a domain's
// variables are named TOOLMESH_<DOMAIN>_..., the limits every service
// shares TOOLMESH_SERVICE_....
func bindServe(s *config.Set, getenv func(string) string, name string, d domain) *serveConfig {
	c := &serveConfig{build: d.build}
	prefix := "TOOLMESH_" + strings.ToUpper(name) + "_"
	s.String(&c.addr, fmt.Sprintf("127.0.0.1:%d", d.port), config.Opt{Flag: "addr", Env: prefix + "ADDR", Usage: "listen address"})
	cli.BindData(s, &c.dataDir, "directory for SQLite files and the mesh public key")
	if !d.stateless {
		s.String(&c.dsn, "", config.Opt{Flag: "dsn", Env: prefix + "DSN", Usage: "database DSN: a postgres:// URL, or a SQLite path", Default: "<data>/" + cli.DBFile(name)})
	}
	s.Duration(&c.drain, 0, config.Opt{Flag: "drain", Env: "TOOLMESH_SERVICE_DRAIN", Usage: "how long to report NOT_SERVING before closing on shutdown"})
	if !d.directory {
		s.String(&c.agentsURL, "", config.Opt{Flag: "agents-url", Env: "TOOLMESH_AGENTS_URL",
			Usage: "agents service URL, e.g. http://127.0.0.1:7102: refuse callers that are not registered, active agents (off when empty)"})
	}
	if d.temporal {
		s.String(&c.temporalAddr, defaultTemporalAddr, config.Opt{Flag: "temporal", Env: "TOOLMESH_TEMPORAL", Usage: "Temporal frontend address"})
	}
	s.String(&c.pubKey, "", config.Opt{Flag: "mesh-public-key", Env: "TOOLMESH_MESH_PUBLIC_KEY",
		Usage: "mesh public key file(s) that verify callers' mesh tokens", Default: "<data>/" + cli.MeshPubKeyFile})
	if len(d.calls)+len(d.mayCall) > 0 {
		cli.BindServices(s, &c.calls, append(slices.Clone(d.calls), d.mayCall...))
	}
	c.limits = cli.BindLimits(s, "TOOLMESH_SERVICE_", server.DefaultMaxBodyBytes)
	c.telemetry = cli.BindTelemetry(s, getenv)
	if d.options != nil {
		c.build = d.options(s)
	}
	return c
}

// parseNamed finds the entry of table that args[0] names (the domain of
// serve, the task queue of worker) and parses the rest of args into the
// options bind binds for it.
func parseNamed[T, C any](args []string, table map[string]T, command, what string, getenv func(string) string, stderr io.Writer,
	bind func(s *config.Set, getenv func(string) string, name string, entry T) C) (name string, entry T, cfg C, err error) {
	names := strings.Join(slices.Sorted(maps.Keys(table)), ", ")
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return "", entry, cfg, fmt.Errorf("%s needs a %s: %s", command, what, names)
	}
	name = args[0]
	entry, ok := table[name]
	if !ok {
		return "", entry, cfg, fmt.Errorf("unknown %s %q (%ss: %s)", what, name, what, names)
	}
	s := cli.NewConfig(command+" "+name, getenv, stderr)
	cfg = bind(s, getenv, name, entry)
	return name, entry, cfg, s.Parse(args[1:])
}

func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, log *slog.Logger) error {
	name, d, c, err := parseNamed(args, domains, "serve", "domain", getenv, stderr, bindServe)
	if err != nil {
		return err
	}
	limits, err := c.limits.Limits()
	if err != nil {
		return err
	}
	if !d.stateless && c.dsn == "" {
		c.dsn = cli.DataFile(c.dataDir, cli.DBFile(name))
	}
	c.pubKey = cli.OrDataFile(c.pubKey, c.dataDir, cli.MeshPubKeyFile)
	verifier, err := cli.ReadMeshVerifier(c.pubKey)
	if err != nil {
		return err
	}
	log = log.With("service", name)
	tel, err := c.telemetry.Start(ctx, "toolmesh-"+name, stdout, log)
	if err != nil {
		return err
	}
	defer cli.StopTelemetry(tel, log)
	var db *sqldb.DB
	if !d.stateless {
		if db, err = sqldb.Open(ctx, c.dsn); err != nil {
			return err
		}
		defer db.Close()
	}
	var afterStop []func()
	defer func() {
		for _, fn := range slices.Backward(afterStop) {
			fn()
		}
	}()
	deps := serveDeps{Getenv: getenv, Log: log, DataDir: c.dataDir, AfterStop: func(fn func()) { afterStop = append(afterStop, fn) }}
	if len(d.calls)+len(d.mayCall) > 0 {
		needed := map[string]string{}
		for _, callee := range d.calls {
			if c.calls[callee] == "" {
				return fmt.Errorf("serve %s needs the %s service: --service %s=http://<host:port>", name, callee, callee)
			}
			needed[callee] = c.calls[callee]
		}
		for _, callee := range d.mayCall {
			if u := c.calls[callee]; u != "" {
				needed[callee] = u
			}
		}
		if deps.Services, err = topology.ServiceURLs(needed); err != nil {
			return err
		}
	}
	if d.temporal {
		// Lazy: the service starts, and serves what needs no Temporal,
		// while Temporal is down; calls that need it answer unavailable.
		tc, err := temporalclient.NewLazy(temporalclient.Config{HostPort: c.temporalAddr, Identity: "toolmesh-" + name, Telemetry: tel.Providers}, log)
		if err != nil {
			return err
		}
		defer tc.Close()
		go temporalclient.CheckReachable(ctx, tc, c.temporalAddr, log)
		deps.Temporal = tc
	}
	svcs, err := c.build(ctx, db, deps)
	if err != nil {
		return err
	}
	lis, err := server.Listen(c.addr)
	if err != nil {
		return err
	}
	opts := server.Options{Busy: sqldb.IsBusy, DrainDelay: c.drain, ShutdownTimeout: 10 * time.Second, Mesh: verifier,
		Telemetry: tel.Providers, Metrics: tel.MetricsHandler(), Limits: limits, Pprof: c.telemetry.Pprof}
	if c.agentsURL != "" {
		check := agentcheck.New(c.agentsURL, agentcheck.Options{Log: log, Telemetry: tel.Providers})
		opts.Interceptors = []connect.Interceptor{check.Interceptor()}
		log.Info("serve.agent_check", "enabled", true, "agents_url", c.agentsURL)
	} else if !d.directory {
		log.Warn("serve.agent_check", "enabled", false, "message", "callers are not checked against the agents directory; set --agents-url")
	}
	srv, err := server.New(ctx, lis, log, opts, svcs...)
	if err != nil {
		lis.Close()
		return err
	}
	return srv.Run(ctx)
}
